//! The reconciler: nothing lost (invariant 4), no oversell even after Redis
//! loses its data (invariant 1), safe to run twice at once.

use std::collections::HashSet;
use std::sync::Arc;

use coupon_domain::clock::Clock;
use coupon_domain::coupon::CouponDefinition;
use coupon_domain::grab::home_shard;
use coupon_domain::grab::ports::{BorrowEnd, Claim, ClaimReply, ClaimStep, StockLedger};
use coupon_domain::ids::{CouponId, RequestId, UserId};
use coupon_domain::reconcile::ports::DurableFacts;
use futures::stream::{self, StreamExt};

use crate::support::{send, Event, Harness, Options};

const UNREACHABLE_QUEUE: &str = "http://127.0.0.1:9/000000000000/unreachable";

pub(crate) fn sqs_down() -> Options {
    Options {
        queue_url: Some(UNREACHABLE_QUEUE.into()),
        ..Options::without_ip_limit()
    }
}

#[tokio::test]
async fn winners_whose_sqs_send_failed_each_get_exactly_one_coupon_after_a_reconcile() {
    sqs_down_then_back(sqs_down()).await;
}

/// 15 winners while SQS is down, who hear BUSY and never retry; SQS back;
/// a reconcile re-drives their grants (the backstop behind the retry).
pub(crate) async fn sqs_down_then_back(opts: Options) {
    let h = Harness::with(opts).await;
    let def = h.coupon(20);
    let coupon = h.create(&def).await;
    let mut winners = Vec::new();
    for i in 0..15 {
        let user = format!("w{i}");
        let resp = h.grab(&coupon, &user, "r").await;
        assert_eq!(resp.code(), "BUSY", "won, not queued: not yet a SUCCESS");
        winners.push(user);
    }
    // SQS is back: the reconciler re-drives to the real queue, but only
    // grants older than the grace period.
    let queue = h.stack.new_queue().await;
    let report = h.reconciler_to(&queue).run().await.unwrap();
    assert_eq!(coupon_domain::reconcile::find(&report, &coupon).unwrap().redriven, 0);
    h.clock.advance(30_000);
    let report = h.reconciler_to(&queue).run().await.unwrap();
    let figures = coupon_domain::reconcile::find(&report, &coupon).unwrap();
    assert_eq!((figures.pending, figures.redriven), (15, 15));
    let h2 = Harness {
        queue_url: queue.clone(),
        ..h
    };
    assert_eq!(h2.pump().await, 15);
    for user in &winners {
        assert_eq!(h2.coupons_of(user).await.len(), 1, "{user}");
    }
    // The next pass confirms and trims: nothing pending, the books balance.
    let after = h2.reconcile(&def).await;
    assert_eq!(
        (after.pending, after.trimmed, after.issued, after.drift),
        (0, 15, 15, 0)
    );
    assert_eq!(h2.outbox_len(&def).await, 0);
}

#[tokio::test]
async fn a_grant_whose_lambda_died_after_the_lua_call_is_re_driven() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    // The script ran (stock, outbox, outcome) and then the process died:
    // no SQS send ever happened.
    let user = UserId::parse("crashed").unwrap();
    let request = RequestId::parse("r1").unwrap();
    let claim = Claim {
        coupon: &coupon,
        home_shard: 0,
        user: &user,
        level: 0,
        request: &request,
        now_ms: h.clock.now_ms(),
    };
    assert!(matches!(
        h.stock_ledger().claim(&claim, ClaimStep::Whole).await.unwrap(),
        ClaimReply::Won(_)
    ));
    assert_eq!(h.receive().await.len(), 0);
    h.clock.advance(31_000);
    let figures = h.reconcile(&def).await;
    assert_eq!(figures.redriven, 1);
    assert_eq!(h.pump().await, 1);
    assert_eq!(h.coupons_of("crashed").await.len(), 1);
    assert_eq!(h.reconcile(&def).await.drift, 0);
}

#[tokio::test]
async fn two_reconcilers_at_once_leave_one_coupon_per_winner() {
    let h = Harness::with(sqs_down()).await;
    let def = h.coupon(10);
    let coupon = h.create(&def).await;
    for i in 0..8 {
        assert_eq!(h.grab(&coupon, &format!("t{i}"), "r").await.code(), "BUSY");
    }
    h.clock.advance(60_000);
    let queue = h.stack.new_queue().await;
    let (a, b) = (h.reconciler_to(&queue), h.reconciler_to(&queue));
    let (ra, rb) = tokio::join!(a.run(), b.run());
    let redriven: u64 = [ra.unwrap(), rb.unwrap()]
        .iter()
        .map(|r| coupon_domain::reconcile::find(r, &coupon).unwrap().redriven)
        .sum();
    assert!(redriven >= 8, "each pending grant re-driven at least once");
    let h2 = Harness { queue_url: queue, ..h };
    h2.pump().await;
    for i in 0..8 {
        assert_eq!(h2.coupons_of(&format!("t{i}")).await.len(), 1);
    }
    assert_eq!(h2.facts().issued(&coupon).await.unwrap(), 8, "duplicates absorbed");
    assert_eq!(h2.reconcile(&def).await.drift, 0);
}

/// A coupon of 4 units on 2 shards whose `user_name`'s home shard other
/// users emptied (their coupons issued), and a borrow reserved there for
/// `user_name`'s request `r1` whose caller then died: the grab script ran
/// and nothing after it.
async fn borrow_reserved_on_an_empty_home(h: &Harness, user_name: &str) -> (CouponDefinition, CouponId) {
    let mut def = h.coupon(4);
    def.shards = 2;
    let coupon = h.create(&def).await;
    let user = UserId::parse(user_name).unwrap();
    let home = home_shard(&user, 2);
    let mut emptied = 0;
    let mut i = 0;
    while emptied < 2 {
        let other = format!("filler-{i}");
        i += 1;
        if home_shard(&UserId::parse(&other).unwrap(), 2) == home {
            assert_eq!(h.grab(&coupon, &other, "r").await.code(), "SUCCESS");
            emptied += 1;
        }
    }
    h.pump().await;
    reserve_borrow(h, &coupon, &user, home).await;
    (def, coupon)
}

/// `user`'s request `r1` reserves a borrow on its empty `home` shard (the
/// grab script runs; the caller dies before anything else).
async fn reserve_borrow(h: &Harness, coupon: &CouponId, user: &UserId, home: u32) {
    let request = RequestId::parse("r1").unwrap();
    let claim = Claim {
        coupon,
        home_shard: home,
        user,
        level: 0,
        request: &request,
        now_ms: h.clock.now_ms(),
    };
    assert!(matches!(
        h.stock_ledger().claim(&claim, ClaimStep::Whole).await.unwrap(),
        ClaimReply::Borrow { ordinal: 1 }
    ));
}

#[tokio::test]
async fn a_borrow_whose_caller_died_is_finished_by_the_reconciler() {
    let h = Harness::new().await;
    let user_name = "orphan-borrower";
    let (def, coupon) = borrow_reserved_on_an_empty_home(&h, user_name).await;
    h.clock.advance(31_000);
    let figures = h.reconcile(&def).await;
    assert_eq!((figures.borrows_finished, figures.redriven), (1, 1));
    assert_eq!(h.pump().await, 1);
    assert_eq!(
        h.coupons_of(user_name).await.len(),
        1,
        "the borrow completed from the other shard"
    );
    // The caller's retry now sees its win.
    let retry = h.grab(&coupon, user_name, "r1").await;
    assert_eq!(
        (retry.code(), retry.body["data"]["replayed"].as_bool()),
        ("SUCCESS", Some(true))
    );
}

/// A borrow reserved while the coupon was on sale, interrupted, then resumed
/// after an operator took the coupon offline (by the caller's retry here;
/// the reconciler resumes one the same way): no donor gives a unit any
/// more, the claim is given back, and the retry hears COUPON_NOT_ACTIVE.
#[tokio::test]
async fn a_borrow_resumed_after_the_coupon_went_offline_takes_nothing() {
    let h = Harness::new().await;
    let user_name = "late-borrower";
    let (def, coupon) = borrow_reserved_on_an_empty_home(&h, user_name).await;
    let path = format!("/admin/coupons/{coupon}/status");
    let off = h
        .admin_call("PUT", &path, Some(serde_json::json!({"status": "OFFLINE"})))
        .await;
    assert_eq!(off.status, 200, "{}", off.body);

    let retry = h.grab(&coupon, user_name, "r1").await;
    assert_eq!(
        (retry.code(), retry.body["data"]["reason"].as_str()),
        ("COUPON_NOT_ACTIVE", Some("OFFLINE")),
        "{}",
        retry.body
    );
    assert_eq!(h.stock_ledger().shard_count(&coupon).await.unwrap(), Some(2));
    let donor_stock = h.reconcile(&def).await.remaining;
    assert_eq!(donor_stock, 2, "the donor kept both its units");

    // Back on sale: the claim was given back, so the user can win.
    h.admin_call("PUT", &path, Some(serde_json::json!({"status": "ONLINE"})))
        .await;
    assert_eq!(h.grab(&coupon, user_name, "r2").await.code(), "SUCCESS");
}

/// A borrow's request record outlives its home shard (a shard dropped for
/// rolling back keeps its request keys): resuming it must not settle on a
/// shard with no state (that answered SOLD_OUT and counted the claim off
/// state about to be rebuilt); it waits (BUSY) for the rebuild.
#[tokio::test]
async fn a_borrow_whose_home_shard_was_dropped_waits_for_the_rebuild() {
    let h = Harness::new().await;
    let mut def = h.coupon(2);
    def.shards = 2;
    let coupon = h.create(&def).await;
    let user_name = "stranded-borrower";
    let user = UserId::parse(user_name).unwrap();
    let home = home_shard(&user, 2);
    let mut filled = 0;
    let mut i = 0;
    while filled < 2 {
        let other = format!("filler-{i}");
        i += 1;
        if h.grab(&coupon, &other, "r").await.code() == "SUCCESS" {
            filled += 1;
        }
    }
    h.pump().await;
    reserve_borrow(&h, &coupon, &user, home).await;
    use coupon_domain::reconcile::ports::StockRepair;
    let repair = coupon_adapters::redis::RedisRepair::new(h.redis.clone());
    assert!(repair.drop_if_behind(&coupon, home, u64::MAX).await.unwrap());

    let waiting = h.grab(&coupon, user_name, "r1").await;
    assert_eq!((waiting.status, waiting.code()), (503, "BUSY"), "{}", waiting.body);

    let rebuilt = h.reconcile(&def).await;
    assert_eq!(rebuilt.shards_rebuilt, 1, "{rebuilt:?}");
    assert_eq!(
        h.grab(&coupon, user_name, "r1").await.code(),
        "SOLD_OUT",
        "every unit is issued"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sale_survives_redis_losing_everything_mid_sale_without_oversell() {
    flush_mid_sale(Options::without_ip_limit()).await;
}

/// 20 winners, half issued, Redis flushed, rebuilt, the sale goes on: no
/// oversell, nobody above the limit, the books balance.
pub(crate) async fn flush_mid_sale(opts: Options) {
    let h = Harness::with(opts).await;
    let mut def = h.coupon(40);
    def.shards = 2;
    let coupon = h.create(&def).await;
    let app = Arc::clone(&h.app);
    let grab_all = |users: Vec<String>, round: &'static str| {
        let app = Arc::clone(&app);
        let coupon = coupon.clone();
        async move {
            stream::iter(users)
                .map(|u| {
                    let app = Arc::clone(&app);
                    let event = Event::grab(coupon.as_str(), &u, round).build();
                    tokio::spawn(async move { send(&app, event).await })
                })
                .buffer_unordered(16)
                .map(|r| r.unwrap().code().to_owned())
                .collect::<Vec<_>>()
                .await
        }
    };
    let first: Vec<String> = (0..20).map(|i| format!("early-{i}")).collect();
    let codes = grab_all(first.clone(), "a").await;
    assert_eq!(codes.iter().filter(|c| *c == "SUCCESS").count(), 20);
    // Half the grants reach DynamoDB; the other half are still in SQS.
    let batch = h.receive().await;
    assert!(h.deliver(&h.issuer(), &batch).await.is_empty());
    let issued_before = h.facts().issued(&coupon).await.unwrap();
    assert!(issued_before > 0 && issued_before < 20);

    h.flush_redis().await;
    let lost = h.grab(&coupon, "late-0", "a").await;
    assert_eq!(
        (lost.status, lost.code()),
        (503, "BUSY"),
        "an instance that knows the coupon answers BUSY until the rebuild, never 404"
    );

    // The other grants are still in the queue: the counters do not know
    // them yet, so the shards stay down rather than sell them again.
    // (Its barriers wait behind them in their lanes.)
    let waiting = h.reconcile_once(&def).await;
    assert_eq!(waiting.shards_rebuilt, 0, "{waiting:?}");
    assert_eq!(h.grab(&coupon, "late-0", "a").await.code(), "BUSY");
    h.pump().await;
    let rebuild = h.reconcile(&def).await;
    assert_eq!(rebuild.shards_rebuilt, 2);
    assert_eq!(
        rebuild.restored,
        40 - 20,
        "every early grant issued, none offered again"
    );

    // The sale goes on: newcomers, and the early users trying again.
    let mut rest: Vec<String> = (0..40).map(|i| format!("late-{i}")).collect();
    rest.extend(first.iter().cloned());
    grab_all(rest, "b").await;
    h.pump().await;

    let issued = h.facts().issued(&coupon).await.unwrap();
    assert!(issued <= 40, "issued {issued} of 40");
    assert_eq!(issued, 40, "every unit issued in the end");
    assert!(
        h.facts().rejections(&coupon).await.unwrap().is_empty(),
        "no SUCCESS turned REJECTED: no unit was offered twice"
    );
    let mut holders = HashSet::new();
    for user in (0..40).map(|i| format!("late-{i}")).chain(first.iter().cloned()) {
        let n = h.coupons_of(&user).await.len();
        assert!(n <= 1, "{user} holds {n}");
        if n == 1 {
            holders.insert(user);
        }
    }
    assert_eq!(holders.len(), 40);
    let after = h.reconcile(&def).await;
    assert_eq!(after.drift, 0, "{after:?}");
    assert_eq!(after.pending, 0);
    assert_eq!(after.remaining, 0);
    let view = h.admin_call("GET", &format!("/admin/coupons/{coupon}"), None).await;
    let figures = &view.body["data"]["figures"];
    assert_eq!(
        (figures["pending"].as_u64(), figures["overgranted"].as_u64()),
        (Some(0), Some(0)),
        "{figures}"
    );
}

/// A coupon of 10 units on 2 shards, 3 of them won (`early-0..2`).
async fn two_shards_with_three_winners(h: &Harness) -> CouponId {
    let mut def = h.coupon(10);
    def.shards = 2;
    let coupon = h.create(&def).await;
    for i in 0..3 {
        assert_eq!(h.grab(&coupon, &format!("early-{i}"), "a").await.code(), "SUCCESS");
    }
    coupon
}

/// Redis loses everything; a grab instance that never saw the coupon (a
/// cold start) must not answer 404 for a coupon that exists: it asks the
/// catalogue, answers BUSY, and asks the reconciler (through the repair
/// queue) for the rebuild, which the next press then finds done.
#[tokio::test]
async fn a_cold_instance_answers_busy_for_a_coupon_redis_lost_and_its_repair_request_heals_the_sale() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let coupon = two_shards_with_three_winners(&h).await;
    h.pump().await;
    h.flush_redis().await;

    let cold = h.cold_instance();
    let pressed = send(&cold, Event::grab(coupon.as_str(), "late-0", "a").build()).await;
    assert_eq!(
        (pressed.status, pressed.code()),
        (503, "BUSY"),
        "a coupon that exists is never COUPON_NOT_FOUND: {:?}",
        pressed.body
    );
    let again = send(&cold, Event::grab(coupon.as_str(), "late-1", "a").build()).await;
    assert_eq!(again.code(), "BUSY");
    // One repair request however many presses found the state gone.
    let received = h
        .stack
        .sqs
        .receive_message()
        .queue_url(&h.config.repair_queue_url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap()
        .messages
        .unwrap_or_default();
    assert_eq!(h.metrics.total("RepairRequestFailed"), 0);
    assert_eq!(received.len(), 1, "{received:?}");

    // The reconciler consumes the repair queue (as its event source mapping
    // invokes it): its pass sends the coupon's barriers, and once the
    // issuer has taken them, the next request's pass rebuilds the coupon.
    let records: Vec<serde_json::Value> = received
        .iter()
        .map(|m| {
            serde_json::json!({
                "messageId": m.message_id(),
                "receiptHandle": m.receipt_handle(),
                "body": m.body(),
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:repairs.fifo",
            })
        })
        .collect();
    let app = reconciler::App {
        reconciler: h.reconciler_to(&h.queue_url),
        elasticache: None,
        // One pass per invocation: this test plays the issuer in between.
        repair_follow: std::time::Duration::ZERO,
    };
    let event = || {
        lambda_runtime::LambdaEvent::new(
            serde_json::json!({ "Records": records }),
            lambda_runtime::Context::default(),
        )
    };
    let waiting = reconciler::handle(&app, event()).await.expect("repair pass");
    assert_eq!(waiting["coupons"][0]["shardsWaiting"].as_u64(), Some(2), "{waiting}");
    assert!(h.pump().await > 0, "the barriers reach the issuer");
    let report = reconciler::handle(&app, event()).await.expect("repair pass");
    let figures = &report["coupons"][0];
    assert_eq!(figures["couponId"], coupon.as_str());
    assert_eq!(
        (figures["shardsRebuilt"].as_u64(), figures["restored"].as_u64()),
        (Some(2), Some(7))
    );

    let healed = send(&cold, Event::grab(coupon.as_str(), "late-0", "a").build()).await;
    assert_eq!(healed.code(), "SUCCESS", "{:?}", healed.body);
    assert_eq!(h.grab(&coupon, "early-0", "b").await.code(), "ALREADY_CLAIMED");

    // A coupon nobody created is still 404, and asks for no repair.
    let unknown = send(&cold, Event::grab("never-created-coupon", "late-2", "a").build()).await;
    assert_eq!((unknown.status, unknown.code()), (404, "COUPON_NOT_FOUND"));
}

/// A repair request's invocation follows the coupon's wait: it sends the
/// barriers, watches them come through while the issuer runs beside it,
/// and rebuilds in the same invocation, so the sale reopens without
/// waiting for the next request.
#[tokio::test]
async fn one_repair_invocation_follows_the_wait_until_the_coupon_is_rebuilt() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let coupon = two_shards_with_three_winners(&h).await;
    h.flush_redis().await;

    let app = reconciler::App {
        reconciler: h.reconciler_to(&h.queue_url),
        elasticache: None,
        repair_follow: std::time::Duration::from_secs(20),
    };
    let event = lambda_runtime::LambdaEvent::new(
        serde_json::json!({ "Records": [{
            "messageId": "m1",
            "body": coupon_adapters::sqs::repair_message(&coupon),
            "eventSource": "aws:sqs",
            "eventSourceARN": "arn:aws:sqs:us-east-1:000000000000:repairs.fifo",
        }]}),
        lambda_runtime::Context::default(),
    );
    let done = std::sync::atomic::AtomicBool::new(false);
    let issuer = async {
        // The issuer's event source, beside the reconciler: the three
        // grants, then the barriers behind them.
        let mut delivered = 0;
        while !done.load(std::sync::atomic::Ordering::SeqCst) {
            delivered += h.pump().await;
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        delivered
    };
    let repair = async {
        let report = reconciler::handle(&app, event).await.expect("repair pass");
        done.store(true, std::sync::atomic::Ordering::SeqCst);
        report
    };
    let started = std::time::Instant::now();
    let (report, delivered) = tokio::join!(repair, issuer);
    let figures = &report["coupons"][0];
    assert_eq!(
        (figures["shardsRebuilt"].as_u64(), figures["shardsWaiting"].as_u64()),
        (Some(2), Some(0)),
        "{report}"
    );
    assert_eq!(delivered, 3 + coupon_domain::barrier::LANES as usize);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "followed to the end"
    );
    assert_eq!(h.grab(&coupon, "late-0", "a").await.code(), "SUCCESS");
}

#[tokio::test]
async fn two_reconcilers_rebuilding_at_once_restore_the_stock_once() {
    let h = Harness::new().await;
    let mut def = h.coupon(30);
    def.shards = 3;
    let coupon = h.create(&def).await;
    for i in 0..6 {
        assert_eq!(h.grab(&coupon, &format!("pre-{i}"), "r").await.code(), "SUCCESS");
    }
    h.pump().await;
    h.flush_redis().await;
    let (a, b) = (h.reconciler_to(&h.queue_url), h.reconciler_to(&h.queue_url));
    let mut reports = Vec::new();
    // Both open the coupon's wait at once (one of them wins), then both
    // rebuild at once once its barriers have come through.
    for _ in 0..2 {
        let (ra, rb) = tokio::join!(a.run(), b.run());
        reports.extend([ra.unwrap(), rb.unwrap()]);
        h.pump().await;
    }
    let restored: u64 = reports
        .iter()
        .map(|r| coupon_domain::reconcile::find(r, &coupon).unwrap().restored)
        .sum();
    assert_eq!(restored, 24, "{reports:?}");
    assert_eq!(h.stock(&def).await, 24);
    // And the six holders cannot grab a second coupon.
    for i in 0..6 {
        assert_eq!(
            h.grab(&coupon, &format!("pre-{i}"), "again").await.code(),
            "ALREADY_CLAIMED"
        );
    }
    assert!(h.facts().was_rebuilt(&coupon).await.unwrap());
}

/// A borrow whose caller died and whose record then expired (nobody settled
/// it within the outcome TTL): settling it found nothing and left the
/// user's claim counted, so with a limit of one the user heard
/// ALREADY_CLAIMED for good while holding nothing. The settle now gives
/// the claim back, once.
#[tokio::test]
async fn a_borrow_whose_record_expired_gives_its_claim_back_once() {
    let h = Harness::new().await;
    let mut def = h.coupon(2);
    def.shards = 2;
    let coupon = h.create(&def).await;
    let user = UserId::parse("expired-borrower").unwrap();
    let home = home_shard(&user, 2);
    // Empty both shards: the user's home first, then the other.
    let mut sold = 0;
    for i in 0.. {
        if sold == 2 {
            break;
        }
        if h.grab(&coupon, &format!("buyer-{i}"), "r").await.code() == "SUCCESS" {
            sold += 1;
        }
    }
    // The borrow will find every shard empty. Reserve it, let its caller die.
    let request = RequestId::parse("r1").unwrap();
    let claim = Claim {
        coupon: &coupon,
        home_shard: home,
        user: &user,
        level: 0,
        request: &request,
        now_ms: h.clock.now_ms(),
    };
    let ledger = h.stock_ledger();
    // No borrow has failed yet, so no shard is stamped sold out: the home
    // shard reserves the claim and sends the caller borrowing.
    let reply = ledger.claim(&claim, ClaimStep::Whole).await.unwrap();
    assert!(matches!(reply, ClaimReply::Borrow { ordinal: 1 }), "{reply:?}");
    // The record expires (the outcome TTL passed).
    let req_key = h.redis.keys().shard(&coupon, home).request(&user, &request);
    let mut conn = h.redis.connection();
    let _: () = redis::cmd("DEL").arg(&req_key).query_async(&mut conn).await.unwrap();
    let users_key = h.redis.keys().shard(&coupon, home).users();
    let counted: Option<i64> = redis::cmd("HGET")
        .arg(&users_key)
        .arg(user.as_str())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(counted, Some(1), "the reservation counted the claim");

    assert_eq!(ledger.settle(&claim, BorrowEnd::AllEmpty).await.unwrap(), None, "GONE");
    assert_eq!(
        ledger.settle(&claim, BorrowEnd::AllEmpty).await.unwrap(),
        None,
        "GONE again"
    );
    let counted: Option<i64> = redis::cmd("HGET")
        .arg(&users_key)
        .arg(user.as_str())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(counted, None, "given back once, never below zero");
}

/// A press told SUCCESS whose answer never reached the user is retried
/// with the same request id, after Redis lost everything. The request's
/// outcome lived only in Redis, so the retry was decided afresh: with a
/// per-user limit above 1 the same request earned a second coupon. The
/// coupon's item carries its request, and the rebuild restores the
/// outcome: the retry replays the same grant.
#[tokio::test]
async fn a_retry_after_redis_lost_everything_replays_its_grant_and_earns_no_second_coupon() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let mut def = h.coupon(10);
    def.per_user_limit = 2;
    def.shards = 2;
    let coupon = h.create(&def).await;
    let first = h.grab(&coupon, "u1", "press-1").await;
    assert_eq!(first.code(), "SUCCESS", "{}", first.body);
    let grant = first.grant_id().unwrap();
    h.pump().await;

    h.flush_redis().await;
    let report = h.reconcile(&def).await;
    assert_eq!(report.shards_rebuilt, 2, "{report:?}");

    let retry = h.grab(&coupon, "u1", "press-1").await;
    assert_eq!(retry.code(), "SUCCESS", "{}", retry.body);
    assert_eq!(retry.grant_id().unwrap(), grant, "the same grant, replayed");
    assert_eq!(retry.body["data"]["replayed"], true);
    let second = h.grab(&coupon, "u1", "press-2").await;
    assert_eq!(second.code(), "SUCCESS", "a new press may still win the second");
    assert_ne!(second.grant_id().unwrap(), grant);
    h.pump().await;
    let held: HashSet<String> = h.coupons_of("u1").await.into_iter().map(|c| c.grant_id).collect();
    assert_eq!(held, HashSet::from([grant, second.grant_id().unwrap()]));
    assert!(h.facts().rejections(&coupon).await.unwrap().is_empty());
}
