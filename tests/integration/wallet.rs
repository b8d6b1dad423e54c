//! Reading coupons: the caller's own, never anyone else's.

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
