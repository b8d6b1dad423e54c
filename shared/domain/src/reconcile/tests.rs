//! The reconciler against in-memory ports: what it re-drives, trims,
//! rebuilds and restores, and what it leaves alone.

use std::collections::HashMap;
use std::sync::Arc;

use super::*;
use crate::clock::ManualClock;
use crate::coupon::CouponStatus;
use crate::ids::{CouponId, RequestId};
use crate::metrics::RecordingMetrics;
use crate::reconcile::ports::OutboxEntry;
use crate::testing::{FakeRedrive, MemoryFacts, MemoryShards, ScriptedLedger};

const NOW: i64 = 1_000_000;
const GRACE: i64 = 30_000;
const SEND_WINDOW: i64 = 3_000;

struct World {
    facts: Arc<MemoryFacts>,
    shards: Arc<MemoryShards>,
    queue: Arc<FakeRedrive>,
    metrics: Arc<RecordingMetrics>,
    reconciler: Reconciler,
}

fn world() -> World {
    world_with(ScriptedLedger::default())
}

fn world_with(ledger: ScriptedLedger) -> World {
    world_windowed(ledger, 0)
}

/// A world whose reconciler waits `send_window` ms for sends decided before
/// a loss or a restart (the others: none, so one pass rebuilds).
fn world_windowed(ledger: ScriptedLedger, send_window: i64) -> World {
    let facts = Arc::new(MemoryFacts::default());
    let shards = Arc::new(MemoryShards::default());
    let queue = Arc::new(FakeRedrive::feeding(facts.clone()));
    let metrics = Arc::new(RecordingMetrics::default());
    let reconciler = Reconciler::new(
        ReconcilePorts {
            facts: facts.clone(),
            repair: shards.clone(),
            ledger: Arc::new(ledger),
            redrive: queue.clone(),
            blacklist: facts.clone(),
            flags: shards.clone(),
            live: shards.clone(),
            clock: Arc::new(ManualClock::new(NOW)),
            metrics: metrics.clone(),
        },
        ReconcileSettings {
            grace_ms: GRACE,
            retention_ms: 86_400_000,
            backlog_ms: 600_000,
            send_window_ms: send_window,
        },
    );
    World {
        facts,
        shards,
        queue,
        metrics,
        reconciler,
    }
}

fn coupon(total: u64, shards: u32) -> CouponDefinition {
    CouponDefinition {
        coupon_id: CouponId::parse("c1").unwrap(),
        name: "20 off".into(),
        amount: 2_000,
        total_stock: total,
        per_user_limit: 1,
        min_member_level: 0,
        grab_start_ms: 0,
        grab_end_ms: NOW + 3_600_000,
        valid_from_ms: 0,
        valid_until_ms: NOW + 86_400_000,
        shards,
        rate_per_sec: 0,
        burst: 0,
        status: CouponStatus::Online,
    }
}

fn grant(seq: u64, shard: u32, user: &str, at: i64) -> Grant {
    Grant {
        grant_id: format!("c1-{shard}-{seq}"),
        coupon_id: CouponId::parse("c1").unwrap(),
        user_id: UserId::parse(user).unwrap(),
        ordinal: 1,
        request_id: RequestId::parse(&format!("r-{user}")).unwrap(),
        shard,
        granted_at_ms: at,
    }
}

#[tokio::test]
async fn a_stale_pending_grant_is_redriven_and_a_confirmed_one_trimmed() {
    let w = world();
    let def = coupon(10, 1);
    w.shards.put(&def.coupon_id, 0, 7);
    let (done, stale, young) = (
        grant(1, 0, "u1", NOW - 60_000),
        grant(2, 0, "u2", NOW - 60_000),
        grant(3, 0, "u3", NOW - 1_000),
    );
    for g in [&done, &stale, &young] {
        w.shards.push(g);
    }
    w.facts.issue(&done);

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!(
        *w.queue.sent.lock().unwrap(),
        vec![stale],
        "only the stale, unconfirmed grant"
    );
    assert_eq!((r.trimmed, r.pending, r.redriven), (1, 2, 1));
    assert_eq!(w.shards.state(&def.coupon_id, 0).unwrap().outbox.len(), 2);
    assert_eq!((r.remaining, r.issued, r.drift), (7, 1, 0));
}

#[tokio::test]
async fn a_lost_shard_is_rebuilt_with_only_what_nothing_accounts_for() {
    let w = world();
    let def = coupon(10, 2);
    // Shard 0 survives with 3 units; shard 1 is gone. 2 coupons issued, one
    // grant still pending on shard 0.
    w.shards.put(&def.coupon_id, 0, 3);
    w.shards.push(&grant(1, 0, "u1", NOW - 1_000));
    w.facts.issue(&grant(1, 1, "u9", NOW - 90_000));
    w.facts.issue(&grant(2, 1, "u8", NOW - 90_000));

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    let rebuilt = w.shards.state(&def.coupon_id, 1).expect("rebuilt");
    assert_eq!(rebuilt.stock, 10 - 3 - 2 - 1);
    assert_eq!((r.shards_rebuilt, r.restored, r.drift), (1, 4, 0));
    assert_eq!(
        w.shards.state(&def.coupon_id, 0).unwrap().epochs,
        1,
        "every shard's sold-out stamp is void"
    );
    assert_eq!(*w.facts.rebuilds.lock().unwrap(), vec![(def.coupon_id.clone(), 4)]);
    let holders: u32 = rebuilt.users.iter().map(|(_, n)| n).sum();
    let homed_on_1 = ["u9", "u8"]
        .iter()
        .filter(|u| crate::grab::home_shard(&UserId::parse(u).unwrap(), 2) == 1)
        .count() as u32;
    assert_eq!(holders, homed_on_1, "holders are restored on their home shard only");
}

#[tokio::test]
async fn a_shard_lost_after_the_window_is_reported_not_rebuilt() {
    let w = world();
    let mut def = coupon(5, 1);
    def.grab_end_ms = NOW - 1;
    w.facts.issue(&grant(1, 0, "u1", NOW - 90_000));

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert!(w.shards.state(&def.coupon_id, 0).is_none());
    assert_eq!(r.shards_rebuilt, 0);
    assert!(r.causes.iter().any(|c| c.contains("not rebuilt")));
    assert_eq!(r.drift, 4, "units nobody holds any more are reported as drift");
}

#[tokio::test]
async fn lost_blacklist_flags_come_back_but_never_one_an_operator_lifted() {
    let w = world();
    let (kept, lifted) = (UserId::parse("bad").unwrap(), UserId::parse("forgiven").unwrap());
    w.facts.blacklist.lock().unwrap().extend([kept.clone(), lifted.clone()]);
    w.facts.lift_after_restore.lock().unwrap().insert(lifted.clone());

    let report = w.reconciler.run().await.unwrap();

    assert_eq!(report.blacklist_restored, 1);
    let flags = w.shards.flags.lock().unwrap();
    assert!(flags.contains(&kept));
    assert!(!flags.contains(&lifted), "the lifted user's flag was cleared again");
}

#[tokio::test]
async fn a_run_visits_live_coupons_and_skips_those_past_retention() {
    let w = world();
    let live = coupon(1, 1);
    let mut old = coupon(1, 1);
    old.coupon_id = CouponId::parse("old").unwrap();
    old.grab_end_ms = NOW - 2 * 86_400_000;
    w.shards.put(&live.coupon_id, 0, 1);
    w.facts.definitions.lock().unwrap().extend([live.clone(), old]);

    let report = w.reconciler.run().await.unwrap();

    assert_eq!(report.coupons.len(), 1);
    assert!(find(&report, &live.coupon_id).is_some());
    assert!(report.is_clean());
    // The dashboard's remaining stock, per live coupon, every run.
    assert_eq!(w.metrics.total_for("StockRemaining", "c1"), 1);
    assert_eq!(w.metrics.total_for("StockRemaining", "old"), 0);
}

/// A grab that takes a unit after the pass has read the outboxes: reading
/// the surviving stock first counts it (as stock); reading it last, as the
/// pass once did, counted it nowhere, and the rebuild sold it again.
#[tokio::test]
async fn a_unit_granted_while_the_pass_reads_is_never_restored_a_second_time() {
    let w = world();
    let def = coupon(10, 2);
    w.shards.put(&def.coupon_id, 0, 5); // shard 1 is lost
    let late = grant(1, 0, "late", NOW);
    let moved = late.clone();
    *w.shards.after_outbox_read.lock().unwrap() = Some(Box::new(move |shards| {
        let s = shards.get_mut(&(moved.coupon_id.clone(), 0)).unwrap();
        s.stock -= 1;
        s.outbox.push(OutboxEntry { seq: 1, grant: moved });
    }));

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    let shard0 = w.shards.state(&def.coupon_id, 0).unwrap().stock as u64;
    assert_eq!(shard0, 4);
    let late_grant = 1;
    let accounted = r.restored + shard0 + late_grant;
    assert!(
        accounted <= def.total_stock,
        "restored {} + left {shard0} + the late grant must fit the stock",
        r.restored
    );
}

#[tokio::test]
async fn a_shard_behind_the_stored_definition_is_brought_up_to_it() {
    let w = world();
    let mut def = coupon(10, 2);
    def.status = CouponStatus::Offline;
    w.facts.definitions.lock().unwrap().push(def.clone());
    w.facts.versions.lock().unwrap().insert(def.coupon_id.clone(), 3);
    w.shards.put(&def.coupon_id, 0, 5);
    w.shards.put(&def.coupon_id, 1, 5);

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    for shard in 0..2 {
        let s = w.shards.state(&def.coupon_id, shard).unwrap();
        assert_eq!((s.version, s.status), (3, Some(CouponStatus::Offline)), "shard {shard}");
        assert_eq!(s.epochs, 1, "two phases: every epoch after every shard");
    }
    assert!(r.causes.iter().any(|c| c.contains("behind the stored definition")));
    let again = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert!(
        again.causes.is_empty(),
        "a current shard is left alone: {:?}",
        again.causes
    );
}

#[tokio::test]
async fn a_lost_shard_comes_back_with_the_definition_stored_now() {
    let w = world();
    let def = coupon(10, 2);
    // The pass was handed the definition as it was when the run began; an
    // operator has since taken the coupon offline (version 2).
    let mut offline = def.clone();
    offline.status = CouponStatus::Offline;
    w.facts.definitions.lock().unwrap().push(offline);
    w.facts.versions.lock().unwrap().insert(def.coupon_id.clone(), 2);
    w.shards.put(&def.coupon_id, 0, 5);

    // The surviving shard is still at version 0: this pass heals it, and
    // the rebuild waits for a pass that reads one version throughout.
    let first = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert_eq!(first.shards_waiting, 1, "{first:?}");
    w.reconciler.coupon(&def, NOW).await.unwrap();

    let rebuilt = w.shards.state(&def.coupon_id, 1).expect("rebuilt");
    assert_eq!((rebuilt.version, rebuilt.status), (2, Some(CouponStatus::Offline)));
}

/// Redis lost a shard while grants it made were still in the queue: the
/// counters do not know those units yet, so reopening now would sell them
/// again (and the issuer would reject one of each pair told SUCCESS). The
/// rebuild waits for the coupon's barriers to come through every lane.
#[tokio::test]
async fn a_lost_shard_is_rebuilt_only_once_its_coupon_s_barriers_came_through_every_lane() {
    let w = world();
    let def = coupon(10, 1);
    *w.queue.hold_barriers.lock().unwrap() = true;

    let waiting = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert!(
        w.shards.state(&def.coupon_id, 0).is_none(),
        "still missing: grabs answer BUSY"
    );
    assert_eq!((waiting.shards_waiting, waiting.shards_rebuilt), (1, 0));
    assert_eq!(*w.queue.barriers_sent.lock().unwrap(), crate::barrier::LANES as usize);
    assert!(
        waiting.causes.iter().any(|c| c.contains("0 of 32 lanes")),
        "{:?}",
        waiting.causes
    );
    let again = w.reconciler.coupon(&def, NOW + 1_000).await.unwrap();
    assert_eq!((again.shards_waiting, again.shards_rebuilt), (1, 0));
    assert_eq!(
        *w.queue.barriers_sent.lock().unwrap(),
        crate::barrier::LANES as usize,
        "sent once per episode"
    );

    // The issuer took the three grants ahead of the barriers, then them.
    for seq in 1..=3 {
        w.facts.issue(&grant(seq, 0, &format!("q{seq}"), NOW - 1_000));
    }
    w.queue.deliver();
    let rebuilt = w.reconciler.coupon(&def, NOW + 2_000).await.unwrap();
    assert_eq!((rebuilt.shards_rebuilt, rebuilt.restored), (1, 7));
    assert!(w.facts.barriers.lock().unwrap().is_empty(), "the episode is closed");
}

/// The grant queue is shared by every coupon: another sale's backlog (the
/// queue never empty) must not keep this coupon's lost shard closed.
#[tokio::test]
async fn another_sale_s_backlog_does_not_hold_up_a_lost_shard_s_rebuild() {
    let w = world();
    let def = coupon(10, 1);
    *w.queue.in_flight.lock().unwrap() = Some(5_000);

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!((r.shards_rebuilt, r.shards_waiting, r.restored), (1, 0, 10), "{r:?}");
}

/// A shard lost after the wait for another one began may have sent grants
/// after that wait's barriers: it needs a wait of its own, and the first
/// shard waits with it.
#[tokio::test]
async fn a_shard_lost_during_a_wait_gets_a_wait_of_its_own() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(10, 2);
    w.shards.put(&def.coupon_id, 0, 5);
    *w.queue.hold_barriers.lock().unwrap() = true;
    let first = w.reconciler.coupon(&def, NOW).await.unwrap();
    let sent = w.reconciler.coupon(&def, NOW + SEND_WINDOW).await.unwrap();
    assert_eq!((first.shards_waiting, sent.shards_waiting), (1, 1));
    let opened = w.facts.barriers.lock().unwrap()[&def.coupon_id].clone();
    assert_eq!(
        (opened.shards.clone(), opened.sent_ms),
        (vec![1], Some(NOW + SEND_WINDOW))
    );

    // Shard 0 is lost too, and the first wait's barriers come through.
    w.shards.shards.lock().unwrap().remove(&(def.coupon_id.clone(), 0));
    w.queue.deliver();
    let later = NOW + SEND_WINDOW + 10;
    let waiting = w.reconciler.coupon(&def, later).await.unwrap();
    assert_eq!((waiting.shards_rebuilt, waiting.shards_waiting), (0, 2), "{waiting:?}");
    let reopened = w.facts.barriers.lock().unwrap()[&def.coupon_id].clone();
    assert_eq!(
        (reopened.shards, reopened.opened_ms, reopened.sent_ms),
        (vec![0, 1], later, None)
    );

    let done = w.reconciler.coupon(&def, later + SEND_WINDOW).await.unwrap();
    assert_eq!((done.shards_rebuilt, done.restored), (2, 10), "{done:?}");
}

/// A wait left open after its shards came back (a pass that died after
/// the rebuild) must not vouch for a later loss: a pass that finds every
/// shard whole closes it.
#[tokio::test]
async fn a_wait_is_closed_once_its_shards_are_whole_and_never_vouches_for_a_later_loss() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(10, 1);
    let mut stale = crate::barrier::BarrierRecord::open(NOW - 60_000, SEND_WINDOW, vec![0]);
    stale.sent_ms = Some(NOW - 50_000);
    stale.lanes_done = crate::barrier::LANES;
    w.facts.barriers.lock().unwrap().insert(def.coupon_id.clone(), stale);
    w.shards.put(&def.coupon_id, 0, 10);

    w.reconciler.coupon(&def, NOW).await.unwrap();
    assert!(w.facts.barriers.lock().unwrap().is_empty());

    w.shards.shards.lock().unwrap().clear();
    let r = w.reconciler.coupon(&def, NOW + 1).await.unwrap();
    assert_eq!((r.shards_rebuilt, r.shards_waiting), (0, 1), "{r:?}");
}

/// A grant waiting in a normal queue backlog is not sent a second time every
/// pass; once the queue is empty, one that DynamoDB still lacks was never
/// sent, and goes at once.
#[tokio::test]
async fn a_pending_grant_is_re_driven_at_once_only_when_the_queue_is_empty() {
    let w = world();
    let def = coupon(10, 1);
    w.shards.put(&def.coupon_id, 0, 9);
    w.shards.push(&grant(1, 0, "waiting", NOW - 60_000));

    *w.queue.in_flight.lock().unwrap() = Some(40);
    let backlog = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert_eq!((backlog.pending, backlog.redriven), (1, 0), "it may be in the backlog");

    *w.queue.in_flight.lock().unwrap() = Some(0);
    let empty = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert_eq!((empty.pending, empty.redriven), (1, 1), "never sent: re-driven");

    *w.queue.in_flight.lock().unwrap() = Some(40);
    let old = w.reconciler.coupon(&def, NOW + 600_000).await.unwrap();
    assert_eq!(old.redriven, 1, "past the backlog horizon it goes anyway");
}

/// A grab that found the coupon's Redis state gone asks for a repair: the
/// named coupon is rebuilt at once, an unknown one is skipped, and a
/// rebuild that must wait for the queue says so (the request is retried).
#[tokio::test]
async fn a_repair_request_rebuilds_the_named_coupon_or_says_it_waits() {
    let w = world();
    let def = coupon(10, 1);
    w.facts.definitions.lock().unwrap().push(def.clone());
    let unknown = CouponId::parse("never-created").unwrap();

    *w.queue.hold_barriers.lock().unwrap() = true;
    let waiting = w
        .reconciler
        .repair(&[def.coupon_id.clone(), unknown.clone()])
        .await
        .unwrap();
    assert_eq!(waiting.coupons.len(), 1, "the unknown coupon is skipped");
    assert_eq!(waiting.coupons[0].shards_waiting, 1);
    assert!(w.shards.state(&def.coupon_id, 0).is_none());

    w.queue.deliver();
    let repaired = w
        .reconciler
        .repair(&[def.coupon_id.clone(), def.coupon_id.clone()])
        .await
        .unwrap();
    assert_eq!(repaired.coupons.len(), 1, "a coupon named twice is repaired once");
    assert_eq!(
        (repaired.coupons[0].shards_rebuilt, repaired.coupons[0].shards_waiting),
        (1, 0)
    );
    assert_eq!(w.shards.state(&def.coupon_id, 0).unwrap().stock, 10);
}

/// Redis came back from an old snapshot: shard 0 thinks it minted 2 grants
/// and has 3 units left, but DynamoDB issued 4 from it (high-water mark 4).
/// Left alone it would sell 2 issued units again; the pass drops it and
/// rebuilds it from DynamoDB. Shard 1, not behind, is left alone.
#[tokio::test]
async fn a_shard_rolled_back_behind_issued_grants_is_dropped_and_rebuilt() {
    let w = world();
    let def = coupon(10, 2);
    w.shards.put(&def.coupon_id, 0, 3);
    w.shards
        .shards
        .lock()
        .unwrap()
        .get_mut(&(def.coupon_id.clone(), 0))
        .unwrap()
        .seq = 2;
    w.shards.put(&def.coupon_id, 1, 5);
    for seq in 1..=4 {
        w.facts.issue(&grant(seq, 0, &format!("u{seq}"), NOW - 90_000));
    }
    w.facts
        .high_water
        .lock()
        .unwrap()
        .insert(def.coupon_id.clone(), HashMap::from([(0, 4), (1, 0)]));

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!((r.shards_rolled_back, r.shards_rebuilt), (1, 1), "{r:?}");
    let rebuilt = w.shards.state(&def.coupon_id, 0).expect("rebuilt");
    assert_eq!(
        rebuilt.stock,
        10 - 4 - 5,
        "only what DynamoDB and shard 1 do not account for"
    );
    assert!(rebuilt.seq > 4, "new grant ids never repeat issued ones");
    assert_eq!(w.shards.state(&def.coupon_id, 1).unwrap().stock, 5);
    assert_eq!(r.drift, 0, "{r:?}");
    assert!(r.causes.iter().any(|c| c.contains("rolled back")), "{:?}", r.causes);

    // The next pass finds the rebuilt shard ahead of the mark: nothing to do.
    let again = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert_eq!((again.shards_rolled_back, again.shards_rebuilt), (0, 0));
}

/// Grants 1..=`seq` of shard 0 issued (to users u1, u2, ...), and the
/// shard's durable mark at `seq`, as the issuer leaves them.
fn issued_on_shard_0(w: &World, def: &CouponDefinition, seq: u64) {
    for n in 1..=seq {
        w.facts.issue(&grant(n, 0, &format!("u{n}"), NOW - 90_000));
    }
    w.facts
        .high_water
        .lock()
        .unwrap()
        .insert(def.coupon_id.clone(), HashMap::from([(0, seq)]));
}

/// A restarted shard whose sequence has not yet fallen behind its mark
/// (the issuer is behind, or traffic moved it past) may still have rolled
/// back: it is judged only once the mark is final (the send window over,
/// the queue empty), and then by that comparison.
fn restarted(w: &World, def: &CouponDefinition, shard: u32, seq: u64) {
    let mut shards = w.shards.shards.lock().unwrap();
    let s = shards.get_mut(&(def.coupon_id.clone(), shard)).unwrap();
    s.seq = seq;
    s.restarted = Some(None);
}

#[tokio::test]
async fn a_restarted_shard_is_judged_only_once_its_coupon_s_barriers_came_through_every_lane() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(10, 2);
    w.shards.put(&def.coupon_id, 0, 5);
    w.shards.put(&def.coupon_id, 1, 5);
    restarted(&w, &def, 0, 2);
    issued_on_shard_0(&w, &def, 2);

    let first = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert_eq!((first.shards_waiting, first.shards_rolled_back), (1, 0), "{first:?}");
    assert!(
        first
            .causes
            .iter()
            .any(|c| c.contains("sends decided before the fault")),
        "{:?}",
        first.causes
    );

    // The window is over, but a grant is still on its way ahead of the
    // barriers: it may be one the shard forgot, and raise the mark.
    *w.queue.hold_barriers.lock().unwrap() = true;
    let later = NOW + SEND_WINDOW;
    let waiting = w.reconciler.coupon(&def, later).await.unwrap();
    assert_eq!(
        (waiting.shards_waiting, waiting.shards_rolled_back),
        (1, 0),
        "{waiting:?}"
    );
    assert!(w.shards.state(&def.coupon_id, 0).unwrap().restarted.is_some());

    // It was one the snapshot lacked: the mark moves past the shard.
    w.facts.issue(&grant(3, 0, "u3", NOW - 1_000));
    w.facts
        .high_water
        .lock()
        .unwrap()
        .insert(def.coupon_id.clone(), HashMap::from([(0, 3)]));
    w.queue.deliver();
    let judged = w.reconciler.coupon(&def, later).await.unwrap();
    assert_eq!(
        (judged.shards_waiting, judged.shards_rolled_back, judged.shards_rebuilt),
        (0, 1, 1),
        "{judged:?}"
    );
    let rebuilt = w.shards.state(&def.coupon_id, 0).unwrap();
    assert_eq!(rebuilt.stock, 10 - 3 - 5, "{judged:?}");
    assert!(rebuilt.seq > 3 && rebuilt.restarted.is_none());
}

#[tokio::test]
async fn a_restarted_shard_that_holds_every_issued_grant_sells_again_unchanged() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(10, 1);
    w.shards.put(&def.coupon_id, 0, 7);
    restarted(&w, &def, 0, 3);
    issued_on_shard_0(&w, &def, 3);

    assert_eq!(w.reconciler.coupon(&def, NOW).await.unwrap().shards_waiting, 1);
    let r = w.reconciler.coupon(&def, NOW + SEND_WINDOW).await.unwrap();

    assert_eq!(
        (r.shards_waiting, r.shards_rolled_back, r.shards_rebuilt),
        (0, 0, 0),
        "{r:?}"
    );
    let shard = w.shards.state(&def.coupon_id, 0).unwrap();
    assert_eq!((shard.stock, shard.seq, shard.restarted), (7, 3, None));
    assert!(r.causes.iter().any(|c| c.contains("sells again")), "{:?}", r.causes);
}

/// A restarted shard may hold units the other shards saw it without (sold
/// after its snapshot under grants never sent, which come back rightly):
/// a borrow that found every shard empty stamped them sold out, and those
/// stamps would refuse presses a borrow from it could serve.
#[tokio::test]
async fn a_restarted_shard_confirmed_with_stock_voids_every_sold_out_stamp() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(10, 2);
    w.shards.put(&def.coupon_id, 0, 4);
    w.shards.put(&def.coupon_id, 1, 0);
    restarted(&w, &def, 0, 3);
    issued_on_shard_0(&w, &def, 3);

    w.reconciler.coupon(&def, NOW).await.unwrap();
    assert_eq!(w.shards.state(&def.coupon_id, 1).unwrap().epochs, 0, "not judged yet");
    let r = w.reconciler.coupon(&def, NOW + SEND_WINDOW).await.unwrap();

    assert!(r.causes.iter().any(|c| c.contains("sells again")), "{:?}", r.causes);
    for shard in 0..2 {
        assert_eq!(
            w.shards.state(&def.coupon_id, shard).unwrap().epochs,
            1,
            "shard {shard}"
        );
    }
}

/// An operator adds stock while a pass rebuilds a lost shard. The pass read
/// the old total; the lost shard would come back at the new version with
/// the old share, and its part of the added units would never be offered
/// (a shard read before the change reached it would have its part sold
/// twice). The rebuild waits for a pass that reads one version throughout.
#[tokio::test]
async fn a_change_committed_during_a_rebuild_pass_waits_for_a_pass_that_reads_one_version() {
    let w = world();
    let def = coupon(10, 2);
    w.facts.definitions.lock().unwrap().push(def.clone());
    w.shards.put(&def.coupon_id, 0, 5);
    let more = CouponDefinition {
        total_stock: 20,
        ..def.clone()
    };
    *w.facts.change_after_read.lock().unwrap() = Some((more, 1));

    let raced = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!((raced.shards_rebuilt, raced.shards_waiting), (0, 1), "{raced:?}");
    assert!(
        raced.causes.iter().any(|c| c.contains("moved during this pass")),
        "{:?}",
        raced.causes
    );
    assert!(w.shards.state(&def.coupon_id, 1).is_none());

    // The change reached shard 0 before the next pass: its share grew by 5.
    {
        let mut shards = w.shards.shards.lock().unwrap();
        let s = shards.get_mut(&(def.coupon_id.clone(), 0)).unwrap();
        s.stock += 5;
        s.version = 1;
    }
    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!(r.shards_rebuilt, 1, "{r:?}");
    let rebuilt = w.shards.state(&def.coupon_id, 1).unwrap();
    assert_eq!((rebuilt.stock, rebuilt.version), (10, 1), "20 in all, 10 on shard 0");
}

/// A surviving shard still on an older version (the change's step for it
/// failed) is healed by the same pass, after its stock was read: the
/// rebuild would count the total's new units for the lost shards and the
/// heal would add that shard's part of them again.
#[tokio::test]
async fn a_rebuild_waits_while_a_surviving_shard_is_behind_the_stored_version() {
    let w = world();
    let def = coupon(20, 2);
    w.facts.definitions.lock().unwrap().push(def.clone());
    w.facts.versions.lock().unwrap().insert(def.coupon_id.clone(), 1);
    w.shards.put(&def.coupon_id, 0, 5);

    let behind = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!((behind.shards_rebuilt, behind.shards_waiting), (0, 1), "{behind:?}");
    assert_eq!(w.shards.state(&def.coupon_id, 0).unwrap().version, 1, "healed");
    let r = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert_eq!(r.shards_rebuilt, 1, "{r:?}");
}

/// A grab's send decided before the loss may land in the queue after it
/// (the SDK's retries): a rebuild as soon as the queue looks empty would
/// restore that unit too, and a later winner would meet the cap. The lost
/// shard waits out the send window from when a pass first found it lost.
#[tokio::test]
async fn a_lost_shard_is_rebuilt_only_once_sends_decided_before_the_loss_have_landed() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(10, 2);
    w.shards.put(&def.coupon_id, 0, 3);

    let first = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert_eq!((first.shards_waiting, first.shards_rebuilt), (1, 0), "{first:?}");
    assert!(
        first
            .causes
            .iter()
            .any(|c| c.contains("sends decided before the fault")),
        "{:?}",
        first.causes
    );

    // The slow send lands, and is issued.
    w.facts.issue(&grant(7, 1, "slow", NOW - 100));
    let later = w.reconciler.coupon(&def, NOW + SEND_WINDOW).await.unwrap();
    assert_eq!((later.shards_waiting, later.shards_rebuilt), (0, 1), "{later:?}");
    assert_eq!(w.shards.state(&def.coupon_id, 1).unwrap().stock, 10 - 3 - 1);
    assert!(
        w.facts.barriers.lock().unwrap().is_empty(),
        "the rebuild closed its wait"
    );
}

/// A shard rebuilt once starts its sequence at the time then; a hot sale
/// can then mint more grants than milliseconds pass, so when it is lost
/// again its durable mark may be ahead of the clock. Starting at "now"
/// would mint grant ids already issued.
#[tokio::test]
async fn a_shard_rebuilt_again_starts_its_sequence_above_its_mark_even_when_the_clock_is_behind_it() {
    let w = world();
    let def = coupon(10, 1);
    let mark = NOW as u64 + 5_000;
    w.facts.issue(&grant(mark, 0, "u1", NOW - 90_000));
    w.facts
        .high_water
        .lock()
        .unwrap()
        .insert(def.coupon_id.clone(), HashMap::from([(0, mark)]));

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!(r.shards_rebuilt, 1, "{r:?}");
    let rebuilt = w.shards.state(&def.coupon_id, 0).expect("rebuilt");
    assert!(
        rebuilt.seq > mark,
        "the next grant id ({}) must be above every issued one ({mark})",
        rebuilt.seq
    );
}

/// A grant whose shard no replica has acknowledged (the replica lags; a
/// failover now would promote it without the grant) is not re-driven yet:
/// issued, it would be a coupon for a unit the promoted replica sells
/// again, and for a user who may never have been told SUCCESS.
#[tokio::test]
async fn a_stale_grant_is_re_driven_only_once_a_replica_holds_its_shard() {
    let w = world_with(ScriptedLedger {
        unreplicated: true,
        ..ScriptedLedger::default()
    });
    let def = coupon(10, 1);
    w.shards.put(&def.coupon_id, 0, 7);
    w.shards.push(&grant(2, 0, "u2", NOW - 60_000));

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert!(w.queue.sent.lock().unwrap().is_empty(), "nothing re-driven");
    assert_eq!((r.pending, r.redriven), (1, 0));
    assert!(r.causes.iter().any(|c| c.contains("no replica")), "{:?}", r.causes);
}

/// The rebuild reads who holds what from the by-coupon index, which
/// DynamoDB cannot read consistently, at the moment the grant queue has
/// just drained (the index furthest behind). A user missing from it would
/// come back with a count one short and win their own ordinal again
/// (SUCCESS, then ORDINAL_TAKEN). The rebuild waits until the index lists
/// every coupon the counters count.
#[tokio::test]
async fn a_rebuild_waits_for_an_index_that_lags_behind_the_counters() {
    let w = world();
    let def = coupon(10, 1);
    for (seq, user) in [(1, "u1"), (2, "u2")] {
        w.facts.issue(&grant(seq, 0, user, NOW - 90_000));
    }
    let lagging = UserId::parse("u2").unwrap();
    let held_back = w
        .facts
        .holdings
        .lock()
        .unwrap()
        .get_mut(&def.coupon_id)
        .unwrap()
        .remove(&lagging)
        .unwrap();

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert!(
        w.shards.state(&def.coupon_id, 0).is_none(),
        "not rebuilt from a lagging index"
    );
    assert_eq!((r.shards_rebuilt, r.shards_waiting), (0, 1), "{r:?}");
    assert!(r.causes.iter().any(|c| c.contains("index")), "{:?}", r.causes);

    // The index catches up: the next pass rebuilds, with both holders.
    w.facts
        .holdings
        .lock()
        .unwrap()
        .get_mut(&def.coupon_id)
        .unwrap()
        .insert(lagging, held_back);
    let r = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert_eq!(r.shards_rebuilt, 1, "{r:?}");
    let rebuilt = w.shards.state(&def.coupon_id, 0).unwrap();
    assert_eq!(rebuilt.users.iter().map(|(_, n)| n).sum::<u32>(), 2);
    assert_eq!(rebuilt.stock, 8);
    let mut answered: Vec<(String, String)> = rebuilt
        .outcomes
        .iter()
        .map(|(u, (request, record))| (format!("{u}/{request}"), record.grant_id.clone()))
        .collect();
    answered.sort();
    assert_eq!(
        answered,
        vec![
            ("u1/r-u1".to_owned(), "c1-0-1".to_owned()),
            ("u2/r-u2".to_owned(), "c1-0-2".to_owned())
        ],
        "each holder's winning request answers its grant again"
    );
}

/// A run reads the clock once and may reach a coupon seconds later: a wait
/// dated from the run's start would date the fault before it happened, and
/// send its barriers before a grab's send decided just before the fault.
#[tokio::test]
async fn a_wait_is_dated_when_the_pass_reaches_the_coupon_not_when_the_run_began() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(10, 1);

    let r = w.reconciler.coupon(&def, NOW - 4_000).await.unwrap();

    assert_eq!(r.shards_waiting, 1);
    let rec = w.facts.barriers.lock().unwrap()[&def.coupon_id].clone();
    assert_eq!(
        (rec.opened_ms, rec.send_after_ms, rec.sent_ms),
        (NOW, NOW + SEND_WINDOW, None)
    );
}
