//! The grab use case against scripted ports: the order of steps, what is
//! sent, what is released, what is remembered.

use std::collections::HashMap;

use super::ports::TakeReply;
use super::*;
use crate::clock::ManualClock;
use crate::metrics::RecordingMetrics;
use crate::outcome::RiskReason;
use crate::testing::{FakeClaims, FakeQueue, FakeRepairs, FakeRisk, MemoryCatalog, ScriptedLedger};

struct World {
    ledger: Arc<ScriptedLedger>,
    risk: Arc<FakeRisk>,
    queue: Arc<FakeQueue>,
    claims: Arc<FakeClaims>,
    catalog: Arc<MemoryCatalog>,
    repairs: Arc<FakeRepairs>,
    metrics: Arc<RecordingMetrics>,
    clock: ManualClock,
    service: GrabService,
}

mod borrows;
mod dry_runs;
mod lookups;

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
    world_claiming(ledger, risk, queue, FakeClaims::default(), catalog, clock)
}

fn world_claiming(
    ledger: ScriptedLedger,
    risk: FakeRisk,
    queue: FakeQueue,
    claims: FakeClaims,
    catalog: MemoryCatalog,
    clock: ManualClock,
) -> World {
    let (ledger, risk, queue, catalog) = (Arc::new(ledger), Arc::new(risk), Arc::new(queue), Arc::new(catalog));
    let claims = Arc::new(claims);
    let repairs = Arc::new(FakeRepairs::default());
    let metrics = Arc::new(RecordingMetrics::default());
    let service = GrabService::new(
        GrabPorts {
            ledger: ledger.clone(),
            risk: risk.clone(),
            publisher: queue.clone(),
            claims: claims.clone(),
            catalog: catalog.clone(),
            repairs: repairs.clone(),
            entries: Arc::new(crate::testing::MemoryEntries::default()),
            clock: Arc::new(clock.clone()),
            metrics: metrics.clone(),
        },
        500,
    );
    World {
        ledger,
        risk,
        queue,
        claims,
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
        device: None,
    }
}

fn record(grant: &str, shard: u32) -> GrantRecord {
    GrantRecord {
        grant_id: crate::ids::GrantId::parse(grant).unwrap(),
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

/// On a cache whose failover may lose a told win, the claim guards the
/// user's ordinal: a win minted again for an ordinal claimed for another
/// grant is never sent (it would be rejected after its SUCCESS); the press
/// is BUSY, the rolled-back shard is dropped at once, and its rebuild is
/// asked for, not left to the next scheduled pass.
#[tokio::test]
async fn a_win_whose_users_ordinal_is_claimed_for_another_grant_is_busy_and_drops_its_shard_for_the_repair_at_once() {
    let ledger = ScriptedLedger {
        shards: 1,
        claim: Some(ClaimReply::Won(record("c-0-1", 0))),
        ..Default::default()
    };
    let held = FakeClaims {
        ordinal_held: true,
        ..Default::default()
    };
    let w = world_claiming(
        ledger,
        FakeRisk::allowing(),
        FakeQueue::default(),
        held,
        MemoryCatalog::default(),
        ManualClock::new(1_000),
    );
    let outcome = w.service.grab(&request("u")).await;
    assert!(matches!(outcome, Err(GrabError::NotQueued(_))), "{outcome:?}");
    assert!(w.queue.sent.lock().unwrap().is_empty(), "nothing sent");
    assert_eq!(w.repairs.asked.lock().unwrap().len(), 1, "the repair is asked for");
    assert!(
        w.ledger.calls().contains(&"drop 0".to_owned()),
        "the shard the claim proves rolled back is dropped at once: {:?}",
        w.ledger.calls()
    );
    assert_eq!(*w.risk.released.lock().unwrap(), 0, "a win keeps its risk hold");
}

/// A rebuild after a cache loss counts what is on its way from the claims:
/// a grant reaches the queue only once its claim is written, and a claim
/// that cannot be written holds the send back (BUSY; the outbox keeps the
/// grant, and the retry claims and sends it).
#[tokio::test]
async fn a_win_is_sent_only_after_its_claim_is_written() {
    let won = || ScriptedLedger {
        shards: 1,
        claim: Some(ClaimReply::Won(record("c-0-1", 0))),
        ..Default::default()
    };
    let refusing = FakeClaims {
        fail: true,
        ..Default::default()
    };
    let w = world_claiming(
        won(),
        FakeRisk::allowing(),
        FakeQueue::default(),
        refusing,
        MemoryCatalog::default(),
        ManualClock::new(1_000),
    );
    let outcome = w.service.grab(&request("u")).await;
    assert!(matches!(outcome, Err(GrabError::NotQueued(_))), "{outcome:?}");
    assert!(
        w.queue.sent.lock().unwrap().is_empty(),
        "nothing sent without its claim"
    );
    assert_eq!(w.metrics.total("GrantQueueFailed"), 1);
    assert_eq!(*w.risk.released.lock().unwrap(), 0, "a win keeps its risk hold");

    let failing_queue = FakeQueue {
        fail: true,
        ..Default::default()
    };
    let w = world(won(), FakeRisk::allowing(), failing_queue);
    let outcome = w.service.grab(&request("u")).await;
    assert!(matches!(outcome, Err(GrabError::NotQueued(_))), "{outcome:?}");
    let claimed: Vec<String> = w
        .claims
        .claimed
        .lock()
        .unwrap()
        .iter()
        .map(|g| g.grant_id.to_string())
        .collect();
    assert_eq!(claimed, vec!["c-0-1"], "the claim is written before the send is tried");

    let w = world(won(), FakeRisk::allowing(), FakeQueue::default());
    let outcome = w.service.grab(&request("u")).await;
    assert!(matches!(outcome, Ok(GrabOutcome::Won { .. })), "{outcome:?}");
    assert_eq!(*w.claims.claimed.lock().unwrap(), *w.queue.sent.lock().unwrap());
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

/// A commit's refusal is stored, and another copy of the press may hold
/// the same places: they go back only once a replica holds the loss (a
/// failover that forgot it would let that copy win on places given back).
/// Until then the press is not told it lost (BUSY), so its retry gives the
/// places back instead of their staying taken for the day.
#[tokio::test]
async fn a_loser_keeps_its_risk_hold_and_hears_busy_until_a_replica_holds_its_loss() {
    let w = world(
        ScriptedLedger {
            shards: 1,
            claim: Some(ClaimReply::Rejected(Rejection::AlreadyClaimed)),
            unreplicated: true,
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    let outcome = w.service.grab(&request("u")).await;
    assert!(matches!(outcome, Err(GrabError::NotReplicated)), "{outcome:?}");
    assert_eq!(
        *w.risk.released.lock().unwrap(),
        0,
        "kept: the loss may yet be forgotten"
    );
    assert_eq!(w.ledger.vouched.lock().unwrap().as_slice(), [(0, "lost".to_owned())]);
}

/// The retry of a press told BUSY for an unvouched loss replays the loss:
/// once a replica holds it, the places go back and the loss is told; while
/// none does, the retry hears BUSY again and gives nothing back.
#[tokio::test]
async fn a_replayed_loss_gives_its_places_back_only_once_a_replica_holds_it() {
    for (unreplicated, released) in [(true, 0), (false, 1)] {
        let w = world(
            ScriptedLedger {
                shards: 1,
                admit: Some(ClaimReply::Replay(Recorded::Closed(Rejection::AlreadyClaimed))),
                unreplicated,
                ..Default::default()
            },
            FakeRisk::allowing(),
            FakeQueue::default(),
        );
        let outcome = w.service.grab(&request("u")).await;
        if unreplicated {
            assert!(matches!(outcome, Err(GrabError::NotReplicated)), "{outcome:?}");
        } else {
            assert!(
                matches!(outcome, Ok(GrabOutcome::Rejected { replayed: true, .. })),
                "{outcome:?}"
            );
        }
        assert_eq!(
            *w.risk.released.lock().unwrap(),
            released,
            "unreplicated: {unreplicated}"
        );
        assert_eq!(w.ledger.vouched.lock().unwrap().as_slice(), [(0, "lost".to_owned())]);
    }
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

/// A restarted shard's memory of a win is heard before the reconciler's
/// check only when its grant's claim is durable: claimed, the grant is on
/// its way whatever the check decides; unclaimed, it may be a snapshot's
/// memory of a unit sold again since, so BUSY and a repair request, and
/// nothing is claimed or sent on its word.
#[tokio::test]
async fn a_win_a_restarted_shard_remembers_is_replayed_before_the_check_only_if_its_claim_is_durable() {
    let unverified = || ScriptedLedger {
        shards: 1,
        admit: Some(ClaimReply::ReplayUnverified(record("c-0-1", 0))),
        ..Default::default()
    };
    let grant = record("c-0-1", 0).into_grant(
        CouponId::parse("c").unwrap(),
        UserId::parse("u").unwrap(),
        RequestId::parse("r").unwrap(),
    );

    let claimed = FakeClaims::default();
    claimed.claimed.lock().unwrap().push(grant.clone());
    let w = world_claiming(
        unverified(),
        FakeRisk::allowing(),
        FakeQueue::default(),
        claimed,
        MemoryCatalog::default(),
        ManualClock::new(1_000),
    );
    let outcome = w.service.grab(&request("u")).await.unwrap();
    assert!(
        matches!(&outcome, GrabOutcome::Won { replayed: true, grant: g } if *g == grant),
        "{outcome:?}"
    );
    assert_eq!(
        w.queue.sent.lock().unwrap().len(),
        1,
        "sent again, as every replayed win"
    );

    let w = world(unverified(), FakeRisk::allowing(), FakeQueue::default());
    let outcome = w.service.grab(&request("u")).await;
    assert!(matches!(outcome, Err(GrabError::Unavailable(_))), "{outcome:?}");
    assert!(
        w.claims.claimed.lock().unwrap().is_empty(),
        "nothing claimed on its word"
    );
    assert!(w.queue.sent.lock().unwrap().is_empty(), "nothing sent on its word");
    assert_eq!(w.repairs.asked.lock().unwrap().len(), 1, "the check is asked for");
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
            claims: Arc::new(FakeClaims::default()),
            catalog: Arc::new(MemoryCatalog::default()),
            repairs: Arc::new(FakeRepairs::default()),
            entries: Arc::new(crate::testing::MemoryEntries::default()),
            clock: Arc::new(ManualClock::new(1_000)),
            metrics: Arc::new(RecordingMetrics::default()),
        },
        500,
    );
    let outcome = service.grab(&request("u")).await.unwrap();
    assert!(matches!(outcome, GrabOutcome::Won { replayed: false, .. }));
    assert_eq!(ledger.calls(), ["claim", "replicated:0"], "no admission first");
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
