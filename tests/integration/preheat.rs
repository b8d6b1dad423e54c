//! Creating a coupon: durable definition, preheated shards, idempotent.

use coupon_domain::catalog::{CreateError, Created};
use coupon_domain::ids::CouponId;

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
    assert!(repo.put_definition(&def).await.unwrap());
    assert_eq!(h.grab(&def.coupon_id, "u1", "r1").await.code(), "COUPON_NOT_FOUND");
    assert_eq!(h.try_create(&def).await.unwrap(), Created::New);
    assert_eq!(h.grab(&def.coupon_id, "u1", "r1").await.code(), "SUCCESS");
    let stored = repo
        .get_definition(&CouponId::parse(def.coupon_id.as_str()).unwrap())
        .await
        .unwrap();
    assert_eq!(stored, Some(def));
}
