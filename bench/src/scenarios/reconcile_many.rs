//! The reconciler's scheduled pass over a thousand coupons, most of them
//! long ended, some not started, a few selling: the first pass visits
//! every one (and settles the ended ones), every later pass only those that
//! may still need work. Run first, so the benchmark's DynamoDB holds these
//! coupons and no other scenario's.

use std::time::Instant;

use coupon_adapters::dynamodb::{DynamoCouponRepository, Tables};
use coupon_domain::catalog::CouponRepository;
use futures::StreamExt;

use super::{coupon, now_ms, preheat, sdk, store, unique, HOUR};
use crate::{BenchEnv, Row, Table};

/// How many coupons, and of them how many ended and not started; the rest
/// sell now.
const COUPONS: usize = 1_000;
const ENDED: usize = 940;
const NOT_STARTED: usize = 50;

/// The two passes' figures.
pub struct ReconcileMany {
    /// Coupons in the store.
    pub coupons: usize,
    /// The first pass: every coupon visited, the ended ones settled.
    pub first_seconds: f64,
    /// A later pass: the settled coupons skipped.
    pub later_seconds: f64,
    /// Coupons a later pass visited.
    pub later_visited: usize,
}

pub async fn reconcile_many(env: &BenchEnv, rows: &mut Table) -> ReconcileMany {
    let (sqs, ddb) = sdk(None).await;
    let redis = store(&env.redis_url, false).await;
    let tables = Tables::new(ddb.clone(), &env.tables);
    let prefix = unique("many");
    let now = now_ms();
    futures::stream::iter(0..COUPONS)
        .for_each_concurrent(16, |i| {
            let (redis, tables, prefix) = (redis.clone(), tables.clone(), prefix.clone());
            async move {
                let mut def = coupon(&format!("{prefix}-{i}"), 100, 2);
                if i < ENDED {
                    def.grab_start_ms = now - 3 * HOUR;
                    def.grab_end_ms = now - 2 * HOUR;
                } else if i < ENDED + NOT_STARTED {
                    def.grab_start_ms = now + 24 * HOUR;
                    def.grab_end_ms = now + 25 * HOUR;
                }
                DynamoCouponRepository::new(tables)
                    .put_definition(&def)
                    .await
                    .expect("definition");
                preheat(&redis, &def).await;
            }
        })
        .await;
    let reconciler = super::reconcile::bench_reconciler(&redis, &tables, sqs, &env.queue_url);
    let start = Instant::now();
    let first = reconciler.run().await.expect("first pass");
    let first_seconds = start.elapsed().as_secs_f64();
    assert!(first.is_clean(), "{:?}", first.errors);
    assert_eq!(first.coupons.len(), COUPONS, "the first pass visits every coupon");
    let start = Instant::now();
    let later = reconciler.run().await.expect("later pass");
    let later_seconds = start.elapsed().as_secs_f64();
    assert!(later.is_clean(), "{:?}", later.errors);
    assert_eq!(
        (later.coupons.len(), later.settled as usize),
        (COUPONS - ENDED, ENDED),
        "a later pass visits only the coupons not settled"
    );
    rows.push(Row {
        name: format!("reconciler: first pass over {COUPONS} coupons ({ENDED} ended)"),
        value: first_seconds,
        unit: "s",
        note: "every coupon visited; the ended ones settled".into(),
    });
    rows.push(Row {
        name: format!("reconciler: a later pass over {COUPONS} coupons"),
        value: later_seconds,
        unit: "s",
        note: format!(
            "{} visited, {ENDED} settled skipped; the definitions' scan",
            later.coupons.len()
        ),
    });
    ReconcileMany {
        coupons: COUPONS,
        first_seconds,
        later_seconds,
        later_visited: later.coupons.len(),
    }
}
