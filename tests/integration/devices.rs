//! The device rules against real Redis: a device id from the verified
//! token (the harness's `device_id` claim), at most K distinct users and M
//! claims per device per day, reserved per press like the IP's place (so
//! retries count once and a press that does not win gives its place back),
//! and the coupons that require a device, refused at admission.

use coupon_domain::config::RiskLimits;
use coupon_domain::ids::DeviceId;
use redis::AsyncCommands;

use crate::support::{homed_on, send_all, Event, Harness, Options, Resp, T0};

async fn concurrently(h: &Harness, events: Vec<serde_json::Value>) -> Vec<Resp> {
    send_all(&h.app, events, 100).await
}

fn count(responses: &[Resp], code: &str, reason: Option<&str>) -> usize {
    responses
        .iter()
        .filter(|r| r.code() == code && reason.is_none_or(|why| r.body["data"]["reason"] == why))
        .count()
}

fn limits(users_per_device: u32, claims_per_device: u32) -> Options {
    let mut opts = Options::without_ip_limit();
    opts.risk = RiskLimits {
        users_per_device,
        claims_per_device,
        ..opts.risk
    };
    opts
}

/// The device's distinct users and the presses holding its claims, as
/// Redis has them for the suite's day.
async fn on_device(h: &Harness, device: &str) -> (i64, i64) {
    let device = DeviceId::parse(device).unwrap();
    let day = RiskLimits::default().day(T0);
    let mut conn = h.redis.connection();
    let users: i64 = conn.hlen(h.redis.keys().device_users(&device, day)).await.unwrap();
    let claims: i64 = conn.scard(h.redis.keys().device_claims(&device, day)).await.unwrap();
    (users, claims)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn five_hundred_concurrent_presses_from_one_device_win_for_no_more_than_k_users() {
    let h = Harness::with(limits(3, 0)).await;
    let def = h.coupon(1_000);
    let coupon = h.create(&def).await;
    let events = (0..500)
        .map(|i| {
            Event::grab(coupon.as_str(), &format!("farm-{i}"), "r")
                .device("phone-farm-1")
                .build()
        })
        .collect();
    let responses = concurrently(&h, events).await;
    assert_eq!(count(&responses, "SUCCESS", None), 3, "K = 3 users");
    assert_eq!(count(&responses, "RISK_REJECTED", Some("DEVICE_USER_LIMIT")), 497);
    let refused = responses.iter().find(|r| r.code() == "RISK_REJECTED").unwrap();
    assert_eq!(
        refused.body["message"],
        "Too many accounts have grabbed from this device today."
    );
    assert_eq!(
        on_device(&h, "phone-farm-1").await,
        (3, 3),
        "no place left held by a loser"
    );
    assert_eq!(h.stock(&def).await, 997);
    // Another device is another count.
    let other = h
        .send(
            Event::grab(coupon.as_str(), "farm-0-again", "r")
                .device("phone-2")
                .build(),
        )
        .await;
    assert_eq!(other.code(), "SUCCESS");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_device_wins_no_more_than_its_daily_claims_across_coupons_and_users() {
    let mut opts = limits(0, 4);
    opts.risk.daily_claims_per_user = 0;
    let h = Harness::with(opts).await;
    let mut def = h.coupon(100);
    def.per_user_limit = 100;
    let first = h.create(&def).await;
    let mut other_def = h.coupon(100);
    other_def.per_user_limit = 100;
    let second = h.create(&other_def).await;
    let events = (0..40)
        .map(|i| {
            let coupon = if i % 2 == 0 { &first } else { &second };
            Event::grab(coupon.as_str(), &format!("u{}", i % 5), &format!("r{i}"))
                .device("shared-tablet")
                .build()
        })
        .collect();
    let responses = concurrently(&h, events).await;
    assert_eq!(count(&responses, "SUCCESS", None), 4, "M = 4 claims");
    assert_eq!(count(&responses, "RISK_REJECTED", Some("DEVICE_CLAIM_LIMIT")), 36);
    assert_eq!(on_device(&h, "shared-tablet").await.1, 4);
}

#[tokio::test]
async fn retries_of_one_press_count_once_on_the_device() {
    let h = Harness::with(limits(3, 2)).await;
    let mut def = h.coupon(10);
    def.per_user_limit = 5;
    let coupon = h.create(&def).await;
    let press = || {
        Event::grab(coupon.as_str(), "retrier", "same")
            .device("d-retry")
            .build()
    };
    for _ in 0..5 {
        assert_eq!(h.send(press()).await.code(), "SUCCESS");
    }
    assert_eq!(on_device(&h, "d-retry").await, (1, 1), "one press, one claim");
    let second = h
        .send(
            Event::grab(coupon.as_str(), "retrier", "next")
                .device("d-retry")
                .build(),
        )
        .await;
    assert_eq!(second.code(), "SUCCESS", "the device's second claim of two");
}

/// A lottery registration takes the user's place among the device's users
/// but is not one of its claims: a family that registers for lotteries
/// from one phone can still press on it (found by the explorer: before,
/// each registration was counted as a claim, and three members entering
/// a few lotteries blocked every grab from the phone for the day).
#[tokio::test]
async fn lottery_registrations_from_a_shared_phone_are_not_its_claims() {
    let h = Harness::with(limits(3, 2)).await;
    let mut sale = h.coupon(10);
    sale.per_user_limit = 5;
    let sale = h.create(&sale).await;
    let family = ["mum", "dad", "kid"];
    for _ in 0..2 {
        let mut lottery = h.coupon(1);
        lottery.mode = coupon_domain::coupon::Mode::Lottery;
        lottery.draw_at_ms = Some(lottery.grab_end_ms + coupon_domain::lottery::DRAW_SETTLE_MS);
        let lottery = h.create(&lottery).await;
        for user in family {
            let entry = Event::grab(lottery.as_str(), user, "unused")
                .path(&format!("/coupons/{lottery}/entries"))
                .body("{}")
                .device("family-phone")
                .build();
            let resp = h.send(entry).await;
            assert_eq!(resp.code(), "SUCCESS", "{}", resp.body);
        }
    }
    assert_eq!(
        on_device(&h, "family-phone").await,
        (3, 0),
        "three users seen, no claim"
    );
    for (i, user) in family.iter().enumerate() {
        let press = Event::grab(sale.as_str(), user, &format!("r{i}"))
            .device("family-phone")
            .build();
        let resp = h.send(press).await;
        if i < 2 {
            assert_eq!(resp.code(), "SUCCESS", "claim {} of 2: {}", i + 1, resp.body);
        } else {
            assert_eq!(resp.code(), "RISK_REJECTED", "{}", resp.body);
            assert_eq!(resp.body["data"]["reason"], "DEVICE_CLAIM_LIMIT");
        }
    }
    assert_eq!(on_device(&h, "family-phone").await, (3, 2));
}

/// A press reserved on the device and then lost (the borrow found every
/// shard empty) gives its place and its claim back.
#[tokio::test]
async fn a_press_that_does_not_win_gives_the_device_its_place_back() {
    let h = Harness::with(limits(1, 1)).await;
    let mut def = h.coupon(2);
    def.shards = 2;
    let coupon = h.create(&def).await;
    for shard in 0..2 {
        let winner = homed_on(shard, 2, "w");
        assert_eq!(h.grab(&coupon, &winner, "r").await.code(), "SUCCESS");
    }
    let loser = homed_on(1, 2, "l");
    let lost = h
        .send(Event::grab(coupon.as_str(), &loser, "r").device("d-lost").build())
        .await;
    assert_eq!(lost.code(), "SOLD_OUT", "{}", lost.body);
    assert_eq!(on_device(&h, "d-lost").await, (0, 0));
}

#[tokio::test]
async fn a_coupon_that_requires_a_device_refuses_a_press_without_one_and_reserves_nothing() {
    let h = Harness::new().await;
    let mut def = h.coupon(5);
    def.device_required = true;
    let coupon = h.create(&def).await;

    let refused = h.grab(&coupon, "no-device", "r").await;
    assert_eq!(
        (refused.status, refused.code()),
        (403, "RISK_REJECTED"),
        "{}",
        refused.body
    );
    assert_eq!(refused.body["data"]["reason"], "DEVICE_REQUIRED");
    assert_eq!(
        refused.body["message"],
        "This coupon can only be grabbed in the app on a verified device."
    );
    let zh = h
        .send(
            Event::grab(coupon.as_str(), "no-device", "r")
                .header("accept-language", "zh-CN")
                .build(),
        )
        .await;
    assert_eq!(zh.body["message"], "该优惠券仅限在已认证设备上的App内领取。");
    let user = coupon_domain::ids::UserId::parse("no-device").unwrap();
    let held: i64 = h
        .redis
        .connection()
        .hlen(h.redis.keys().user_claims(&user, RiskLimits::default().day(T0)))
        .await
        .unwrap();
    assert_eq!(held, 0, "refused at admission, before the risk reservation");
    let dry = h.send(Event::eligibility(coupon.as_str(), "no-device").build()).await;
    assert_eq!(dry.body["data"]["reason"], "DEVICE_REQUIRED", "{}", dry.body);

    let with = h
        .send(Event::grab(coupon.as_str(), "with-device", "r").device("ios-1").build())
        .await;
    assert_eq!(with.code(), "SUCCESS", "{}", with.body);
    let dry = h
        .send(Event::eligibility(coupon.as_str(), "other").device("ios-2").build())
        .await;
    assert_eq!(dry.body["data"]["wouldWin"], true, "{}", dry.body);
    assert_eq!(h.stock(&def).await, 4);
}
