//! A sale through both designs: units sold beyond the stock (must be 0).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use coupon_domain::ids::CouponId;
use redis::AsyncCommands;

use super::{apps, coupon, drive, preheat, store, unique, Wiring};
use crate::{lock, BenchEnv, Row, Table};
use coupon_domain::testing::CountingQueue;

/// A sale of 1,000 units pressed 3,000 times by 32 callers, through both
/// designs; returns the units sold beyond the stock (must be 0).
pub async fn oversell(env: &BenchEnv, rows: &mut Table) -> u64 {
    const STOCK: u64 = 1_000;
    let publisher = Arc::new(CountingQueue::default());
    let id = unique("sale");
    let setup = store(&env.redis_url, false).await;
    preheat(&setup, &coupon(&id, STOCK, 4)).await;
    let apps = apps(&env.redis_url, false, 32, Wiring::Production, 1_000, publisher.clone()).await;
    let sale = drive(&apps, &id, "sale", Duration::from_secs(600), 3 * STOCK).await;
    let won = sale.status(200);
    let published = publisher.published.load(Ordering::Relaxed);
    let mut conn = setup.connection();
    let mut left = 0i64;
    for s in 0..4 {
        let v: i64 = conn
            .hget(setup.keys().shard(&CouponId::parse(&id).unwrap(), s).meta(), "stock")
            .await
            .expect("stock");
        left += v;
    }
    let grab_over = won.saturating_sub(STOCK) + published.saturating_sub(STOCK) + u64::from(left < 0);
    assert_eq!(won as i64 + left, STOCK as i64, "grab: won + left = stock");

    let baseline = lock::run(
        &env.redis_url,
        &unique("locksale"),
        STOCK as i64,
        32,
        Duration::from_secs(600),
        3 * STOCK,
    )
    .await;
    let lock_over = baseline.won.saturating_sub(STOCK);
    rows.push(Row {
        name: "sale: 1000 units, 3000 presses, 32 callers: grab winners".into(),
        value: won as f64,
        unit: "units",
        note: format!("oversell {grab_over}"),
    });
    rows.push(Row {
        name: "sale: same through the seed 002 lock flow: winners".into(),
        value: baseline.won as f64,
        unit: "units",
        note: format!("oversell {lock_over}; {} presses gave up waiting", baseline.gave_up),
    });
    grab_over + lock_over
}
