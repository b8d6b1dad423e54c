//! The handler against redis-benchmark sending the same EVALSHA at the
//! same concurrency: what the handler adds beyond its one round trip.

use std::sync::Arc;

use serde_json::{json, Value};

use super::{apps, coupon, drive_fed, now_ms, preheat, store, unique, Feed, Wiring};
use crate::{BenchEnv, Row, Table};
use coupon_domain::testing::CountingQueue;

/// The result of a comparison at several concurrency levels.
pub struct Ratios {
    /// The headline ratio.
    pub ratio: f64,
    /// Per level.
    pub by_level: Value,
}

pub async fn grab_vs_redis_benchmark(env: &BenchEnv, rows: &mut Table) -> Ratios {
    let mut levels = Vec::new();
    let mut worst = f64::MAX;
    let sha = load_grab_script(&env.redis_url).await;
    for &c in &env.levels {
        let publisher = Arc::new(CountingQueue::default());
        let rb_id = unique(&format!("rb{c}"));
        let h_id = unique(&format!("h{c}"));
        let setup = store(&env.redis_url, false).await;
        preheat(&setup, &coupon(&rb_id, 1_000_000_000, 1)).await;
        preheat(&setup, &coupon(&h_id, 1_000_000_000, 1)).await;
        let apps = apps(&env.redis_url, false, c, Wiring::ScriptOnly, 0, publisher.clone()).await;
        let parsed = drive_fed(&apps, &h_id, &format!("e{c}"), env.run, u64::MAX, Feed::Events).await;
        assert_eq!(
            parsed.status(200),
            parsed.total,
            "every decision a win: {:?}",
            parsed.by_status
        );
        // Alternating rounds, the median of each side: this machine's two
        // cores are shared and its speed drifts.
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            let handler = drive_fed(
                &apps,
                &h_id,
                &format!("h{c}r{round}"),
                env.run,
                u64::MAX,
                Feed::Requests,
            )
            .await;
            assert_eq!(
                handler.status(200),
                handler.total,
                "every decision a win: {:?}",
                handler.by_status
            );
            let requests = ((handler.per_sec() * env.run.as_secs_f64()) as u64).max(10_000);
            ours.push(handler.per_sec());
            theirs.push(redis_benchmark(env.redis_port, c, requests, &sha, &rb_id));
        }
        let (handler_rate, rb) = (median(&mut ours), median(&mut theirs));
        let ratio = handler_rate / rb;
        worst = worst.min(ratio);
        rows.push(Row {
            name: format!("grab::handle, script only, {c} callers"),
            value: handler_rate,
            unit: "grabs/s",
            note: format!("median of {ROUNDS}; the handler and Redis share 2 cores"),
        });
        rows.push(Row {
            name: "  the same, each event parsed from JSON first".into(),
            value: parsed.per_sec(),
            unit: "grabs/s",
            note: "plus lambda_http's event parsing (the runtime's work)".into(),
        });
        rows.push(Row {
            name: format!("redis-benchmark, same EVALSHA, {c} clients"),
            value: rb,
            unit: "req/s",
            note: format!("median of {ROUNDS}; Redis CPU"),
        });
        levels.push(json!({"concurrency": c, "handler_per_sec": handler_rate, "handler_rounds": ours, "handler_with_event_parsing_per_sec": parsed.per_sec(), "redis_benchmark_per_sec": rb, "redis_benchmark_rounds": theirs, "ratio": ratio, "ratio_with_event_parsing": parsed.per_sec() / rb}));
    }
    rows.push(Row {
        name: "grab_vs_redis_benchmark (lowest over levels)".into(),
        value: worst,
        unit: "ratio",
        note: "ratio on this machine; no target".into(),
    });
    Ratios {
        ratio: worst,
        by_level: json!(levels),
    }
}

/// The grab script's SHA as the adapter loads it (lib.lua + grab.lua).
pub(crate) async fn load_grab_script(url: &str) -> String {
    let text = concat!(
        include_str!("../../../lua/lib.lua"),
        include_str!("../../../lua/grab.lua")
    );
    let client = redis::Client::open(url).expect("url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(text)
        .query_async(&mut conn)
        .await
        .expect("script load")
}

/// redis-benchmark sending the grab script's EVALSHA with the adapter's key
/// layout, fresh users and request ids (`__rand_int__`); requests per second.
pub(crate) fn redis_benchmark(port: u16, callers: usize, requests: u64, sha: &str, coupon: &str) -> f64 {
    let tag = format!("bench:{{cpn:{coupon}:0}}");
    let out = std::process::Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args([
            "-c",
            &callers.to_string(),
            "-n",
            &requests.to_string(),
            "-r",
            "1000000000",
            "--csv",
        ])
        .arg("EVALSHA")
        .arg(sha)
        .arg("5")
        .arg(format!("{tag}:meta"))
        .arg(format!("{tag}:users"))
        .arg(format!("{tag}:req:u__rand_int__:r__rand_int__"))
        .arg(format!("{tag}:outbox"))
        .arg(format!("{tag}:borrowing"))
        .arg("whole")
        .arg("u__rand_int__")
        .arg("0")
        .arg(now_ms().to_string())
        .arg("")
        .arg("r__rand_int__")
        .arg("3600000")
        .output()
        .expect("redis-benchmark (apt: redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| l.starts_with("\"EVALSHA"))
        .find_map(|l| l.split(',').nth(1).and_then(|v| v.trim_matches('"').parse().ok()))
        .unwrap_or_else(|| {
            panic!(
                "redis-benchmark output: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// Alternating rounds per level; each side's figure is their median.
pub(crate) const ROUNDS: usize = 5;

pub(crate) fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
