//! The coupon's wait for its grants on their way (`wait.rs`): a lost or
//! restarted shard is repaired only once the coupon's barriers came
//! through every lane, and never later than that.

use super::*;

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

/// Every unit of the coupon is in DynamoDB: no grant of it can be on its
/// way that a rebuild would miss (one would meet the cap), so its lost
/// shard is rebuilt in the pass that finds it, with no barrier in the
/// queue ahead of the sales that still sell. After a lost node, the sold-out
/// sales answer SOLD_OUT again within one pass.
#[tokio::test]
async fn a_lost_shard_of_a_coupon_whose_every_unit_is_issued_is_rebuilt_at_once_without_barriers() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(3, 1);
    for seq in 1..=3 {
        w.facts.issue(&grant(seq, 0, &format!("u{seq}"), NOW - 1_000));
    }
    *w.queue.hold_barriers.lock().unwrap() = true;

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!((r.shards_waiting, r.shards_rebuilt, r.restored), (0, 1, 0), "{r:?}");
    assert_eq!(w.shards.state(&def.coupon_id, 0).expect("rebuilt").stock, 0);
    assert_eq!(*w.queue.barriers_sent.lock().unwrap(), 0);
    assert!(w.facts.barriers.lock().unwrap().is_empty(), "no episode");
}

/// A wait opened while a unit was still on its way is closed once that
/// unit reached DynamoDB and so every unit has: the shard is rebuilt then,
/// and the episode cannot vouch for a later loss.
#[tokio::test]
async fn a_wait_opened_before_the_last_unit_arrived_is_closed_when_it_does() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(3, 1);
    for seq in 1..=2 {
        w.facts.issue(&grant(seq, 0, &format!("u{seq}"), NOW - 1_000));
    }
    *w.queue.hold_barriers.lock().unwrap() = true;
    let waiting = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert_eq!((waiting.shards_waiting, waiting.shards_rebuilt), (1, 0), "{waiting:?}");
    assert!(w.facts.barriers.lock().unwrap().contains_key(&def.coupon_id));

    w.facts.issue(&grant(3, 0, "u3", NOW - 1_000));
    let r = w.reconciler.coupon(&def, NOW + 1_000).await.unwrap();

    assert_eq!((r.shards_waiting, r.shards_rebuilt, r.restored), (0, 1, 0), "{r:?}");
    assert!(w.facts.barriers.lock().unwrap().is_empty(), "the episode is closed");
}
