//! Telling the world what happened to a coupon: the seed's notification
//! service ("您已成功领取{券名}（{金额}元），请尽快使用"), done with the
//! user-coupons table's change stream as the outbox.
//!
//! No writer publishes anything. Every change to a user coupon (issue,
//! redemption, return, revocation) is one write to DynamoDB, and DynamoDB
//! Streams hands that write to the notifier exactly as it was made, in
//! order per item, for 24 hours. The notifier turns each change into at most
//! one domain event ([`event_for`], pure) and publishes it to an event bus
//! ([`EventBus`]). A write can therefore never be told without having
//! happened, nor happen without being told: there is no dual write to get
//! half right.
//!
//! Delivery is at least once (a retried batch publishes again), so every
//! event carries an id derived from the grant and the transition (and the
//! order, for the transitions an order makes): a consumer keeps the ids it
//! has handled and drops a repeat. The same id for the same transition, on
//! any retry, from any instance.
//!
//! # What counts as a transition
//!
//! | before -> after (stored status) | event |
//! |---|---|
//! | nothing -> UNUSED | `CouponIssued` |
//! | UNUSED -> USED | `CouponRedeemed` (with the order) |
//! | USED -> UNUSED, before `validUntilMs` | `CouponReleased` (the order gave it back) |
//! | USED -> UNUSED, at or after `validUntilMs` | `CouponExpired` (it came back past its validity) |
//! | UNUSED -> REVOKED | `CouponRevoked` |
//! | anything else (same status, the TTL removing a record) | none |
//!
//! An unused coupon whose validity simply runs out is not a write (expiry is
//! decided at read, so no sweeper races a redemption), so the stream has
//! nothing to say at that moment: a consumer that wants to remind users
//! before expiry schedules it from `CouponIssued`, which carries
//! `validUntilMs`. The TTL's removal, 90 days later, is housekeeping, not
//! news.

pub mod ports;

use std::sync::Arc;

use serde::Serialize;
use tracing::{instrument, warn};

use crate::error::StoreError;
use crate::ids::{CouponId, GrantId, OrderId, UserId};
use crate::metrics::{Metric, Metrics};
use crate::user_coupon::{CouponState, UserCoupon};
pub use ports::EventBus;

/// What happened to a coupon, as consumers subscribe to it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
pub enum Transition {
    /// The winner's coupon is in their wallet.
    #[serde(rename = "CouponIssued")]
    Issued,
    /// An order spent it.
    #[serde(rename = "CouponRedeemed")]
    Redeemed,
    /// The order that spent it gave it back (cancelled, refunded).
    #[serde(rename = "CouponReleased")]
    Released,
    /// It came back to the wallet past its validity.
    #[serde(rename = "CouponExpired")]
    Expired,
    /// An operator took it back.
    #[serde(rename = "CouponRevoked")]
    Revoked,
}

impl Transition {
    /// The event's type on the bus (EventBridge `detail-type`), which rules
    /// match on.
    pub fn detail_type(self) -> &'static str {
        match self {
            Self::Issued => "CouponIssued",
            Self::Redeemed => "CouponRedeemed",
            Self::Released => "CouponReleased",
            Self::Expired => "CouponExpired",
            Self::Revoked => "CouponRevoked",
        }
    }

    fn slug(self) -> &'static str {
        match self {
            Self::Issued => "issued",
            Self::Redeemed => "redeemed",
            Self::Released => "released",
            Self::Expired => "expired",
            Self::Revoked => "revoked",
        }
    }
}

/// One user-coupon write, as the change stream reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CouponChange {
    /// Whose coupon.
    pub user: UserId,
    /// The item before the write (none for an insert).
    pub before: Option<UserCoupon>,
    /// The item after it (none for a removal).
    pub after: Option<UserCoupon>,
}

/// The message a user reads, in both languages the API speaks.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Message {
    /// Chinese, as the seed words it.
    pub zh: String,
    /// English.
    pub en: String,
}

/// One domain event: the `detail` of an EventBridge event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CouponEvent {
    /// Stable per transition: `<grantId>/<transition>[/<orderId>]`. The
    /// same transition always has the same id, so consumers drop repeats.
    pub event_id: String,
    /// What happened.
    #[serde(rename = "type")]
    pub transition: Transition,
    /// Whose coupon.
    pub user_id: UserId,
    /// Which coupon.
    pub coupon_id: CouponId,
    /// The grant it was issued from (the wallet's and the order API's id).
    pub grant_id: GrantId,
    /// The coupon's name, as issued.
    pub coupon_name: String,
    /// Face value in minor units (fen, cents).
    pub amount: u64,
    /// Usable from...
    pub valid_from_ms: i64,
    /// ...until (exclusive).
    pub valid_until_ms: i64,
    /// The order that spent or returned it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub order_id: Option<OrderId>,
    /// When the write happened.
    pub occurred_at_ms: i64,
    /// What to tell the user.
    pub message: Message,
}

/// The event a change makes, if it is a transition (see the module table).
pub fn event_for(change: &CouponChange) -> Option<CouponEvent> {
    let after = change.after.as_ref()?;
    let before = change.before.as_ref().map(|b| b.status);
    let (transition, order, at) = match (before, after.status) {
        (None, CouponState::Unused) => (Transition::Issued, None, after.received_at_ms),
        (Some(CouponState::Unused), CouponState::Used) => {
            (Transition::Redeemed, after.order_id.clone(), after.used_at_ms?)
        }
        (Some(CouponState::Used), CouponState::Unused) => {
            let before = change.before.as_ref()?;
            // Every return writes `returned_at_ms`; a record from before it
            // did is dated by its use rather than dropped.
            let at = after.returned_at_ms.or(before.used_at_ms)?;
            let order = before.order_id.clone();
            if at >= after.valid_until_ms {
                (Transition::Expired, order, at)
            } else {
                (Transition::Released, order, at)
            }
        }
        (Some(CouponState::Unused), CouponState::Revoked) => (Transition::Revoked, None, after.revoked_at_ms?),
        _ => return None,
    };
    let event_id = match (&order, transition) {
        (Some(o), Transition::Redeemed | Transition::Released) => {
            format!("{}/{}/{}", after.grant_id, transition.slug(), o.as_str())
        }
        _ => format!("{}/{}", after.grant_id, transition.slug()),
    };
    Some(CouponEvent {
        event_id,
        transition,
        user_id: change.user.clone(),
        coupon_id: after.coupon_id.clone(),
        grant_id: after.grant_id.clone(),
        coupon_name: after.name.clone(),
        amount: after.amount,
        valid_from_ms: after.valid_from_ms,
        valid_until_ms: after.valid_until_ms,
        message: message(transition, &after.name, after.amount, order.as_ref()),
        order_id: order,
        occurred_at_ms: at,
    })
}

/// Minor units as yuan: 2000 -> "20", 1050 -> "10.50".
pub fn yuan(minor: u64) -> String {
    if minor.is_multiple_of(100) {
        (minor / 100).to_string()
    } else {
        format!("{}.{:02}", minor / 100, minor % 100)
    }
}

fn message(transition: Transition, name: &str, amount: u64, order: Option<&OrderId>) -> Message {
    let y = yuan(amount);
    let order = order.map(OrderId::as_str).unwrap_or("-");
    let (zh, en) = match transition {
        Transition::Issued => (
            format!("您已成功领取{name}（{y}元），请尽快使用"),
            format!("You have claimed {name} ({y} yuan). Use it soon!"),
        ),
        Transition::Redeemed => (
            format!("您的{name}（{y}元）已用于订单{order}"),
            format!("Your {name} ({y} yuan) was used on order {order}."),
        ),
        Transition::Released => (
            format!("订单{order}已退回您的{name}（{y}元），可以再次使用"),
            format!("Order {order} gave back your {name} ({y} yuan); you can use it again."),
        ),
        Transition::Expired => (
            format!("您的{name}（{y}元）已过期"),
            format!("Your {name} ({y} yuan) has expired."),
        ),
        Transition::Revoked => (
            format!("您的{name}（{y}元）已被收回"),
            format!("Your {name} ({y} yuan) was withdrawn."),
        ),
    };
    Message { zh, en }
}

/// One stream record as the notifier received it: its position (the id a
/// partial batch response names) and what it said.
#[derive(Debug)]
pub struct Record {
    /// The stream's sequence number: what `batchItemFailures` names.
    pub id: String,
    /// The change, or why it could not be read (a record the notifier does
    /// not understand fails, and reaches the on-failure destination after
    /// the retries: never dropped in silence).
    pub change: Result<CouponChange, String>,
}

/// The notifier's use case: a batch of changes in, the records that must
/// be delivered again out.
pub struct NotifierService {
    bus: Arc<dyn EventBus>,
    metrics: Arc<dyn Metrics>,
}

impl NotifierService {
    /// Wires the service.
    pub fn new(bus: Arc<dyn EventBus>, metrics: Arc<dyn Metrics>) -> Self {
        Self { bus, metrics }
    }

    /// Publishes the events of `records` (in order) and returns the ids of
    /// the records that failed, first failure first. The stream retries
    /// from the first one named, so the records after it come again too:
    /// their events repeat with the same ids, which consumers drop.
    #[instrument(skip_all, fields(records = records.len()))]
    pub async fn handle(&self, records: Vec<Record>) -> Vec<String> {
        let mut failed = Vec::new();
        let mut events = Vec::new();
        let mut sources = Vec::new();
        for (at, record) in records.into_iter().enumerate() {
            match record.change {
                Ok(change) => match event_for(&change) {
                    Some(event) => {
                        events.push(event);
                        sources.push((at, record.id));
                    }
                    None => self.metrics.count(Metric::NotifierSkipped, None, 1),
                },
                Err(why) => {
                    warn!(record = %record.id, %why, "a stream record the notifier cannot read");
                    self.metrics.count(Metric::NotifierUnreadable, None, 1);
                    failed.push((at, record.id));
                }
            }
        }
        let results = if events.is_empty() {
            Vec::new()
        } else {
            self.bus.publish(&events).await
        };
        for ((event, source), result) in events.iter().zip(sources).zip(results_for(results, events.len())) {
            match result {
                Ok(()) => self
                    .metrics
                    .count(Metric::CouponEvents, Some(event.transition.detail_type()), 1),
                Err(e) => {
                    warn!(record = %source.1, event = %event.event_id, error = %e, source = ?std::error::Error::source(&e), "event not published; the stream delivers it again");
                    self.metrics.count(Metric::NotifierFailures, None, 1);
                    failed.push(source);
                }
            }
        }
        failed.sort();
        failed.into_iter().map(|(_, id)| id).collect()
    }
}

/// One result per event: a bus that answered for fewer events than it was
/// given failed the rest.
fn results_for(results: Vec<Result<(), StoreError>>, n: usize) -> Vec<Result<(), StoreError>> {
    let mut results = results;
    while results.len() < n {
        results.push(Err(StoreError::Protocol {
            what: "event bus",
            detail: "fewer results than events".into(),
        }));
    }
    results.truncate(n);
    results
}

#[cfg(test)]
mod tests;
