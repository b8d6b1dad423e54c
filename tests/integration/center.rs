//! The coupon center (`GET /coupons`) against real Redis and the local
//! DynamoDB: the live coupons from the coupons table's `live` index, each
//! with the caller's button read from their home shard, and nothing
//! written by listing.
//!
//! Every test moves its clock to an epoch of its own, days past the
//! suite's [`T0`], so the listing (every live coupon of the shared table)
//! holds its own coupons and few others; it still pages through all of it
//! and keeps its own.

use std::collections::HashMap;

use coupon_domain::coupon::{CouponDefinition, CouponStatus};
use coupon_domain::ids::CouponId;
use serde_json::Value;

use crate::support::{homed_on, Event, Harness, Options, Resp, HOUR};

const DAY: i64 = 24 * HOUR;

impl Harness {
    /// A coupon whose window is open at the clock's instant.
    fn live_coupon(&self, stock: u64) -> CouponDefinition {
        let now = coupon_domain::clock::Clock::now_ms(&self.clock);
        let mut def = self.coupon(stock);
        def.grab_start_ms = now - HOUR;
        def.grab_end_ms = now + HOUR;
        def.valid_from_ms = now;
        def.valid_until_ms = now + 7 * DAY;
        def
    }

    /// Every page of the center as `user` sees it, keeping this test's
    /// coupons: id -> the listed offer.
    async fn center(&self, user: &str, ours: &[&CouponId]) -> HashMap<String, Value> {
        let mut found = HashMap::new();
        let mut cursor: Option<String> = None;
        for _ in 0..1_000 {
            let query = match &cursor {
                Some(c) => format!("limit=50&cursor={c}"),
                None => "limit=50".to_owned(),
            };
            let resp = self.send(Event::center(user).query(&query).build()).await;
            assert_eq!((resp.status, resp.code()), (200, "SUCCESS"), "{}", resp.body);
            for offer in resp.body["data"]["coupons"].as_array().unwrap() {
                let id = offer["couponId"].as_str().unwrap();
                if ours.iter().any(|c| c.as_str() == id) {
                    found.insert(id.to_owned(), offer.clone());
                }
            }
            match resp.body["data"]["nextCursor"].as_str() {
                Some(next) => cursor = Some(next.to_owned()),
                None => return found,
            }
        }
        panic!("the center never reached its last page");
    }
}

fn state(offers: &HashMap<String, Value>, coupon: &CouponId) -> (String, Value, String) {
    let offer = offers
        .get(coupon.as_str())
        .unwrap_or_else(|| panic!("{coupon} not listed"));
    (
        offer["state"].as_str().unwrap().to_owned(),
        offer["held"].clone(),
        offer["stock"].as_str().unwrap().to_owned(),
    )
}

fn won(resp: &Resp) {
    assert_eq!(resp.code(), "SUCCESS", "{}", resp.body);
}

#[tokio::test]
async fn the_center_shows_each_caller_the_button_a_press_would_draw() {
    let h = Harness::new().await;
    let now = h.own_epoch();
    let open = h.create(&h.live_coupon(100)).await;
    let mut two = h.live_coupon(100);
    two.per_user_limit = 2;
    let two = h.create(&two).await;
    let last = h.create(&h.live_coupon(1)).await;
    let mut soon = h.live_coupon(100);
    soon.grab_start_ms = now + HOUR;
    soon.grab_end_ms = now + 2 * HOUR;
    let soon = h.create(&soon).await;
    let mut gold = h.live_coupon(100);
    gold.min_member_level = 5;
    let gold = h.create(&gold).await;
    let mut off = h.live_coupon(100);
    off.status = CouponStatus::Offline;
    let off = h.create(&off).await;

    won(&h.grab(&open, "alice", "r1").await);
    won(&h.grab(&two, "alice", "r2").await);
    won(&h.grab(&last, "alice", "r3").await);

    let ours = [&open, &two, &last, &soon, &gold, &off];
    let alice = h.center("alice", &ours).await;
    assert_eq!(state(&alice, &open), ("CLAIMED".into(), 1.into(), "PLENTY".into()));
    assert_eq!(state(&alice, &two), ("CAN_GRAB".into(), 1.into(), "PLENTY".into()));
    // Alice holds the last unit: CLAIMED, even though it sold out.
    assert_eq!(state(&alice, &last), ("CLAIMED".into(), 1.into(), "NONE".into()));
    assert_eq!(
        state(&alice, &soon),
        ("NOT_STARTED".into(), Value::Null, "PLENTY".into())
    );
    assert_eq!(alice[soon.as_str()]["startsAtMs"], Value::from(now + HOUR));
    assert_eq!(state(&alice, &gold).0, "NOT_ELIGIBLE");
    assert!(!alice.contains_key(off.as_str()), "an offline coupon is not listed");

    let bob = h.center("bob", &ours).await;
    assert_eq!(state(&bob, &open), ("CAN_GRAB".into(), 0.into(), "PLENTY".into()));
    assert_eq!(state(&bob, &last), ("SOLD_OUT".into(), 0.into(), "NONE".into()));
    // What the dry run says agrees with each button.
    let dry = h.send(Event::eligibility(last.as_str(), "bob").build()).await;
    assert_eq!(dry.code(), "SOLD_OUT");
}

#[tokio::test]
async fn an_empty_home_shard_reads_can_grab_while_another_shard_has_stock() {
    let h = Harness::new().await;
    h.own_epoch();
    let mut def = h.live_coupon(2);
    def.shards = 2;
    def.per_user_limit = 1;
    let coupon = h.create(&def).await;
    // Empty shard 0 with a user homed there; shard 1 keeps its unit.
    let homed = |shard: u32, label: &str| homed_on(shard, 2, label);
    let first = homed(0, "first");
    won(&h.grab(&coupon, &first, "r1").await);
    let next = homed(0, "next");
    let offers = h.center(&next, &[&coupon]).await;
    assert_eq!(state(&offers, &coupon), ("CAN_GRAB".into(), 0.into(), "PLENTY".into()));
    // Its press borrows from shard 1; then nobody can grab.
    won(&h.grab(&coupon, &next, "r2").await);
    let last = homed(0, "last");
    let offers = h.center(&last, &[&coupon]).await;
    assert_eq!(state(&offers, &coupon), ("SOLD_OUT".into(), 0.into(), "NONE".into()));
}

#[tokio::test]
async fn the_stock_level_turns_few_at_the_configured_share_and_never_says_how_many() {
    let h = Harness::with(Options::without_ip_limit()).await;
    h.own_epoch();
    let coupon = h.create(&h.live_coupon(20)).await;
    for i in 0..17 {
        won(&h.grab(&coupon, &format!("u{i}"), "r").await);
    }
    let offers = h.center("viewer", &[&coupon]).await;
    assert_eq!(state(&offers, &coupon).2, "PLENTY", "3 of 20 left is over 10%");
    won(&h.grab(&coupon, "u17", "r").await);
    let offers = h.center("viewer", &[&coupon]).await;
    assert_eq!(state(&offers, &coupon).2, "FEW", "2 of 20 left");
    let offer = &offers[coupon.as_str()];
    assert!(
        offer.get("remaining").is_none() && offer.get("totalStock").is_none(),
        "{offer}"
    );
}

#[tokio::test]
async fn listing_a_hundred_times_changes_no_redis_key_and_takes_no_token() {
    let h = Harness::new().await;
    h.own_epoch();
    let mut def = h.live_coupon(10);
    def.shards = 2;
    def.rate_per_sec = 1;
    def.burst = 2;
    let coupon = h.create(&def).await;
    won(&h.grab(&coupon, "winner", "r1").await);
    let before = h.snapshot().await;
    for i in 0..100 {
        h.center(&format!("viewer{}", i % 7), &[&coupon]).await;
    }
    assert_eq!(h.snapshot().await, before);
}

#[tokio::test]
async fn a_coupon_whose_redis_state_is_gone_stays_listed_from_its_definition() {
    let h = Harness::new().await;
    h.own_epoch();
    let coupon = h.create(&h.live_coupon(10)).await;
    won(&h.grab(&coupon, "alice", "r1").await);
    h.flush_redis().await;
    let offers = h.center("alice", &[&coupon]).await;
    assert_eq!(
        state(&offers, &coupon),
        ("CAN_GRAB".into(), Value::Null, "UNKNOWN".into())
    );
}

#[tokio::test]
async fn the_center_reads_a_sharded_coupon_on_the_redis_cluster() {
    let h = Harness::with(Options::default().on_cluster()).await;
    h.own_epoch();
    let mut def = h.live_coupon(8);
    def.shards = 4;
    let coupon = h.create(&def).await;
    won(&h.grab(&coupon, "alice", "r1").await);
    let alice = h.center("alice", &[&coupon]).await;
    assert_eq!(state(&alice, &coupon), ("CLAIMED".into(), 1.into(), "PLENTY".into()));
    let bob = h.center("bob", &[&coupon]).await;
    assert_eq!(state(&bob, &coupon), ("CAN_GRAB".into(), 0.into(), "PLENTY".into()));
}

#[tokio::test]
async fn one_lost_shard_makes_the_stock_unknown_never_sold_out() {
    let h = Harness::new().await;
    h.own_epoch();
    let mut def = h.live_coupon(2);
    def.shards = 2;
    let coupon = h.create(&def).await;
    // A user homed on shard 0 empties it; then shard 1, which holds the
    // last unit, loses its state.
    let on = |shard: u32, label: &str| homed_on(shard, 2, label);
    won(&h.grab(&coupon, &on(0, "first"), "r1").await);
    let mut conn = h.redis.connection();
    let meta = h.redis.keys().shard(&coupon, 1).meta();
    let _: () = redis::AsyncCommands::del(&mut conn, &meta).await.unwrap();
    let offers = h.center(&on(0, "viewer"), &[&coupon]).await;
    assert_eq!(state(&offers, &coupon), ("CAN_GRAB".into(), 0.into(), "UNKNOWN".into()));
}

#[tokio::test]
async fn pages_follow_the_cursor_soonest_window_first_without_repeats() {
    let h = Harness::new().await;
    let now = h.own_epoch();
    let mut ids = Vec::new();
    for i in 0..5 {
        let mut def = h.live_coupon(5);
        def.grab_start_ms = now - HOUR + i * 1_000;
        ids.push(h.create(&def).await);
    }
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let query = match &cursor {
            Some(c) => format!("limit=2&cursor={c}"),
            None => "limit=2".to_owned(),
        };
        let resp = h.send(Event::center("pager").query(&query).build()).await;
        let page = resp.body["data"]["coupons"].as_array().unwrap().clone();
        assert!(page.len() <= 2, "{}", resp.body);
        for offer in page {
            let id = offer["couponId"].as_str().unwrap().to_owned();
            if ids.iter().any(|c| c.as_str() == id) {
                seen.push(id);
            }
        }
        match resp.body["data"]["nextCursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let want: Vec<String> = ids.iter().map(|c| c.as_str().to_owned()).collect();
    assert_eq!(seen, want);
}

#[tokio::test]
async fn a_malformed_cursor_or_limit_is_400_naming_it() {
    let h = Harness::new().await;
    for (query, names) in [
        ("limit=0", "limit"),
        ("limit=51", "limit"),
        ("cursor=12", "cursor"),
        ("cursor=1~a%20b", "cursor"),
    ] {
        let resp = h.send(Event::center("u").query(query).build()).await;
        assert_eq!(
            (resp.status, resp.code()),
            (400, "INVALID_REQUEST"),
            "{query}: {}",
            resp.body
        );
        assert!(
            resp.body["data"]["detail"].as_str().unwrap().contains(names),
            "{}",
            resp.body
        );
    }
}
