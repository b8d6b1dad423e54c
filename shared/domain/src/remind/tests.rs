use std::sync::Arc;

use super::*;
use crate::clock::ManualClock;
use crate::coupon::Wave;
use crate::testing::{MemoryDefinitions, MemoryReminderBus, MemoryReminders};

const NOW: i64 = 10_000_000;
const MIN: i64 = 60_000;

fn def(id: &str, start: i64) -> CouponDefinition {
    let mut d = crate::coupon::tests::sample();
    d.coupon_id = CouponId::parse(id).unwrap();
    d.grab_start_ms = start;
    d.grab_end_ms = start + 60 * MIN;
    d.valid_from_ms = start;
    d.valid_until_ms = start + 120 * MIN;
    d
}

/// Three waves, 10 minutes apart, the first at the window's start.
fn waved(id: &str, start: i64) -> CouponDefinition {
    let mut d = def(id, start);
    d.total_stock = 30;
    d.waves = (0..3)
        .map(|k| Wave {
            at_ms: start + k * 10 * MIN,
            units: 10,
        })
        .collect();
    d
}

struct World {
    store: Arc<MemoryReminders>,
    bus: Arc<MemoryReminderBus>,
    clock: ManualClock,
    reminders: Reminders,
    sender: ReminderSender,
}

fn world(defs: &[CouponDefinition]) -> World {
    let store = Arc::new(MemoryReminders::default());
    let bus = Arc::new(MemoryReminderBus::default());
    let clock = ManualClock::new(NOW);
    World {
        reminders: Reminders::new(
            store.clone(),
            Arc::new(MemoryDefinitions::with(defs)),
            Arc::new(clock.clone()),
            DEFAULT_LEAD_MS,
        ),
        sender: ReminderSender::new(store.clone(), bus.clone(), Arc::new(clock.clone()), DEFAULT_LEAD_MS),
        store,
        bus,
        clock,
    }
}

fn user(u: &str) -> UserId {
    UserId::parse(u).unwrap()
}

fn coupon(c: &str) -> CouponId {
    CouponId::parse(c).unwrap()
}

#[test]
fn the_next_opening_is_the_start_then_each_wave_and_none_once_nothing_is_to_come() {
    let plain = def("c1", NOW + MIN);
    assert_eq!(next_opening(&plain, NOW), Some(NOW + MIN));
    assert_eq!(next_opening(&plain, NOW + MIN), None, "on sale, no wave: nothing ahead");
    let w = waved("c2", NOW);
    assert_eq!(next_opening(&w, NOW - 1), Some(NOW));
    assert_eq!(next_opening(&w, NOW), Some(NOW + 10 * MIN));
    assert_eq!(next_opening(&w, NOW + 20 * MIN), None);
    let mut late = def("c3", NOW);
    late.waves = vec![Wave {
        at_ms: NOW + 5 * MIN,
        units: late.total_stock,
    }];
    assert_eq!(
        next_opening(&late, NOW - MIN),
        Some(NOW + 5 * MIN),
        "the first wave, not the start"
    );
}

#[tokio::test]
async fn a_subscription_is_idempotent_and_says_when_the_reminder_goes_out() {
    let w = world(&[def("c1", NOW + 30 * MIN)]);
    let first = w.reminders.subscribe(&user("u1"), &coupon("c1")).await.unwrap();
    w.clock.advance(1_000);
    let again = w.reminders.subscribe(&user("u1"), &coupon("c1")).await.unwrap();
    assert_eq!(first, again, "the same reminder, created once");
    assert_eq!(first.opens_at_ms, Some(NOW + 30 * MIN));
    assert_eq!(first.remind_at_ms, Some(NOW + 25 * MIN));
    assert_eq!(w.store.items.lock().unwrap().len(), 1);
    assert_eq!(w.reminders.list(&user("u1")).await.unwrap(), vec![first]);
}

#[tokio::test]
async fn a_reminder_for_an_unknown_ended_offline_or_running_coupon_is_refused() {
    let mut offline = def("off", NOW + MIN);
    offline.status = CouponStatus::Offline;
    let w = world(&[def("ended", NOW - 120 * MIN), offline, def("running", NOW - MIN)]);
    let u = user("u1");
    assert!(matches!(
        w.reminders.subscribe(&u, &coupon("nope")).await,
        Err(RemindError::NotFound)
    ));
    assert!(matches!(
        w.reminders.subscribe(&u, &coupon("ended")).await,
        Err(RemindError::Ended)
    ));
    assert!(matches!(
        w.reminders.subscribe(&u, &coupon("off")).await,
        Err(RemindError::Ended)
    ));
    assert!(matches!(
        w.reminders.subscribe(&u, &coupon("running")).await,
        Err(RemindError::NothingAhead)
    ));
    assert!(w.store.items.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_user_keeps_at_most_the_bound_of_reminders() {
    let defs: Vec<CouponDefinition> = (0..=MAX_PER_USER).map(|i| def(&format!("c{i}"), NOW + MIN)).collect();
    let w = world(&defs);
    for d in &defs[..MAX_PER_USER] {
        w.reminders.subscribe(&user("u1"), &d.coupon_id).await.unwrap();
    }
    let over = w.reminders.subscribe(&user("u1"), &defs[MAX_PER_USER].coupon_id).await;
    assert!(matches!(over, Err(RemindError::TooMany { max: MAX_PER_USER })));
    // One already held is still answered.
    assert!(w.reminders.subscribe(&user("u1"), &defs[0].coupon_id).await.is_ok());
}

#[tokio::test]
async fn each_subscriber_is_told_once_per_wave_within_the_lead_and_never_after_it_opened() {
    let d = waved("c1", NOW + 30 * MIN);
    let w = world(std::slice::from_ref(&d));
    for u in ["u1", "u2"] {
        w.reminders.subscribe(&user(u), &coupon("c1")).await.unwrap();
    }
    let defs = std::slice::from_ref(&d);
    // Before the lead: nothing.
    assert_eq!(w.sender.send_due(defs).await, SendReport::default());
    // Within it: both, once, however many passes run.
    w.clock.set(NOW + 26 * MIN);
    assert_eq!(w.sender.send_due(defs).await.sent, 2);
    assert_eq!(w.sender.send_due(defs).await, SendReport::default());
    // The next wave: both again, under new ids.
    w.clock.set(NOW + 36 * MIN);
    assert_eq!(w.sender.send_due(defs).await.sent, 2);
    let ids: Vec<String> = w
        .bus
        .accepted
        .lock()
        .unwrap()
        .iter()
        .map(|e| e.event_id.clone())
        .collect();
    assert_eq!(
        ids,
        vec![
            format!("c1/u1/starting/{}", NOW + 30 * MIN),
            format!("c1/u2/starting/{}", NOW + 30 * MIN),
            format!("c1/u1/starting/{}", NOW + 40 * MIN),
            format!("c1/u2/starting/{}", NOW + 40 * MIN),
        ]
    );
    let first = w.bus.accepted.lock().unwrap()[0].clone();
    assert_eq!((first.wave, first.kind), (Some(1), SALE_STARTING));
    assert!(first.message.en.contains("opens in 4 min"), "{}", first.message.en);
    // A pass that runs only after the third wave opened tells nobody of it.
    w.clock.set(NOW + 50 * MIN + 1);
    assert_eq!(w.sender.send_due(defs).await, SendReport::default());
}

#[tokio::test]
async fn a_refused_event_comes_again_on_the_next_pass_and_a_cancelled_reminder_never() {
    let d = def("c1", NOW + 10 * MIN);
    let w = world(std::slice::from_ref(&d));
    for u in ["u1", "u2", "u3"] {
        w.reminders.subscribe(&user(u), &coupon("c1")).await.unwrap();
    }
    assert!(w.reminders.cancel(&user("u3"), &coupon("c1")).await.unwrap());
    assert!(
        !w.reminders.cancel(&user("u3"), &coupon("c1")).await.unwrap(),
        "a repeat is no error"
    );
    let refused = format!("c1/u2/starting/{}", NOW + 10 * MIN);
    w.bus.refuse.lock().unwrap().push(refused.clone());
    w.clock.set(NOW + 6 * MIN);
    let defs = std::slice::from_ref(&d);
    let report = w.sender.send_due(defs).await;
    assert_eq!((report.sent, report.failed), (1, 1));
    w.bus.refuse.lock().unwrap().clear();
    assert_eq!(w.sender.send_due(defs).await.sent, 1);
    let told: Vec<String> = w
        .bus
        .accepted
        .lock()
        .unwrap()
        .iter()
        .map(|e| e.user_id.as_str().to_owned())
        .collect();
    assert_eq!(told, vec!["u1", "u2"]);
}

#[tokio::test]
async fn two_passes_at_once_publish_under_one_id_and_mark_once() {
    let d = def("c1", NOW + 10 * MIN);
    let w = world(std::slice::from_ref(&d));
    w.reminders.subscribe(&user("u1"), &coupon("c1")).await.unwrap();
    w.clock.set(NOW + 6 * MIN);
    let defs = std::slice::from_ref(&d);
    let (a, b) = tokio::join!(w.sender.send_due(defs), w.sender.send_due(defs));
    assert_eq!(a.sent + b.sent, 1);
    let ids: std::collections::HashSet<String> = w
        .bus
        .accepted
        .lock()
        .unwrap()
        .iter()
        .map(|e| e.event_id.clone())
        .collect();
    assert_eq!(ids.len(), 1, "any repeat carries the same id");
}
