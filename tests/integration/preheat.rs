//! Creating a coupon: durable definition, preheated shards, idempotent.

use std::collections::HashSet;

use coupon_domain::catalog::{CreateError, Created, Stored};
use coupon_domain::ids::CouponId;
use coupon_domain::reconcile::ports::DurableFacts;

use crate::support::Harness;

#[tokio::test]
async fn creating_the_same_coupon_twice_is_a_no_op_that_keeps_the_stock() {
    let h = Harness::new().await;
    let mut def = h.coupon(10);
    def.shards = 3;
    assert_eq!(h.try_create(&def).await.unwrap(), Created::New);
    assert_eq!(h.stock(&def).await, 10);
    assert_eq!(h.grab(&def.coupon_id, "u1", "r1").await.code(), "SUCCESS");
    assert_eq!(h.try_create(&def).await.unwrap(), Created::Unchanged);
    assert_eq!(h.stock(&def).await, 9, "a repeated preheat never resets stock");
}

#[tokio::test]
async fn a_different_definition_under_the_same_id_is_a_conflict() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    h.create(&def).await;
    let mut other = def.clone();
    other.total_stock = 20;
    assert!(matches!(h.try_create(&other).await, Err(CreateError::Conflict(_))));
    assert_eq!(h.stock(&def).await, 10);
}

#[tokio::test]
async fn an_invalid_definition_writes_nothing() {
    let h = Harness::new().await;
    let mut def = h.coupon(10);
    def.grab_end_ms = def.grab_start_ms - 1;
    assert!(matches!(h.try_create(&def).await, Err(CreateError::Invalid(e)) if e.field == "grabEndMs"));
    let missing = h.grab(&def.coupon_id, "u1", "r1").await;
    assert_eq!(missing.code(), "COUPON_NOT_FOUND");
}

#[tokio::test]
async fn a_half_done_create_is_finished_by_running_it_again() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    // The definition reached DynamoDB but the preheat never ran.
    let repo = coupon_adapters::dynamodb::DynamoCouponRepository::new(h.tables.clone());
    use coupon_domain::catalog::CouponRepository;
    assert_eq!(repo.put_definition(&def).await.unwrap(), Stored::New);
    // It exists (durably) but is not ready: retry, not "not found".
    assert_eq!(h.grab(&def.coupon_id, "u1", "r1").await.code(), "BUSY");
    assert_eq!(h.try_create(&def).await.unwrap(), Created::New);
    assert_eq!(h.grab(&def.coupon_id, "u1", "r1").await.code(), "SUCCESS");
    let stored = repo
        .get_definition(&CouponId::parse(def.coupon_id.as_str()).unwrap())
        .await
        .unwrap();
    assert_eq!(stored, Some(def));
}

/// The sequence that used to sell stock twice: Redis lost a live coupon, an
/// operator created it again with the same definition, and the preheat
/// wrote every shard back with the full stock and its grant sequence at 0:
/// units already granted were sold again and grant ids repeated for other
/// users. A coupon preheated once is never preheated again; its lost shards
/// go through the rebuild, which knows what is already granted.
#[tokio::test]
async fn a_re_create_after_redis_lost_the_coupon_never_restores_the_full_stock() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    h.create(&def).await;
    let mut told_success = Vec::new();
    for i in 0..4 {
        let resp = h.grab(&def.coupon_id, &format!("before-{i}"), "r").await;
        assert_eq!(resp.code(), "SUCCESS");
        told_success.push(resp.grant_id().unwrap());
    }
    h.pump().await;

    h.flush_redis().await;
    assert_eq!(h.try_create(&def).await.unwrap(), Created::Unchanged);
    assert_eq!(h.outbox_len(&def).await, 0, "nothing was preheated");
    let report = h.reconcile(&def).await;
    assert_eq!((report.shards_rebuilt, report.restored), (1, 6));

    for i in 0..10 {
        let resp = h.grab(&def.coupon_id, &format!("after-{i}"), "r").await;
        if resp.code() == "SUCCESS" {
            told_success.push(resp.grant_id().unwrap());
        }
    }
    h.pump().await;
    assert_eq!(told_success.len(), 10, "exactly the stock was ever told SUCCESS");
    let unique: HashSet<&String> = told_success.iter().collect();
    assert_eq!(unique.len(), 10, "no grant id was handed out twice: {told_success:?}");
    assert_eq!(h.facts().issued(&def.coupon_id).await.unwrap(), 10);
    assert!(
        h.facts().rejections(&def.coupon_id).await.unwrap().is_empty(),
        "no SUCCESS turned REJECTED"
    );
}
