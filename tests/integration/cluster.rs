//! The same invariants on a local 3-master Redis Cluster (ElastiCache cluster
//! mode): no CROSSSLOT error anywhere (every script touches one slot), a hot
//! coupon's shards spread over the masters, no oversell, limits hold, and the
//! reconciler re-drives and rebuilds.

use std::collections::HashSet;
use std::sync::Arc;

use futures::stream::{self, StreamExt};
use redis::Value;

use crate::flash_sale::skewed_sale;
use crate::reconcile::{flush_mid_sale, sqs_down, sqs_down_then_back};
use crate::support::{send, Event, Harness, Options};

/// The master (by port) that serves each slot range.
async fn slot_owners(h: &Harness) -> Vec<(i64, i64, i64)> {
    let mut conn = h.redis.connection();
    let slots: Value = redis::cmd("CLUSTER").arg("SLOTS").query_async(&mut conn).await.unwrap();
    let Value::Array(ranges) = slots else {
        panic!("CLUSTER SLOTS")
    };
    ranges
        .iter()
        .map(|r| {
            let Value::Array(r) = r else { panic!("range") };
            let int = |v: &Value| match v {
                Value::Int(i) => *i,
                other => panic!("{other:?}"),
            };
            let Value::Array(master) = &r[2] else { panic!("master") };
            (int(&r[0]), int(&r[1]), int(&master[1]))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hot_coupon_sharded_over_the_cluster_sells_exactly_its_stock() {
    let h = skewed_sale(Options::without_ip_limit().on_cluster(), 8).await;
    // Where did the shards of a fresh 8-shard coupon land?
    let mut def = h.coupon(8);
    def.shards = 8;
    h.create(&def).await;
    let owners = slot_owners(&h).await;
    let mut conn = h.redis.connection();
    let mut masters = HashSet::new();
    for shard in 0..8 {
        let key = h.redis.keys().shard(&def.coupon_id, shard).meta();
        let slot: i64 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&key)
            .query_async(&mut conn)
            .await
            .unwrap();
        let (_, _, port) = owners.iter().find(|(a, b, _)| (*a..=*b).contains(&slot)).unwrap();
        masters.insert(*port);
    }
    assert!(masters.len() >= 2, "8 shards on masters {masters:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn per_user_and_per_ip_limits_hold_on_the_cluster() {
    let h = Harness::with(Options::default().on_cluster()).await;
    let mut def = h.coupon(1_000);
    def.per_user_limit = 100;
    def.shards = 3;
    let coupon = h.create(&def).await;
    let app = Arc::clone(&h.app);
    let mut events: Vec<_> = (0..50)
        .map(|i| Event::grab(coupon.as_str(), "greedy", &format!("r{i}")).build())
        .collect();
    events.extend((0..50).map(|i| {
        Event::grab(coupon.as_str(), &format!("farm-{i}"), "r")
            .ip("198.51.100.99")
            .build()
    }));
    let codes: Vec<(String, String)> = stream::iter(events)
        .map(|e| {
            let app = Arc::clone(&app);
            let user = e["requestContext"]["authorizer"]["jwt"]["claims"]["sub"]
                .as_str()
                .unwrap()
                .to_owned();
            tokio::spawn(async move { (user, send(&app, e).await.code().to_owned()) })
        })
        .buffer_unordered(50)
        .map(|r| r.unwrap())
        .collect()
        .await;
    let wins = |prefix: &str| {
        codes
            .iter()
            .filter(|(u, c)| u.starts_with(prefix) && c == "SUCCESS")
            .count()
    };
    assert_eq!(wins("greedy"), 5, "daily limit");
    assert_eq!(wins("farm-"), 10, "distinct users per IP");
    assert!(
        codes.iter().all(|(_, c)| c == "SUCCESS" || c == "RISK_REJECTED"),
        "{codes:?}"
    );
}

#[tokio::test]
async fn the_reconciler_re_drives_on_the_cluster() {
    sqs_down_then_back(sqs_down().on_cluster()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_flushed_mid_sale_is_rebuilt_without_oversell() {
    flush_mid_sale(Options::without_ip_limit().on_cluster()).await;
}
