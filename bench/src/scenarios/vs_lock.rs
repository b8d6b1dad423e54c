//! The grab against the seeds' lock-based flow (SETNX lock, GET, DECR,
//! DEL) at the same concurrency.

use std::sync::Arc;

use serde_json::json;

use super::{apps, coupon, drive_fed, preheat, store, unique, Feed, Ratios, Wiring};
use crate::{lock, BenchEnv, Row, Table};
use coupon_domain::testing::CountingQueue;

pub async fn grab_vs_lock(env: &BenchEnv, rows: &mut Table) -> Ratios {
    let mut levels = Vec::new();
    let mut at_max = 0.0;
    for &c in &env.levels {
        let publisher = Arc::new(CountingQueue::default());
        let id = unique(&format!("full{c}"));
        preheat(&store(&env.redis_url, false).await, &coupon(&id, 1_000_000_000, 1)).await;
        let production = apps(&env.redis_url, false, c, Wiring::Production, 0, publisher.clone()).await;
        let full = drive_fed(&production, &id, &format!("f{c}"), env.run, u64::MAX, Feed::Requests).await;
        let lean = apps(&env.redis_url, false, c, Wiring::ScriptOnly, 0, publisher).await;
        let script = drive_fed(&lean, &id, &format!("s{c}"), env.run, u64::MAX, Feed::Requests).await;
        let baseline = lock::run(&env.redis_url, &unique("lock"), 1_000_000_000, c, env.run, u64::MAX).await;
        let lock_rate = baseline.decided as f64 / baseline.elapsed.as_secs_f64();
        let ratio = script.per_sec() / lock_rate;
        at_max = ratio;
        rows.push(Row {
            name: format!("grab::handle, script only, {c} callers"),
            value: script.per_sec(),
            unit: "grabs/s",
            note: "the same decision work as the lock flow, and more (limit, idempotency, outbox)".into(),
        });
        rows.push(Row {
            name: format!("grab handler, production wiring, {c} callers"),
            value: full.per_sec(),
            unit: "grabs/s",
            note: "4 scripts (admission, risk user + risk IP, claim), 3 round trips".into(),
        });
        rows.push(Row {
            name: format!("seed 002 lock flow, {c} callers"),
            value: lock_rate,
            unit: "grabs/s",
            note: format!("the lock: 100 ms spins; {} gave up after 5 s", baseline.gave_up),
        });
        levels.push(json!({"concurrency": c, "grab_per_sec": script.per_sec(), "grab_production_wiring_per_sec": full.per_sec(), "lock_per_sec": lock_rate, "lock_gave_up": baseline.gave_up, "ratio": ratio, "ratio_production_wiring": full.per_sec() / lock_rate}));
    }
    rows.push(Row {
        name: format!(
            "grab_vs_lock_baseline (at {} callers)",
            env.levels.last().copied().unwrap_or(0)
        ),
        value: at_max,
        unit: "ratio",
        note: "ratio on this machine; no target".into(),
    });
    Ratios {
        ratio: at_max,
        by_level: json!(levels),
    }
}
