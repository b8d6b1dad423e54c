//! Step 0: a coupon Redis lost answers BUSY and asks for its repair; one
//! never created is NOT_FOUND, looked up once per window.

use super::*;

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
