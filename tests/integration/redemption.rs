//! The coupon's use by orders (the order service's routes on the
//! IAM-authorized function), against the real DynamoDB emulator: every
//! transition, every refusal, and two orders racing for one coupon.

use coupon_domain::clock::Clock;
use serde_json::{json, Value};

use crate::support::{unique, Harness, Resp, HOUR};

/// A user holding one issued coupon of a fresh campaign.
async fn holder(h: &Harness, def: &coupon_domain::coupon::CouponDefinition) -> (String, String) {
    h.admin_create(def).await;
    let user = unique("buyer");
    let grant = h.grab(&def.coupon_id, &user, "r1").await.grant_id().unwrap();
    h.pump().await;
    (user, grant)
}

async fn redeem(h: &Harness, order: &str, user: &str, grant: &str) -> Resp {
    h.admin_call(
        "PUT",
        &format!("/redemptions/{order}"),
        Some(json!({"userId": user, "grantId": grant})),
    )
    .await
}

async fn give_back(h: &Harness, order: &str, user: &str, grant: &str) -> Resp {
    h.admin_call(
        "POST",
        &format!("/redemptions/{order}/return"),
        Some(json!({"userId": user, "grantId": grant})),
    )
    .await
}

fn status(r: &Resp) -> (&str, Option<&str>) {
    (r.code(), r.body["data"]["coupon"]["status"].as_str())
}

#[tokio::test]
async fn a_coupon_is_spent_once_given_back_only_by_its_order_and_each_answer_repeats() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    let (user, grant) = holder(&h, &def).await;
    let o1 = unique("order");
    let o2 = unique("order");

    let spent = redeem(&h, &o1, &user, &grant).await;
    assert_eq!(status(&spent), ("SUCCESS", Some("USED")), "{}", spent.body);
    assert_eq!(spent.body["data"]["coupon"]["orderId"], o1.as_str());
    assert_eq!(spent.body["data"]["replayed"], false);
    let again = redeem(&h, &o1, &user, &grant).await;
    assert_eq!(
        (again.code(), &again.body["data"]["replayed"]),
        ("SUCCESS", &Value::Bool(true))
    );
    let other = redeem(&h, &o2, &user, &grant).await;
    assert_eq!((other.status, other.code()), (409, "COUPON_USED"));

    let wallet = h.wallet_get("/me/coupons?status=used", &user).await;
    assert_eq!(
        wallet.body["data"]["coupons"][0]["orderId"],
        o1.as_str(),
        "{}",
        wallet.body
    );
    assert_eq!(wallet.body["data"]["coupons"][0]["usedAtMs"], h.clock.now_ms());

    let wrong = give_back(&h, &o2, &user, &grant).await;
    assert_eq!((wrong.status, wrong.code()), (409, "NOT_USED_BY_ORDER"));
    let back = give_back(&h, &o1, &user, &grant).await;
    assert_eq!(status(&back), ("SUCCESS", Some("UNUSED")), "{}", back.body);
    assert!(back.body["data"]["coupon"].get("orderId").is_none());
    let back_again = give_back(&h, &o1, &user, &grant).await;
    assert_eq!(
        (back_again.code(), &back_again.body["data"]["replayed"]),
        ("SUCCESS", &Value::Bool(true))
    );
    let stale = redeem(&h, &o1, &user, &grant).await;
    assert_eq!(
        (stale.code(), stale.body["data"]["reason"].as_str()),
        ("COUPON_NOT_USABLE", Some("RETURNED_BY_ORDER")),
        "a late retry of a returned order's redemption never spends it again"
    );

    // Spendable again, by another order.
    assert_eq!(status(&redeem(&h, &o2, &user, &grant).await), ("SUCCESS", Some("USED")));
    let revoke = format!("/admin/users/{user}/coupons/{grant}/revoked");
    let used = h.admin_call("PUT", &revoke, Some(json!({"reason": "too late"}))).await;
    assert_eq!(
        (used.status, used.code()),
        (409, "COUPON_USED"),
        "a used coupon is not revoked"
    );
}

#[tokio::test]
async fn a_coupon_not_valid_yet_expired_revoked_or_someone_elses_is_refused() {
    let h = Harness::new().await;
    let mut later = h.coupon(5);
    later.valid_from_ms = later.grab_end_ms;
    let (user, grant) = holder(&h, &later).await;
    let early = redeem(&h, &unique("order"), &user, &grant).await;
    assert_eq!((early.status, early.code()), (409, "COUPON_NOT_USABLE"));
    assert_eq!(early.body["data"]["reason"], "NOT_YET_VALID");
    assert_eq!(early.body["data"]["validFromMs"], later.valid_from_ms);

    let stranger = redeem(&h, &unique("order"), &unique("stranger"), &grant).await;
    assert_eq!((stranger.status, stranger.code()), (404, "GRANT_NOT_FOUND"));
    let bad = redeem(&h, "no spaces allowed", &user, &grant).await;
    assert_eq!((bad.status, bad.code()), (400, "INVALID_REQUEST"));

    // Its validity over: EXPIRED, in the wallet too.
    h.clock.advance(later.valid_until_ms - h.clock.now_ms());
    let expired = redeem(&h, &unique("order"), &user, &grant).await;
    assert_eq!(expired.body["data"]["reason"], "EXPIRED", "{}", expired.body);

    let def = h.coupon(5);
    let h2 = Harness::new().await;
    let (user, grant) = holder(&h2, &def).await;
    let revoke = format!("/admin/users/{user}/coupons/{grant}/revoked");
    h2.admin_call("PUT", &revoke, Some(json!({"reason": "fraud"}))).await;
    let revoked = redeem(&h2, &unique("order"), &user, &grant).await;
    assert_eq!(
        (revoked.code(), revoked.body["data"]["reason"].as_str()),
        ("COUPON_NOT_USABLE", Some("REVOKED"))
    );
}

#[tokio::test]
async fn of_two_orders_redeeming_one_coupon_at_once_exactly_one_wins() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    let (user, grant) = holder(&h, &def).await;
    let orders: Vec<String> = (0..4).map(|_| unique("order")).collect();
    let answers = futures::future::join_all(orders.iter().map(|o| redeem(&h, o, &user, &grant))).await;
    let codes: Vec<&str> = answers.iter().map(Resp::code).collect();
    assert_eq!(codes.iter().filter(|c| **c == "SUCCESS").count(), 1, "{codes:?}");
    assert!(
        codes.iter().all(|c| *c == "SUCCESS" || *c == "COUPON_USED"),
        "{codes:?}"
    );
}

#[tokio::test]
async fn a_coupon_given_back_after_its_validity_reads_expired() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    let (user, grant) = holder(&h, &def).await;
    let order = unique("order");
    assert_eq!(redeem(&h, &order, &user, &grant).await.code(), "SUCCESS");
    h.clock.advance(def.valid_until_ms - h.clock.now_ms() + HOUR);
    let back = give_back(&h, &order, &user, &grant).await;
    assert_eq!(status(&back), ("SUCCESS", Some("EXPIRED")), "{}", back.body);
    let wallet = h.wallet_get("/me/coupons?status=expired", &user).await;
    assert_eq!(wallet.body["data"]["coupons"].as_array().map(Vec::len), Some(1));
}
