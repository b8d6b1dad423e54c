//! After a sell-out: the per-instance sold-out memory against none, in
//! Redis CPU per rejection and in rejections per second.

use std::sync::Arc;
use std::time::Duration;

use super::{apps, coupon, drive, drive_fed, preheat, redis_cpu, store, unique, Feed, Wiring};
use crate::{BenchEnv, Row, Table};
use coupon_domain::testing::CountingQueue;

pub async fn sold_out(env: &BenchEnv, rows: &mut Table) -> SoldOut {
    let c = env.levels.last().copied().unwrap_or(32);
    let id = unique("gone");
    let setup = store(&env.redis_url, false).await;
    preheat(&setup, &coupon(&id, 50, 4)).await;
    let publisher = Arc::new(CountingQueue::default());
    let sell = apps(&env.redis_url, false, 8, Wiring::Production, 0, publisher.clone()).await;
    let sale = drive(&sell, &id, "sellout", Duration::from_secs(60), 500).await;
    assert_eq!(sale.status(200), 50, "{:?}", sale.by_status);
    let remembered = apps(&env.redis_url, false, c, Wiring::Production, 60_000, publisher.clone()).await;
    // Each instance learns the sell-out on its first press.
    drive_fed(
        &remembered,
        &id,
        "learn",
        Duration::from_secs(60),
        c as u64,
        Feed::Requests,
    )
    .await;
    let cpu0 = redis_cpu(&env.redis_url).await;
    let with = drive_fed(&remembered, &id, "mem", env.run, u64::MAX, Feed::Requests).await;
    let cpu1 = redis_cpu(&env.redis_url).await;
    let forgetful = apps(&env.redis_url, false, c, Wiring::Production, 0, publisher).await;
    let without = drive_fed(&forgetful, &id, "nomem", env.run, u64::MAX, Feed::Requests).await;
    let cpu2 = redis_cpu(&env.redis_url).await;
    assert_eq!(with.status(410), with.total, "{:?}", with.by_status);
    assert_eq!(without.status(410), without.total, "{:?}", without.by_status);
    // Redis CPU per rejection: what one Redis can serve is its inverse.
    let us_with = (cpu1 - cpu0) * 1e6 / with.total as f64;
    let us_without = (cpu2 - cpu1) * 1e6 / without.total as f64;
    let speedup = us_without / us_with;
    let measured = with.per_sec() / without.per_sec();
    rows.push(Row {
        name: "Redis CPU per rejection, memory on / off".into(),
        value: us_with,
        unit: "us",
        note: format!("{us_without:.1} us with the memory off"),
    });
    rows.push(Row {
        name: "measured on this machine (client-bound): on / off".into(),
        value: measured,
        unit: "ratio",
        note: "one process drives all callers; in AWS each Lambda instance has its own CPU".into(),
    });
    rows.push(Row {
        name: format!("after sell-out, sold-out memory on, {c} callers"),
        value: with.per_sec(),
        unit: "rejects/s",
        note: "one GET per press (a replay of a win must still hear SUCCESS)".into(),
    });
    rows.push(Row {
        name: format!("after sell-out, memory off (Redis-bound), {c} callers"),
        value: without.per_sec(),
        unit: "rejects/s",
        note: "the admission script (the grab script refuses it first)".into(),
    });
    rows.push(Row {
        name: "soldout_speedup (Redis-bound rejections/s, on / off)".into(),
        value: speedup,
        unit: "ratio",
        note: "no target: the memory keeps one GET per press, so this is the script-to-GET ratio".into(),
    });
    SoldOut {
        speedup,
        measured,
        redis_us_with: us_with,
        redis_us_without: us_without,
    }
}

/// The sold-out memory's effect.
pub struct SoldOut {
    /// Redis-bound rejection rate with the memory over without it.
    pub speedup: f64,
    /// Rejections per second with over without, as measured here.
    pub measured: f64,
    /// Redis CPU per rejection with the memory (microseconds).
    pub redis_us_with: f64,
    /// And without.
    pub redis_us_without: f64,
}
