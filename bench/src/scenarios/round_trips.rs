//! What one press costs Redis, by outcome, with the production wiring (risk
//! checks on) during the sale: round trips and commands counted at the
//! wire by a counting proxy (one caller, one press at a time), and Redis
//! main-thread CPU per press with every caller pressing at once.

use std::sync::Arc;
use std::time::Duration;

use coupon_domain::coupon::CouponDefinition;
use coupon_domain::grab::ports::GrantPublisher;
use grab::GrabApp;
use serde_json::{json, Value};

use super::{apps, coupon, drive_as, preheat, redis_cpu, store, unique, Feed, Wiring};
use crate::{BenchEnv, Row, Table};
use coupon_domain::testing::CountingQueue;

/// The figures of the summary.
pub struct Costs {
    /// Round trips per winner.
    pub winner: f64,
    /// The largest round trips per press over the refusals the grab script
    /// decides (rate limited, already claimed, not eligible, sold out with
    /// the memory off).
    pub loser: f64,
    /// Round trips per press answered from the sold-out memory.
    pub loser_remembered: f64,
    /// The largest Redis CPU per press over the same refusals (µs).
    pub cpu_per_refusal: f64,
    /// Redis CPU of a press the sold-out memory answers: one `GET` (µs),
    /// the baseline the per-press CPU targets are ratios to. Absolute
    /// figures move 2.5x between machines of one kind; the ratio to a
    /// `GET` measured in the same run does not.
    pub cpu_per_get: f64,
    /// Redis CPU of a winning press (µs): the admission, the risk pair and
    /// the claim.
    pub cpu_per_win: f64,
    /// Redis CPU of a dry run the home shard refuses, and of one that
    /// would win (µs).
    pub cpu_per_dry_run: (f64, f64),
    /// Round trips of the same two dry runs.
    pub dry_run_trips: (f64, f64),
    /// Everything, by outcome.
    pub by_outcome: Value,
}

/// One outcome's set-up: the coupon, how its users press, what they hear.
struct Case {
    name: &'static str,
    /// The HTTP status every press of this case answers with.
    status: u16,
    /// A refusal the grab script decides (counted in the loser figures).
    refusal: bool,
    def: CouponDefinition,
    /// Sold-out memory of the instances (ms; 0 = off).
    memory_ms: u64,
    /// Users press in turn from this many per caller (they already hold
    /// the coupon), or a fresh user per press.
    cycle: Option<u64>,
    /// Measured as dry runs (`GET .../eligibility`) rather than presses.
    dry_run: bool,
}

impl Case {
    /// Presses, or their dry runs.
    fn feed(&self) -> Feed {
        if self.dry_run {
            Feed::DryRuns
        } else {
            Feed::Requests
        }
    }
}

fn cases() -> Vec<Case> {
    let fresh = |name: &str, stock: u64| coupon(&unique(name), stock, 1);
    let mut rate = fresh("rate", 1_000_000_000);
    rate.rate_per_sec = 1;
    rate.burst = 1;
    let mut gated = fresh("gated", 1_000_000_000);
    gated.min_member_level = 9; // the fixture's users are level 2
    let mut dry_gated = fresh("dry-gated", 1_000_000_000);
    dry_gated.min_member_level = 9;
    vec![
        Case {
            name: "winner",
            status: 200,
            refusal: false,
            def: fresh("win", 1_000_000_000),
            memory_ms: 0,
            cycle: None,
            dry_run: false,
        },
        Case {
            name: "rate limited",
            status: 429,
            refusal: true,
            def: rate,
            memory_ms: 0,
            cycle: None,
            dry_run: false,
        },
        Case {
            name: "already claimed",
            status: 409,
            refusal: true,
            def: fresh("held", 1_000_000_000),
            memory_ms: 0,
            cycle: Some(16),
            dry_run: false,
        },
        Case {
            name: "not eligible",
            status: 403,
            refusal: true,
            def: gated,
            memory_ms: 0,
            cycle: None,
            dry_run: false,
        },
        Case {
            name: "sold out, memory off",
            status: 410,
            refusal: true,
            def: fresh("gone", 1),
            memory_ms: 0,
            cycle: None,
            dry_run: false,
        },
        Case {
            name: "sold out, memory on",
            status: 410,
            refusal: false,
            def: fresh("gone-mem", 1),
            memory_ms: 600_000,
            cycle: None,
            dry_run: false,
        },
        // The dry run: refused on the home shard (the member level, as
        // the press above), and one that would win (the risk rules read
        // as well).
        Case {
            name: "dry run, not eligible",
            status: 403,
            refusal: false,
            def: dry_gated,
            memory_ms: 0,
            cycle: None,
            dry_run: true,
        },
        Case {
            name: "dry run, would win",
            status: 200,
            refusal: false,
            def: fresh("dry-win", 1_000_000_000),
            memory_ms: 0,
            cycle: None,
            dry_run: true,
        },
    ]
}

/// What every measurement of a case shares: the production wiring's
/// pieces, a proxy that counts what crosses the wire, and the callers.
struct Rig<'a> {
    env: &'a BenchEnv,
    /// The Redis URL through the counting proxy.
    proxied: String,
    wire: crate::proxy::Wire,
    publisher: Arc<dyn GrantPublisher>,
    callers: usize,
}

/// One case's figures.
struct Measured {
    /// Per press, at the wire, one caller pressing one request at a time.
    trips: f64,
    commands: f64,
    counted: u64,
    /// Redis CPU per press (µs), the least of the runs, and every run.
    cpu_us: f64,
    runs: Vec<f64>,
    pressed: u64,
}

/// Brings the coupon to the case's state on fresh instances: the unit of a
/// sold-out coupon sold, the pressing users holding their coupon, the rate
/// limit's one token taken; each instance knowing the coupon.
async fn prepared(rig: &Rig<'_>, case: &Case, url: &str, callers: usize, label: &str) -> Vec<Arc<GrabApp>> {
    let apps = apps(
        url,
        false,
        callers,
        Wiring::Production,
        case.memory_ms,
        rig.publisher.clone(),
    )
    .await;
    let n = apps.len() as u64 * case.cycle.unwrap_or(1);
    let id = case.def.coupon_id.as_str();
    drive_as(&apps, id, label, Duration::from_secs(60), n, Feed::Requests, case.cycle).await;
    apps
}

/// Round trips and commands per press: one caller, one press at a time,
/// counted at the wire.
async fn at_the_wire(rig: &Rig<'_>, case: &Case) -> (f64, f64, u64) {
    const N: u64 = 1_000;
    let one = prepared(rig, case, &rig.proxied, 1, "p0").await;
    let id = case.def.coupon_id.as_str();
    let (c0, t0) = (rig.wire.commands(), rig.wire.round_trips());
    let d = drive_as(&one, id, "p", Duration::from_secs(600), N, case.feed(), case.cycle).await;
    let (commands, trips) = (rig.wire.commands() - c0, rig.wire.round_trips() - t0);
    // A rate limit of one token per second lets a press through now and
    // then: those are winners, not this case.
    let share = d.status(case.status) as f64 / d.total as f64;
    assert!(share >= 0.99, "{}: {:?}", case.name, d.by_status);
    let per = |x: u64| x as f64 / d.total as f64;
    (per(trips), per(commands), d.total)
}

/// Redis CPU per press with every caller pressing at once, Redis busy: the
/// least of three runs, since this machine's speed drifts (a busy
/// neighbour, the hypervisor) and drift only ever adds CPU time, so the
/// least is the closest to what the press itself costs.
async fn redis_cpu_per_press(rig: &Rig<'_>, case: &Case) -> (f64, Vec<f64>, u64) {
    let url = &rig.env.redis_url;
    let many = prepared(rig, case, url, rig.callers, "c0").await;
    let id = case.def.coupon_id.as_str();
    let mut runs = Vec::new();
    let mut pressed = 0;
    for label in ["c1", "c2", "c3"] {
        let before = redis_cpu(url).await;
        let load = drive_as(&many, id, label, rig.env.run, u64::MAX, case.feed(), case.cycle).await;
        runs.push((redis_cpu(url).await - before) * 1e6 / load.total as f64);
        let share = load.status(case.status) as f64 / load.total as f64;
        assert!(share >= 0.99, "{}: {:?}", case.name, load.by_status);
        pressed += load.total;
    }
    let cpu_us = runs.iter().copied().fold(f64::INFINITY, f64::min);
    (cpu_us, runs, pressed)
}

async fn measure(rig: &Rig<'_>, case: &Case) -> Measured {
    let (trips, commands, counted) = at_the_wire(rig, case).await;
    let (cpu_us, runs, pressed) = redis_cpu_per_press(rig, case).await;
    Measured {
        trips,
        commands,
        counted,
        cpu_us,
        runs,
        pressed,
    }
}

pub async fn round_trips(env: &BenchEnv, rows: &mut Table) -> Costs {
    let upstream = env
        .redis_url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let (port, wire) = crate::proxy::start(upstream).await;
    let rig = Rig {
        env,
        proxied: format!("redis://127.0.0.1:{port}"),
        wire,
        publisher: Arc::new(CountingQueue::default()),
        callers: env.levels.iter().copied().max().unwrap_or(32),
    };
    let setup = store(&env.redis_url, false).await;
    let (mut winner, mut loser, mut remembered, mut cpu_refusal) = (0.0, 0.0_f64, 0.0, 0.0_f64);
    let (mut cpu_get, mut cpu_win) = (0.0, 0.0);
    let (mut dry_cpu, mut dry_trips, mut not_eligible_cpu) = ((0.0, 0.0), (0.0, 0.0), 0.0);
    let mut by_outcome = Vec::new();
    for case in cases() {
        preheat(&setup, &case.def).await;
        let m = measure(&rig, &case).await;
        rows.push(Row {
            name: format!("press costs: {}", case.name),
            value: m.trips,
            unit: "round trips",
            note: format!(
                "{:.2} commands; {:.1} us of Redis CPU per press at {} callers",
                m.commands, m.cpu_us, rig.callers
            ),
        });
        match case.name {
            "winner" => (winner, cpu_win) = (m.trips, m.cpu_us),
            "sold out, memory on" => (remembered, cpu_get) = (m.trips, m.cpu_us),
            "not eligible" => not_eligible_cpu = m.cpu_us,
            "dry run, not eligible" => (dry_cpu.0, dry_trips.0) = (m.cpu_us, m.trips),
            "dry run, would win" => (dry_cpu.1, dry_trips.1) = (m.cpu_us, m.trips),
            _ => {}
        }
        if case.refusal {
            loser = loser.max(m.trips);
            cpu_refusal = cpu_refusal.max(m.cpu_us);
        }
        by_outcome.push(json!({
            "outcome": case.name,
            "roundTrips": m.trips,
            "commands": m.commands,
            "redisCpuUs": m.cpu_us,
            "decidedByTheGrabScript": case.refusal,
            "redisCpuUsRuns": m.runs,
            "presses": {"counted": m.counted, "cpu": m.pressed},
        }));
    }
    rows.push(Row {
        name: "redis_round_trips_per_loser (largest over script refusals)".into(),
        value: loser,
        unit: "round trips",
        note: "target <= 1".into(),
    });
    rows.push(Row {
        name: "redis_cpu_us_per_refusal (largest over the same)".into(),
        value: cpu_refusal,
        unit: "us",
        note: format!("a GET: {cpu_get:.1} us in this run (the sold-out memory's press)"),
    });
    rows.push(Row {
        name: "redis_cpu_refusal_vs_get (the same / a GET, this run)".into(),
        value: cpu_refusal / cpu_get.max(f64::MIN_POSITIVE),
        unit: "ratio",
        note: "target <= 4".into(),
    });
    rows.push(Row {
        name: "redis_cpu_win_vs_get (a winning press / a GET, this run)".into(),
        value: cpu_win / cpu_get.max(f64::MIN_POSITIVE),
        unit: "ratio",
        note: format!("{cpu_win:.1} us: admission, risk pair, claim"),
    });
    rows.push(Row {
        name: "dry run refused on the home shard (not eligible): Redis CPU vs the press's refusal".into(),
        value: dry_cpu.0 / not_eligible_cpu.max(f64::MIN_POSITIVE),
        unit: "ratio",
        note: format!(
            "{:.1} us, {:.2} round trips; would win: {:.1} us, {:.2} round trips (the risk rules read too)",
            dry_cpu.0, dry_trips.0, dry_cpu.1, dry_trips.1
        ),
    });
    Costs {
        winner,
        cpu_per_dry_run: dry_cpu,
        dry_run_trips: dry_trips,
        loser,
        loser_remembered: remembered,
        cpu_per_refusal: cpu_refusal,
        cpu_per_get: cpu_get,
        cpu_per_win: cpu_win,
        by_outcome: json!({
            "countedAt": "the wire (a counting proxy), one caller pressing one request at a time",
            "redisCpu": format!("Redis main-thread CPU over the presses of {} callers", rig.callers),
            "wiring": "production: risk checks on",
            "outcomes": by_outcome,
        }),
    }
}
