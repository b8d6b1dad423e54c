//! Each business rule of the grab answers with its own code, and a refused
//! grab moves no stock.

use coupon_domain::blacklist::BlacklistFlags;
use coupon_domain::coupon::CouponStatus;

use crate::support::{Event, Harness, HOUR, T0};

#[tokio::test]
async fn before_the_window_the_answer_is_not_active_with_the_start_time() {
    let h = Harness::new().await;
    let mut def = h.coupon(5);
    def.grab_start_ms = T0 + HOUR;
    def.grab_end_ms = T0 + 2 * HOUR;
    let coupon = h.create(&def).await;
    let resp = h.grab(&coupon, "u1", "r1").await;
    assert_eq!((resp.status, resp.code()), (409, "COUPON_NOT_ACTIVE"));
    assert_eq!(resp.body["data"]["reason"], "NOT_STARTED");
    assert_eq!(resp.body["data"]["startsAtMs"], T0 + HOUR);
    // The clock reaches the start: the same request id now wins, because a
    // refusal stores nothing.
    h.clock.set(T0 + HOUR);
    assert_eq!(h.grab(&coupon, "u1", "r1").await.code(), "SUCCESS");
}

#[tokio::test]
async fn after_the_window_the_answer_is_not_active_ended() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    h.clock.set(def.grab_end_ms);
    let resp = h.grab(&coupon, "u1", "r1").await;
    assert_eq!((resp.status, resp.code()), (409, "COUPON_NOT_ACTIVE"));
    assert_eq!(resp.body["data"]["reason"], "ENDED");
    assert_eq!(h.stock(&def).await, 5);
}

#[tokio::test]
async fn an_offline_coupon_is_not_active() {
    let h = Harness::new().await;
    let mut def = h.coupon(5);
    def.status = CouponStatus::Offline;
    let coupon = h.create(&def).await;
    let resp = h.grab(&coupon, "u1", "r1").await;
    assert_eq!(resp.code(), "COUPON_NOT_ACTIVE");
    assert_eq!(resp.body["data"]["reason"], "OFFLINE");
}

#[tokio::test]
async fn a_member_level_below_the_minimum_is_not_eligible() {
    let h = Harness::new().await;
    let mut def = h.coupon(5);
    def.min_member_level = 3;
    let coupon = h.create(&def).await;
    let low = h
        .send(Event::grab(coupon.as_str(), "u1", "r1").level("2").build())
        .await;
    assert_eq!((low.status, low.code()), (403, "NOT_ELIGIBLE"));
    assert_eq!(low.body["data"]["minLevel"], 3);
    let enough = h
        .send(Event::grab(coupon.as_str(), "u2", "r1").level("3").build())
        .await;
    assert_eq!(enough.code(), "SUCCESS");
}

#[tokio::test]
async fn a_blacklisted_user_is_refused_by_risk_control_and_moves_no_stock() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    let user = coupon_domain::ids::UserId::parse("mallory").unwrap();
    h.flags().set_flag(&user, true).await.unwrap();
    let resp = h.grab(&coupon, "mallory", "r1").await;
    assert_eq!((resp.status, resp.code()), (403, "RISK_REJECTED"));
    assert_eq!(resp.body["data"]["reason"], "BLACKLISTED");
    assert_eq!(h.stock(&def).await, 5);
    h.flags().set_flag(&user, false).await.unwrap();
    assert_eq!(h.grab(&coupon, "mallory", "r1").await.code(), "SUCCESS");
}

#[tokio::test]
async fn an_empty_token_bucket_rate_limits_until_a_token_refills() {
    let h = Harness::new().await;
    let mut def = h.coupon(5);
    def.rate_per_sec = 1;
    def.burst = 1;
    let coupon = h.create(&def).await;
    assert_eq!(h.grab(&coupon, "u1", "r1").await.code(), "SUCCESS");
    let limited = h.grab(&coupon, "u2", "r1").await;
    assert_eq!((limited.status, limited.code()), (429, "RATE_LIMITED"));
    assert_eq!(limited.body["data"]["retryAfterMs"], 1000);
    assert_eq!(limited.headers["retry-after"], "1");
    h.clock.advance(999);
    assert_eq!(h.grab(&coupon, "u2", "r1").await.code(), "RATE_LIMITED");
    h.clock.advance(1);
    assert_eq!(h.grab(&coupon, "u2", "r1").await.code(), "SUCCESS");
    assert_eq!(h.stock(&def).await, 3);
}

#[tokio::test]
async fn a_second_claim_beyond_the_limit_is_already_claimed() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    assert_eq!(h.grab(&coupon, "u1", "r1").await.code(), "SUCCESS");
    let again = h.grab(&coupon, "u1", "r2").await;
    assert_eq!((again.status, again.code()), (409, "ALREADY_CLAIMED"));
    assert_eq!(h.stock(&def).await, 4);
}

#[tokio::test]
async fn an_empty_coupon_is_sold_out_with_410() {
    let h = Harness::new().await;
    let def = h.coupon(1);
    let coupon = h.create(&def).await;
    assert_eq!(h.grab(&coupon, "u1", "r1").await.code(), "SUCCESS");
    let resp = h.grab(&coupon, "u2", "r1").await;
    assert_eq!((resp.status, resp.code()), (410, "SOLD_OUT"));
}

#[tokio::test]
async fn messages_follow_accept_language() {
    let h = Harness::new().await;
    let def = h.coupon(1);
    let coupon = h.create(&def).await;
    let zh = h
        .send(
            Event::grab(coupon.as_str(), "u1", "r1")
                .header("accept-language", "zh-CN,zh;q=0.9")
                .build(),
        )
        .await;
    assert_eq!(zh.body["message"], "成功。");
    let en = h.grab(&coupon, "u2", "r1").await;
    assert_eq!(en.body["message"], "All coupons are gone.");
}
