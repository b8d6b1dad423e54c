//! The coupon's wait before a lost or restarted shard is repaired
//! (`wait.rs`): the send window from when a pass first found it, never
//! the queue's backlog; and the grants on their way, read from their
//! claims, restored with the shard.

use super::*;

/// Redis lost a shard while grants it made were still in the queue (the
/// issuer slow, or paused): the counters do not know those units yet. The
/// rebuild does not wait for them: their claims name them, so the shard
/// reopens without them (their units, their users' claims, their
/// requests' outcomes restored as on their way), and lists them in its
/// outbox again until the issuer has them.
#[tokio::test]
async fn a_lost_shard_is_rebuilt_without_waiting_for_the_grants_on_their_way_which_it_restores() {
    let w = world();
    let def = coupon(10, 1);
    let on_their_way: Vec<Grant> = (1..=3)
        .map(|seq| grant(seq, 0, &format!("q{seq}"), NOW - 1_000))
        .collect();
    // One more was issued already; its claim was not deleted yet.
    let issued = grant(4, 0, "q4", NOW - 2_000);
    w.facts.issue(&issued);
    w.facts
        .claims
        .lock()
        .unwrap()
        .extend(on_their_way.iter().cloned().chain([issued]));
    *w.queue.in_flight.lock().unwrap() = Some(3);

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!((r.shards_rebuilt, r.shards_waiting, r.restored), (1, 0, 6), "{r:?}");
    assert_eq!((r.pending, r.issued, r.drift), (3, 1, 0), "{r:?}");
    let shard = w.shards.state(&def.coupon_id, 0).expect("rebuilt");
    assert_eq!(shard.stock, 6);
    let listed: Vec<Grant> = shard.outbox.iter().map(|e| e.grant.clone()).collect();
    assert_eq!(listed, on_their_way, "the rebuilt outbox lists what is on its way");
    for g in &on_their_way {
        assert!(
            shard.users.contains(&(g.user_id.clone(), 1)),
            "{} keeps its claim",
            g.user_id
        );
        assert!(
            shard
                .outcomes
                .contains(&(g.user_id.clone(), (g.request_id.clone(), GrantRecord::of(g)))),
            "a retry of {}'s press replays its grant",
            g.user_id
        );
    }
    assert!(shard.seq > 4, "new grant ids start above every claimed one");

    // The issuer takes them: the next pass trims them, nothing moves.
    for g in &on_their_way {
        w.facts.issue(g);
    }
    let after = w.reconciler.coupon(&def, NOW + 1_000).await.unwrap();
    assert_eq!(
        (after.pending, after.issued, after.remaining, after.drift),
        (0, 4, 6, 0),
        "{after:?}"
    );
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

/// A shard lost after the wait for another one began may be sending grants
/// (and writing their claims) until its own send window is over: it needs
/// a wait of its own, and the first shard waits with it.
#[tokio::test]
async fn a_shard_lost_during_a_wait_gets_a_wait_of_its_own() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(10, 2);
    w.shards.put(&def.coupon_id, 0, 5);
    let first = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert_eq!(first.shards_waiting, 1);
    let opened = w.facts.barriers.lock().unwrap()[&def.coupon_id].clone();
    assert_eq!(opened.shards, vec![1]);

    // Shard 0 is lost too, just before the first wait is over.
    w.shards.shards.lock().unwrap().remove(&(def.coupon_id.clone(), 0));
    let later = NOW + SEND_WINDOW;
    let waiting = w.reconciler.coupon(&def, later).await.unwrap();
    assert_eq!((waiting.shards_rebuilt, waiting.shards_waiting), (0, 2), "{waiting:?}");
    let reopened = w.facts.barriers.lock().unwrap()[&def.coupon_id].clone();
    assert_eq!((reopened.shards, reopened.opened_ms), (vec![0, 1], later));

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
    let stale = crate::barrier::BarrierRecord::open(NOW - 60_000, SEND_WINDOW, vec![0]);
    w.facts.barriers.lock().unwrap().insert(def.coupon_id.clone(), stale);
    w.shards.put(&def.coupon_id, 0, 10);

    w.reconciler.coupon(&def, NOW).await.unwrap();
    assert!(w.facts.barriers.lock().unwrap().is_empty());

    w.shards.shards.lock().unwrap().clear();
    let r = w.reconciler.coupon(&def, NOW + 1).await.unwrap();
    assert_eq!((r.shards_rebuilt, r.shards_waiting), (0, 1), "{r:?}");
}

/// A grab's send (and the claim before it) decided before the loss may
/// land after it (the SDK's retries): a rebuild before the send window is
/// over would miss that claim and restore its unit too, and a later
/// winner would meet the cap. The lost shard waits out the send window
/// from when a pass first found it lost.
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

    // The slow send's claim lands, and the grant stays on its way.
    w.facts.claims.lock().unwrap().push(grant(7, 1, "slow", NOW - 100));
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
/// pass before a grab's send decided just before the fault had landed.
#[tokio::test]
async fn a_wait_is_dated_when_the_pass_reaches_the_coupon_not_when_the_run_began() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(10, 1);

    let r = w.reconciler.coupon(&def, NOW - 4_000).await.unwrap();

    assert_eq!(r.shards_waiting, 1);
    let rec = w.facts.barriers.lock().unwrap()[&def.coupon_id].clone();
    assert_eq!((rec.opened_ms, rec.send_after_ms), (NOW, NOW + SEND_WINDOW));
}

/// Every unit of the coupon is in DynamoDB: no grant of it can be on its
/// way that a rebuild would miss (one would meet the cap), so its lost
/// shard is rebuilt in the pass that finds it, with no wait at all. After
/// a lost node, the sold-out sales answer SOLD_OUT again within one pass.
#[tokio::test]
async fn a_lost_shard_of_a_coupon_whose_every_unit_is_issued_is_rebuilt_at_once_without_a_wait() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(3, 1);
    for seq in 1..=3 {
        w.facts.issue(&grant(seq, 0, &format!("u{seq}"), NOW - 1_000));
    }

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!((r.shards_waiting, r.shards_rebuilt, r.restored), (0, 1, 0), "{r:?}");
    assert_eq!(w.shards.state(&def.coupon_id, 0).expect("rebuilt").stock, 0);
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
    let waiting = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert_eq!((waiting.shards_waiting, waiting.shards_rebuilt), (1, 0), "{waiting:?}");
    assert!(w.facts.barriers.lock().unwrap().contains_key(&def.coupon_id));

    w.facts.issue(&grant(3, 0, "u3", NOW - 1_000));
    let r = w.reconciler.coupon(&def, NOW + 1_000).await.unwrap();

    assert_eq!((r.shards_waiting, r.shards_rebuilt, r.restored), (0, 1, 0), "{r:?}");
    assert!(w.facts.barriers.lock().unwrap().is_empty(), "the episode is closed");
}
