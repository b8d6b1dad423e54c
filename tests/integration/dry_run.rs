//! The dry run (`GET /coupons/{couponId}/eligibility`) against real Redis:
//! the answer a press would get now, and not one byte of the coupon's or
//! the user's state changed by asking.

use coupon_domain::blacklist::BlacklistFlags;
use coupon_domain::ids::UserId;
use redis::AsyncCommands;

use crate::support::{homed_on, Event, Harness, HOUR, T0};

impl Harness {
    /// What a press of `user` on `coupon` would get now.
    async fn dry_run(&self, coupon: &coupon_domain::ids::CouponId, user: &str) -> crate::support::Resp {
        self.send(Event::eligibility(coupon.as_str(), user).build()).await
    }

    /// Every key of this harness (its prefix), sorted, with what it holds:
    /// its DUMP (the value byte for byte, its encoding included) and
    /// whether it expires. A hash kept as a hash table is the one
    /// exception, held as its sorted fields and values: Redis rehashes a
    /// growing table a step at a time on reads as well as writes, so a
    /// read alone can change the order DUMP lists its entries in.
    pub(crate) async fn snapshot(&self) -> Vec<(String, Vec<u8>, bool)> {
        let mut conn = self.redis.connection();
        let mut keys = crate::support::keys_matching(&mut conn, &format!("{}*", self.config.redis.key_prefix)).await;
        keys.sort();
        let mut out = Vec::new();
        for key in keys {
            // Without OBJECT (the Serverless stand-in), every hash is held
            // as its fields: the same comparison, a little less strict.
            let encoding: String = redis::cmd("OBJECT")
                .arg("ENCODING")
                .arg(&key)
                .query_async(&mut conn)
                .await
                .unwrap_or_else(|_| "hashtable".into());
            let kind: String = redis::cmd("TYPE").arg(&key).query_async(&mut conn).await.unwrap();
            let value = if kind == "hash" && encoding == "hashtable" {
                let mut fields: Vec<(String, String)> = conn.hgetall(&key).await.unwrap();
                fields.sort();
                format!("{fields:?}").into_bytes()
            } else {
                redis::cmd("DUMP").arg(&key).query_async(&mut conn).await.unwrap()
            };
            let ttl: i64 = conn.pttl(&key).await.unwrap();
            out.push((key, value, ttl > 0));
        }
        out
    }
}

#[tokio::test]
async fn a_thousand_dry_runs_leave_every_redis_key_of_the_coupon_and_its_users_unchanged() {
    let h = Harness::new().await;
    let mut def = h.coupon(20);
    def.shards = 2;
    def.rate_per_sec = 50;
    def.burst = 5;
    let coupon = h.create(&def).await;
    // State worth keeping: a winner (its record, outbox entry, risk holds)
    // and a token bucket that has been drawn from.
    assert_eq!(h.grab(&coupon, "winner", "r1").await.code(), "SUCCESS");
    let before = h.snapshot().await;
    assert!(
        before.len() >= 6,
        "{:?}",
        before.iter().map(|(k, ..)| k).collect::<Vec<_>>()
    );
    for i in 0..1_000 {
        let user = if i % 10 == 0 {
            "winner".to_owned()
        } else {
            format!("u{}", i % 37)
        };
        let resp = h.dry_run(&coupon, &user).await;
        let expected = if user == "winner" { "ALREADY_CLAIMED" } else { "SUCCESS" };
        assert_eq!(resp.code(), expected, "{user}: {:?}", resp.body);
    }
    assert_eq!(h.snapshot().await, before, "a dry run changed Redis");
    assert_eq!(h.stock(&def).await, 19);
    // Nothing was spent for anyone: a press after all that still wins.
    assert_eq!(h.grab(&coupon, "u1", "r1").await.code(), "SUCCESS");
}

#[tokio::test]
async fn a_would_win_answer_names_the_coupon_and_a_press_then_wins() {
    let h = Harness::new().await;
    let def = h.coupon(3);
    let coupon = h.create(&def).await;
    let resp = h.dry_run(&coupon, "alice").await;
    assert_eq!((resp.status, resp.code()), (200, "SUCCESS"));
    assert_eq!(resp.body["data"]["couponId"], coupon.as_str());
    assert_eq!(resp.body["data"]["wouldWin"], true);
    assert_eq!(h.grab(&coupon, "alice", "r1").await.code(), "SUCCESS");
    let again = h.dry_run(&coupon, "alice").await;
    assert_eq!((again.status, again.code()), (409, "ALREADY_CLAIMED"));
}

#[tokio::test]
async fn the_rate_limit_is_looked_at_and_never_drawn_from() {
    let h = Harness::new().await;
    let mut def = h.coupon(10);
    def.rate_per_sec = 1;
    def.burst = 1;
    let coupon = h.create(&def).await;
    for _ in 0..50 {
        assert_eq!(h.dry_run(&coupon, "bob").await.code(), "SUCCESS");
    }
    // The one token is still there for the press.
    assert_eq!(h.grab(&coupon, "bob", "r1").await.code(), "SUCCESS");
    let limited = h.dry_run(&coupon, "carol").await;
    assert_eq!((limited.status, limited.code()), (429, "RATE_LIMITED"));
    assert!(limited.body["data"]["retryAfterMs"].as_u64().unwrap() > 0);
    assert!(limited.headers.contains_key("retry-after"));
}

#[tokio::test]
async fn each_refusal_is_the_one_a_press_would_hear() {
    let h = Harness::new().await;
    // Not started, with the start time.
    let mut later = h.coupon(5);
    later.grab_start_ms = T0 + HOUR;
    later.grab_end_ms = T0 + 2 * HOUR;
    let later_id = h.create(&later).await;
    let resp = h.dry_run(&later_id, "u1").await;
    assert_eq!((resp.status, resp.code()), (409, "COUPON_NOT_ACTIVE"));
    assert_eq!(
        resp.body["data"],
        serde_json::json!({"reason": "NOT_STARTED", "startsAtMs": T0 + HOUR})
    );
    // Member level.
    let mut gated = h.coupon(5);
    gated.min_member_level = 3;
    let gated_id = h.create(&gated).await;
    let resp = h.dry_run(&gated_id, "u1").await;
    assert_eq!((resp.status, resp.code()), (403, "NOT_ELIGIBLE"));
    assert_eq!(resp.body["data"]["minLevel"], 3);
    // The blacklist, read without reserving anything.
    let open = h.coupon(1);
    let open_id = h.create(&open).await;
    let mallory = UserId::parse("mallory").unwrap();
    h.flags().set_flag(&mallory, true).await.unwrap();
    let resp = h.dry_run(&open_id, "mallory").await;
    assert_eq!((resp.status, resp.code()), (403, "RISK_REJECTED"));
    assert_eq!(resp.body["data"]["reason"], "BLACKLISTED");
    // Sold out once the one unit is won.
    assert_eq!(h.grab(&open_id, "u1", "r1").await.code(), "SUCCESS");
    let resp = h.dry_run(&open_id, "u2").await;
    assert_eq!((resp.status, resp.code()), (410, "SOLD_OUT"));
    // An unknown coupon.
    let unknown = coupon_domain::ids::CouponId::parse("never-created-dry-run").unwrap();
    assert_eq!(h.dry_run(&unknown, "u1").await.code(), "COUPON_NOT_FOUND");
}

#[tokio::test]
async fn the_ip_and_daily_limits_refuse_a_dry_run_as_they_would_a_press() {
    let mut opts = crate::support::Options::default();
    opts.risk.users_per_ip = 2;
    opts.risk.daily_claims_per_user = 1;
    let h = Harness::with(opts).await;
    let first = h.coupon(10);
    let first_id = h.create(&first).await;
    let second = h.coupon(10);
    let second_id = h.create(&second).await;
    // Every fixture press comes from one IP: two users fill its places.
    assert_eq!(h.grab(&first_id, "ann", "r1").await.code(), "SUCCESS");
    assert_eq!(h.grab(&first_id, "ben", "r1").await.code(), "SUCCESS");
    let crowded = h.dry_run(&first_id, "cat").await;
    assert_eq!(crowded.body["data"]["reason"], "IP_LIMIT", "{:?}", crowded.body);
    // Ann used her one claim of the day: another coupon is refused too.
    let spent = h.dry_run(&second_id, "ann").await;
    assert_eq!(
        (spent.code(), spent.body["data"]["reason"].as_str()),
        ("RISK_REJECTED", Some("DAILY_LIMIT"))
    );
}

#[tokio::test]
async fn an_empty_home_shard_would_borrow_from_another_and_all_empty_is_sold_out() {
    let h = Harness::with(crate::support::Options::without_ip_limit()).await;
    let mut def = h.coupon(2);
    def.shards = 2;
    let coupon = h.create(&def).await;
    let (a, b, c) = (homed_on(0, 2, "a"), homed_on(0, 2, "b"), homed_on(1, 2, "c"));
    // Shard 0's one unit goes to a: b's home shard is empty, shard 1 not.
    assert_eq!(h.grab(&coupon, &a, "r1").await.code(), "SUCCESS");
    assert_eq!(h.dry_run(&coupon, &b).await.code(), "SUCCESS");
    assert_eq!(h.grab(&coupon, &c, "r1").await.code(), "SUCCESS");
    assert_eq!(h.dry_run(&coupon, &b).await.code(), "SOLD_OUT");
}
