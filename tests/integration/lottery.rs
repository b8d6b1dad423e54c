//! Lottery mode against real Redis and the local DynamoDB: registrations
//! (one per user, the grab's eligibility and risk rules), the draw the
//! reconciler runs at its instant (exactly the stock, to the smallest
//! ranks, through the grab's claims, queue and issuer), a draw that dies
//! half way and runs again, and the revealed seed that recomputes the
//! winners.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use coupon_domain::config::RiskLimits;
use coupon_domain::coupon::{CouponDefinition, Mode};
use coupon_domain::error::StoreError;
use coupon_domain::grab::ports::{
    BorrowEnd, Claim, ClaimReply, ClaimStep, Decision, EntryReply, Peek, PeekReply, Recorded, StockLedger, TakeReply,
};
use coupon_domain::ids::{CouponId, UserId};
use coupon_domain::lottery::ports::Entries;
use coupon_domain::lottery::{verify, Seed, DRAW_SETTLE_MS};
use coupon_domain::reconcile::ports::DurableFacts;
use serde_json::Value;

use crate::support::{send_all, Event, Harness, Options, Resp, T0};

/// A lottery of `stock` units on `shards` shards: registration during the
/// suite's usual window, the draw as soon after it as allowed.
fn lottery(h: &Harness, stock: u64, shards: u32) -> CouponDefinition {
    let mut def = h.coupon(stock);
    def.shards = shards;
    def.mode = Mode::Lottery;
    def.draw_at_ms = Some(def.grab_end_ms + DRAW_SETTLE_MS);
    def
}

fn entry(coupon: &CouponId, user: &str) -> Event {
    let mut e = Event::grab(coupon.as_str(), user, "unused").path(&format!("/coupons/{coupon}/entries"));
    e = e.body("{}");
    e
}

async fn register(h: &Harness, coupon: &CouponId, user: &str) -> Resp {
    h.send(entry(coupon, user).build()).await
}

async fn standing(h: &Harness, coupon: &CouponId, user: &str) -> Value {
    let e = Event::eligibility(coupon.as_str(), user).path(&format!("/coupons/{coupon}/entries/me"));
    let resp = h.send(e.build()).await;
    assert_eq!(resp.code(), "SUCCESS", "{}", resp.body);
    resp.body["data"].clone()
}

async fn entries_stored(h: &Harness, def: &CouponDefinition) -> Vec<UserId> {
    let entries = coupon_adapters::dynamodb::DynamoEntries::new(h.tables.clone());
    let mut all = Vec::new();
    for shard in 0..def.shards {
        all.extend(entries.entries(&def.coupon_id, shard).await.unwrap());
    }
    all
}

async fn seed_of(h: &Harness, coupon: &CouponId) -> Seed {
    let entries = coupon_adapters::dynamodb::DynamoEntries::new(h.tables.clone());
    entries.lottery(coupon).await.unwrap().expect("a lottery").seed
}

async fn holders(h: &Harness, coupon: &CouponId) -> BTreeSet<UserId> {
    h.facts().holdings(coupon).await.unwrap().into_keys().collect()
}

#[tokio::test]
async fn a_lottery_draws_exactly_its_stock_from_the_entries_and_anyone_can_recompute_the_winners() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let def = lottery(&h, 5, 2);
    let coupon = h.create(&def).await;
    h.clock.set(T0);
    let hash_before = standing(&h, &coupon, "u0").await["seedHash"]
        .as_str()
        .unwrap()
        .to_owned();
    for i in 0..20 {
        let resp = register(&h, &coupon, &format!("u{i}")).await;
        assert_eq!(resp.code(), "SUCCESS", "{}", resp.body);
        assert_eq!(resp.body["data"]["replayed"], false);
    }
    let again = register(&h, &coupon, "u3").await;
    assert_eq!(again.body["data"]["replayed"], true, "{}", again.body);
    let press = h.grab(&coupon, "u1", "r").await;
    assert_eq!(
        (press.code(), press.body["data"]["reason"].as_str()),
        ("COUPON_NOT_ACTIVE", Some("LOTTERY"))
    );
    let mine = standing(&h, &coupon, "u1").await;
    assert_eq!(
        (mine["status"].as_str(), mine.get("seed")),
        (Some("REGISTERED"), None),
        "{mine}"
    );

    // Before its instant nothing is drawn; at it, one pass draws.
    h.reconcile(&def).await;
    assert_eq!(standing(&h, &coupon, "u1").await["status"], "REGISTERED");
    h.clock.set(def.draw_at_ms.unwrap());
    let report = h.reconcile(&def).await;
    assert!(
        report
            .causes
            .iter()
            .any(|c| c.contains("lottery drawn: 5 winner(s) of 20")),
        "{report:?}"
    );
    h.pump().await;
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 5);

    let seed = seed_of(&h, &coupon).await;
    assert_eq!(
        seed.commitment(),
        hash_before,
        "the seed revealed is the one committed to"
    );
    let verdict = verify(&seed, entries_stored(&h, &def).await, 5, holders(&h, &coupon).await);
    assert!(verdict.agrees(), "{verdict:?}");
    let mut won = 0;
    for i in 0..20 {
        let s = standing(&h, &coupon, &format!("u{i}")).await;
        assert_eq!(s["seed"].as_str(), Some(seed.to_hex().as_str()));
        match s["status"].as_str().unwrap() {
            "WON" => {
                won += 1;
                assert!(s["grantId"].is_string(), "{s}");
            }
            "NOT_DRAWN" => {}
            other => panic!("{other}"),
        }
    }
    assert_eq!(won, 5);
    assert_eq!(standing(&h, &coupon, "never").await["status"], "NOT_REGISTERED");
    let late = register(&h, &coupon, "late").await;
    assert_eq!(
        (late.code(), late.body["data"]["reason"].as_str()),
        ("COUPON_NOT_ACTIVE", Some("ENDED"))
    );
    // A second draw changes nothing.
    h.reconcile(&def).await;
    h.pump().await;
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 5);
    assert!(h.facts().rejections(&coupon).await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_concurrent_identical_registrations_make_one_entry() {
    let h = Harness::new().await;
    let def = lottery(&h, 3, 2);
    let coupon = h.create(&def).await;
    let events = (0..30).map(|_| entry(&coupon, "twin").build()).collect();
    let answers = send_all(&h.app, events, 30).await;
    assert!(
        answers.iter().all(|r| r.code() == "SUCCESS"),
        "{:?}",
        answers.iter().map(|r| &r.body).collect::<Vec<_>>()
    );
    let first: Vec<&Resp> = answers.iter().filter(|r| r.body["data"]["replayed"] == false).collect();
    assert!(first.len() <= 1, "at most one answered as the first registration");
    let times: BTreeSet<i64> = answers
        .iter()
        .map(|r| r.body["data"]["registeredAtMs"].as_i64().unwrap())
        .collect();
    assert_eq!(times.len(), 1, "every answer names the one entry");
    assert_eq!(entries_stored(&h, &def).await, vec![UserId::parse("twin").unwrap()]);
}

#[tokio::test]
async fn a_script_registering_fifty_users_from_one_device_gets_at_most_k_entries() {
    let mut opts = Options::without_ip_limit();
    opts.risk = RiskLimits {
        users_per_device: 3,
        ..opts.risk
    };
    let h = Harness::with(opts).await;
    let def = lottery(&h, 3, 2);
    let coupon = h.create(&def).await;
    let mut registered = 0;
    for i in 0..50 {
        let resp = h
            .send(entry(&coupon, &format!("bot-{i}")).device("one-phone").build())
            .await;
        match resp.code() {
            "SUCCESS" => registered += 1,
            "RISK_REJECTED" => assert_eq!(resp.body["data"]["reason"], "DEVICE_USER_LIMIT"),
            other => panic!("{other}: {}", resp.body),
        }
    }
    assert_eq!(registered, 3);
    assert_eq!(entries_stored(&h, &def).await.len(), 3);
}

#[tokio::test]
async fn registrations_are_refused_outside_the_window_and_for_a_first_come_coupon() {
    let h = Harness::new().await;
    let def = lottery(&h, 3, 1);
    let coupon = h.create(&def).await;
    let plain = h.create(&h.coupon(3)).await;
    h.clock.set(def.grab_start_ms - 1);
    let early = register(&h, &coupon, "early").await;
    assert_eq!(early.body["data"]["reason"], "NOT_STARTED", "{}", early.body);
    h.clock.set(def.grab_end_ms);
    assert_eq!(register(&h, &coupon, "late").await.body["data"]["reason"], "ENDED");
    h.clock.set(T0);
    let wrong = register(&h, &plain, "u").await;
    assert_eq!(
        (wrong.status, wrong.body["data"]["reason"].as_str()),
        (409, Some("FIRST_COME"))
    );
    let unknown = register(&h, &CouponId::parse("no-such-lottery").unwrap(), "u").await;
    assert_eq!(unknown.code(), "COUPON_NOT_FOUND");
    let bad = h.send(entry(&coupon, "u").body("{\"x\":1}").build()).await;
    assert_eq!(bad.code(), "INVALID_REQUEST");
}

#[tokio::test]
async fn a_registration_retried_after_the_window_answers_the_entry_the_draw_will_count() {
    let h = Harness::new().await;
    let def = lottery(&h, 3, 1);
    let coupon = h.create(&def).await;
    let first = register(&h, &coupon, "slow").await;
    assert_eq!(first.code(), "SUCCESS", "{}", first.body);
    // The home shard forgets the entry (its `remember_entry` never landed,
    // or the shard was rebuilt); DynamoDB holds it, and the draw reads it.
    let entries = h.redis.keys().shard(&coupon, 0).entries();
    let _: () = redis::cmd("DEL")
        .arg(&entries)
        .query_async(&mut h.redis.connection())
        .await
        .unwrap();
    h.clock.set(def.grab_end_ms + 1);
    let retry = register(&h, &coupon, "slow").await;
    assert_eq!(
        (
            retry.code(),
            &retry.body["data"]["replayed"],
            &retry.body["data"]["registeredAtMs"]
        ),
        ("SUCCESS", &Value::Bool(true), &first.body["data"]["registeredAtMs"]),
        "{}",
        retry.body
    );
    let stranger = register(&h, &coupon, "late").await;
    assert_eq!(stranger.body["data"]["reason"], "ENDED", "{}", stranger.body);
}

/// Fails the draw's claims after `left` of them, as a reconciler killed
/// half way through a draw leaves it.
struct DiesMidDraw {
    inner: Arc<dyn StockLedger>,
    left: AtomicU32,
}

#[async_trait]
impl StockLedger for DiesMidDraw {
    async fn shard_count(&self, c: &CouponId) -> Result<Option<u32>, StoreError> {
        self.inner.shard_count(c).await
    }
    async fn drop_rolled_back(&self, c: &CouponId, shard: u32) -> Result<bool, StoreError> {
        self.inner.drop_rolled_back(c, shard).await
    }
    async fn claim(&self, claim: &Claim<'_>, step: ClaimStep) -> Result<ClaimReply, StoreError> {
        if step == ClaimStep::Draw
            && self
                .left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_err()
        {
            return Err(StoreError::Unavailable("the reconciler died".into()));
        }
        self.inner.claim(claim, step).await
    }
    async fn take(&self, claim: &Claim<'_>, donor: u32, ordinal: u32) -> Result<TakeReply, StoreError> {
        self.inner.take(claim, donor, ordinal).await
    }
    async fn settle(&self, claim: &Claim<'_>, ended: BorrowEnd<'_>) -> Result<Option<Recorded>, StoreError> {
        self.inner.settle(claim, ended).await
    }
    async fn peek(&self, peek: &Peek<'_>) -> Result<PeekReply, StoreError> {
        self.inner.peek(peek).await
    }
    async fn shard_stock(&self, c: &CouponId, shard: u32, now_ms: i64) -> Result<u64, StoreError> {
        self.inner.shard_stock(c, shard, now_ms).await
    }
    async fn admit_entry(&self, ask: &Peek<'_>) -> Result<EntryReply, StoreError> {
        self.inner.admit_entry(ask).await
    }
    async fn remember_entry(&self, ask: &Peek<'_>, at_ms: i64) -> Result<(), StoreError> {
        self.inner.remember_entry(ask, at_ms).await
    }
    async fn recorded(&self, claim: &Claim<'_>) -> Result<Option<Recorded>, StoreError> {
        self.inner.recorded(claim).await
    }
    async fn replicated(&self, c: &CouponId, shard: u32, decision: Decision<'_>) -> Result<bool, StoreError> {
        self.inner.replicated(c, shard, decision).await
    }
}

#[tokio::test]
async fn a_draw_killed_half_way_and_run_again_issues_exactly_the_stock_each_once() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let def = lottery(&h, 8, 3);
    let coupon = h.create(&def).await;
    h.clock.set(T0);
    for i in 0..30 {
        assert_eq!(register(&h, &coupon, &format!("p{i}")).await.code(), "SUCCESS");
    }
    h.clock.set(def.draw_at_ms.unwrap());
    let dying = h.reconciler_over(&h.queue_url, 0, |mut ports| {
        ports.ledger = Arc::new(DiesMidDraw {
            inner: ports.ledger,
            left: AtomicU32::new(3),
        });
        ports
    });
    let died = dying.run().await.unwrap();
    let figures = coupon_domain::reconcile::find(&died, &coupon).expect("visited");
    assert!(
        figures.causes.iter().any(|c| c.contains("lottery draw not finished")),
        "{figures:?}"
    );
    h.pump().await;
    assert_eq!(
        standing(&h, &coupon, "p0").await.get("seed"),
        None,
        "not drawn: still secret"
    );

    h.clock.advance(1_000);
    let report = h.reconcile(&def).await;
    assert!(
        report
            .causes
            .iter()
            .any(|c| c.contains("lottery drawn: 8 winner(s) of 30")),
        "{report:?}"
    );
    h.pump().await;
    h.reconcile(&def).await;
    h.pump().await;
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 8);
    assert!(h.facts().rejections(&coupon).await.unwrap().is_empty());
    let holdings = h.facts().holdings(&coupon).await.unwrap();
    assert!(
        holdings.values().all(|held| held.len() == 1),
        "each winner once: {holdings:?}"
    );
    let seed = seed_of(&h, &coupon).await;
    let verdict = verify(&seed, entries_stored(&h, &def).await, 8, holdings.into_keys());
    assert!(verdict.agrees(), "{verdict:?}");
}

/// The draw recorded, its grants lost before any reached DynamoDB (the
/// queue purged, Redis flushed with the outboxes): each pass claims the
/// winners again until DynamoDB holds as many coupons as the draw
/// recorded winners, so every winner still gets theirs, once.
#[tokio::test]
async fn winners_whose_grants_were_lost_after_the_draw_are_claimed_again_until_issued() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let def = lottery(&h, 4, 2);
    let coupon = h.create(&def).await;
    h.clock.set(T0);
    for i in 0..12 {
        assert_eq!(register(&h, &coupon, &format!("q{i}")).await.code(), "SUCCESS");
    }
    h.clock.set(def.draw_at_ms.unwrap());
    let report = h.reconcile(&def).await;
    assert!(
        report.causes.iter().any(|c| c.contains("lottery drawn: 4 winner(s)")),
        "{report:?}"
    );
    h.stack.sqs.purge_queue().queue_url(&h.queue_url).send().await.unwrap();
    h.flush_redis().await;
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 0, "nothing reached DynamoDB");

    // The first pass rebuilds the shards (the claims name the grants on
    // their way), the next claims the winners again. A re-drive whose
    // claims missed their budget (a slow store) is retried by the pass
    // after, as the scheduled reconciler would: a few passes, not two.
    let mut reports = Vec::new();
    for _ in 0..5 {
        reports.push(h.reconcile(&def).await);
        h.pump().await;
        if h.facts().issued(&coupon).await.unwrap() >= 4 {
            break;
        }
    }
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 4, "{reports:#?}");
    let holdings = h.facts().holdings(&coupon).await.unwrap();
    assert!(holdings.values().all(|held| held.len() == 1), "{holdings:?}");
    let verdict = verify(
        &seed_of(&h, &coupon).await,
        entries_stored(&h, &def).await,
        4,
        holdings.into_keys(),
    );
    assert!(verdict.agrees(), "{verdict:?}");
}
