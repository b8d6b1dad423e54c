//! Risk limits keyed by user and IP hold under concurrency, and a grab that
//! does not win gives its reservation back.

use std::sync::Arc;

use coupon_domain::config::RiskLimits;
use futures::stream::{self, StreamExt};
use redis::AsyncCommands;

use crate::support::{send, Event, Harness, Options, Resp};

async fn concurrently(h: &Harness, events: Vec<serde_json::Value>) -> Vec<Resp> {
    let app = Arc::clone(&h.app);
    stream::iter(events)
        .map(|e| {
            let app = Arc::clone(&app);
            tokio::spawn(async move { send(&app, e).await })
        })
        .buffer_unordered(50)
        .map(|r| r.expect("task"))
        .collect()
        .await
}

fn count(responses: &[Resp], code: &str) -> usize {
    responses.iter().filter(|r| r.code() == code).count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_grabs_by_one_user_win_no_more_than_the_daily_limit() {
    let h = Harness::new().await; // 5 claims per user per day
    let mut def = h.coupon(1_000);
    def.per_user_limit = 100;
    let coupon = h.create(&def).await;
    let events = (0..50)
        .map(|i| Event::grab(coupon.as_str(), "greedy", &format!("r{i}")).build())
        .collect();
    let responses = concurrently(&h, events).await;
    assert_eq!(count(&responses, "SUCCESS"), 5);
    assert_eq!(count(&responses, "RISK_REJECTED"), 45);
    assert!(responses
        .iter()
        .filter(|r| r.code() == "RISK_REJECTED")
        .all(|r| r.body["data"]["reason"] == "DAILY_LIMIT"));
    assert_eq!(h.stock(&def).await, 995);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_users_from_one_ip_win_no_more_than_the_ip_limit() {
    let h = Harness::new().await; // 10 distinct users per IP per day
    let def = h.coupon(1_000);
    let coupon = h.create(&def).await;
    let events = (0..50)
        .map(|i| {
            Event::grab(coupon.as_str(), &format!("farm-{i}"), "r")
                .ip("198.51.100.23")
                .build()
        })
        .collect();
    let responses = concurrently(&h, events).await;
    assert_eq!(count(&responses, "SUCCESS"), 10);
    assert_eq!(count(&responses, "RISK_REJECTED"), 40);
    // A user already counted for the IP may grab again from it.
    let winner = responses.iter().find(|r| r.code() == "SUCCESS").unwrap();
    assert!(winner.grant_id().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn grabs_that_lose_give_their_risk_reservations_back() {
    let h = Harness::new().await;
    let def = h.coupon(3);
    let coupon = h.create(&def).await;
    let events = (0..50)
        .map(|i| {
            Event::grab(coupon.as_str(), &format!("p-{i}"), "r")
                .ip("198.51.100.77")
                .build()
        })
        .collect();
    let responses = concurrently(&h, events).await;
    // Only 3 units: at most 3 users keep a place for the IP, so others can
    // still be admitted up to the limit, and every loser released its place.
    assert_eq!(count(&responses, "SUCCESS"), 3);
    let day = RiskLimits::default().day(crate::support::T0);
    let ip = coupon_domain::ids::ClientIp::parse("198.51.100.77").unwrap();
    let mut conn = h.redis.connection();
    let users: std::collections::HashMap<String, i64> = conn.hgetall(h.redis.keys().ip_users(ip, day)).await.unwrap();
    assert_eq!(users.len(), 3, "places held: {users:?}");
    assert!(users.values().all(|&n| n == 1));
    // And every loser's daily counter is back at zero.
    let mut zero_counters = 0;
    for i in 0..50 {
        let user = coupon_domain::ids::UserId::parse(&format!("p-{i}")).unwrap();
        let n: Option<i64> = conn.get(h.redis.keys().user_claims(&user, day)).await.unwrap();
        if n.unwrap_or(0) == 0 {
            zero_counters += 1;
        }
    }
    assert_eq!(zero_counters, 47);
}

#[tokio::test]
async fn a_replay_of_a_win_that_filled_the_daily_limit_still_returns_the_win() {
    let h = Harness::with(Options {
        risk: RiskLimits {
            daily_claims_per_user: 1,
            ..Options::default().risk
        },
        ..Options::default()
    })
    .await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    let first = h.grab(&coupon, "ivan", "r1").await;
    assert_eq!(first.code(), "SUCCESS");
    let replay = h.grab(&coupon, "ivan", "r1").await;
    assert_eq!(replay.code(), "SUCCESS");
    assert_eq!(replay.grant_id(), first.grant_id());
    let other = h.create(&h.coupon(5)).await;
    let refused = h.grab(&other, "ivan", "r1").await;
    assert_eq!(refused.code(), "RISK_REJECTED");
    assert_eq!(refused.body["data"]["reason"], "DAILY_LIMIT");
}
