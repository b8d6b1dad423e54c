use std::sync::Arc;

use super::*;
use crate::metrics::RecordingMetrics;
use crate::testing::MemoryBus;

const VALID_UNTIL: i64 = 10_000;

fn unused() -> UserCoupon {
    UserCoupon {
        coupon_id: CouponId::parse("spring-20").unwrap(),
        ordinal: 1,
        grant_id: GrantId::parse("spring-20-0-1-7").unwrap(),
        status: CouponState::Unused,
        name: "春季满减券".into(),
        amount: 2_000,
        received_at_ms: 1_000,
        valid_from_ms: 0,
        valid_until_ms: VALID_UNTIL,
        order_id: None,
        used_at_ms: None,
        returned_by: Vec::new(),
        returned_at_ms: None,
        revoked_at_ms: None,
    }
}

fn used_by(order: &str) -> UserCoupon {
    UserCoupon {
        status: CouponState::Used,
        order_id: Some(OrderId::parse(order).unwrap()),
        used_at_ms: Some(2_000),
        ..unused()
    }
}

fn returned_at(order: &str, at: i64) -> UserCoupon {
    UserCoupon {
        returned_by: vec![OrderId::parse(order).unwrap()],
        returned_at_ms: Some(at),
        ..unused()
    }
}

fn change(before: Option<UserCoupon>, after: Option<UserCoupon>) -> CouponChange {
    CouponChange {
        user: UserId::parse("u-1").unwrap(),
        before,
        after,
    }
}

fn ok(id: &str, c: CouponChange) -> Record {
    Record {
        id: id.into(),
        change: Ok(c),
    }
}

#[test]
fn an_issued_coupon_tells_the_winner_in_the_seeds_words() {
    let event = event_for(&change(None, Some(unused()))).unwrap();
    assert_eq!(event.transition, Transition::Issued);
    assert_eq!(event.event_id, "spring-20-0-1-7/issued");
    assert_eq!(event.message.zh, "您已成功领取春季满减券（20元），请尽快使用");
    assert_eq!(event.message.en, "You have claimed 春季满减券 (20 yuan). Use it soon!");
    assert_eq!(event.occurred_at_ms, 1_000);
    let json = serde_json::to_value(&event).unwrap();
    assert_eq!(json["type"], "CouponIssued");
    assert_eq!(json["userId"], "u-1");
    assert_eq!(json["validUntilMs"], VALID_UNTIL);
    assert!(json.get("orderId").is_none());
}

#[test]
fn each_stored_transition_makes_its_event_with_an_id_per_grant_transition_and_order() {
    let cases = [
        (
            Some(unused()),
            used_by("o-1"),
            Transition::Redeemed,
            "spring-20-0-1-7/redeemed/o-1",
        ),
        (
            Some(used_by("o-1")),
            returned_at("o-1", 3_000),
            Transition::Released,
            "spring-20-0-1-7/released/o-1",
        ),
        (
            Some(used_by("o-1")),
            returned_at("o-1", VALID_UNTIL),
            Transition::Expired,
            "spring-20-0-1-7/expired",
        ),
        (
            Some(unused()),
            UserCoupon {
                status: CouponState::Revoked,
                revoked_at_ms: Some(4_000),
                ..unused()
            },
            Transition::Revoked,
            "spring-20-0-1-7/revoked",
        ),
    ];
    for (before, after, transition, id) in cases {
        let event = event_for(&change(before, Some(after))).unwrap();
        assert_eq!((event.transition, event.event_id.as_str()), (transition, id));
    }
    // A second order's redemption after a return is its own event.
    let again = event_for(&change(Some(returned_at("o-1", 3_000)), Some(used_by("o-2")))).unwrap();
    assert_eq!(again.event_id, "spring-20-0-1-7/redeemed/o-2");
    assert_eq!(again.order_id.unwrap().as_str(), "o-2");
}

#[test]
fn writes_that_change_no_status_and_ttl_removals_are_not_news() {
    assert!(event_for(&change(Some(unused()), Some(unused()))).is_none());
    assert!(event_for(&change(Some(unused()), None)).is_none());
    assert!(event_for(&change(Some(used_by("o-1")), Some(used_by("o-1")))).is_none());
}

#[test]
fn amounts_read_as_yuan() {
    assert_eq!(yuan(2_000), "20");
    assert_eq!(yuan(1_050), "10.50");
    assert_eq!(yuan(5), "0.05");
}

#[tokio::test]
async fn a_refused_event_and_an_unreadable_record_are_named_in_stream_order_and_the_rest_published() {
    let bus = Arc::new(MemoryBus::default());
    bus.refuse.lock().unwrap().push("spring-20-0-1-7/redeemed/o-1".into());
    let metrics = Arc::new(RecordingMetrics::default());
    let service = NotifierService::new(bus.clone(), metrics.clone());
    let failed = service
        .handle(vec![
            ok("100", change(None, Some(unused()))),
            ok("101", change(Some(unused()), Some(used_by("o-1")))),
            Record {
                id: "102".into(),
                change: Err("no status".into()),
            },
            ok("103", change(Some(unused()), Some(unused()))),
        ])
        .await;
    assert_eq!(failed, vec!["101".to_owned(), "102".to_owned()]);
    let accepted = bus.accepted.lock().unwrap();
    assert_eq!(accepted.len(), 1);
    assert_eq!(accepted[0].transition, Transition::Issued);
    assert_eq!(metrics.total("CouponEvents"), 1);
    assert_eq!(metrics.total("NotifierFailures"), 1);
    assert_eq!(metrics.total("NotifierUnreadable"), 1);
    assert_eq!(metrics.total("NotifierSkipped"), 1);
}

#[tokio::test]
async fn a_retried_batch_publishes_the_same_ids_again() {
    let bus = Arc::new(MemoryBus::default());
    let service = NotifierService::new(bus.clone(), Arc::new(RecordingMetrics::default()));
    for _ in 0..2 {
        let failed = service.handle(vec![ok("1", change(None, Some(unused())))]).await;
        assert!(failed.is_empty());
    }
    let ids: Vec<String> = bus
        .accepted
        .lock()
        .unwrap()
        .iter()
        .map(|e| e.event_id.clone())
        .collect();
    assert_eq!(ids, vec!["spring-20-0-1-7/issued"; 2]);
}
