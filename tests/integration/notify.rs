//! The notifier against the real emulator end to end: coupons issued,
//! redeemed, given back, expired on return and revoked through the real
//! functions; the user-coupons change stream read as Lambda reads it; the
//! notifier publishing to an EventBridge bus; a rule delivering to SQS.

use std::collections::BTreeSet;
use std::sync::Arc;

use coupon_adapters::eventbridge::EventBridgeBus;
use coupon_domain::clock::Clock;
use coupon_domain::metrics::RecordingMetrics;
use lambda_runtime::{Context, LambdaEvent};
use notifier::{handle, wire, Clients, Notifier};
use serde_json::{json, Value};

use crate::support::{unique, CouponStream, Harness, TestBus};

fn notifier_on(h: &Harness, bus: &str) -> Notifier {
    wire(Clients {
        bus: Arc::new(EventBridgeBus::new(
            coupon_adapters::eventbridge::Client::new(&h.stack.sdk),
            bus,
        )),
        metrics: Arc::new(RecordingMetrics::default()),
    })
}

async fn notify(notifier: &Notifier, records: Vec<Value>) -> Vec<String> {
    let response = handle(
        notifier,
        LambdaEvent::new(json!({ "Records": records }), Context::default()),
    )
    .await
    .expect("the notifier answers");
    response
        .batch_item_failures
        .into_iter()
        .filter_map(|f| f.item_identifier)
        .collect()
}

async fn order(h: &Harness, method: &str, path: String, user: &str, grant: &str) {
    let r = h
        .admin_call(method, &path, Some(json!({"userId": user, "grantId": grant})))
        .await;
    assert_eq!(r.code(), "SUCCESS", "{path}: {}", r.body);
}

#[tokio::test]
async fn every_transition_a_coupon_makes_reaches_the_bus_once_under_a_stable_id() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    h.admin_create(&def).await;
    let (spender, keeper) = (unique("spender"), unique("keeper"));
    let g1 = h.grab(&def.coupon_id, &spender, "r1").await.grant_id().unwrap();
    let g2 = h.grab(&def.coupon_id, &keeper, "r1").await.grant_id().unwrap();
    h.pump().await;
    let (o1, o2) = (unique("order"), unique("order"));
    order(&h, "PUT", format!("/redemptions/{o1}"), &spender, &g1).await;
    order(&h, "POST", format!("/redemptions/{o1}/return"), &spender, &g1).await;
    order(&h, "PUT", format!("/redemptions/{o2}"), &spender, &g1).await;
    // The second order is refunded after the coupon's validity: it comes
    // back expired.
    h.clock.advance(def.valid_until_ms - h.clock.now_ms());
    order(&h, "POST", format!("/redemptions/{o2}/return"), &spender, &g1).await;
    let revoke = format!("/admin/users/{keeper}/coupons/{g2}/revoked");
    let r = h.admin_call("PUT", &revoke, Some(json!({"reason": "fraud"}))).await;
    assert_eq!(r.code(), "SUCCESS", "{}", r.body);

    let records = CouponStream::open(&h.stack)
        .await
        .records_of(&[&spender, &keeper])
        .await;
    assert_eq!(records.len(), 7, "two issues and five changes on the stream");
    let bus = TestBus::create(&h.stack).await;
    let notifier = notifier_on(&h, &bus.name);
    assert!(notify(&notifier, records.clone()).await.is_empty());

    let delivered = bus.delivered(&h.stack, 7).await;
    let mut seen: Vec<(String, String)> = delivered
        .iter()
        .map(|e| {
            assert_eq!(e["source"], "coupon-grab");
            assert_eq!(e["detail-type"], e["detail"]["type"]);
            (
                e["detail"]["eventId"].as_str().unwrap().to_owned(),
                e["detail-type"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    seen.sort();
    let mut want = vec![
        (format!("{g1}/issued"), "CouponIssued".to_owned()),
        (format!("{g1}/redeemed/{o1}"), "CouponRedeemed".to_owned()),
        (format!("{g1}/released/{o1}"), "CouponReleased".to_owned()),
        (format!("{g1}/redeemed/{o2}"), "CouponRedeemed".to_owned()),
        (format!("{g1}/expired"), "CouponExpired".to_owned()),
        (format!("{g2}/issued"), "CouponIssued".to_owned()),
        (format!("{g2}/revoked"), "CouponRevoked".to_owned()),
    ];
    want.sort();
    assert_eq!(seen, want);

    let issued = delivered
        .iter()
        .find(|e| e["detail"]["eventId"] == format!("{g2}/issued"))
        .unwrap();
    let detail = &issued["detail"];
    assert_eq!(detail["userId"], keeper.as_str());
    assert_eq!(detail["couponId"], def.coupon_id.as_str());
    assert_eq!(detail["amount"], def.amount);
    assert_eq!(detail["validUntilMs"], def.valid_until_ms);
    assert_eq!(
        detail["message"]["zh"],
        format!(
            "您已成功领取{}（{}元），请尽快使用",
            def.name,
            coupon_domain::notify::yuan(def.amount)
        )
    );

    // The stream delivers a batch again after a failure: the same ids come
    // again, and a consumer keeping ids drops every one.
    assert!(notify(&notifier, records).await.is_empty());
    let again: BTreeSet<String> = bus
        .delivered(&h.stack, 7)
        .await
        .iter()
        .map(|e| e["detail"]["eventId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(again, seen.into_iter().map(|(id, _)| id).collect());
}

#[tokio::test]
async fn a_bus_that_takes_nothing_leaves_every_record_to_the_stream_and_nothing_is_acknowledged() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    h.admin_create(&def).await;
    let user = unique("winner");
    h.grab(&def.coupon_id, &user, "r1").await.grant_id().unwrap();
    h.pump().await;
    let records = CouponStream::open(&h.stack).await.records_of(&[&user]).await;
    assert_eq!(records.len(), 1);
    // An endpoint that refuses every connection: the one failure every
    // emulator and AWS itself produce alike (a missing bus is refused by
    // moto but taken silently by LocalStack).
    let refusing = aws_sdk_eventbridge::config::Builder::from(&h.stack.sdk)
        .endpoint_url("http://127.0.0.1:9")
        .build();
    let notifier = wire(Clients {
        bus: Arc::new(EventBridgeBus::new(
            coupon_adapters::eventbridge::Client::from_conf(refusing),
            unique("bus"),
        )),
        metrics: Arc::new(RecordingMetrics::default()),
    });
    let failed = notify(&notifier, records.clone()).await;
    assert_eq!(
        failed,
        vec![records[0]["dynamodb"]["SequenceNumber"].as_str().unwrap().to_owned()]
    );
}
