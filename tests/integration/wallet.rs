//! Reading coupons: the caller's own, never anyone else's.

use coupon_domain::clock::Clock;

use crate::support::{unique, Harness};

#[tokio::test]
async fn a_grant_is_pending_until_issued_and_then_in_the_wallet() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    let reader = unique("reader");
    let won = h.grab(&coupon, &reader, "r1").await;
    let grant = won.grant_id().unwrap();
    let pending = h.wallet_get(&format!("/me/grants/{grant}"), &reader).await;
    assert_eq!(
        (pending.code(), pending.body["data"]["status"].as_str()),
        ("SUCCESS", Some("PENDING"))
    );
    let empty = h.wallet_get("/me/coupons", &reader).await;
    assert_eq!(empty.body["data"]["coupons"].as_array().map(Vec::len), Some(0));

    h.pump().await;
    let issued = h.wallet_get(&format!("/me/grants/{grant}"), &reader).await;
    assert_eq!(issued.body["data"]["status"], "ISSUED");
    let wallet = h.wallet_get("/me/coupons", &reader).await;
    let coupons = wallet.body["data"]["coupons"].as_array().unwrap().clone();
    assert_eq!(coupons.len(), 1);
    assert_eq!(coupons[0]["grantId"], grant.as_str());
    assert_eq!(coupons[0]["couponId"], coupon.as_str());
    assert_eq!(coupons[0]["status"], "UNUSED");
    assert_eq!(coupons[0]["amount"], 2000);
    assert_eq!(coupons[0]["validUntilMs"], def.valid_until_ms);
}

#[tokio::test]
async fn nobody_reads_another_users_grant() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    let grant = h.grab(&coupon, "owner", "r1").await.grant_id().unwrap();
    let intruder = unique("intruder");
    let pending = h.wallet_get(&format!("/me/grants/{grant}"), &intruder).await;
    assert_eq!((pending.status, pending.code()), (404, "GRANT_NOT_FOUND"));
    h.pump().await;
    let issued = h.wallet_get(&format!("/me/grants/{grant}"), &intruder).await;
    assert_eq!(issued.code(), "GRANT_NOT_FOUND");
    let theirs = h.wallet_get("/me/coupons", &intruder).await;
    assert_eq!(theirs.body["data"]["coupons"].as_array().map(Vec::len), Some(0));
}

#[tokio::test]
async fn wallet_routes_answer_bad_input_with_4xx() {
    let h = Harness::new().await;
    for (path, status, code) in [
        ("/me/grants/not-a-grant", 404, "GRANT_NOT_FOUND"),
        ("/me/grants/x%7Bcpn%7D-0-1", 400, "INVALID_REQUEST"),
        ("/me/grants/c-0-99999999", 404, "GRANT_NOT_FOUND"),
        ("/me/elsewhere", 404, "ROUTE_NOT_FOUND"),
    ] {
        let resp = h.wallet_get(path, "someone").await;
        assert_eq!((resp.status, resp.code()), (status, code), "{path}");
    }
}

/// Three coupons issued a moment apart, read two at a time: newest first,
/// each exactly once; then the oldest one's validity ends and it reads
/// EXPIRED (nothing was written: the state is decided at read).
#[tokio::test]
async fn the_wallet_pages_newest_first_and_an_unused_coupon_past_its_validity_reads_expired() {
    let h = Harness::new().await;
    let reader = unique("pager");
    let mut grants = Vec::new();
    let mut oldest_until = 0;
    for i in 0..3 {
        let mut def = h.coupon(5);
        if i == 0 {
            def.valid_until_ms = def.grab_end_ms;
            oldest_until = def.valid_until_ms;
        }
        let coupon = h.create(&def).await;
        grants.push(h.grab(&coupon, &reader, "r").await.grant_id().unwrap());
        h.pump().await;
        h.clock.advance(1_000);
    }
    let ids = |resp: &crate::support::Resp| -> Vec<String> {
        resp.body["data"]["coupons"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["grantId"].as_str().unwrap().to_owned())
            .collect()
    };

    let first = h.wallet_get("/me/coupons?limit=2", &reader).await;
    assert_eq!(ids(&first), [grants[2].clone(), grants[1].clone()], "{}", first.body);
    let cursor = first.body["data"]["nextCursor"]
        .as_str()
        .expect("more to read")
        .to_owned();
    let second = h
        .wallet_get(&format!("/me/coupons?limit=2&cursor={cursor}"), &reader)
        .await;
    assert_eq!(ids(&second), [grants[0].clone()]);
    assert!(second.body["data"]["nextCursor"].is_null());

    h.clock.advance(oldest_until - h.clock.now_ms());
    let expired = h.wallet_get("/me/coupons?status=expired", &reader).await;
    assert_eq!(ids(&expired), [grants[0].clone()]);
    assert_eq!(expired.body["data"]["coupons"][0]["status"], "EXPIRED");
    let unused = h.wallet_get("/me/coupons?status=unused", &reader).await;
    assert_eq!(ids(&unused), [grants[2].clone(), grants[1].clone()]);

    let bad = h.wallet_get("/me/coupons?limit=0", &reader).await;
    assert_eq!((bad.status, bad.code()), (400, "INVALID_REQUEST"));
}
