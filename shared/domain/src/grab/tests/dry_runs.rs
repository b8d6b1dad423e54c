//! The dry run: the answer a press would get now, from read-only calls
//! only (no claim, no reservation, no send), in the order a press decides.

use super::ports::PeekReply;
use super::*;

fn ask(user: &str) -> DryRun {
    DryRun {
        coupon: CouponId::parse("c").unwrap(),
        user: UserId::parse(user).unwrap(),
        level: 0,
        ip: None,
        device: None,
    }
}

/// Every ledger call was a read a dry run may make.
fn only_reads(w: &World) -> bool {
    w.ledger
        .calls()
        .iter()
        .all(|c| c.starts_with("peek:") || c.starts_with("stock:"))
}

#[tokio::test]
async fn a_press_that_would_win_is_told_so_and_nothing_is_claimed_reserved_or_sent() {
    let w = world(
        ScriptedLedger {
            shards: 1,
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    assert_eq!(w.service.eligibility(&ask("u")).await.unwrap(), Eligibility::WouldWin);
    assert!(only_reads(&w), "{:?}", w.ledger.calls());
    assert_eq!(*w.risk.reserved.lock().unwrap(), 0);
    assert!(w.queue.sent.lock().unwrap().is_empty());
}

#[tokio::test]
async fn what_the_home_shard_refuses_is_the_answer_and_the_risk_rules_are_not_read() {
    for reason in [
        Rejection::AlreadyClaimed,
        Rejection::NotStarted { starts_at_ms: 5_000 },
        Rejection::RateLimited { retry_after_ms: 250 },
        Rejection::SoldOut,
    ] {
        let w = world(
            ScriptedLedger {
                shards: 2,
                peek: Some(PeekReply::Rejected(reason.clone())),
                ..Default::default()
            },
            FakeRisk {
                refuse: Some(RiskReason::Blacklisted),
                ..FakeRisk::allowing()
            },
            FakeQueue::default(),
        );
        // The shard's refusal comes first, as for a press: the blacklist
        // is read only for a press the shard would let through.
        assert_eq!(
            w.service.eligibility(&ask("u")).await.unwrap(),
            Eligibility::Refused(reason)
        );
        assert!(only_reads(&w));
    }
}

#[tokio::test]
async fn a_press_the_risk_rules_would_refuse_hears_the_risk_refusal() {
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
    assert_eq!(
        w.service.eligibility(&ask("u")).await.unwrap(),
        Eligibility::Refused(Rejection::Risk(RiskReason::DailyLimit))
    );
    assert_eq!(*w.risk.reserved.lock().unwrap(), 0);
}

#[tokio::test]
async fn an_empty_home_shard_would_borrow_while_another_shard_has_stock() {
    let w = world(
        ScriptedLedger {
            shards: 4,
            peek: Some(PeekReply::Empty { next_wave_at_ms: None }),
            stocks: HashMap::from([(2, 1)]),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    let home = home_shard(&UserId::parse("u").unwrap(), 4);
    assert_eq!(w.service.eligibility(&ask("u")).await.unwrap(), Eligibility::WouldWin);
    // The donors in a press's order, stopping at the first with stock.
    let mut expected = vec![format!("peek:{home}")];
    for offset in 1..4 {
        let donor = (home + offset) % 4;
        expected.push(format!("stock:{donor}"));
        if donor == 2 {
            break;
        }
    }
    assert_eq!(w.ledger.calls(), expected);
}

#[tokio::test]
async fn every_shard_empty_is_sold_out() {
    let w = world(
        ScriptedLedger {
            shards: 3,
            peek: Some(PeekReply::Empty { next_wave_at_ms: None }),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    assert_eq!(
        w.service.eligibility(&ask("u")).await.unwrap(),
        Eligibility::Refused(Rejection::SoldOut)
    );
    assert_eq!(w.ledger.calls().len(), 3, "the home shard and both others");
}

#[tokio::test]
async fn after_a_sell_out_the_instance_answers_from_memory_without_redis() {
    let w = world(
        ScriptedLedger {
            shards: 1,
            claim: Some(ClaimReply::Rejected(Rejection::SoldOut)),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    let _ = w.service.grab(&request("first")).await.unwrap();
    let before = w.ledger.calls().len();
    assert_eq!(
        w.service.eligibility(&ask("u")).await.unwrap(),
        Eligibility::Refused(Rejection::SoldOut)
    );
    assert_eq!(w.ledger.calls().len(), before, "no call after the memory answered");
}

#[tokio::test]
async fn a_home_shard_with_no_state_is_busy_and_asks_for_its_repair() {
    let w = world(
        ScriptedLedger {
            shards: 2,
            peek: Some(PeekReply::Rejected(Rejection::NotFound)),
            ..Default::default()
        },
        FakeRisk::allowing(),
        FakeQueue::default(),
    );
    let answer = w.service.eligibility(&ask("u")).await;
    assert!(matches!(answer, Err(GrabError::Unavailable(_))), "{answer:?}");
    assert_eq!(w.repairs.asked.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_coupon_never_created_is_not_found() {
    let w = world(ScriptedLedger::default(), FakeRisk::allowing(), FakeQueue::default());
    assert_eq!(
        w.service.eligibility(&ask("u")).await.unwrap(),
        Eligibility::Refused(Rejection::NotFound)
    );
}
