//! The grab use case against scripted ports: the order of steps, what is
//! sent, what is released, what is remembered.

use std::collections::HashMap;

use super::ports::TakeReply;
use super::*;
use crate::clock::ManualClock;
use crate::metrics::RecordingMetrics;
use crate::outcome::RiskReason;
use crate::testing::{FakeQueue, FakeRepairs, FakeRisk, MemoryCatalog, ScriptedLedger};

struct World {
    ledger: Arc<ScriptedLedger>,
    risk: Arc<FakeRisk>,
    queue: Arc<FakeQueue>,
    catalog: Arc<MemoryCatalog>,
    repairs: Arc<FakeRepairs>,
    metrics: Arc<RecordingMetrics>,
    clock: ManualClock,
    service: GrabService,
}

fn world(ledger: ScriptedLedger, risk: FakeRisk, queue: FakeQueue) -> World {
    world_with(ledger, risk, queue, MemoryCatalog::default())
}

fn world_with(ledger: ScriptedLedger, risk: FakeRisk, queue: FakeQueue, catalog: MemoryCatalog) -> World {
    world_at(ledger, risk, queue, catalog, ManualClock::new(1_000))
}

fn world_at(
    ledger: ScriptedLedger,
    risk: FakeRisk,
    queue: FakeQueue,
    catalog: MemoryCatalog,
    clock: ManualClock,
) -> World {
    let (ledger, risk, queue, catalog) = (Arc::new(ledger), Arc::new(risk), Arc::new(queue), Arc::new(catalog));
    let repairs = Arc::new(FakeRepairs::default());
    let metrics = Arc::new(RecordingMetrics::default());
    let service = GrabService::new(
        GrabPorts {
            ledger: ledger.clone(),
            risk: risk.clone(),
            publisher: queue.clone(),
            catalog: catalog.clone(),
            repairs: repairs.clone(),
            clock: Arc::new(clock.clone()),
            metrics: metrics.clone(),
        },
        500,
    );
    World {
        ledger,
        risk,
        queue,
        catalog,
        repairs,
        metrics,
        clock,
        service,
    }
}

fn request(user: &str) -> GrabRequest {
    GrabRequest {
        coupon: CouponId::parse("c").unwrap(),
        user: UserId::parse(user).unwrap(),
        level: 0,
        request: RequestId::parse("r").unwrap(),
        ip: None,
    }
}

fn record(grant: &str, shard: u32) -> GrantRecord {
    GrantRecord {
        grant_id: grant.into(),
        ordinal: 1,
        shard,
        granted_at_ms: 1_000,
    }
}

#[tokio::test]
async fn a_winner_whose_send_fails_is_not_told_success_and_keeps_its_hold() {
    let w = world(
        ScriptedLedger {
            shards: 1,
            claim: Some(ClaimReply::Won(record("c-0-1", 0))),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue {
            fail: true,
            ..Default::default()
        },
    );
    let outcome = w.service.grab(&request("u")).await;
    assert!(matches!(outcome, Err(GrabError::NotQueued(_))), "{outcome:?}");
    assert_eq!(w.metrics.total("GrantQueueFailed"), 1);
    assert_eq!(*w.risk.released.lock().unwrap(), 0, "a win keeps its risk hold");
}

/// The reconciler trusts that every send decided before a shard was lost
/// has landed once its send window has passed: a send may not start, or go
/// on, later than the budget allows, however long the replica took.
#[tokio::test]
async fn a_win_is_sent_only_within_its_send_budget_counted_from_the_decision() {
    for (ack_ms, sent) in [(500, true), (SEND_BUDGET_MS, false)] {
        let clock = ManualClock::new(1_000);
        let w = world_at(
            ScriptedLedger {
                shards: 1,
                claim: Some(ClaimReply::Won(record("c-0-1", 0))),
                slow_replica: Some((clock.clone(), ack_ms)),
                ..Default::default()
            },
            FakeRisk::allowing(),
            FakeQueue::default(),
            MemoryCatalog::default(),
            clock,
        );
        let outcome = w.service.grab(&request("u")).await;
        if sent {
            assert!(matches!(outcome, Ok(GrabOutcome::Won { .. })), "{outcome:?}");
            assert_eq!(*w.queue.budgets.lock().unwrap(), vec![(SEND_BUDGET_MS - ack_ms) as u64]);
        } else {
            assert!(matches!(outcome, Err(GrabError::NotQueued(_))), "{outcome:?}");
            assert!(w.queue.budgets.lock().unwrap().is_empty(), "no send started");
            assert_eq!(*w.risk.released.lock().unwrap(), 0, "a win keeps its risk hold");
        }
    }
}

#[tokio::test]
async fn a_loser_gives_its_risk_hold_back_and_sends_nothing() {
    let w = world(
        ScriptedLedger {
            shards: 1,
            claim: Some(ClaimReply::Rejected(Rejection::AlreadyClaimed)),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    let outcome = w.service.grab(&request("u")).await.unwrap();
    assert_eq!(
        outcome,
        GrabOutcome::Rejected {
            reason: Rejection::AlreadyClaimed,
            replayed: false
        }
    );
    assert_eq!(*w.risk.released.lock().unwrap(), 1);
    assert!(w.queue.sent.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_replayed_win_is_sent_again_and_keeps_its_own_hold() {
    let w = world(
        ScriptedLedger {
            shards: 1,
            claim: Some(ClaimReply::Replay(Recorded::Won(record("c-0-1", 0)))),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    let outcome = w.service.grab(&request("u")).await.unwrap();
    assert!(matches!(outcome, GrabOutcome::Won { replayed: true, .. }));
    let sent = w.queue.sent.lock().unwrap();
    assert_eq!(sent.len(), 1, "the first send may have failed: every replay sends");
    assert_eq!(sent[0].grant_id, "c-0-1");
    assert_eq!(
        *w.risk.released.lock().unwrap(),
        0,
        "the hold is this press's own reservation (keyed by request): the win keeps it"
    );
}

#[tokio::test]
async fn a_borrow_visits_donors_in_order_from_home_and_stops_at_the_first_win() {
    let user = "borrower";
    let home = home_shard(&UserId::parse(user).unwrap(), 4);
    let first_donor = (home + 1) % 4;
    let second_donor = (home + 2) % 4;
    let w = world(
        ScriptedLedger {
            shards: 4,
            claim: Some(ClaimReply::Borrow { ordinal: 1 }),
            takes: HashMap::from([(second_donor, TakeReply::Won(record("c-x-1", second_donor)))]),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    let outcome = w.service.grab(&request(user)).await.unwrap();
    assert!(matches!(outcome, GrabOutcome::Won { .. }));
    assert_eq!(
        w.ledger.calls(),
        vec![
            "admit".to_string(),
            "claim".to_string(),
            format!("take:{first_donor}"),
            format!("take:{second_donor}"),
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
    let w = world(
        ScriptedLedger {
            shards: 4,
            claim: Some(ClaimReply::Borrow { ordinal: 1 }),
            takes: HashMap::from([
                (first_donor, TakeReply::Closed(Rejection::Offline)),
                (second_donor, TakeReply::Won(record("c-x-1", second_donor))),
            ]),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
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
            format!("take:{first_donor}"),
            "settle".into()
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
async fn a_sell_out_is_remembered_for_the_ttl_and_then_forgotten() {
    let w = world(
        ScriptedLedger {
            shards: 1,
            admit: Some(ClaimReply::Rejected(Rejection::SoldOut)),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    w.service.grab(&request("a")).await.unwrap();
    let second = w.service.grab(&request("b")).await.unwrap();
    assert!(matches!(
        second,
        GrabOutcome::Rejected {
            reason: Rejection::SoldOut,
            ..
        }
    ));
    // From memory: one read of the request record, no admission.
    assert_eq!(w.ledger.calls(), vec!["admit", "recorded"]);
    assert_eq!(*w.risk.reserved.lock().unwrap(), 0, "refused at admission");
    w.clock.advance(500);
    w.service.grab(&request("c")).await.unwrap();
    assert_eq!(w.ledger.calls().last().map(String::as_str), Some("admit"));
}

#[tokio::test]
async fn an_undecided_claim_is_an_error_and_keeps_the_hold() {
    let w = world(
        ScriptedLedger {
            shards: 1,
            fail_claim: true,
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    assert!(matches!(
        w.service.grab(&request("u")).await,
        Err(GrabError::Unavailable(_))
    ));
    assert_eq!(
        *w.risk.released.lock().unwrap(),
        0,
        "over-count rather than under-count"
    );
    assert_eq!(w.metrics.total_for("GrabOutcome", "UNAVAILABLE"), 1);
}

#[tokio::test]
async fn a_risk_refusal_after_admission_is_final_and_claims_nothing() {
    let w = world(
        ScriptedLedger {
            shards: 1,
            ..Default::default()
        },
        FakeRisk {
            refuse: Some(RiskReason::DailyLimit),
            ..FakeRisk::allowing()
        },
        FakeQueue::default(),
    );
    let outcome = w.service.grab(&request("u")).await.unwrap();
    assert!(matches!(
        outcome,
        GrabOutcome::Rejected {
            reason: Rejection::Risk(RiskReason::DailyLimit),
            ..
        }
    ));
    assert_eq!(w.ledger.calls(), ["admit"], "refused before the claim");
    assert_eq!(*w.risk.released.lock().unwrap(), 0, "a refusal holds nothing");
}

#[tokio::test]
async fn a_press_the_shard_refuses_is_decided_at_admission_and_never_reaches_the_risk_rules() {
    for refusal in [
        Rejection::RateLimited { retry_after_ms: 40 },
        Rejection::AlreadyClaimed,
        Rejection::NotEligible { min_level: 3 },
        Rejection::SoldOut,
        Rejection::Offline,
        Rejection::Ended,
        Rejection::NotStarted { starts_at_ms: 9_000 },
    ] {
        let w = world(
            ScriptedLedger {
                shards: 1,
                admit: Some(ClaimReply::Rejected(refusal.clone())),
                ..Default::default()
            },
            FakeRisk::allowing(),
            FakeQueue::default(),
        );
        let outcome = w.service.grab(&request("u")).await.unwrap();
        assert_eq!(
            outcome,
            GrabOutcome::Rejected {
                reason: refusal.clone(),
                replayed: false
            }
        );
        assert_eq!(w.ledger.calls(), ["admit"], "{refusal:?}: one call");
        assert_eq!(*w.risk.reserved.lock().unwrap(), 0, "{refusal:?}: nothing reserved");
        assert_eq!(*w.risk.released.lock().unwrap(), 0, "{refusal:?}: nothing to give back");
    }
}

#[tokio::test]
async fn a_win_replayed_at_admission_is_sent_again_without_reserving_or_claiming() {
    let w = world(
        ScriptedLedger {
            shards: 1,
            admit: Some(ClaimReply::Replay(Recorded::Won(record("c-0-1", 0)))),
            ..Default::default()
        },
        FakeRisk {
            // The win itself may be what filled the user's day.
            refuse: Some(RiskReason::DailyLimit),
            ..FakeRisk::allowing()
        },
        FakeQueue::default(),
    );
    let outcome = w.service.grab(&request("u")).await.unwrap();
    assert!(
        matches!(outcome, GrabOutcome::Won { replayed: true, .. }),
        "{outcome:?}"
    );
    assert_eq!(w.ledger.calls(), ["admit", "replicated:0"]);
    assert_eq!(w.queue.sent.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_borrow_found_at_admission_is_resumed_and_gives_its_reservation_back_if_it_ends_empty() {
    let w = world(
        ScriptedLedger {
            shards: 2,
            admit: Some(ClaimReply::Replay(Recorded::Borrowing { ordinal: 1 })),
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
    let donor = 1 - home_shard(&UserId::parse("u").unwrap(), 2);
    assert_eq!(
        w.ledger.calls(),
        ["admit".to_string(), format!("take:{donor}"), "settle".into()]
    );
    assert_eq!(
        *w.risk.reserved.lock().unwrap(),
        1,
        "the press's own reservation, found again"
    );
    assert_eq!(*w.risk.released.lock().unwrap(), 1);
}

#[tokio::test]
async fn a_guard_that_reserves_nothing_lets_one_call_decide() {
    let ledger = Arc::new(ScriptedLedger {
        shards: 1,
        claim: Some(ClaimReply::Won(record("c-0-1", 0))),
        ..Default::default()
    });
    let service = GrabService::new(
        GrabPorts {
            ledger: ledger.clone(),
            risk: Arc::new(crate::testing::AllowAll),
            publisher: Arc::new(FakeQueue::default()),
            catalog: Arc::new(MemoryCatalog::default()),
            repairs: Arc::new(FakeRepairs::default()),
            clock: Arc::new(ManualClock::new(1_000)),
            metrics: Arc::new(RecordingMetrics::default()),
        },
        500,
    );
    let outcome = service.grab(&request("u")).await.unwrap();
    assert!(matches!(outcome, GrabOutcome::Won { replayed: false, .. }));
    assert_eq!(ledger.calls(), ["claim", "replicated:0"], "no admission first");
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
    let w = world(
        ScriptedLedger {
            shards: 2,
            claim: Some(ClaimReply::Borrow { ordinal: 1 }),
            takes: HashMap::from([(donor, TakeReply::Missing)]),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    let outcome = w.service.grab(&request(user)).await;
    assert!(matches!(outcome, Err(GrabError::Unavailable(_))), "{outcome:?}");
    assert_eq!(
        w.ledger.calls(),
        vec!["admit".to_owned(), "claim".to_owned(), format!("take:{donor}")],
        "no settle: no SOLD_OUT stamp"
    );
    assert_eq!(w.metrics.total("ShardMissing"), 1);
    assert_eq!(
        *w.risk.released.lock().unwrap(),
        0,
        "undecided: the hold stays for the retry"
    );
}

#[tokio::test]
async fn a_win_no_replica_acknowledged_is_busy_and_sends_nothing() {
    let w = world(
        ScriptedLedger {
            shards: 1,
            claim: Some(ClaimReply::Won(record("c-0-1", 0))),
            unreplicated: true,
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    let outcome = w.service.grab(&request("u")).await;
    assert!(matches!(outcome, Err(GrabError::NotReplicated)), "{outcome:?}");
    assert!(
        w.queue.sent.lock().unwrap().is_empty(),
        "not sent before a replica holds it"
    );
    assert_eq!(*w.risk.released.lock().unwrap(), 0, "the hold stays for the retry");
    assert_eq!(w.metrics.total("GrantNotReplicated"), 1);
}

#[tokio::test]
async fn a_borrowed_win_waits_for_the_home_and_the_donor_shard() {
    let user = "borrower";
    let home = home_shard(&UserId::parse(user).unwrap(), 2);
    let donor = (home + 1) % 2;
    let w = world(
        ScriptedLedger {
            shards: 2,
            claim: Some(ClaimReply::Borrow { ordinal: 1 }),
            takes: HashMap::from([(donor, TakeReply::Won(record("c-x-1", donor)))]),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    w.service.grab(&request(user)).await.unwrap();
    let calls = w.ledger.calls();
    assert!(calls.contains(&format!("replicated:{home}")), "{calls:?}");
    assert!(calls.contains(&format!("replicated:{donor}")), "{calls:?}");
}

#[tokio::test]
async fn a_known_coupon_whose_home_shard_lost_its_state_is_busy_not_not_found() {
    let w = world(
        ScriptedLedger {
            shards: 2,
            claim: Some(ClaimReply::Rejected(Rejection::NotFound)),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    let outcome = w.service.grab(&request("u")).await;
    assert!(matches!(outcome, Err(GrabError::Unavailable(_))), "{outcome:?}");
    assert_eq!(w.metrics.total("ShardMissing"), 1);
    assert_eq!(
        w.repairs.asked.lock().unwrap().len(),
        1,
        "the rebuild is asked for at once"
    );
}

#[tokio::test]
async fn a_cold_instance_asks_the_catalogue_and_answers_busy_for_a_coupon_redis_lost() {
    // Redis lost everything (no shard count) and this instance never saw
    // the coupon: the catalogue says it exists, so BUSY, never NOT_FOUND,
    // and one repair request however many presses arrive in the window.
    let w = world_with(
        ScriptedLedger {
            claim: Some(ClaimReply::Rejected(Rejection::NotFound)),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
        MemoryCatalog::with("c", 2),
    );
    for user in ["u1", "u2", "u3"] {
        let outcome = w.service.grab(&request(user)).await;
        assert!(matches!(outcome, Err(GrabError::Unavailable(_))), "{outcome:?}");
    }
    assert_eq!(w.catalog.lookups.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(w.repairs.asked.lock().unwrap().len(), 1);
    // A window later the instance asks again if the state is still gone.
    w.clock.advance(LOOKUP_MEMORY_MS as i64);
    let _ = w.service.grab(&request("u4")).await;
    assert_eq!(w.repairs.asked.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn an_unknown_coupon_is_not_found_and_looked_up_once_per_window() {
    let w = world(ScriptedLedger::default(), FakeRisk::allowing(), FakeQueue::default());
    for user in ["u1", "u2", "u3"] {
        let outcome = w.service.grab(&request(user)).await.unwrap();
        assert!(
            matches!(
                outcome,
                GrabOutcome::Rejected {
                    reason: Rejection::NotFound,
                    ..
                }
            ),
            "{outcome:?}"
        );
    }
    assert_eq!(w.catalog.lookups.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert!(w.repairs.asked.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_refused_repair_request_still_answers_busy_and_is_counted() {
    let w = world_with(
        ScriptedLedger::default(),
        FakeRisk::allowing(),
        FakeQueue::default(),
        MemoryCatalog::with("c", 1),
    );
    w.repairs.refusing.store(true, std::sync::atomic::Ordering::Relaxed);
    let outcome = w.service.grab(&request("u")).await;
    assert!(matches!(outcome, Err(GrabError::Unavailable(_))), "{outcome:?}");
    assert_eq!(w.metrics.total("RepairRequestFailed"), 1);
}
