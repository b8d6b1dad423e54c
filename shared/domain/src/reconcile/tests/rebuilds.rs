//! Lost shards rebuilt from DynamoDB: only with what nothing else accounts
//! for, from one definition version and an index that agrees with the
//! counters, and not once the window is over.

use super::*;

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
        2,
        "every shard's sold-out stamp is void: bumped before the restore and after"
    );
    assert_eq!(*w.facts.rebuilds.lock().unwrap(), vec![(def.coupon_id.clone(), 4)]);
    let holders: u32 = rebuilt.users.iter().map(|(_, n)| n).sum();
    let homed_on_1 = ["u9", "u8", "u1"]
        .iter()
        .filter(|u| crate::grab::home_shard(&UserId::parse(u).unwrap(), 2) == 1)
        .count() as u32;
    assert_eq!(holders, homed_on_1, "holders are restored on their home shard only");
}

/// The mark a rebuilt shard's sequence starts at is durable before the
/// state is: a run that dies between the two leaves a mark with no state
/// under it, and the next run rebuilds above it; never a state that an
/// older snapshot, restored later, would not be found behind.
#[tokio::test]
async fn a_rebuild_raises_the_shards_mark_before_it_writes_the_shard() {
    let w = world();
    let def = coupon(4, 2);
    w.shards.put(&def.coupon_id, 1, 2);
    *w.shards.restore_dies.lock().unwrap() = true;

    assert!(w.reconciler.coupon(&def, NOW).await.is_err(), "the rebuild died");

    assert!(w.shards.state(&def.coupon_id, 0).is_none(), "nothing written");
    let mark = w.facts.high_water.lock().unwrap()[&def.coupon_id][&0];
    assert!(mark >= NOW as u64, "the mark was raised first: {mark}");
    w.reconciler.coupon(&def, NOW).await.unwrap();
    let rebuilt = w.shards.state(&def.coupon_id, 0).expect("rebuilt");
    assert!(
        rebuilt.seq > mark,
        "the next run starts above the mark: {} > {mark}",
        rebuilt.seq
    );
}

/// A borrow's unit and its claim on two shards, the donor lost after the
/// home settled its grant (the explorer's seed 24): the home's list of
/// borrowed grants tells the donor's rebuild that the unit is gone, and
/// the grant is pending (re-driven in time) until it is issued.
#[tokio::test]
async fn a_rebuilt_donor_does_not_restore_a_unit_it_gave_to_a_borrow_settled_elsewhere() {
    let w = world();
    let def = coupon(4, 2);
    // Shard 1 survives, sold out; its user won shard 0's unit 0-7, which
    // shard 0's outbox held when shard 0 lost its state.
    w.shards.put(&def.coupon_id, 1, 0);
    let borrowed = grant(7, 0, "b", NOW - 90_000);
    w.shards.lend(1, &borrowed);

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!(r.shards_rebuilt, 1);
    assert_eq!(r.pending, 1, "the borrowed grant is pending");
    let rebuilt = w.shards.state(&def.coupon_id, 0).expect("rebuilt");
    assert_eq!(rebuilt.stock, 4 - 1, "the unit 0-7 carries is not restored");
    assert_eq!(
        rebuilt.taken,
        vec![(borrowed.user_id.clone(), GrantRecord::of(&borrowed))],
        "its take is written back: a retry replaying the win finds what it vouches for"
    );
    assert_eq!(r.drift, 0);

    // Once the donor is back, the grant is re-driven as any old pending
    // one, and the home forgets it once issued.
    w.reconciler.coupon(&def, NOW + 60_000).await.unwrap();
    assert_eq!(*w.queue.sent.lock().unwrap(), vec![borrowed.clone()]);
    // The re-drive asks the grant's shard to vouch for the grant itself
    // (its outbox entry, or the home's list), the home for its writes.
    let vouched = w.ledger.vouched.lock().unwrap().clone();
    let id = borrowed.grant_id.to_string();
    assert!(
        vouched.ends_with(&[(0, format!("pending {id}")), (1, "writes".into())]),
        "{vouched:?}"
    );
    w.facts.issue(&borrowed);
    w.reconciler.coupon(&def, NOW + 120_000).await.unwrap();
    assert!(w.shards.state(&def.coupon_id, 1).unwrap().borrowed.is_empty());
}

/// A borrow whose caller died after the donor's take, its grant re-driven
/// and issued, the home's reservation still open; then the donor is lost.
/// The rebuilt donor writes the take back from DynamoDB, so the borrow,
/// resumed by a retry or a pass, replays that unit instead of taking a
/// second one for the same claim (whose grant the issuer would refuse
/// after its user was told SUCCESS).
#[tokio::test]
async fn a_rebuilt_donor_gives_back_the_unit_dynamodb_holds_to_a_borrow_still_open() {
    let w = world();
    let def = coupon(4, 2);
    let homed = |shard: u32| {
        (0..50)
            .map(|i| format!("u{i}"))
            .find(|u| crate::grab::home_shard(&UserId::parse(u).unwrap(), 2) == shard)
            .unwrap()
    };
    let (borrower, local) = (homed(1), homed(0));
    w.shards.put(&def.coupon_id, 1, 0);
    let borrowed = grant(7, 0, &borrower, NOW - 90_000);
    let own = grant(8, 0, &local, NOW - 90_000);
    w.facts.issue(&borrowed);
    w.facts.issue(&own);

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!(r.shards_rebuilt, 1);
    let rebuilt = w.shards.state(&def.coupon_id, 0).expect("rebuilt");
    assert_eq!(
        rebuilt.taken,
        vec![(UserId::parse(&borrower).unwrap(), GrantRecord::of(&borrowed))],
        "the borrow's unit, and not the one its own user won"
    );
}

/// A borrow's unit and its claim on two shards, the home lost after the
/// donor gave the unit (the explorer's seed 101): the rebuilt home counts
/// the user's claim and replays the win to their retry, instead of letting
/// them claim again (or hear SOLD_OUT) while the donor's grant goes out.
#[tokio::test]
async fn a_rebuilt_home_shard_counts_its_users_units_pending_in_other_shards_outboxes() {
    let w = world();
    let def = coupon(4, 2);
    let user = (0..)
        .map(|n| format!("b{n}"))
        .find(|u| crate::grab::home_shard(&UserId::parse(u).unwrap(), 2) == 1)
        .unwrap();
    // Shard 0 gave `user` (homed on the lost shard 1) a unit: pending.
    w.shards.put(&def.coupon_id, 0, 1);
    let borrowed = grant(1, 0, &user, NOW - 1_000);
    w.shards.push(&borrowed);

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!(r.shards_rebuilt, 1);
    let rebuilt = w.shards.state(&def.coupon_id, 1).expect("rebuilt");
    assert_eq!(rebuilt.stock, 4 - 1 - 1, "the borrowed unit is not restored");
    assert_eq!(rebuilt.users, vec![(UserId::parse(&user).unwrap(), 1)]);
    assert_eq!(
        rebuilt.outcomes,
        vec![(
            UserId::parse(&user).unwrap(),
            (borrowed.request_id.clone(), crate::grant::GrantRecord::of(&borrowed))
        )],
        "the retry replays the donor's grant"
    );
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
        .map(|(u, (request, record))| (format!("{u}/{request}"), record.grant_id.to_string()))
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

/// A shard's durable mark can lag the grants it covers (its write failed
/// and the batch comes back after the visibility timeout) while the grants
/// themselves are issued. A rebuild must start its sequence above every
/// sequence DynamoDB holds, or it mints issued grant ids again (which the
/// FIFO queue would drop as duplicates of the issued ones).
#[tokio::test]
async fn a_rebuild_starts_its_sequence_above_every_issued_grant_even_when_the_mark_lags() {
    let w = world();
    let def = coupon(10, 1);
    let minted = NOW as u64 + 5_000;
    w.facts.issue(&grant(minted, 0, "u1", NOW - 90_000));
    w.facts
        .high_water
        .lock()
        .unwrap()
        .insert(def.coupon_id.clone(), HashMap::from([(0, 2)]));

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!(r.shards_rebuilt, 1, "{r:?}");
    let rebuilt = w.shards.state(&def.coupon_id, 0).expect("rebuilt");
    assert!(
        rebuilt.seq > minted,
        "the next grant id ({}) must be above the issued {minted}",
        rebuilt.seq
    );
}

/// A claimed grant the issuer rejected (the cap, or its ordinal taken)
/// holds nothing: a rebuild that restored it would count a coupon its user
/// never got and answer a retry of its request with a grant that was
/// rejected.
#[tokio::test]
async fn a_rebuild_restores_no_claim_and_no_answer_from_a_rejected_grant() {
    let w = world();
    let def = coupon(4, 1);
    let rejected = grant(3, 0, "u1", NOW - 90_000);
    w.facts.claims.lock().unwrap().push(rejected.clone());
    w.facts
        .rejections
        .lock()
        .unwrap()
        .entry(def.coupon_id.clone())
        .or_default()
        .push(crate::reconcile::ports::RejectedGrant {
            grant_id: rejected.grant_id.clone(),
            reason: crate::user_coupon::RejectReason::CapReached,
        });

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    let rebuilt = w.shards.state(&def.coupon_id, 0).expect("rebuilt");
    assert!(rebuilt.users.is_empty(), "u1 holds nothing: {:?}", rebuilt.users);
    assert!(rebuilt.outcomes.is_empty(), "no request replays the rejected grant");
    assert!(rebuilt.outbox.is_empty(), "nothing of it is on its way");
    assert_eq!((r.shards_rebuilt, r.pending), (1, 0));
}

/// A pass that dies right after restoring a lost shard (the function timed
/// out there) leaves no other shard answering SOLD_OUT from a stamp of
/// before the loss: every stamp was voided before the restore, since the
/// next pass finds every shard there and bumps nothing.
#[tokio::test]
async fn a_pass_that_dies_right_after_a_rebuild_leaves_no_stale_sold_out_stamp() {
    let w = world();
    let def = coupon(10, 2);
    w.shards.put(&def.coupon_id, 0, 0);
    *w.shards.dies_after_repair.lock().unwrap() = true;

    let died = w.reconciler.coupon(&def, NOW).await;

    assert!(died.is_err(), "the pass died after its restore");
    assert_eq!(w.shards.state(&def.coupon_id, 1).expect("restored").stock, 10);
    assert_eq!(
        w.shards.state(&def.coupon_id, 0).unwrap().epochs,
        1,
        "shard 0's stamp of before the loss is void"
    );
}
