//! Redis losing a coupon's state mid-sale: no oversell, the repair
//! request that reopens the sale, and rebuilds that run at once.

use std::collections::HashSet;
use std::sync::Arc;

use coupon_domain::ids::CouponId;
use coupon_domain::reconcile::ports::DurableFacts;
use futures::stream::{self, StreamExt};

use crate::support::{send, Event, Harness, Options, Server};

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

    // The other grants are still in the queue (the issuer has not taken
    // them): the counters do not know them, but their claims do, so the
    // shards reopen now without offering their units again.
    let rebuild = h.reconcile_once(&def).await;
    assert_eq!(rebuild.shards_rebuilt, 2, "{rebuild:?}");
    assert_eq!(
        rebuild.restored,
        40 - 20,
        "every early grant counted, issued or on its way; none offered again"
    );
    assert_eq!(rebuild.pending, 20 - issued_before, "{rebuild:?}");
    for early in &first {
        let again = h.grab(&coupon, early, "a").await;
        assert_eq!(again.code(), "SUCCESS", "{early}'s retry replays its grant");
    }
    h.pump().await;

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
    // invokes it): its pass rebuilds the coupon, the three grants still on
    // the queue counted from their claims.
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
        // One pass per invocation.
        repair_follow: std::time::Duration::ZERO,
        reminders: None,
    };
    let event = || {
        lambda_runtime::LambdaEvent::new(
            serde_json::json!({ "Records": records }),
            lambda_runtime::Context::default(),
        )
    };
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

/// A server restart breaks every connection to it, and the first command
/// on each fails before the connection comes back by itself. The repair
/// invocation that meets it (the restart is what the grabs ask it to
/// repair) tries its pass again a step later, instead of failing the batch
/// back to the queue, whose redelivery waits out the visibility timeout
/// while the sale stays closed.
#[tokio::test]
async fn a_repair_pass_that_meets_a_connection_broken_by_a_restart_is_tried_again_and_reopens_the_sale() {
    let mut server = Server::standalone();
    let h = Harness::with(Options {
        redis_url: Some(server.url()),
        ..Options::without_ip_limit()
    })
    .await;
    let coupon = two_shards_with_three_winners(&h).await;
    server.cmd(&["SAVE"]);
    server.restart_from_snapshot();

    let app = reconciler::App {
        reconciler: h.reconciler_to(&h.queue_url),
        elasticache: None,
        repair_follow: std::time::Duration::from_secs(20),
        reminders: None,
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
    let report = reconciler::handle(&app, event)
        .await
        .expect("the pass is tried again, not failed back to the queue");
    let figures = &report["coupons"][0];
    assert_eq!(figures["couponId"], coupon.as_str(), "{report}");
    assert_eq!(figures["shardsWaiting"].as_u64(), Some(0), "{report}");
    assert_eq!(h.grab(&coupon, "late-0", "a").await.code(), "SUCCESS");
    assert_eq!(h.grab(&coupon, "early-0", "b").await.code(), "ALREADY_CLAIMED");
}

/// A repair request's invocation follows the coupon's wait: it watches
/// the send window pass and rebuilds in the same invocation, so the sale
/// reopens without waiting for the next request, whatever the issuer
/// beside it does meanwhile.
#[tokio::test]
async fn one_repair_invocation_follows_the_wait_until_the_coupon_is_rebuilt() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let coupon = two_shards_with_three_winners(&h).await;
    h.flush_redis().await;

    let app = reconciler::App {
        reconciler: h.reconciler_to(&h.queue_url),
        elasticache: None,
        repair_follow: std::time::Duration::from_secs(20),
        reminders: None,
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
        // grants.
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
    assert!(delivered <= 3, "only the grants travel: {delivered}");
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
    // rebuild at once.
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
    let held: HashSet<String> = h
        .coupons_of("u1")
        .await
        .into_iter()
        .map(|c| c.grant_id.to_string())
        .collect();
    assert_eq!(held, HashSet::from([grant, second.grant_id().unwrap()]));
    assert!(h.facts().rejections(&coupon).await.unwrap().is_empty());
}

/// A dropped shard keeps its outbox, and the reconciler trims entries from
/// it while the shard is missing: the stream then only takes ids above the
/// highest it ever held, not above its newest entry. The rebuild still
/// lists every grant on its way, in order, the kept ones unchanged.
#[tokio::test]
async fn a_rebuild_lists_its_grants_in_an_outbox_a_dropped_shard_kept_and_the_pass_trimmed() {
    use coupon_adapters::redis::RedisRepair;
    use coupon_domain::grant::Grant;
    use coupon_domain::ids::{GrantId, RequestId, UserId};
    use coupon_domain::reconcile::ports::{ShardUnits, StockRepair};

    let h = Harness::new().await;
    let def = h.coupon(3);
    let coupon = h.create(&def).await;
    let stored = h.facts().stored(&coupon).await.unwrap().expect("stored");
    let on_its_way = |seq: u64, user: &str| Grant {
        grant_id: GrantId::new(&coupon, 0, seq),
        coupon_id: coupon.clone(),
        user_id: UserId::parse(user).unwrap(),
        ordinal: 1,
        request_id: RequestId::parse(&format!("r-{user}")).unwrap(),
        shard: 0,
        granted_at_ms: 1,
    };
    let (kept, trimmed, claimed) = (on_its_way(5, "u5"), on_its_way(7, "u7"), on_its_way(6, "u6"));
    let keys = h.redis.keys().shard(&coupon, 0);
    let mut conn = h.redis.connection();
    for g in [&kept, &trimmed] {
        let _: String = redis::cmd("XADD")
            .arg(keys.outbox())
            .arg(format!("{}-0", g.grant_id.seq()))
            .arg("grant_id")
            .arg(g.grant_id.as_str())
            .arg("coupon_id")
            .arg(g.coupon_id.as_str())
            .arg("user_id")
            .arg(g.user_id.as_str())
            .arg("ordinal")
            .arg(g.ordinal)
            .arg("request_id")
            .arg(g.request_id.as_str())
            .arg("shard")
            .arg(g.shard)
            .arg("granted_at_ms")
            .arg(g.granted_at_ms)
            .query_async(&mut conn)
            .await
            .unwrap();
    }
    // Dropped (its state gone, its outbox kept); then the pass trims the
    // grant DynamoDB confirmed.
    let _: () = redis::cmd("DEL").arg(keys.meta()).query_async(&mut conn).await.unwrap();
    let repair = RedisRepair::new(h.redis.clone());
    repair.trim(&coupon, 0, &[7]).await.unwrap();

    let units = ShardUnits { stock: 1, expired: 0 };
    let restored = repair
        .restore_shard(&stored, 0, units, 100, &[], &[], &[kept.clone(), claimed.clone()], 1)
        .await
        .unwrap();

    assert!(restored, "the shard is written");
    let listed: Vec<u64> = repair.outbox(&coupon, 0).await.unwrap().iter().map(|e| e.seq).collect();
    assert_eq!(listed, vec![5, 6], "the kept grant and the claimed one, in order");
}

/// Two rebuilds of one shard at once (a coupon whose every unit is issued
/// opens no wait to serialise them): each writes its users and its request
/// records, stamped with its own incarnation, then the meta last. Had the
/// lower incarnation's meta opened the shard over the higher one's records,
/// every win restored would be another incarnation's record there, and its
/// retry decided afresh. The higher stages its incarnation with its
/// records, and the lower does not open the shard.
#[tokio::test]
async fn of_two_rebuilds_at_once_only_the_higher_incarnation_opens_the_shard() {
    use coupon_adapters::redis::RedisRepair;
    use coupon_domain::grant::GrantRecord;
    use coupon_domain::ids::{GrantId, RequestId, UserId};
    use coupon_domain::reconcile::ports::{ShardUnits, StockRepair};
    use coupon_domain::user_coupon::Held;

    let h = Harness::new().await;
    let def = h.coupon(3);
    let coupon = h.create(&def).await;
    let stored = h.facts().stored(&coupon).await.unwrap().expect("stored");
    let (user, request) = (UserId::parse("holder").unwrap(), RequestId::parse("r1").unwrap());
    let record = GrantRecord {
        grant_id: GrantId::new(&coupon, 0, 1),
        ordinal: 1,
        shard: 0,
        granted_at_ms: 1,
    };
    let holders = vec![(
        user.clone(),
        vec![Held {
            outcome: Some((request.clone(), record.clone())),
        }],
    )];
    let keys = h.redis.keys().shard(&coupon, 0);
    let mut conn = h.redis.connection();
    let _: () = redis::cmd("DEL").arg(keys.meta()).query_async(&mut conn).await.unwrap();
    let repair = RedisRepair::new(h.redis.clone());
    let units = ShardUnits { stock: 2, expired: 0 };

    // The higher run (base 2000) has written its records, not its meta yet.
    let _: () = redis::cmd("SET")
        .arg(keys.base())
        .arg(2000)
        .query_async(&mut conn)
        .await
        .unwrap();
    let lower = repair
        .restore_shard(&stored, 0, units, 1000, &holders, &[], &[], 1)
        .await
        .unwrap();
    assert!(!lower, "the lower incarnation does not open the shard");
    let meta: bool = redis::cmd("EXISTS")
        .arg(keys.meta())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(!meta);
    let higher = repair
        .restore_shard(&stored, 0, units, 2000, &holders, &[], &[], 1)
        .await
        .unwrap();
    assert!(higher, "the higher one does");
    let stored_record: String = redis::cmd("GET")
        .arg(keys.request(&user, &request))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(stored_record.ends_with("#2000"), "{stored_record}");
    let claim = crate::support::plain_claim(&coupon, &user, &request, crate::support::T0);
    let replayed = coupon_domain::grab::ports::StockLedger::recorded(&h.stock_ledger(), &claim)
        .await
        .unwrap();
    assert!(
        matches!(replayed, Some(coupon_domain::grab::ports::Recorded::Won(ref r)) if *r == record),
        "{replayed:?}"
    );
}
