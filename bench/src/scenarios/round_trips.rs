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
}

fn cases() -> Vec<Case> {
    let fresh = |name: &str, stock: u64| coupon(&unique(name), stock, 1);
    let mut rate = fresh("rate", 1_000_000_000);
    rate.rate_per_sec = 1;
    rate.burst = 1;
    let mut gated = fresh("gated", 1_000_000_000);
    gated.min_member_level = 9; // the fixture's users are level 2
    vec![
        Case {
            name: "winner",
            status: 200,
            refusal: false,
            def: fresh("win", 1_000_000_000),
            memory_ms: 0,
            cycle: None,
        },
        Case {
            name: "rate limited",
            status: 429,
            refusal: true,
            def: rate,
            memory_ms: 0,
            cycle: None,
        },
        Case {
            name: "already claimed",
            status: 409,
            refusal: true,
            def: fresh("held", 1_000_000_000),
            memory_ms: 0,
            cycle: Some(16),
        },
        Case {
            name: "not eligible",
            status: 403,
            refusal: true,
            def: gated,
            memory_ms: 0,
            cycle: None,
        },
        Case {
            name: "sold out, memory off",
            status: 410,
            refusal: true,
            def: fresh("gone", 1),
            memory_ms: 0,
            cycle: None,
        },
        Case {
            name: "sold out, memory on",
            status: 410,
            refusal: false,
            def: fresh("gone-mem", 1),
            memory_ms: 600_000,
            cycle: None,
        },
    ]
}

pub async fn round_trips(env: &BenchEnv, rows: &mut Table) -> Costs {
    const N: u64 = 1_000;
    let upstream = env
        .redis_url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let (port, wire) = crate::proxy::start(upstream).await;
    let proxied = format!("redis://127.0.0.1:{port}");
    let publisher: Arc<dyn GrantPublisher> = Arc::new(CountingQueue::default());
    let setup = store(&env.redis_url, false).await;
    let callers = env.levels.iter().copied().max().unwrap_or(32);
    let (mut winner, mut loser, mut remembered, mut cpu_refusal) = (0.0, 0.0_f64, 0.0, 0.0_f64);
    let mut by_outcome = Vec::new();
    for case in cases() {
        preheat(&setup, &case.def).await;
        let id = case.def.coupon_id.as_str().to_owned();
        // Bring the coupon to the case's state: the unit of a sold-out
        // coupon sold, the pressing users holding their coupon, the rate
        // limit's one token taken; each instance knowing the coupon.
        let prepare = |apps: Vec<Arc<GrabApp>>, label: &'static str| {
            let id = id.clone();
            async move {
                let n = apps.len() as u64 * case.cycle.unwrap_or(1);
                drive_as(
                    &apps,
                    &id,
                    label,
                    Duration::from_secs(60),
                    n,
                    Feed::Requests,
                    case.cycle,
                )
                .await;
                apps
            }
        };
        // Round trips and commands: one caller, one press at a time.
        let one = apps(
            &proxied,
            false,
            1,
            Wiring::Production,
            case.memory_ms,
            publisher.clone(),
        )
        .await;
        let one = prepare(one, "p0").await;
        let (c0, t0) = (wire.commands(), wire.round_trips());
        let d = drive_as(&one, &id, "p", Duration::from_secs(600), N, Feed::Requests, case.cycle).await;
        let (commands, trips) = (wire.commands() - c0, wire.round_trips() - t0);
        let share = d.status(case.status) as f64 / d.total as f64;
        // A rate limit of one token per second lets a press through now
        // and then: those are winners, not this case.
        assert!(share >= 0.99, "{}: {:?}", case.name, d.by_status);
        let per = |x: u64| x as f64 / d.total as f64;
        // Redis CPU: every caller pressing at once, Redis busy.
        let many = apps(
            &env.redis_url,
            false,
            callers,
            Wiring::Production,
            case.memory_ms,
            publisher.clone(),
        )
        .await;
        let many = prepare(many, "c0").await;
        // The least of three runs: this machine's speed drifts (a busy
        // neighbour, the hypervisor), and drift only ever adds CPU time,
        // so the least is the closest to what the press itself costs.
        let mut runs = Vec::new();
        let mut pressed = 0;
        for round in 0..3 {
            let label = ["c1", "c2", "c3"][round];
            let before = redis_cpu(&env.redis_url).await;
            let load = drive_as(&many, &id, label, env.run, u64::MAX, Feed::Requests, case.cycle).await;
            runs.push((redis_cpu(&env.redis_url).await - before) * 1e6 / load.total as f64);
            assert!(
                load.status(case.status) as f64 >= 0.99 * load.total as f64,
                "{}: {:?}",
                case.name,
                load.by_status
            );
            pressed += load.total;
        }
        let cpu_us = runs.iter().copied().fold(f64::INFINITY, f64::min);
        rows.push(Row {
            name: format!("press costs: {}", case.name),
            value: per(trips),
            unit: "round trips",
            note: format!(
                "{:.2} commands; {cpu_us:.1} us of Redis CPU per press at {callers} callers",
                per(commands)
            ),
        });
        match case.name {
            "winner" => winner = per(trips),
            "sold out, memory on" => remembered = per(trips),
            _ => {}
        }
        if case.refusal {
            loser = loser.max(per(trips));
            cpu_refusal = cpu_refusal.max(cpu_us);
        }
        by_outcome.push(json!({
            "outcome": case.name,
            "roundTrips": per(trips),
            "commands": per(commands),
            "redisCpuUs": cpu_us,
            "decidedByTheGrabScript": case.refusal,
            "redisCpuUsRuns": runs,
            "presses": {"counted": d.total, "cpu": pressed},
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
        note: "target <= 25".into(),
    });
    Costs {
        winner,
        loser,
        loser_remembered: remembered,
        cpu_per_refusal: cpu_refusal,
        by_outcome: json!({
            "countedAt": "the wire (a counting proxy), one caller pressing one request at a time",
            "redisCpu": format!("Redis main-thread CPU over the presses of {callers} callers"),
            "wiring": "production: risk checks on",
            "outcomes": by_outcome,
        }),
    }
}
