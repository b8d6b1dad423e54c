//! Handler tests from a recorded stream event (`tests/fixtures`), over the
//! in-memory bus.

use std::sync::Arc;

use coupon_domain::metrics::RecordingMetrics;
use coupon_domain::notify::Transition;
use coupon_domain::testing::MemoryBus;
use lambda_runtime::{Context, LambdaEvent};
use serde_json::Value;

use super::*;

fn fixture() -> Value {
    serde_json::from_str(include_str!("../../../tests/fixtures/notifier_stream.json")).unwrap()
}

fn notifier(bus: Arc<MemoryBus>) -> Notifier {
    wire(Clients {
        bus,
        metrics: Arc::new(RecordingMetrics::default()),
    })
}

async fn call(notifier: &Notifier, payload: Value) -> Result<Value, Error> {
    let response = handle(notifier, LambdaEvent::new(payload, Context::default())).await?;
    Ok(serde_json::to_value(response).unwrap())
}

#[tokio::test]
async fn an_issue_and_a_redemption_become_two_events_and_a_ttl_removal_none() {
    let bus = Arc::new(MemoryBus::default());
    let response = call(&notifier(bus.clone()), fixture()).await.unwrap();
    assert_eq!(response["batchItemFailures"], serde_json::json!([]));
    let events = bus.accepted.lock().unwrap();
    let seen: Vec<(Transition, &str)> = events.iter().map(|e| (e.transition, e.event_id.as_str())).collect();
    assert_eq!(
        seen,
        vec![
            (Transition::Issued, "spring-20-0-1-7/issued"),
            (Transition::Redeemed, "spring-20-0-1-7/redeemed/order-77"),
        ]
    );
    assert_eq!(events[0].message.zh, "您已成功领取春季满减券（20元），请尽快使用");
}

#[tokio::test]
async fn a_refused_event_names_its_record_by_sequence_number() {
    let bus = Arc::new(MemoryBus::default());
    bus.refuse
        .lock()
        .unwrap()
        .push("spring-20-0-1-7/redeemed/order-77".into());
    let response = call(&notifier(bus), fixture()).await.unwrap();
    assert_eq!(
        response["batchItemFailures"],
        serde_json::json!([{"itemIdentifier": "111100000000000000002"}])
    );
}

#[tokio::test]
async fn a_record_without_a_sequence_number_fails_the_whole_batch() {
    let mut payload = fixture();
    payload["Records"][1]["dynamodb"]
        .as_object_mut()
        .unwrap()
        .remove("SequenceNumber");
    let bus = Arc::new(MemoryBus::default());
    assert!(call(&notifier(bus.clone()), payload).await.is_err());
    assert!(bus.accepted.lock().unwrap().is_empty());
    assert!(call(&notifier(bus), serde_json::json!({"detail": {}})).await.is_err());
}
