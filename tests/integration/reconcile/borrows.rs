//! Borrows left open by callers that died (a grab that reserved a unit on
//! another shard and never settled it): the reconciler finishes each once,
//! never past a closed coupon or a shard that is still being rebuilt.

use coupon_domain::clock::Clock;
use coupon_domain::coupon::CouponDefinition;
use coupon_domain::grab::home_shard;
use coupon_domain::grab::ports::{BorrowEnd, Claim, ClaimReply, ClaimStep, StockLedger};
use coupon_domain::ids::{CouponId, RequestId, UserId};

use crate::support::Harness;

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

/// A press of `user` for `request` on its `home` shard, now.
fn press<'a>(h: &Harness, coupon: &'a CouponId, home: u32, user: &'a UserId, request: &'a RequestId) -> Claim<'a> {
    Claim {
        coupon,
        home_shard: home,
        user,
        level: 0,
        request,
        device: None,
        now_ms: h.clock.now_ms(),
    }
}

/// `user`'s request `r1` reserves a borrow on its empty `home` shard (the
/// grab script runs; the caller dies before anything else).
async fn reserve_borrow(h: &Harness, coupon: &CouponId, user: &UserId, home: u32) {
    let request = RequestId::parse("r1").unwrap();
    let claim = press(h, coupon, home, user, &request);
    assert!(matches!(
        h.stock_ledger().claim(&claim, ClaimStep::Whole).await.unwrap(),
        ClaimReply::Borrow { ordinal: 1, .. }
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
    let repair = coupon_adapters::redis::repair::RedisRepair::new(h.redis.clone());
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
    let claim = press(&h, &coupon, home, &user, &request);
    let ledger = h.stock_ledger();
    // No borrow has failed yet, so no shard is stamped sold out: the home
    // shard reserves the claim and sends the caller borrowing.
    let reply = ledger.claim(&claim, ClaimStep::Whole).await.unwrap();
    assert!(matches!(reply, ClaimReply::Borrow { ordinal: 1, .. }), "{reply:?}");
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

/// A reservation's record lives until its borrow is settled, not only the
/// outcome TTL: one that expired while the borrow stayed open left the
/// user's claim counted with nothing saying why (the explorer's seeds 1102
/// and 6046). Settled, the press's answer lives the outcome TTL.
#[tokio::test]
async fn a_borrows_reservation_record_lives_until_the_borrow_is_settled() {
    let h = Harness::new().await;
    let user_name = "patient-borrower";
    let (def, coupon) = borrow_reserved_on_an_empty_home(&h, user_name).await;
    let user = UserId::parse(user_name).unwrap();
    let request = RequestId::parse("r1").unwrap();
    let key = h
        .redis
        .keys()
        .shard(&coupon, home_shard(&user, def.shards))
        .request(&user, &request);
    let mut conn = h.redis.connection();
    let day_ms = 86_400_000;
    let reserved: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await.unwrap();
    assert!(reserved > 29 * day_ms, "the reservation lives 30 days: {reserved}");
    assert_eq!(h.grab(&coupon, user_name, "r1").await.code(), "SUCCESS");
    let settled: i64 = redis::cmd("PTTL").arg(&key).query_async(&mut conn).await.unwrap();
    assert!(
        settled > 0 && settled <= day_ms,
        "the answer lives the outcome TTL: {settled}"
    );
}

/// A borrow whose record expired after a donor gave it a unit (its caller
/// stalled past the outcome TTL between the take and the settle): the
/// settle kept the claim counted but recorded nothing, so the retry was
/// decided afresh (the next ordinals, then ALREADY_CLAIMED) while the
/// donor's grant, re-driven from its outbox, reached the user from the
/// request that heard the refusal (the explorer's seed 1102). The settle
/// now records the grant under the request id and lists it: the retry
/// replays it.
#[tokio::test]
async fn a_borrow_whose_record_expired_after_a_donors_take_replays_the_donors_grant() {
    use coupon_domain::grab::ports::TakeReply;
    use coupon_domain::reconcile::ports::StockRepair;
    let h = Harness::new().await;
    let user_name = "slow-borrower";
    let (def, coupon) = borrow_reserved_on_an_empty_home(&h, user_name).await;
    let user = UserId::parse(user_name).unwrap();
    let home = home_shard(&user, def.shards);
    let request = RequestId::parse("r1").unwrap();
    let claim = press(&h, &coupon, home, &user, &request);
    let ledger = h.stock_ledger();
    let TakeReply::Won(rec) = ledger.take(&claim, 1 - home, 1).await.unwrap() else {
        panic!("the donor has two units");
    };
    // The outcome TTL passes before the settle.
    let mut conn = h.redis.connection();
    let req_key = h.redis.keys().shard(&coupon, home).request(&user, &request);
    let _: () = redis::cmd("DEL").arg(&req_key).query_async(&mut conn).await.unwrap();

    assert_eq!(
        ledger.settle(&claim, BorrowEnd::Took(&rec)).await.unwrap(),
        None,
        "GONE"
    );
    let users_key = h.redis.keys().shard(&coupon, home).users();
    let counted: Option<i64> = redis::cmd("HGET")
        .arg(&users_key)
        .arg(user_name)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(counted, Some(1), "the claim counted once, at the reservation");
    let repair = coupon_adapters::redis::repair::RedisRepair::new(h.redis.clone());
    let listed = repair.borrowed(&coupon, home).await.unwrap();
    assert_eq!(
        listed.iter().map(|g| g.grant_id.to_string()).collect::<Vec<_>>(),
        vec![rec.grant_id.to_string()],
        "listed as the user's borrowed grant"
    );

    let retry = h.grab(&coupon, user_name, "r1").await;
    assert_eq!(
        (retry.code(), retry.grant_id()),
        ("SUCCESS", Some(rec.grant_id.to_string())),
        "{}",
        retry.body
    );
    h.pump().await;
    let held = h.coupons_of(user_name).await;
    assert_eq!(held.len(), 1, "{held:?}");
}

/// A donor's grant settled on the home shard is listed there, with its
/// user and request, until the reconciler finds it issued: if the donor
/// loses its state meanwhile, the list is what keeps its rebuild from
/// selling the unit again (the explorer's seed 24).
#[tokio::test]
async fn a_donors_grant_settled_at_home_is_listed_there_until_issued() {
    use coupon_domain::reconcile::ports::StockRepair;
    let h = Harness::new().await;
    let user_name = "lister";
    let (def, coupon) = borrow_reserved_on_an_empty_home(&h, user_name).await;
    let home = home_shard(&UserId::parse(user_name).unwrap(), 2);
    let won = h.grab(&coupon, user_name, "r1").await;
    assert_eq!(won.code(), "SUCCESS", "{}", won.body);
    let repair = coupon_adapters::redis::repair::RedisRepair::new(h.redis.clone());
    let listed = repair.borrowed(&coupon, home).await.unwrap();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].grant_id.to_string(), won.grant_id().unwrap());
    assert_eq!(
        (
            listed[0].user_id.as_str(),
            listed[0].request_id.as_str(),
            listed[0].shard
        ),
        (user_name, "r1", 1 - home)
    );
    assert_eq!(h.pump().await, 1);
    h.reconcile(&def).await;
    assert!(
        repair.borrowed(&coupon, home).await.unwrap().is_empty(),
        "forgotten once issued"
    );
}
