//! Shards that rolled back or whose server restarted: dropped and rebuilt
//! when behind the durable mark, selling again unchanged when whole.

use super::*;

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
async fn a_restarted_shard_is_judged_once_the_send_window_is_over_against_the_grants_claimed_too() {
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
    assert!(w.shards.state(&def.coupon_id, 0).unwrap().restarted.is_some());

    // A grant the snapshot lacked is on its way (the issuer has not seen
    // it, so no mark names it): its claim does, and the shard is behind it.
    let on_its_way = grant(3, 0, "u3", NOW - 1_000);
    w.facts.claims.lock().unwrap().push(on_its_way.clone());
    let later = NOW + SEND_WINDOW;
    let judged = w.reconciler.coupon(&def, later).await.unwrap();
    assert_eq!(
        (judged.shards_waiting, judged.shards_rolled_back, judged.shards_rebuilt),
        (0, 1, 1),
        "{judged:?}"
    );
    let rebuilt = w.shards.state(&def.coupon_id, 0).unwrap();
    assert_eq!(rebuilt.stock, 10 - 2 - 1 - 5, "{judged:?}");
    assert_eq!(rebuilt.outbox.len(), 1, "the grant on its way is listed again");
    assert!(rebuilt.seq > 3 && rebuilt.restarted.is_none());
}

/// The explorer's seed 1025: a restarted shard whose snapshot holds a win
/// (its last unit) that never reached DynamoDB (the caller gave up before
/// the claim) is dropped, being dry since its stamp. The request's record
/// survives the drop (a drop cannot find it), so the user's retry replays
/// that grant and sends it: the rebuild must count it, or it sells the unit
/// again to another user and the replayed SUCCESS ends REJECTED. The drop
/// keeps the outbox, the pass counts its grants on their way, and the
/// rebuild claims them first, keeps their units and lists them again.
#[tokio::test]
async fn a_restarted_shard_dropped_keeps_the_grants_of_its_outbox_for_the_requests_that_replay_them() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(1, 1);
    w.shards.put(&def.coupon_id, 0, 0);
    let won = grant(1, 0, "u3", NOW - 1_000);
    w.shards.push(&won);
    restarted(&w, &def, 0, 1);

    assert_eq!(w.reconciler.coupon(&def, NOW).await.unwrap().shards_waiting, 1);
    let r = w.reconciler.coupon(&def, NOW + SEND_WINDOW).await.unwrap();

    assert_eq!((r.shards_rolled_back, r.shards_rebuilt), (1, 1), "{r:?}");
    let rebuilt = w.shards.state(&def.coupon_id, 0).expect("rebuilt");
    assert_eq!(rebuilt.stock, 0, "the unit is the replayed grant's: {r:?}");
    assert_eq!(
        rebuilt
            .outbox
            .iter()
            .map(|e| e.grant.grant_id.clone())
            .collect::<Vec<_>>(),
        vec![won.grant_id.clone()],
        "listed again, for the re-drive"
    );
    assert!(
        rebuilt.users.iter().any(|(u, n)| u.as_str() == "u3" && *n == 1),
        "{:?}",
        rebuilt.users
    );
    assert!(
        w.facts
            .claims
            .lock()
            .unwrap()
            .iter()
            .any(|g| g.grant_id == won.grant_id),
        "claimed before the shard reopened"
    );
    assert_eq!(r.drift, 0, "{r:?}");
}

/// A dropped shard's kept outbox may list a grant id the state minted a
/// second time after rolling back (u6's, under u1's claimed id): its unit
/// was u1's, so it is not on its way. It is trimmed, never re-driven, and
/// the rebuild lists u1's claimed grant in its place.
#[tokio::test]
async fn a_kept_outbox_entry_reusing_a_claimed_grant_id_is_trimmed_and_the_claimed_grant_listed() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(3, 1);
    w.shards.put(&def.coupon_id, 0, 1);
    let first = grant(2, 0, "u1", NOW - 2_000);
    w.facts.claims.lock().unwrap().push(first.clone());
    w.shards.push(&grant(1, 0, "u5", NOW - 3_000));
    w.facts.claims.lock().unwrap().push(grant(1, 0, "u5", NOW - 3_000));
    let again = grant(2, 0, "u6", NOW - 1_000);
    w.shards.push(&again);
    restarted(&w, &def, 0, 1);
    w.facts
        .high_water
        .lock()
        .unwrap()
        .insert(def.coupon_id.clone(), HashMap::from([(0, 2)]));

    assert_eq!(w.reconciler.coupon(&def, NOW).await.unwrap().shards_waiting, 1);
    let r = w.reconciler.coupon(&def, NOW + SEND_WINDOW).await.unwrap();

    assert_eq!((r.shards_rolled_back, r.shards_rebuilt), (1, 1), "{r:?}");
    let rebuilt = w.shards.state(&def.coupon_id, 0).expect("rebuilt");
    let listed: Vec<(String, String)> = rebuilt
        .outbox
        .iter()
        .map(|e| (e.grant.grant_id.to_string(), e.grant.user_id.to_string()))
        .collect();
    assert_eq!(
        listed,
        vec![
            (grant(1, 0, "u5", 0).grant_id.to_string(), "u5".into()),
            (first.grant_id.to_string(), "u1".into())
        ],
        "{r:?}"
    );
    assert_eq!(rebuilt.stock, 3 - 2, "u6's re-mint took no unit: {r:?}");
    assert!(
        !rebuilt.users.iter().any(|(u, _)| u.as_str() == "u6"),
        "{:?}",
        rebuilt.users
    );
    assert!(r.causes.iter().any(|c| c.contains("reuse ids")), "{:?}", r.causes);
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

/// A donor restarted from a snapshot older than a take a home settled:
/// DynamoDB has not issued that grant yet (its send failed, the user heard
/// BUSY), so only the home's list of borrowed grants knows its sequence.
/// Confirmed, the shard would mint that grant id again for another user
/// while the re-drive sends it to the borrower; it is dropped and rebuilt,
/// with the take written back for the borrower's retry.
#[tokio::test]
async fn a_restarted_donor_behind_a_take_its_home_settled_is_dropped_not_confirmed() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(10, 2);
    w.shards.put(&def.coupon_id, 0, 5);
    w.shards.put(&def.coupon_id, 1, 0);
    restarted(&w, &def, 0, 3);
    issued_on_shard_0(&w, &def, 3);
    let borrower = (0..50)
        .map(|i| format!("b{i}"))
        .find(|u| crate::grab::home_shard(&UserId::parse(u).unwrap(), 2) == 1)
        .unwrap();
    let taken = grant(4, 0, &borrower, NOW - 90_000);
    w.shards.lend(1, &taken);

    assert_eq!(w.reconciler.coupon(&def, NOW).await.unwrap().shards_waiting, 1);
    let r = w.reconciler.coupon(&def, NOW + SEND_WINDOW).await.unwrap();

    assert_eq!((r.shards_rolled_back, r.shards_rebuilt), (1, 1), "{r:?}");
    let rebuilt = w.shards.state(&def.coupon_id, 0).unwrap();
    assert!(rebuilt.seq > 4, "grant ids never repeat the one the home holds");
    let take = (UserId::parse(&borrower).unwrap(), GrantRecord::of(&taken));
    assert!(rebuilt.taken.contains(&take), "{:?}", rebuilt.taken);
}

/// A restarted shard may hold units the other shards saw it without (sold
/// after its snapshot under grants never sent, which come back rightly):
/// a borrow that found every shard empty stamped them sold out, and those
/// stamps would refuse presses a borrow from it could serve.
#[tokio::test]
async fn a_restarted_shard_confirmed_with_stock_voids_every_sold_out_stamp() {
    let (w, def) = a_stocked_shard_restarted_beside_an_empty_one().await;
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

/// A pass that dies right after confirming a restarted shard (the function
/// timed out there) leaves no other shard answering SOLD_OUT beside the
/// confirmed shard's units: every stamp was voided before the check, since
/// the next pass finds the shard current and bumps nothing.
#[tokio::test]
async fn a_pass_that_dies_right_after_confirming_a_restarted_shard_leaves_no_stale_sold_out_stamp() {
    let (w, def) = a_stocked_shard_restarted_beside_an_empty_one().await;
    *w.shards.dies_after_repair.lock().unwrap() = true;

    let _ = w.reconciler.coupon(&def, NOW + SEND_WINDOW).await;
    *w.shards.dies_after_repair.lock().unwrap() = false;
    let r = w.reconciler.coupon(&def, NOW + 2 * SEND_WINDOW).await.unwrap();

    assert!(
        w.shards.state(&def.coupon_id, 0).unwrap().restarted.is_none(),
        "confirmed"
    );
    assert_eq!(r.shards_waiting, 0, "{r:?}");
    assert!(
        w.shards.state(&def.coupon_id, 1).unwrap().epochs >= 1,
        "shard 1's stamp of before the restart is void"
    );
}

/// Shard 0 restarted with 4 units (3 issued from it, which it holds),
/// shard 1 empty (its users' borrows found no unit and stamped it sold
/// out); a first pass has found the restart and waits out the window.
async fn a_stocked_shard_restarted_beside_an_empty_one() -> (World, CouponDefinition) {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(10, 2);
    w.shards.put(&def.coupon_id, 0, 4);
    w.shards.put(&def.coupon_id, 1, 0);
    restarted(&w, &def, 0, 3);
    issued_on_shard_0(&w, &def, 3);
    w.reconciler.coupon(&def, NOW).await.unwrap();
    (w, def)
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

/// A restarted shard of a coupon whose every unit is issued: nothing can
/// be on its way, so it is judged in the pass that finds it; and any stock
/// it holds can only be a rollback's (its sequence may still be level with
/// a mark that a grant the cap will reject has yet to raise). It is dropped
/// and rebuilt empty, never confirmed with units that are not there.
#[tokio::test]
async fn a_restarted_shard_of_a_coupon_whose_every_unit_is_issued_is_rebuilt_empty_at_once() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(3, 1);
    w.shards.put(&def.coupon_id, 0, 2);
    restarted(&w, &def, 0, 3);
    issued_on_shard_0(&w, &def, 3);

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!((r.shards_waiting, r.shards_rebuilt), (0, 1), "{r:?}");
    let shard = w.shards.state(&def.coupon_id, 0).expect("rebuilt");
    assert_eq!((shard.stock, shard.restarted), (0, None));
    assert!(shard.seq > 3, "new grant ids never repeat issued ones");
    assert!(
        r.causes.iter().any(|c| c.contains("every unit is issued")),
        "{:?}",
        r.causes
    );
}

/// A stock addition commits between the pass's read of the definition and
/// its read of the counters: every unit of the old total is issued, but not
/// of the new one, and the restarted shard may hold the added units and
/// grants never sent. It must not be taken for a sold-out coupon (dropped
/// with its outbox); it waits out the send window like any sale with units left.
#[tokio::test]
async fn a_stock_addition_racing_the_pass_keeps_a_restarted_shard_waiting() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(3, 1);
    w.facts.definitions.lock().unwrap().push(def.clone());
    w.shards.put(&def.coupon_id, 0, 2);
    restarted(&w, &def, 0, 3);
    issued_on_shard_0(&w, &def, 3);
    let mut more = def.clone();
    more.total_stock = 5;
    *w.facts.change_after_read.lock().unwrap() = Some((more, 1));

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!(
        (r.shards_waiting, r.shards_rebuilt, r.shards_rolled_back),
        (1, 0, 0),
        "{r:?}"
    );
    let shard = w.shards.state(&def.coupon_id, 0).expect("kept for its check");
    assert_eq!(shard.stock, 2);
}

/// A mark can lag the grants it covers (its write kept failing until the
/// batch went to the dead-letter queue): a restarted shard level with that
/// mark but behind a grant DynamoDB issued has rolled back. It is dropped
/// and rebuilt, never confirmed to sell that unit again under its grant id.
#[tokio::test]
async fn a_restarted_shard_behind_an_issued_grant_is_dropped_even_when_its_mark_lags() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(10, 1);
    w.shards.put(&def.coupon_id, 0, 7);
    restarted(&w, &def, 0, 3);
    issued_on_shard_0(&w, &def, 3);
    w.facts.issue(&grant(4, 0, "u4", NOW - 90_000));

    assert_eq!(w.reconciler.coupon(&def, NOW).await.unwrap().shards_waiting, 1);
    let r = w.reconciler.coupon(&def, NOW + SEND_WINDOW).await.unwrap();

    assert_eq!((r.shards_rolled_back, r.shards_rebuilt), (1, 1), "{r:?}");
    let shard = w.shards.state(&def.coupon_id, 0).expect("rebuilt");
    assert_eq!(shard.stock, 10 - 4);
    assert!(shard.seq > 4, "new grant ids never repeat issued ones");
}
