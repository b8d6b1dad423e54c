//! Remind me, from the subscription to the event on a bus: the wallet's
//! `PUT /me/reminders/{couponId}` stores it, the reconciler's schedule
//! sends `CouponSaleStarting` within the lead before the sale and before
//! each wave, once per subscriber and opening, to a real local EventBridge
//! bus whose rule delivers it to a queue.
//!
//! Each test moves its clock to an epoch of its own, so the live coupons
//! the sender looks at are its own.

use std::collections::BTreeSet;
use std::sync::Arc;

use coupon_domain::coupon::{CouponDefinition, Wave};
use lambda_runtime::{Context, LambdaEvent};
use serde_json::{json, Value};
use tokio::sync::Notify;

use crate::support::{Harness, TestBus, HOUR};

const MIN: i64 = 60_000;

/// Six units in three waves 20 minutes apart, the first half an hour from
/// the test's epoch.
fn three_waves(h: &Harness, now: i64) -> CouponDefinition {
    let mut def = h.coupon(6);
    let start = now + 30 * MIN;
    def.grab_start_ms = start;
    def.grab_end_ms = start + 3 * HOUR;
    def.valid_from_ms = start;
    def.valid_until_ms = start + 24 * HOUR;
    def.waves = (0..3)
        .map(|k| Wave {
            at_ms: start + k * 20 * MIN,
            units: 2,
        })
        .collect();
    def
}

async fn sent(app: &reconciler::App) -> Value {
    reconciler::remind(app).await.expect("a bus is configured")
}

#[tokio::test]
async fn each_subscriber_hears_on_the_bus_before_the_sale_and_before_each_wave_exactly_once() {
    let h = Harness::new().await;
    let now = h.own_epoch();
    let def = three_waves(&h, now);
    let coupon = h.create(&def).await;
    let start = def.grab_start_ms;
    let path = format!("/me/reminders/{coupon}");
    for user in ["alice", "bob", "alice"] {
        let put = h.wallet_call("PUT", &path, user).await;
        assert_eq!(put.code(), "SUCCESS", "{}", put.body);
        assert_eq!(put.body["data"]["opensAtMs"], start);
        assert_eq!(put.body["data"]["remindAtMs"], start - 5 * MIN);
    }
    let listed = h.wallet_get("/me/reminders", "alice").await;
    let ours: Vec<&Value> = listed.body["data"]["reminders"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["couponId"] == coupon.as_str())
        .collect();
    assert_eq!(
        ours.len(),
        1,
        "a repeated subscription is one reminder: {}",
        listed.body
    );

    let bus = TestBus::create(&h.stack).await;
    let app = h.reconciler_app(&bus.name);
    assert_eq!(sent(&app).await["sent"], 0, "not within the lead yet");
    h.clock.set(start - 4 * MIN);
    assert_eq!(sent(&app).await["sent"], 2);
    assert_eq!(sent(&app).await["sent"], 0, "once per opening, however many passes");
    h.clock.set(start + 16 * MIN);
    assert_eq!(sent(&app).await["sent"], 2, "before the second wave");
    let gone = h.wallet_call("DELETE", &path, "bob").await;
    assert_eq!(
        (gone.code(), &gone.body["data"]["removed"]),
        ("SUCCESS", &Value::Bool(true))
    );
    h.clock.set(start + 36 * MIN);
    assert_eq!(sent(&app).await["sent"], 1, "bob cancelled before the third");

    let delivered = bus.delivered(&h.stack, 5).await;
    let seen: BTreeSet<(String, String, i64)> = delivered
        .iter()
        .map(|e| {
            assert_eq!(e["detail-type"], "CouponSaleStarting");
            assert_eq!(e["detail"]["couponId"], coupon.as_str());
            (
                e["detail"]["eventId"].as_str().unwrap().to_owned(),
                e["detail"]["userId"].as_str().unwrap().to_owned(),
                e["detail"]["wave"].as_i64().unwrap(),
            )
        })
        .collect();
    let expected: BTreeSet<(String, String, i64)> = [("alice", 1), ("bob", 1), ("alice", 2), ("bob", 2), ("alice", 3)]
        .into_iter()
        .map(|(user, wave)| {
            let at = start + (wave - 1) * 20 * MIN;
            (format!("{coupon}/{user}/starting/{at}"), user.to_owned(), wave)
        })
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(delivered.len(), 5, "no repeat reached the bus");
}

#[tokio::test]
async fn a_reminder_for_an_unknown_ended_or_open_coupon_is_a_clear_4xx() {
    let h = Harness::new().await;
    let now = h.own_epoch();
    let mut ended = h.coupon(2);
    ended.grab_start_ms = now - 3 * HOUR;
    ended.grab_end_ms = now - HOUR;
    ended.valid_from_ms = now - 3 * HOUR;
    ended.valid_until_ms = now + 24 * HOUR;
    let mut open = h.coupon(2);
    open.grab_start_ms = now - HOUR;
    open.grab_end_ms = now + HOUR;
    open.valid_from_ms = now - HOUR;
    open.valid_until_ms = now + 24 * HOUR;
    // Created before their windows are over, as an operator would have.
    h.clock.set(now - 4 * HOUR);
    let ended = h.create(&ended).await;
    let open = h.create(&open).await;
    h.clock.set(now);
    let cases = [
        (
            format!("/me/reminders/{}", h.coupon(1).coupon_id),
            404,
            "COUPON_NOT_FOUND",
            None,
        ),
        (
            format!("/me/reminders/{ended}"),
            409,
            "NOTHING_TO_REMIND",
            Some("ENDED"),
        ),
        (
            format!("/me/reminders/{open}"),
            409,
            "NOTHING_TO_REMIND",
            Some("OPEN_NOW"),
        ),
        ("/me/reminders/bad%20id".to_owned(), 400, "INVALID_REQUEST", None),
    ];
    for (path, status, code, reason) in cases {
        let resp = h.wallet_call("PUT", &path, "carol").await;
        assert_eq!((resp.status, resp.code()), (status, code), "{path}: {}", resp.body);
        if let Some(reason) = reason {
            assert_eq!(resp.body["data"]["reason"], reason, "{path}");
        }
    }
    let none = h.wallet_call("DELETE", &format!("/me/reminders/{open}"), "carol").await;
    assert_eq!(
        (none.code(), &none.body["data"]["removed"]),
        ("SUCCESS", &Value::Bool(false))
    );
}

/// On a loaded machine a pass over many coupons took longer than the time
/// left before a wave: the reminders, sent after it, found the wave open
/// and skipped it. They go out beside the pass now, and a pass that fails
/// keeps none of them back.
#[tokio::test]
async fn a_scheduled_pass_sends_the_reminders_due_while_its_reconciliation_is_held_up_and_when_it_fails() {
    let h = Harness::new().await;
    let now = h.own_epoch();
    let def = three_waves(&h, now);
    let coupon = h.create(&def).await;
    for user in ["alice", "bob"] {
        let put = h.wallet_call("PUT", &format!("/me/reminders/{coupon}"), user).await;
        assert_eq!(put.code(), "SUCCESS", "{}", put.body);
    }
    h.clock.set(def.grab_start_ms - 4 * MIN);
    let bus = TestBus::create(&h.stack).await;
    let release = Arc::new(Notify::new());
    let app = reconciler::App {
        reconciler: h.reconciler_held_then_failing(release.clone()),
        ..h.reconciler_app(&bus.name)
    };
    let app = Arc::new(app);
    let schedule = LambdaEvent::new(json!({"source": "aws.scheduler"}), Context::default());
    let invocation = tokio::spawn({
        let app = app.clone();
        async move { reconciler::handle(&app, schedule).await.map_err(|e| e.to_string()) }
    });

    let delivered = bus.delivered(&h.stack, 2).await;
    assert!(!invocation.is_finished(), "the pass is still held up");
    let users: BTreeSet<&str> = delivered
        .iter()
        .map(|e| e["detail"]["userId"].as_str().unwrap())
        .collect();
    assert_eq!(users, BTreeSet::from(["alice", "bob"]), "{delivered:?}");
    release.notify_one();
    let failed = invocation.await.unwrap();
    assert!(
        failed.is_err(),
        "the pass's failure is still the invocation's: {failed:?}"
    );
    assert_eq!(
        sent(&app).await["sent"],
        0,
        "the reminders were marked: the next pass sends none again"
    );
}
