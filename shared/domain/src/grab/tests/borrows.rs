//! Borrowing from other shards when the home shard is empty: donors in a
//! fixed order, nothing taken from a closed coupon or past a lost shard,
//! and a borrowed win acknowledged on both shards.

use super::*;

/// A ledger that reserves a borrow (the press's first claim, ordinal 1) on
/// the home shard of a coupon over `shards`; the donors answer as scripted.
fn borrowing(shards: u32) -> ScriptedLedger {
    ScriptedLedger {
        shards,
        claim: Some(ClaimReply::Borrow {
            ordinal: 1,
            at_ms: 1_000,
        }),
        ..Default::default()
    }
}

/// The press stays undecided for its retry: nothing sent, and the risk
/// hold it took kept.
fn assert_undecided(w: &World) {
    assert!(w.queue.sent.lock().unwrap().is_empty(), "nothing sent");
    assert_eq!(
        *w.risk.released.lock().unwrap(),
        0,
        "undecided: the hold stays for the retry"
    );
}

/// A press's world on `ledger`, with the risk rules allowing and SQS up.
fn borrow_world(ledger: ScriptedLedger) -> World {
    world(ledger, FakeRisk::allowing(), FakeQueue::default())
}

#[tokio::test]
async fn a_borrow_visits_donors_in_order_from_home_and_stops_at_the_first_win() {
    let user = "borrower";
    let home = home_shard(&UserId::parse(user).unwrap(), 4);
    let first_donor = (home + 1) % 4;
    let second_donor = (home + 2) % 4;
    let w = borrow_world(ScriptedLedger {
        takes: HashMap::from([(
            second_donor,
            TakeReply::Won(record(&format!("c-{second_donor}-1"), second_donor)),
        )]),
        ..borrowing(4)
    });
    let outcome = w.service.grab(&request(user)).await.unwrap();
    assert!(matches!(outcome, GrabOutcome::Won { .. }));
    assert_eq!(
        w.ledger.calls(),
        vec![
            "admit".to_string(),
            "claim".to_string(),
            format!("replicated:{home}"),
            format!("take:{first_donor}"),
            format!("take:{second_donor}"),
            format!("replicated:{second_donor}"),
            "settle".into(),
            format!("replicated:{home}"),
            format!("replicated:{second_donor}"),
        ]
    );
    assert_eq!(w.queue.sent.lock().unwrap()[0].shard, second_donor);
}

#[tokio::test]
async fn a_borrow_that_finds_the_coupon_closed_takes_nothing_and_says_why() {
    let user = "borrower";
    let home = home_shard(&UserId::parse(user).unwrap(), 4);
    let first_donor = (home + 1) % 4;
    let second_donor = (home + 2) % 4;
    let w = borrow_world(ScriptedLedger {
        takes: HashMap::from([
            (first_donor, TakeReply::Closed(Rejection::Offline)),
            (
                second_donor,
                TakeReply::Won(record(&format!("c-{second_donor}-1"), second_donor)),
            ),
        ]),
        ..borrowing(4)
    });
    let outcome = w.service.grab(&request(user)).await.unwrap();
    assert!(
        matches!(
            outcome,
            GrabOutcome::Rejected {
                reason: Rejection::Offline,
                ..
            }
        ),
        "{outcome:?}"
    );
    assert_eq!(
        w.ledger.calls(),
        vec![
            "admit".to_string(),
            "claim".to_string(),
            format!("replicated:{home}"),
            format!("take:{first_donor}"),
            "settle".into(),
            // The stored loss, held by a replica before the hold goes back.
            format!("replicated:{home}"),
        ],
        "no other donor is asked once one says the coupon is closed"
    );
    assert!(w.queue.sent.lock().unwrap().is_empty());
    assert_eq!(
        *w.risk.released.lock().unwrap(),
        1,
        "a press that won nothing gives its hold back"
    );
}

#[tokio::test]
async fn a_borrow_found_at_admission_is_resumed_and_gives_its_reservation_back_if_it_ends_empty() {
    let w = world(
        ScriptedLedger {
            shards: 2,
            admit: Some(ClaimReply::Replay(Recorded::Borrowing {
                ordinal: 1,
                at_ms: 1_000,
            })),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    let outcome = w.service.grab(&request("u")).await.unwrap();
    assert_eq!(
        outcome,
        GrabOutcome::Rejected {
            reason: Rejection::SoldOut,
            replayed: true
        }
    );
    let home = home_shard(&UserId::parse("u").unwrap(), 2);
    let donor = 1 - home;
    assert_eq!(
        w.ledger.calls(),
        [
            "admit".to_string(),
            format!("replicated:{home}"),
            format!("take:{donor}"),
            "settle".into(),
            // The loss, held by a replica before the hold goes back.
            format!("replicated:{home}"),
        ]
    );
    assert_eq!(
        *w.risk.reserved.lock().unwrap(),
        1,
        "the press's own reservation, found again"
    );
    assert_eq!(*w.risk.released.lock().unwrap(), 1);
}

/// A copy of a press (or a retry) that finds the borrow reserved by
/// another judges every donor at the reservation's instant, not on its own
/// clock: copies either side of a release wave see the same donors, so one
/// cannot settle a loss while the other takes a unit nobody is told of.
#[tokio::test]
async fn a_resumed_borrow_judges_its_donors_at_the_instant_the_claim_was_reserved() {
    let w = world(
        ScriptedLedger {
            shards: 3,
            admit: Some(ClaimReply::Replay(Recorded::Borrowing { ordinal: 1, at_ms: 400 })),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    w.service.grab(&request("u")).await.unwrap();
    assert_eq!(
        *w.ledger.take_instants.lock().unwrap(),
        [400, 400],
        "both donors, at 400, not at 1000"
    );
}

/// The attempt that decided a loss may have died before it gave its risk
/// places back (its answer lost): the retry that hears the loss replayed
/// gives them back, so a press that never won counts against no limit.
#[tokio::test]
async fn a_replayed_loss_gives_back_the_risk_places_its_first_attempt_took() {
    let w = world(
        ScriptedLedger {
            shards: 2,
            admit: Some(ClaimReply::Replay(Recorded::SoldOut)),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    let outcome = w.service.grab(&request("u")).await.unwrap();
    assert_eq!(
        outcome,
        GrabOutcome::Rejected {
            reason: Rejection::SoldOut,
            replayed: true
        }
    );
    assert_eq!(*w.risk.reserved.lock().unwrap(), 0, "nothing reserved anew");
    assert_eq!(*w.risk.released.lock().unwrap(), 1, "the press's places given back");
}

#[test]
fn home_shards_are_stable_and_in_range() {
    let u = UserId::parse("alice").unwrap();
    assert_eq!(home_shard(&u, 1), 0);
    for shards in 2..10 {
        let s = home_shard(&u, shards);
        assert!(s < shards);
        assert_eq!(s, home_shard(&u, shards));
    }
}

#[test]
fn users_spread_over_shards() {
    let mut seen = [0u32; 4];
    for i in 0..400 {
        seen[home_shard(&UserId::parse(&format!("u{i}")).unwrap(), 4) as usize] += 1;
    }
    assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
}

#[tokio::test]
async fn a_borrow_that_meets_a_lost_donor_shard_is_busy_and_stamps_nothing() {
    let user = "borrower";
    let home = home_shard(&UserId::parse(user).unwrap(), 2);
    let donor = (home + 1) % 2;
    let w = borrow_world(ScriptedLedger {
        takes: HashMap::from([(donor, TakeReply::Missing)]),
        ..borrowing(2)
    });
    let outcome = w.service.grab(&request(user)).await;
    assert!(matches!(outcome, Err(GrabError::Unavailable(_))), "{outcome:?}");
    assert_eq!(
        w.ledger.calls(),
        vec![
            "admit".to_owned(),
            "claim".to_owned(),
            format!("replicated:{home}"),
            format!("take:{donor}")
        ],
        "no settle: no SOLD_OUT stamp"
    );
    assert_eq!(w.metrics.total("ShardMissing"), 1);
    assert_undecided(&w);
}

/// A lost donor may have given this claim its unit before the loss, and
/// may hold stock once rebuilt: a walk that went past it to the next donor
/// could take a second unit for the same claim (the retry, after the
/// rebuild, takes from the first donor again). So the walk stops there.
#[tokio::test]
async fn a_borrow_takes_nothing_past_a_lost_donor_even_where_a_later_donor_has_stock() {
    let user = "borrower";
    let home = home_shard(&UserId::parse(user).unwrap(), 3);
    let lost = (home + 1) % 3;
    let stocked = (home + 2) % 3;
    let w = borrow_world(ScriptedLedger {
        takes: HashMap::from([
            (lost, TakeReply::Missing),
            (stocked, TakeReply::Won(record(&format!("c-{stocked}-1"), stocked))),
        ]),
        ..borrowing(3)
    });
    let outcome = w.service.grab(&request(user)).await;
    assert!(matches!(outcome, Err(GrabError::Unavailable(_))), "{outcome:?}");
    let calls = w.ledger.calls();
    assert!(!calls.contains(&format!("take:{stocked}")), "{calls:?}");
    assert_undecided(&w);
}

/// The home's reservation must survive whatever the donor's unit survives:
/// with no replica holding it, a failover of the home would forget the
/// claim while the donor keeps the unit given for it. So nothing is taken
/// until a replica acknowledges the reservation; the press is BUSY and its
/// retry resumes the borrow.
#[tokio::test]
async fn a_borrow_takes_nothing_from_a_donor_until_a_replica_holds_its_reservation() {
    let user = "borrower";
    let home = home_shard(&UserId::parse(user).unwrap(), 2);
    let donor = (home + 1) % 2;
    let w = borrow_world(ScriptedLedger {
        takes: HashMap::from([(donor, TakeReply::Won(record(&format!("c-{donor}-1"), donor)))]),
        unreplicated: true,
        ..borrowing(2)
    });
    let outcome = w.service.grab(&request(user)).await;
    assert!(matches!(outcome, Err(GrabError::Unavailable(_))), "{outcome:?}");
    assert_eq!(
        w.ledger.calls(),
        vec!["admit".to_owned(), "claim".to_owned(), format!("replicated:{home}")],
        "no take, no settle: the reservation stays open for the retry"
    );
    assert_eq!(w.metrics.total("GrantNotReplicated"), 1);
    assert_undecided(&w);
}

/// And the home records a donor's unit only once a replica of the donor
/// holds the take: a donor that failed over without it would sell the unit
/// again while the home's record replayed it to the user.
#[tokio::test]
async fn a_borrow_settles_a_donors_unit_only_once_a_replica_of_the_donor_holds_the_take() {
    let user = "borrower";
    let home = home_shard(&UserId::parse(user).unwrap(), 2);
    let donor = (home + 1) % 2;
    let w = borrow_world(ScriptedLedger {
        takes: HashMap::from([(donor, TakeReply::Won(record(&format!("c-{donor}-1"), donor)))]),
        ..borrowing(2)
    });
    w.service.grab(&request(user)).await.unwrap();
    let calls = w.ledger.calls();
    let at = |call: &str| {
        calls
            .iter()
            .position(|c| c == call)
            .unwrap_or_else(|| panic!("{call} in {calls:?}"))
    };
    assert!(
        at(&format!("replicated:{home}")) < at(&format!("take:{donor}")),
        "{calls:?}"
    );
    assert!(at(&format!("replicated:{donor}")) < at("settle"), "{calls:?}");
    let grant = format!("c-{donor}-1");
    assert_eq!(
        *w.ledger.vouched.lock().unwrap(),
        vec![
            (home, "reserved".to_owned()),
            (donor, format!("took {grant}")),
            (home, format!("won {grant}")),
            (donor, format!("took {grant}")),
        ],
        "each acknowledgement vouches for the decision its node must hold"
    );
}

/// A settle that finds the reservation gone, with nothing taken, knows
/// nothing of what the press came to: another copy may have settled it and
/// its answer lived out its time (a BETWEEN_WAVES record dies when its wave
/// is out). SOLD_OUT there would be false, and the instance would remember
/// it for everyone while the wave sells: BUSY, and the retry decides afresh.
#[tokio::test]
async fn a_settle_that_finds_the_reservation_gone_with_nothing_taken_is_busy_not_sold_out() {
    let home = home_shard(&UserId::parse("borrower").unwrap(), 2);
    let donor = (home + 1) % 2;
    let w = borrow_world(ScriptedLedger {
        takes: HashMap::from([(donor, TakeReply::Empty)]),
        settle_gone: true,
        ..borrowing(2)
    });
    let outcome = w.service.grab(&request("borrower")).await;
    assert!(matches!(outcome, Err(GrabError::Unavailable(_))), "{outcome:?}");
    assert_eq!(w.metrics.total_for("GrabOutcome", "SOLD_OUT"), 0, "no SOLD_OUT told");
}
