//! Many users, little stock: invariants 1 (no oversell), 2 (at most N per
//! user), 3 (idempotent requests) and 5 (no false sold-out) under real
//! concurrency against real Redis and SQS.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use coupon_domain::grab::home_shard;
use coupon_domain::ids::UserId;
use futures::stream::{self, StreamExt};

use crate::support::{send, Event, Harness, Options};

/// Users whose home shard is 0 for `skewed_percent` of them (the rest spread
/// normally): the worst case for per-shard stock.
pub(crate) fn users(count: usize, shards: u32, skewed_percent: usize) -> Vec<String> {
    let skewed = count * skewed_percent / 100;
    let mut out = Vec::with_capacity(count);
    let mut i = 0;
    while out.len() < count {
        let name = format!("user-{i}");
        i += 1;
        let home = home_shard(&UserId::parse(&name).unwrap(), shards);
        let want_home_zero = out.len() < skewed;
        if !want_home_zero || home == 0 {
            out.push(name);
        }
    }
    out
}

pub(crate) struct SaleResult {
    /// user -> grant ids won (distinct)
    wins: HashMap<String, HashSet<String>>,
    /// request id -> grant ids answered for it
    by_request: HashMap<String, HashSet<String>>,
    codes: HashMap<String, usize>,
}

/// Every user sends `per_user` grabs; request ids repeat (two distinct ids
/// per user, each sent twice), all concurrently.
pub(crate) async fn run_sale(h: &Harness, coupon: &str, users: &[String], per_user: usize) -> SaleResult {
    let app = Arc::clone(&h.app);
    let mut requests = Vec::new();
    for k in 0..per_user {
        for (i, u) in users.iter().enumerate() {
            let request_id = format!("{u}-r{}", k % 2);
            let event = Event::grab(coupon, u, &request_id)
                .ip(&format!("2001:db8::{i:x}"))
                .build();
            requests.push((u.clone(), request_id, event));
        }
    }
    let responses: Vec<_> = stream::iter(requests)
        .map(|(u, r, event)| {
            let app = Arc::clone(&app);
            tokio::spawn(async move { (u, r, send(&app, event).await) })
        })
        .buffer_unordered(128)
        .collect()
        .await;
    let mut result = SaleResult {
        wins: HashMap::new(),
        by_request: HashMap::new(),
        codes: HashMap::new(),
    };
    for joined in responses {
        let (user, request, resp) = joined.expect("task");
        *result.codes.entry(resp.code().to_owned()).or_default() += 1;
        if let Some(grant) = resp.grant_id() {
            result.wins.entry(user).or_default().insert(grant.clone());
            result.by_request.entry(request).or_default().insert(grant);
        }
    }
    result
}

pub(crate) async fn assert_exactly_stock_won(
    h: &Harness,
    def: &coupon_domain::coupon::CouponDefinition,
    result: &SaleResult,
) {
    let all: HashSet<&String> = result.wins.values().flatten().collect();
    assert_eq!(
        all.len() as u64,
        def.total_stock,
        "winners = stock; codes {:?}",
        result.codes
    );
    for (user, grants) in &result.wins {
        assert!(grants.len() <= def.per_user_limit as usize, "{user} won {grants:?}");
    }
    for (request, grants) in &result.by_request {
        assert_eq!(grants.len(), 1, "request {request} answered with two grants");
    }
    assert_eq!(h.stock(def).await, 0, "stock in Redis");
    assert_eq!(h.outbox_len(def).await, def.total_stock, "outbox entries");
    let outbox: HashSet<String> = h.outbox_grant_ids(def).await.into_iter().collect();
    let queued: Vec<_> = h.stack.drain(&h.queue_url).await;
    let queued_ids: HashSet<String> = queued.iter().map(|g| g.grant_id.to_string()).collect();
    // One message per grant: a replayed win is sent again (its first send
    // may have failed), and the FIFO queue's deduplication by grant id
    // keeps one copy (a send given up at its budget may still have landed,
    // and is deduplicated the same way).
    assert_eq!(
        queued.len(),
        queued_ids.len(),
        "one SQS message per grant, however many times it was sent"
    );
    let won: HashSet<String> = all.into_iter().cloned().collect();
    assert_eq!(queued_ids, won, "SQS carries exactly the winners");
    assert_eq!(outbox, won, "the outbox holds exactly the winners");
}

fn open_risk() -> Options {
    Options::without_ip_limit()
}

/// 2,000 grabs from 500 users (90% homed on one shard) for 100 units in
/// `shards` shards: every unit won exactly once, nothing more.
pub(crate) async fn skewed_sale(opts: Options, shards: u32) -> Harness {
    let h = Harness::with(opts).await;
    let mut def = h.coupon(100);
    def.shards = shards;
    let coupon = h.create(&def).await;
    let result = run_sale(&h, coupon.as_str(), &users(500, shards, 90), 4).await;
    assert_exactly_stock_won(&h, &def, &result).await;
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_thousand_grabs_from_five_hundred_users_hand_out_exactly_the_stock() {
    let h = Harness::with(open_risk()).await;
    let def = h.coupon(100);
    let coupon = h.create(&def).await;
    let result = run_sale(&h, coupon.as_str(), &users(500, 1, 0), 4).await;
    assert_exactly_stock_won(&h, &def, &result).await;
    assert!(result.codes.get("SOLD_OUT").copied().unwrap_or(0) > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn four_shards_with_users_skewed_onto_one_shard_still_sell_every_unit() {
    skewed_sale(open_risk(), 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_attempt_each_from_more_users_than_stock_wins_every_unit_across_shards() {
    // Each user tries once, so any SOLD_OUT answered while a shard still had
    // stock would leave a unit unsold.
    let h = Harness::with(open_risk()).await;
    let mut def = h.coupon(100);
    def.shards = 4;
    let coupon = h.create(&def).await;
    let result = run_sale(&h, coupon.as_str(), &users(160, 4, 75), 1).await;
    assert_exactly_stock_won(&h, &def, &result).await;
    assert_eq!(result.codes.get("SOLD_OUT").copied(), Some(60));
}

#[tokio::test]
async fn users_homed_on_an_empty_shard_borrow_until_the_whole_coupon_is_gone() {
    let h = Harness::with(open_risk()).await;
    let mut def = h.coupon(12);
    def.shards = 4;
    let coupon = h.create(&def).await;
    let homed_on_zero = users(13, 4, 100);
    for (i, user) in homed_on_zero.iter().take(12).enumerate() {
        let resp = h.grab(&coupon, user, "r").await;
        assert_eq!(resp.code(), "SUCCESS", "grab {i} with stock left: {:?}", resp.body);
    }
    assert_eq!(h.stock(&def).await, 0);
    let last = h.grab(&coupon, &homed_on_zero[12], "r").await;
    assert_eq!((last.status, last.code()), (410, "SOLD_OUT"));
}

#[tokio::test]
async fn a_replayed_request_id_returns_the_first_outcome_and_moves_stock_once() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    let coupon = h.create(&def).await;
    let first = h.grab(&coupon, "alice", "req-1").await;
    assert_eq!(first.code(), "SUCCESS");
    assert_eq!(first.body["data"]["replayed"], false);
    let again = h.grab(&coupon, "alice", "req-1").await;
    assert_eq!(again.code(), "SUCCESS");
    assert_eq!(again.grant_id(), first.grant_id());
    assert_eq!(again.body["data"]["replayed"], true);
    assert_eq!(h.stock(&def).await, 9);
    assert_eq!(h.outbox_len(&def).await, 1);
    let sent = h.stack.drain(&h.queue_url).await;
    assert_eq!(
        sent.len(),
        1,
        "a replay sends its grant again, and SQS keeps one copy (deduplicated by grant id)"
    );
    assert!(sent.iter().all(|g| Some(g.grant_id.to_string()) == first.grant_id()));
    // A new request id from the same user is a new grab: the limit says no.
    assert_eq!(h.grab(&coupon, "alice", "req-2").await.code(), "ALREADY_CLAIMED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_same_request_id_sent_twenty_times_at_once_wins_once() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    let coupon = h.create(&def).await;
    let app = Arc::clone(&h.app);
    let responses: Vec<_> = stream::iter(0..20)
        .map(|_| {
            let app = Arc::clone(&app);
            let event = Event::grab(coupon.as_str(), "bob", "same").build();
            tokio::spawn(async move { send(&app, event).await })
        })
        .buffer_unordered(20)
        .collect()
        .await;
    let grants: HashSet<_> = responses
        .into_iter()
        .map(|r| r.unwrap().grant_id().expect("all succeed"))
        .collect();
    assert_eq!(grants.len(), 1);
    assert_eq!(h.stock(&def).await, 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_per_user_limit_of_two_gives_two_ordinals_under_concurrency() {
    let h = Harness::new().await;
    let mut def = h.coupon(50);
    def.per_user_limit = 2;
    let coupon = h.create(&def).await;
    let app = Arc::clone(&h.app);
    let responses: Vec<_> = stream::iter(0..10)
        .map(|i| {
            let app = Arc::clone(&app);
            let event = Event::grab(coupon.as_str(), "carol", &format!("r{i}")).build();
            tokio::spawn(async move { send(&app, event).await })
        })
        .buffer_unordered(10)
        .collect()
        .await;
    let mut ordinals: Vec<u64> = responses
        .into_iter()
        .map(|r| r.unwrap())
        .filter(|r| r.code() == "SUCCESS")
        .map(|r| r.body["data"]["ordinal"].as_u64().unwrap())
        .collect();
    ordinals.sort_unstable();
    assert_eq!(ordinals, vec![1, 2]);
    assert_eq!(h.stock(&def).await, 48);
}

#[tokio::test]
async fn after_a_sell_out_a_replay_of_a_winning_request_still_succeeds() {
    let h = Harness::new().await;
    let def = h.coupon(1);
    let coupon = h.create(&def).await;
    let won = h.grab(&coupon, "dave", "d1").await;
    assert_eq!(won.code(), "SUCCESS");
    assert_eq!(h.grab(&coupon, "erin", "e1").await.code(), "SOLD_OUT");
    // The instance now remembers the sell-out...
    assert_eq!(h.grab(&coupon, "frank", "f1").await.code(), "SOLD_OUT");
    // ...but a retry of the winner's request is answered truthfully.
    let replay = h.grab(&coupon, "dave", "d1").await;
    assert_eq!(replay.code(), "SUCCESS");
    assert_eq!(replay.grant_id(), won.grant_id());
}
