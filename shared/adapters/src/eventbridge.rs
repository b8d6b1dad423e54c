//! The coupon event bus on EventBridge: the notifier's coupon events and
//! the reminders' `CouponSaleStarting`, to one custom bus.
//!
//! `PutEvents` takes at most 10 entries per call and accepts or refuses
//! each entry on its own (`FailedEntryCount`, an `ErrorCode` per entry), so
//! the adapter answers one result per event: only the refused ones are
//! retried by the stream. EventBridge gives every entry its own id; the
//! domain's stable `eventId` travels in the detail, where consumers find it.

use std::sync::Arc;

use async_trait::async_trait;
use aws_sdk_eventbridge::primitives::DateTime;
use aws_sdk_eventbridge::types::PutEventsRequestEntry;
pub use aws_sdk_eventbridge::Client;
use coupon_domain::error::StoreError;
use coupon_domain::notify::{CouponEvent, EventBus};
use coupon_domain::remind::{ReminderBus, SaleStarting, SALE_STARTING};
use serde::Serialize;

/// Entries per `PutEvents` call (the service's limit).
const ENTRIES_PER_CALL: usize = 10;

/// The `source` of every event this system publishes; rules match on it.
pub const SOURCE: &str = "coupon-grab";

/// What goes on the bus: a `detail` with its type and instant.
trait Detail: Serialize {
    fn detail_type(&self) -> &'static str;
    fn at_ms(&self) -> i64;
}

impl Detail for CouponEvent {
    fn detail_type(&self) -> &'static str {
        self.transition.detail_type()
    }
    fn at_ms(&self) -> i64 {
        self.occurred_at_ms
    }
}

impl Detail for SaleStarting {
    fn detail_type(&self) -> &'static str {
        SALE_STARTING
    }
    fn at_ms(&self) -> i64 {
        self.sent_at_ms
    }
}

/// [`EventBus`] and [`ReminderBus`] on EventBridge.
#[derive(Debug, Clone)]
pub struct EventBridgeBus {
    client: Client,
    bus: String,
}

/// An entry EventBridge refused, with its code (`ThrottlingException`,
/// `InternalFailure`, ...).
#[derive(Debug, thiserror::Error)]
#[error("entry refused: {code}: {message}")]
pub struct EntryRefused {
    code: String,
    message: String,
}

impl EventBridgeBus {
    /// Publishes to the bus named `bus` (`EVENT_BUS_NAME`).
    pub fn new(client: Client, bus: impl Into<String>) -> Self {
        Self {
            client,
            bus: bus.into(),
        }
    }

    fn entry(&self, event: &impl Detail) -> Result<PutEventsRequestEntry, StoreError> {
        let detail = serde_json::to_string(event).map_err(|e| StoreError::Protocol {
            what: "coupon event",
            detail: e.to_string(),
        })?;
        Ok(PutEventsRequestEntry::builder()
            .event_bus_name(&self.bus)
            .source(SOURCE)
            .detail_type(event.detail_type())
            .detail(detail)
            .time(DateTime::from_millis(event.at_ms()))
            .build())
    }

    /// `events` in calls of at most [`ENTRIES_PER_CALL`], one result each.
    async fn publish_all(&self, events: &[impl Detail + Sync]) -> Vec<Result<(), StoreError>> {
        let mut results = Vec::with_capacity(events.len());
        for chunk in events.chunks(ENTRIES_PER_CALL) {
            results.extend(self.call(chunk).await);
        }
        results
    }

    async fn call(&self, events: &[impl Detail]) -> Vec<Result<(), StoreError>> {
        let entries: Vec<_> = events.iter().map(|e| self.entry(e)).collect();
        let ready: Vec<PutEventsRequestEntry> = entries.iter().filter_map(|e| e.as_ref().ok().cloned()).collect();
        let answers = if ready.is_empty() {
            Ok(Vec::new())
        } else {
            self.client
                .put_events()
                .set_entries(Some(ready))
                .send()
                .await
                .map(|out| out.entries.unwrap_or_default())
                .map_err(Arc::new)
        };
        let mut answers = match answers {
            Ok(answers) => answers.into_iter().map(Ok).collect::<Vec<_>>().into_iter(),
            Err(e) => std::iter::repeat_with(|| Err(Arc::clone(&e)))
                .take(entries.len())
                .collect::<Vec<_>>()
                .into_iter(),
        };
        entries
            .into_iter()
            .map(|entry| {
                entry?;
                match answers.next() {
                    Some(Ok(answer)) => match answer.error_code {
                        None => Ok(()),
                        Some(code) => Err(StoreError::Unavailable(Box::new(EntryRefused {
                            code,
                            message: answer.error_message.unwrap_or_default(),
                        }))),
                    },
                    Some(Err(e)) => Err(StoreError::Unavailable(Box::new(e))),
                    None => Err(StoreError::Protocol {
                        what: "PutEvents",
                        detail: "fewer result entries than events".into(),
                    }),
                }
            })
            .collect()
    }
}

#[async_trait]
impl EventBus for EventBridgeBus {
    async fn publish(&self, events: &[CouponEvent]) -> Vec<Result<(), StoreError>> {
        self.publish_all(events).await
    }
}

#[async_trait]
impl ReminderBus for EventBridgeBus {
    async fn publish(&self, events: &[SaleStarting]) -> Vec<Result<(), StoreError>> {
        self.publish_all(events).await
    }
}
