//! A SUCCESS survives a failover: a win is answered SUCCESS only once a
//! replica holds it (Redis `WAIT`), so promoting a replica that lagged loses
//! only decisions nobody was told about. A real primary and replica, started
//! by the test; the lag is a real one (the replica stopped, or cut off).

use std::collections::HashSet;

use coupon_adapters::redis::RedisLedger;
use coupon_domain::coupon::CouponDefinition;
use coupon_domain::grab::ports::{Decision, Recorded, StockLedger};
use coupon_domain::ids::{CouponId, RequestId, UserId};
use coupon_domain::reconcile::ports::DurableFacts;

use crate::support::{unique, Harness, Options, ReplicaSet, Server};

/// A harness on `server` alone, the IP limit off.
async fn harness_on(server: &Server) -> Harness {
    Harness::with(Options {
        redis_url: Some(server.url()),
        ..Options::without_ip_limit()
    })
    .await
}

/// A coupon of `stock` units on one shard, created.
async fn one_shard_coupon(h: &Harness, stock: u64) -> (CouponDefinition, CouponId) {
    let mut def = h.coupon(stock);
    def.shards = 1;
    let coupon = h.create(&def).await;
    (def, coupon)
}

fn on(pair: &ReplicaSet) -> Options {
    Options {
        redis_url: Some(pair.primary.url()),
        replica_acks: 1,
        ..Options::without_ip_limit()
    }
}

/// A sale on `pair` whose replicas stopped (SIGSTOP) after one win they hold;
/// `u2`'s press `r1` then wins on the primary alone and hears BUSY.
async fn a_win_the_replica_lacks(pair: &ReplicaSet) -> (Harness, CouponId) {
    let h = Harness::with(on(pair)).await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    assert_eq!(h.grab_until_decided(&coupon, "u1", "r1").await.code(), "SUCCESS");

    pair.stop_replicas();
    let lagging = h.grab(&coupon, "u2", "r1").await;
    assert_eq!((lagging.status, lagging.code()), (503, "BUSY"), "{}", lagging.body);
    (h, coupon)
}

#[tokio::test]
async fn a_win_is_success_only_once_a_replica_holds_it() {
    let pair = ReplicaSet::start();
    let (h, coupon) = a_win_the_replica_lacks(&pair).await;
    assert_eq!(h.metrics.total("GrantNotReplicated"), 1);
    assert_eq!(h.receive().await.len(), 1, "nothing sent for the unacknowledged win");

    replayed_once_the_replicas_catch_up(&pair, &h, &coupon).await;
}

/// The replicas resume; `u2`'s press `r1`, retried on `h`, replays its win.
async fn replayed_once_the_replicas_catch_up(pair: &ReplicaSet, h: &Harness, coupon: &CouponId) {
    pair.resume_replicas();
    let retry = h.grab_until_decided(coupon, "u2", "r1").await;
    assert_eq!(retry.code(), "SUCCESS", "{}", retry.body);
    assert_eq!(retry.body["data"]["replayed"], true);
}

/// The retry that Valkey (and Redis from 7.2) answered SUCCESS: a win made
/// while the replica lagged answers BUSY; the user's retry reaches another
/// instance (after a Lambda timeout always a fresh process, so a fresh
/// connection), whose admission finds the stored win and writes nothing.
/// There a `WAIT` counts only the connection's own writes, so it answered
/// at once, the grant was sent and the user told SUCCESS for a win no
/// replica held. The wait now covers a write of its own made after the win.
#[tokio::test]
async fn a_retry_on_a_fresh_instance_is_success_only_once_a_replica_holds_the_win() {
    let pair = ReplicaSet::start();
    let (h, coupon) = a_win_the_replica_lacks(&pair).await;

    let fresh = Harness::with(Options {
        key_prefix: Some(h.config.redis.key_prefix.clone()),
        queue_url: Some(h.queue_url.clone()),
        ..on(&pair)
    })
    .await;
    fresh.own.lock().unwrap().insert(coupon.clone());
    let retry = fresh.grab(&coupon, "u2", "r1").await;
    assert_eq!(
        (retry.status, retry.code()),
        (503, "BUSY"),
        "the replica still lags: {}",
        retry.body
    );
    assert_eq!(fresh.metrics.total("GrantNotReplicated"), 1);
    assert_eq!(h.receive().await.len(), 1, "nothing sent for the unacknowledged win");

    replayed_once_the_replicas_catch_up(&pair, &fresh, &coupon).await;
}

/// The sequence that used to turn a SUCCESS into a REJECTED: the replica
/// stopped receiving, the primary told a winner SUCCESS, the primary died
/// and the replica took over without that win; the winner's retry won a
/// second unit under the same ordinal, and the issuer rejected one. After
/// the failover wins are still acknowledged (the other replica follows the
/// new primary), so the sale sells its last unit at once.
#[tokio::test]
async fn a_failover_to_a_replica_that_lagged_loses_no_success() {
    let pair = ReplicaSet::start();
    let h = Harness::with(on(&pair)).await;
    let def = h.coupon(3);
    let coupon = h.create(&def).await;
    let mut told = Vec::new();
    for user in ["u1", "u2"] {
        let resp = h.grab_until_decided(&coupon, user, "r1").await;
        assert_eq!(resp.code(), "SUCCESS");
        told.push(resp.grant_id().unwrap());
    }

    pair.partition();
    let cut_off = h.grab(&coupon, "u3", "r1").await;
    assert_eq!(cut_off.code(), "BUSY", "no replica holds it: not a SUCCESS");
    pair.fail_over();

    // The functions reconnect to the new primary (ElastiCache moves the
    // endpoint); same keys, same queue.
    let prefix = h.config.redis.key_prefix.clone();
    let after = Harness::with(Options {
        redis_url: Some(pair.replica.url()),
        key_prefix: Some(prefix),
        queue_url: Some(h.queue_url.clone()),
        // As deployed: the second replica follows the new primary and
        // acknowledges, so the sale goes on without waiting for a
        // replacement node.
        replica_acks: 1,
        ..Options::without_ip_limit()
    })
    .await;
    after.own.lock().unwrap().insert(coupon.clone());
    for (user, request) in [("u3", "r1"), ("u4", "r1"), ("u1", "r1")] {
        let resp = after.grab_until_decided(&coupon, user, request).await;
        if resp.code() == "SUCCESS" {
            told.push(resp.grant_id().unwrap());
        }
    }
    after.pump().await;

    let told: HashSet<String> = told.into_iter().collect();
    assert_eq!(told.len(), 3, "exactly the stock was told SUCCESS, each grant once");
    let mut issued = HashSet::new();
    for user in ["u1", "u2", "u3", "u4"] {
        for c in after.coupons_of(user).await {
            issued.insert(c.grant_id.to_string());
        }
    }
    assert_eq!(issued, told, "every SUCCESS is the coupon its user holds");
    assert!(
        after.facts().rejections(&coupon).await.unwrap().is_empty(),
        "no SUCCESS turned REJECTED"
    );
}

/// The acknowledgement vouches only for what the node that gives it holds:
/// a win decided on the primary, then the failover (the replica cut off
/// had not received it), then the grab's fence and `WAIT` reaching the
/// promoted replica (a reconnect, a cluster client following `MOVED`).
/// Acknowledging that node's writes would tell SUCCESS for a win whose
/// unit, and grant id, the new primary sells again; the fence finds no
/// such win there and vouches for nothing.
#[tokio::test]
async fn a_wait_that_reaches_a_promoted_replica_without_the_win_vouches_for_nothing() {
    let pair = ReplicaSet::start();
    let h = Harness::with(on(&pair)).await;
    let (_, coupon) = one_shard_coupon(&h, 3).await;
    let (user, request) = (UserId::parse("u1").unwrap(), RequestId::parse("r1").unwrap());

    pair.partition();
    let cut_off = h.grab(&coupon, "u1", "r1").await;
    assert_eq!(cut_off.code(), "BUSY", "no replica holds it: not a SUCCESS");
    let claim = crate::support::plain_claim(&coupon, &user, &request, 0);
    let old = RedisLedger::new(h.redis.clone());
    let Some(Recorded::Won(record)) = old.recorded(&claim).await.unwrap() else {
        panic!("the old primary holds the win");
    };
    let won = Decision::Won {
        user: &user,
        request: &request,
        record: &record,
    };
    pair.fail_over();

    let after = Harness::with(Options {
        redis_url: Some(pair.replica.url()),
        key_prefix: Some(h.config.redis.key_prefix.clone()),
        replica_acks: 1,
        ..Options::without_ip_limit()
    })
    .await;
    let new = RedisLedger::new(after.redis.clone());
    assert!(
        !new.replicated(&coupon, 0, won).await.unwrap(),
        "the promoted replica never had the win"
    );
    assert!(
        new.replicated(&coupon, 0, Decision::Writes).await.unwrap(),
        "its own writes are acknowledged (its replica follows it)"
    );
}

/// Risk places go back only for a loss a replica holds, and the fence
/// vouches for a loss only where the press's record is one: a record that
/// is not a loss (a win here; a borrow's reservation, from which the press
/// may still win) vouches for nothing, though a replica holds it.
#[tokio::test]
async fn a_replica_vouches_for_a_loss_only_where_the_record_is_a_loss() {
    use coupon_domain::grab::ports::{ClaimReply, ClaimStep};
    let pair = ReplicaSet::start();
    let h = Harness::with(on(&pair)).await;
    let (_, coupon) = one_shard_coupon(&h, 1).await;
    assert_eq!(h.grab(&coupon, "u1", "r1").await.code(), "SUCCESS");
    let ledger = RedisLedger::new(h.redis.clone());
    let (u1, r1) = (UserId::parse("u1").unwrap(), RequestId::parse("r1").unwrap());
    let (u2, r2) = (UserId::parse("u2").unwrap(), RequestId::parse("r2").unwrap());
    // u2's press was admitted before the last unit went; its commit is
    // refused, and the refusal stored.
    let refused = ledger
        .claim(&crate::support::plain_claim(&coupon, &u2, &r2, 0), ClaimStep::Commit)
        .await
        .unwrap();
    assert!(matches!(refused, ClaimReply::Rejected(_)), "{refused:?}");
    let lost = |user, request| Decision::Lost { user, request };
    assert!(
        ledger.replicated(&coupon, 0, lost(&u2, &r2)).await.unwrap(),
        "a stored loss"
    );
    assert!(
        !ledger.replicated(&coupon, 0, lost(&u1, &r1)).await.unwrap(),
        "a win is no loss"
    );
    assert!(
        ledger
            .replicated(
                &coupon,
                0,
                Decision::Reserved {
                    user: &u1,
                    request: &r1
                }
            )
            .await
            .unwrap(),
        "though a replica holds the record"
    );
}

/// Redis restarted from a snapshot older than its last writes (a node that
/// persists by RDB crashing; a restore): the grants minted after the
/// snapshot were issued, but the shard has forgotten them and would sell
/// their units again under the same grant ids (the winners told SUCCESS,
/// then REJECTED at the DynamoDB cap). Its sequence cannot say so once new
/// presses have moved it past the durable mark, so the restart itself
/// closes the shard: new users pressing before any reconciliation hear
/// BUSY. The reconciler then finds the shard behind its mark, drops it and
/// rebuilds it from DynamoDB: nothing issued is offered again, and new
/// grant ids never repeat issued ones.
#[tokio::test]
async fn a_shard_restarted_from_an_old_snapshot_never_sells_issued_units_again() {
    restarted_from_an_old_snapshot(&mut Server::standalone()).await;
}

/// The same on a primary with replicas: its snapshot then carries its
/// replication id, and the restarted primary names it as its second id,
/// exactly as a promoted replica names the primary it followed. Only the
/// process's age tells them apart (`lua/lib.lua`, `verified()`).
#[tokio::test]
async fn a_primary_with_replicas_restarted_from_its_own_snapshot_is_not_taken_for_a_promoted_replica() {
    let mut set = ReplicaSet::start();
    restarted_from_an_old_snapshot(&mut set.primary).await;
}

async fn restarted_from_an_old_snapshot(server: &mut Server) {
    let h = harness_on(server).await;
    let (def, coupon) = one_shard_coupon(&h, 6).await;
    for i in 0..2 {
        assert_eq!(h.grab(&coupon, &format!("before-{i}"), "r").await.code(), "SUCCESS");
    }
    assert!(server.cmd(&["SAVE"]).contains("OK"));
    let mut told = HashSet::new();
    for i in 0..3 {
        let won = h.grab(&coupon, &format!("after-{i}"), "r").await;
        assert_eq!(won.code(), "SUCCESS");
        told.insert(won.body["data"]["grantId"].as_str().unwrap().to_owned());
    }
    h.pump().await;
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 5);

    server.restart_from_snapshot();
    h.wait_for_redis().await;
    for i in 0..3 {
        let early = h.grab(&coupon, &format!("early-{i}"), "r").await;
        assert_eq!((early.status, early.code()), (503, "BUSY"), "{}", early.body);
    }
    // Judged once sends decided before the restart have landed: behind its
    // mark, so dropped and rebuilt in the same pass.
    let waiting = h.reconcile_windowed(&def, 3_000).await;
    assert_eq!(
        (
            waiting.shards_rolled_back,
            waiting.shards_rebuilt,
            waiting.shards_waiting
        ),
        (0, 0, 1),
        "{waiting:?}"
    );
    h.clock.advance(3_000);
    let report = h.reconcile_windowed(&def, 3_000).await;
    assert_eq!(
        (report.shards_rolled_back, report.shards_rebuilt, report.restored),
        (1, 1, 1),
        "{report:?}"
    );

    // The sale goes on: one unit is left, and the users the snapshot forgot
    // still hold theirs.
    for i in 0..3 {
        assert_eq!(
            h.grab(&coupon, &format!("after-{i}"), "again").await.code(),
            "ALREADY_CLAIMED"
        );
    }
    let mut late = Vec::new();
    for i in 0..4 {
        let who = if i < 3 {
            format!("early-{i}")
        } else {
            format!("late-{i}")
        };
        let pressed = h.grab(&coupon, &who, "again").await;
        if pressed.code() == "SUCCESS" {
            late.push(pressed.body["data"]["grantId"].as_str().unwrap().to_owned());
        }
    }
    assert_eq!(late.len(), 1, "exactly the one unit nobody holds");
    assert!(!told.contains(&late[0]), "a new grant id, not an issued one");
    h.pump().await;
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 6);
    assert!(
        h.facts().rejections(&coupon).await.unwrap().is_empty(),
        "no SUCCESS turned REJECTED"
    );
    assert_eq!(h.reconcile(&def).await.drift, 0);
}

/// A snapshot from before a loss holds a win whose claim was never written
/// (its caller died after the script, before the claim): the loss took it,
/// the rebuild never heard of it and sold its unit again. The server then
/// restarts from that snapshot, and the win's record comes back with it.
/// The retry of that press replayed it (before the check, and after the
/// drop, which cannot find a request's key), and its grant went out beside
/// the unit's new holder: a SUCCESS the stock did not have. A record is now
/// honoured only by the state that wrote it, and a win only once that
/// state is verified (lua/lib.lua, own_record()): BUSY until the check,
/// then decided afresh.
#[tokio::test]
async fn a_win_never_claimed_in_a_snapshot_from_before_a_loss_is_never_replayed_once_its_unit_sold_again() {
    use coupon_domain::clock::Clock;
    use coupon_domain::grab::ports::{ClaimReply, ClaimStep};

    let mut server = Server::standalone();
    let h = harness_on(&server).await;
    let (def, coupon) = one_shard_coupon(&h, 2).await;
    let (user, request) = (UserId::parse("died").unwrap(), RequestId::parse("r1").unwrap());
    let claim = crate::support::plain_claim(&coupon, &user, &request, h.clock.now_ms());
    let won = h.stock_ledger().claim(&claim, ClaimStep::Whole).await.unwrap();
    assert!(matches!(won, ClaimReply::Won(_)), "{won:?}");
    assert!(server.cmd(&["SAVE"]).contains("OK"));

    h.flush_redis().await;
    let rebuilt = h.reconcile(&def).await;
    assert_eq!((rebuilt.shards_rebuilt, rebuilt.restored), (1, 2), "{rebuilt:?}");
    for i in 0..2 {
        let pressed = h.grab(&coupon, &format!("new-{i}"), "r").await;
        assert_eq!(pressed.code(), "SUCCESS", "{}", pressed.body);
    }
    h.pump().await;

    server.restart_from_snapshot();
    h.wait_for_redis().await;
    let early = h.grab(&coupon, "died", "r1").await;
    assert_eq!((early.status, early.code()), (503, "BUSY"), "{}", early.body);
    // Every unit is issued, so nothing can be on its way: the restarted
    // shard is dropped and rebuilt at once, empty.
    let report = h.reconcile_windowed(&def, 3_000).await;
    assert_eq!((report.shards_rebuilt, report.restored), (1, 0), "{report:?}");
    let retry = h.grab(&coupon, "died", "r1").await;
    assert_eq!(retry.code(), "SOLD_OUT", "decided afresh: {}", retry.body);
    h.pump().await;
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 2);
    assert!(h.coupons_of("died").await.is_empty());
    assert!(h.facts().rejections(&coupon).await.unwrap().is_empty());
    assert_eq!(h.reconcile(&def).await.drift, 0);
}

/// A donor's take replays, for a retry of the borrow, the unit it gave the
/// claim. On a donor restarted since it was verified that replay waited
/// for nothing: the retry settled the unit on the home while the restart
/// check dropped the donor (dry), and a rebuild that had read the home's
/// borrowed list before the settle landed counted the unit nowhere and sold
/// it again. The take replays only from state that may sell, as a win
/// does: Missing (the borrow waits, BUSY) until the check.
#[tokio::test]
async fn a_take_on_a_restarted_donor_replays_its_unit_only_once_the_donor_is_checked() {
    use coupon_domain::clock::Clock;
    use coupon_domain::grab::ports::TakeReply;

    let mut server = Server::standalone();
    let h = harness_on(&server).await;
    let (_, coupon) = one_shard_coupon(&h, 2).await;
    let (user, request) = (UserId::parse("borrower").unwrap(), RequestId::parse("r1").unwrap());
    let claim = crate::support::plain_claim(&coupon, &user, &request, h.clock.now_ms());
    let ledger = h.stock_ledger();
    let TakeReply::Won(took) = ledger.take(&claim, 0, 1).await.unwrap() else {
        panic!("the donor has stock");
    };
    assert!(matches!(ledger.take(&claim, 0, 1).await.unwrap(), TakeReply::Won(again) if again == took));
    assert!(server.cmd(&["SAVE"]).contains("OK"));

    server.restart_from_snapshot();
    h.wait_for_redis().await;
    let replayed = ledger.take(&claim, 0, 1).await.unwrap();
    assert!(matches!(replayed, TakeReply::Missing), "{replayed:?}");
}

/// A loss told to a press (its borrow found nothing: SOLD_OUT) stays the
/// answer to every retry of it, whatever happened to the shard since: here
/// a restart check dropped it, the rebuild started a new incarnation, and
/// stock was added after. A loss holds no unit and counts nothing, so it is
/// honoured whichever incarnation stored it (`own_record()` in
/// `lua/lib.lua`); a retry decided afresh would have won the added unit.
#[tokio::test]
async fn a_loss_told_before_a_restart_is_the_answer_to_every_retry_after_the_rebuild() {
    let mut server = Server::standalone();
    let h = harness_on(&server).await;
    let mut def = h.coupon(2);
    def.shards = 2;
    let coupon = h.create(&def).await;
    for shard in 0..2 {
        let winner = crate::support::homed_on(shard, 2, "w");
        assert_eq!(h.grab(&coupon, &winner, "r1").await.code(), "SUCCESS");
    }
    let loser = crate::support::homed_on(1, 2, "l");
    let lost = h.grab(&coupon, &loser, "r1").await;
    assert_eq!(lost.code(), "SOLD_OUT", "{}", lost.body);
    h.pump().await;
    assert!(server.cmd(&["SAVE"]).contains("OK"));

    server.restart_from_snapshot();
    h.wait_for_redis().await;
    // Every unit is issued: the restarted shards are dropped and rebuilt
    // at once.
    let report = h.reconcile_windowed(&def, 3_000).await;
    assert_eq!((report.shards_waiting, report.shards_rebuilt), (0, 2), "{report:?}");
    let path = format!("/admin/coupons/{}/stock", def.coupon_id);
    let added = h
        .admin_call_keyed("POST", &path, serde_json::json!({"add": 1}), "k-add")
        .await;
    assert_eq!(added.code(), "SUCCESS", "{}", added.body);
    h.clock.advance(10_000);

    let retry = h.grab(&coupon, &loser, "r1").await;
    assert_eq!(retry.code(), "SOLD_OUT", "the loss it was told: {}", retry.body);
    let again = h.grab(&coupon, &loser, "r2").await;
    assert_eq!(
        again.code(),
        "SUCCESS",
        "a new press wins the added unit: {}",
        again.body
    );
}

/// A restart that lost nothing (the snapshot taken after the last grant, an
/// AOF) looks the same from inside Redis: the shard waits for its check,
/// is found to hold every issued grant, and sells on from where it was,
/// nothing dropped or rebuilt.
#[tokio::test]
async fn a_shard_restarted_with_every_grant_sells_again_once_checked_and_loses_nothing() {
    let mut server = Server::standalone();
    let h = harness_on(&server).await;
    let (def, coupon) = one_shard_coupon(&h, 4).await;
    let mut told = HashSet::new();
    for i in 0..2 {
        let won = h.grab(&coupon, &format!("u{i}"), "r").await;
        told.insert(won.body["data"]["grantId"].as_str().unwrap().to_owned());
    }
    h.pump().await;
    assert!(server.cmd(&["SAVE"]).contains("OK"));
    server.restart_from_snapshot();
    h.wait_for_redis().await;

    assert_eq!(h.grab(&coupon, "u2", "r").await.code(), "BUSY");
    assert_eq!(h.reconcile_windowed(&def, 3_000).await.shards_waiting, 1);
    h.clock.advance(3_000);
    let report = h.reconcile_windowed(&def, 3_000).await;
    assert_eq!(
        (report.shards_waiting, report.shards_rolled_back, report.shards_rebuilt),
        (0, 0, 0),
        "{report:?}"
    );
    assert_eq!(h.grab(&coupon, "u0", "again").await.code(), "ALREADY_CLAIMED");
    for i in 2..4 {
        let won = h.grab(&coupon, &format!("u{i}"), "r").await;
        assert_eq!(won.code(), "SUCCESS", "{}", won.body);
        assert!(told.insert(won.body["data"]["grantId"].as_str().unwrap().to_owned()));
    }
    assert_eq!(h.grab(&coupon, "u9", "r").await.code(), "SOLD_OUT");
    h.pump().await;
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 4);
    assert!(h.facts().rejections(&coupon).await.unwrap().is_empty());
}

/// A retry of a press that won before a restart hears its win at once,
/// before the reconciler's check, when its grant's claim is durable (the
/// grant is on its way whatever the check decides; without this the retry
/// waited for the check, 5-6 s after a real restart, and kept a sale's
/// BUSY stretch open that long), while a new press waits for the check.
/// A win the snapshot holds but no claim names is still BUSY (the test
/// before this one).
#[tokio::test]
async fn a_retry_of_a_claimed_win_hears_it_at_once_after_a_restart_while_new_presses_wait_for_the_check() {
    let mut server = Server::standalone();
    let h = harness_on(&server).await;
    let (_, coupon) = one_shard_coupon(&h, 4).await;
    let won = h.grab(&coupon, "u0", "r").await;
    assert_eq!(won.code(), "SUCCESS", "{}", won.body);
    assert!(server.cmd(&["SAVE"]).contains("OK"));
    server.restart_from_snapshot();
    h.wait_for_redis().await;

    let retry = h.grab(&coupon, "u0", "r").await;
    assert_eq!(retry.code(), "SUCCESS", "{}", retry.body);
    assert_eq!(retry.body["data"]["grantId"], won.body["data"]["grantId"]);
    assert_eq!(h.grab(&coupon, "u1", "r").await.code(), "BUSY");
    h.pump().await;
    assert_eq!(h.coupons_of("u0").await.len(), 1);
    assert!(h.facts().rejections(&coupon).await.unwrap().is_empty());
}

/// After a restore, every coupon in Redis is suspect, the sold-out ones
/// too, and each would wait out the send window before it answered
/// anything but BUSY. A coupon whose every unit DynamoDB holds has no
/// grant on its way, so its one pass repairs it (SOLD_OUT again, its state
/// rebuilt from DynamoDB) with no wait, while a sale with units left still
/// waits for its own.
#[tokio::test]
async fn a_sold_out_sale_answers_again_one_pass_after_a_restore_while_a_selling_one_waits() {
    let mut server = Server::standalone();
    let h = harness_on(&server).await;
    let (sold, sold_id) = one_shard_coupon(&h, 2).await;
    let (selling, selling_id) = one_shard_coupon(&h, 4).await;
    for i in 0..2 {
        assert_eq!(h.grab(&sold_id, &format!("s{i}"), "r").await.code(), "SUCCESS");
    }
    assert_eq!(h.grab(&selling_id, "o0", "r").await.code(), "SUCCESS");
    h.pump().await;
    assert!(server.cmd(&["SAVE"]).contains("OK"));
    server.restart_from_snapshot();
    h.wait_for_redis().await;

    let repaired = h.reconcile_windowed(&sold, 3_000).await;
    let waiting = h.reconcile_windowed(&selling, 3_000).await;

    assert_eq!(
        (repaired.shards_waiting, repaired.shards_rebuilt, repaired.restored),
        (0, 1, 0),
        "{repaired:?}"
    );
    assert_eq!(waiting.shards_waiting, 1, "{waiting:?}");
    assert!(h.facts().barrier(&sold_id).await.unwrap().is_none(), "no wait opened");
    assert!(h.facts().barrier(&selling_id).await.unwrap().is_some());
    assert_eq!(h.grab(&sold_id, "late", "r").await.code(), "SOLD_OUT");
    assert_eq!(h.grab(&selling_id, "o1", "r").await.code(), "BUSY");
    h.pump().await;
    assert_eq!(h.facts().issued(&sold_id).await.unwrap(), 2);
    assert!(h.facts().rejections(&sold_id).await.unwrap().is_empty());
}

/// A grab on MemoryDB (the template's `Cache` `memorydb`) signs in as an ACL
/// user of its own (`REDIS_USERNAME`), its password read from Secrets
/// Manager at cold start, on a server whose default user is off: with the
/// user name it starts and its connection answers; without it (the secret
/// taken as the default user's token, as for ElastiCache) the start fails.
#[tokio::test]
async fn a_grab_signs_in_as_its_cache_user_with_the_password_from_secrets_manager() {
    let server = Server::standalone();
    let stack = crate::support::Stack::connect().await;
    let user = "coupon-grab-test";
    let password = format!("P{}", unique("pw").replace(|c: char| !c.is_ascii_alphanumeric(), ""));
    let secret = aws_sdk_secretsmanager::Client::new(&stack.sdk)
        .create_secret()
        .name(unique("cache-user"))
        .secret_string(&password)
        .send()
        .await
        .expect("a secret on the local endpoint");
    let arn = secret.arn().expect("the secret's ARN").to_owned();
    let acl = |args: &[&str]| {
        let out = server.cmd(args);
        assert!(out.trim() == "OK", "{args:?}: {out}");
    };
    acl(&[
        "ACL",
        "SETUSER",
        user,
        "on",
        &format!(">{password}"),
        "~*",
        "&*",
        "+@all",
    ]);
    acl(&["ACL", "SETUSER", "default", "off"]);
    let url = server.url();
    let config = |username: Option<&str>| {
        let mut pairs = vec![
            ("REDIS_URL", url.as_str()),
            ("REDIS_AUTH_SECRET_ARN", arn.as_str()),
            ("GRANT_QUEUE_URL", "http://127.0.0.1:9/000000000000/grants"),
            ("REPAIR_QUEUE_URL", "http://127.0.0.1:9/000000000000/repairs"),
            ("COUPONS_TABLE", "coupons"),
            ("CLAIMS_TABLE", "claims"),
        ];
        if let Some(username) = username {
            pairs.push(("REDIS_USERNAME", username));
        }
        grab::Config::read(&coupon_domain::config::Env::from_pairs(&pairs)).expect("a valid configuration")
    };
    let clients = grab::Clients::connect(&config(Some(user)))
        .await
        .unwrap_or_else(|e| panic!("the cache user did not sign in: {e}"));
    let mut conn = clients.redis.connection();
    let who: String = redis::cmd("ACL").arg("WHOAMI").query_async(&mut conn).await.unwrap();
    assert_eq!(who, user);
    assert!(
        grab::Clients::connect(&config(None)).await.is_err(),
        "the password taken as the default user's token signed in"
    );
}

/// A grab configured to wait for replicas (`REDIS_REPLICA_ACKS=1`, as the
/// template sets it for a node-based cluster) and pointed at a cache that
/// has no `WAIT` (ElastiCache Serverless) fails its cold start with a
/// message naming the setting, instead of answering BUSY to every win;
/// with the setting at 0 the same cache starts it.
#[tokio::test]
async fn a_grab_that_waits_for_replicas_refuses_to_start_on_a_cache_without_wait() {
    let server = Server::without(&["WAIT"]);
    let url = server.url();
    let config = |acks: &str| {
        let env = coupon_domain::config::Env::from_pairs(&[
            ("REDIS_URL", url.as_str()),
            ("REDIS_REPLICA_ACKS", acks),
            ("GRANT_QUEUE_URL", "http://127.0.0.1:9/000000000000/grants"),
            ("REPAIR_QUEUE_URL", "http://127.0.0.1:9/000000000000/repairs"),
            ("COUPONS_TABLE", "coupons"),
            ("CLAIMS_TABLE", "claims"),
        ]);
        grab::Config::read(&env).expect("a valid configuration")
    };
    let Err(refused) = grab::Clients::connect(&config("1")).await else {
        panic!("a grab waiting for replicas started on a server without WAIT");
    };
    let message = refused.to_string();
    assert!(message.starts_with("REDIS_REPLICA_ACKS is invalid"), "{message}");
    assert!(message.contains("WAIT"), "{message}");
    assert!(
        grab::Clients::connect(&config("0")).await.is_ok(),
        "a grab asking no replica acknowledgement starts on the same server"
    );
}
