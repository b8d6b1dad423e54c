//! A SUCCESS survives a failover: a win is answered SUCCESS only once a
//! replica holds it (Redis `WAIT`), so promoting a replica that lagged loses
//! only decisions nobody was told about. A real primary and replica, started
//! by the test; the lag is a real one (the replica stopped, or cut off).

use std::collections::HashSet;

use coupon_domain::reconcile::ports::DurableFacts;

use crate::support::{Harness, Options, ReplicaPair};

fn on(pair: &ReplicaPair) -> Options {
    Options {
        redis_url: Some(pair.primary.url()),
        replica_acks: 1,
        ..Options::without_ip_limit()
    }
}

#[tokio::test]
async fn a_win_is_success_only_once_a_replica_holds_it() {
    let pair = ReplicaPair::start();
    let h = Harness::with(on(&pair)).await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    assert_eq!(h.grab(&coupon, "u1", "r1").await.code(), "SUCCESS");

    pair.replica.signal("STOP");
    let lagging = h.grab(&coupon, "u2", "r1").await;
    assert_eq!((lagging.status, lagging.code()), (503, "BUSY"), "{}", lagging.body);
    assert_eq!(h.metrics.total("GrantNotReplicated"), 1);
    assert_eq!(h.receive().await.len(), 1, "nothing sent for the unacknowledged win");

    pair.replica.signal("CONT");
    let retry = h.grab(&coupon, "u2", "r1").await;
    assert_eq!(retry.code(), "SUCCESS", "{}", retry.body);
    assert_eq!(retry.body["data"]["replayed"], true);
}

/// The sequence that used to turn a SUCCESS into a REJECTED: the replica
/// stopped receiving, the primary told a winner SUCCESS, the primary died
/// and the replica took over without that win; the winner's retry won a
/// second unit under the same ordinal, and the issuer rejected one.
#[tokio::test]
async fn a_failover_to_a_replica_that_lagged_loses_no_success() {
    let pair = ReplicaPair::start();
    let h = Harness::with(on(&pair)).await;
    let def = h.coupon(3);
    let coupon = h.create(&def).await;
    let mut told = Vec::new();
    for user in ["u1", "u2"] {
        let resp = h.grab(&coupon, user, "r1").await;
        assert_eq!(resp.code(), "SUCCESS");
        told.push(resp.grant_id().unwrap());
    }

    pair.partition();
    let cut_off = h.grab(&coupon, "u3", "r1").await;
    assert_eq!(cut_off.code(), "BUSY", "no replica holds it: not a SUCCESS");
    pair.fail_over();

    // The functions reconnect to the new primary (ElastiCache moves the
    // endpoint); same keys, same queue.
    let prefix = h.config.redis.key_prefix.clone();
    let after = Harness::with(Options {
        redis_url: Some(pair.replica.url()),
        key_prefix: Some(prefix),
        queue_url: Some(h.queue_url.clone()),
        replica_acks: 0, // the new primary has no replica yet
        ..Options::without_ip_limit()
    })
    .await;
    after.own.lock().unwrap().insert(coupon.clone());
    for (user, request) in [("u3", "r1"), ("u4", "r1"), ("u1", "r1")] {
        let resp = after.grab(&coupon, user, request).await;
        if resp.code() == "SUCCESS" {
            told.push(resp.grant_id().unwrap());
        }
    }
    after.pump().await;

    let told: HashSet<String> = told.into_iter().collect();
    assert_eq!(told.len(), 3, "exactly the stock was told SUCCESS, each grant once");
    let mut issued = HashSet::new();
    for user in ["u1", "u2", "u3", "u4"] {
        for c in after.coupons_of(user).await {
            issued.insert(c.grant_id);
        }
    }
    assert_eq!(issued, told, "every SUCCESS is the coupon its user holds");
    assert!(
        after.facts().rejections(&coupon).await.unwrap().is_empty(),
        "no SUCCESS turned REJECTED"
    );
}
