//! Risk limits keyed by user and IP hold under concurrency, and a grab that
//! does not win gives its reservation back.

use coupon_domain::config::RiskLimits;
use redis::AsyncCommands;

use crate::support::{send_all, Event, Harness, Options, Resp};

async fn concurrently(h: &Harness, events: Vec<serde_json::Value>) -> Vec<Resp> {
    send_all(&h.app, events, 50).await
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
    let holds: i64 = conn.scard(h.redis.keys().ip_holds(ip, day)).await.unwrap();
    assert_eq!(holds, 3, "one press per winner holds the IP place");
    // And every loser's daily claims are back at zero.
    let mut zero_counters = 0;
    for i in 0..50 {
        let user = coupon_domain::ids::UserId::parse(&format!("p-{i}")).unwrap();
        let n: i64 = conn.hlen(h.redis.keys().user_claims(&user, day)).await.unwrap();
        if n == 0 {
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

/// A reservation or a release that runs twice (a client library retrying a
/// script after a connection reset, a retried invocation) counts once. With
/// counters, a repeated release gave back a claim the user still had won,
/// and the user could pass the daily limit.
#[tokio::test]
async fn a_repeated_reservation_or_release_counts_once_and_the_daily_limit_holds() {
    use coupon_domain::grab::ports::{RiskDecision, RiskGuard};
    use coupon_domain::ids::{CouponId, RequestId, UserId};

    let h = Harness::new().await; // 5 claims per user per day
    let risk = coupon_adapters::redis::RedisRisk::new(h.redis.clone(), Options::default().risk);
    let (user, coupon) = (UserId::parse("twice").unwrap(), CouponId::parse("c-risk").unwrap());
    let ip = coupon_domain::ids::ClientIp::parse("203.0.113.99");
    let reserve = |request: &'static str| {
        let (risk, user, coupon) = (&risk, user.clone(), coupon.clone());
        async move {
            let request = RequestId::parse(request).unwrap();
            let claim = crate::support::plain_claim(&coupon, &user, &request, crate::support::T0);
            risk.reserve(&claim, ip).await.unwrap()
        }
    };
    // Four wins, each reserved twice (a retried script): four claims held.
    for r in ["w1", "w2", "w3", "w4"] {
        assert!(matches!(reserve(r).await, RiskDecision::Allowed(_)));
        assert!(
            matches!(reserve(r).await, RiskDecision::Allowed(_)),
            "{r} again: its own reservation"
        );
    }
    // A fifth press loses; its release runs three times.
    let RiskDecision::Allowed(lost) = reserve("l5").await else {
        panic!("the fifth claim fits the limit")
    };
    for _ in 0..3 {
        risk.release(&lost).await.unwrap();
    }
    // One claim is free again, not three: one more press, then the limit.
    assert!(matches!(reserve("w6").await, RiskDecision::Allowed(_)));
    assert!(
        matches!(reserve("w7").await, RiskDecision::Refused(_)),
        "five claims held: the limit"
    );
    let day = RiskLimits::default().day(crate::support::T0);
    let mut conn = h.redis.connection();
    let held: i64 = conn.hlen(h.redis.keys().user_claims(&user, day)).await.unwrap();
    assert_eq!(held, 5);
    let seen: std::collections::HashMap<String, i64> =
        conn.hgetall(h.redis.keys().ip_users(ip.unwrap(), day)).await.unwrap();
    assert_eq!(seen.get("twice"), Some(&5), "one IP place per press held, never below");
}

/// Two copies of one press (a retry from another network while the first
/// is still deciding): the copy an IP at its limit refuses gives back only
/// what it took itself, never the places the first copy holds and may win
/// with. It used to release them, and the first copy's win then counted
/// against no limit.
#[tokio::test]
async fn a_refused_copy_of_a_press_keeps_the_places_the_other_copy_holds() {
    use coupon_domain::grab::ports::{Claim, RiskDecision, RiskGuard};
    use coupon_domain::ids::{ClientIp, CouponId, DeviceId, RequestId, UserId};

    let h = Harness::new().await;
    let mut limits = Options::default().risk;
    limits.users_per_ip = 1;
    let risk = coupon_adapters::redis::RedisRisk::new(h.redis.clone(), limits);
    let coupon = CouponId::parse("c-copies").unwrap();
    let device = DeviceId::parse("phone-copies").unwrap();
    let reserve = |user: &'static str, ip: &'static str| {
        let (risk, coupon, device) = (&risk, coupon.clone(), device.clone());
        async move {
            let (user, request) = (UserId::parse(user).unwrap(), RequestId::parse("r1").unwrap());
            let claim = Claim {
                coupon: &coupon,
                home_shard: 0,
                user: &user,
                level: 0,
                request: &request,
                device: Some(&device),
                now_ms: crate::support::T0,
            };
            risk.reserve(&claim, ClientIp::parse(ip)).await.unwrap()
        }
    };
    // The other network is full.
    assert!(matches!(
        reserve("someone", "198.51.100.9").await,
        RiskDecision::Allowed(_)
    ));
    assert!(matches!(
        reserve("copies", "203.0.113.50").await,
        RiskDecision::Allowed(_)
    ));
    assert_eq!(
        reserve("copies", "198.51.100.9").await,
        RiskDecision::Refused(coupon_domain::outcome::RiskReason::IpLimit)
    );
    let day = RiskLimits::default().day(crate::support::T0);
    let mut conn = h.redis.connection();
    let user = UserId::parse("copies").unwrap();
    let claims: i64 = conn.hlen(h.redis.keys().user_claims(&user, day)).await.unwrap();
    assert_eq!(claims, 1, "the first copy's daily claim is still held");
    let on_device: i64 = conn.scard(h.redis.keys().device_holds(&device, day)).await.unwrap();
    assert_eq!(on_device, 2, "someone's place on the device, and the first copy's");
}

/// Two copies of one press on instances whose clocks disagree, both past
/// their risk reservation (the second finds the first's places HELD): the
/// copy on the clock behind is refused at its commit (the sale has not
/// started there) and gives the places back. Its refusal is stored, so the
/// copy on the clock ahead, committing after it, hears the same refusal;
/// it used to win there, on places nobody held any more, a claim counted
/// against no limit.
#[tokio::test]
async fn a_press_refused_at_its_commit_is_refused_for_every_copy() {
    use coupon_adapters::redis::RedisLedger;
    use coupon_domain::grab::ports::{ClaimReply, ClaimStep, Recorded, StockLedger};
    use coupon_domain::ids::{RequestId, UserId};
    use coupon_domain::outcome::Rejection;

    let h = Harness::new().await;
    let mut def = h.coupon(3);
    def.grab_start_ms = crate::support::T0 + 1_000;
    let coupon = h.create(&def).await;
    let ledger = RedisLedger::new(h.redis.clone());
    let (user, request) = (UserId::parse("twins").unwrap(), RequestId::parse("r1").unwrap());
    let copy_at = |now_ms| crate::support::plain_claim(&coupon, &user, &request, now_ms);
    let behind = ledger
        .claim(&copy_at(crate::support::T0), ClaimStep::Commit)
        .await
        .unwrap();
    let refused = Rejection::NotStarted {
        starts_at_ms: def.grab_start_ms,
    };
    assert_eq!(behind, ClaimReply::Rejected(refused.clone()));
    let ahead = ledger
        .claim(&copy_at(crate::support::T0 + 2_000), ClaimStep::Commit)
        .await
        .unwrap();
    assert_eq!(
        ahead,
        ClaimReply::Replay(Recorded::Closed(refused)),
        "the first copy's end"
    );
    assert_eq!(h.stock(&def).await, 3, "nothing sold to the press");
    // A new press of the user's, once the sale opened, wins as ever.
    h.clock.advance(2_000);
    let again = h.grab(&coupon, "twins", "r2").await;
    assert_eq!(again.code(), "SUCCESS", "{}", again.body);
}
