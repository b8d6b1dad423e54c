//! A fake of the buses' ports: a bus that keeps what it was given and
//! refuses the events it is told to, for coupon events and reminders alike.

use std::sync::Mutex;

use async_trait::async_trait;

use crate::error::StoreError;
use crate::notify::{CouponEvent, EventBus};
use crate::remind::{ReminderBus, SaleStarting};

/// Keeps every accepted event; refuses the ids in `refuse`.
#[derive(Debug)]
pub struct MemoryBus<E = CouponEvent> {
    /// Accepted, in order.
    pub accepted: Mutex<Vec<E>>,
    /// Event ids refused (as a bus refuses single entries).
    pub refuse: Mutex<Vec<String>>,
}

/// The reminders' bus in memory.
pub type MemoryReminderBus = MemoryBus<SaleStarting>;

impl<E> Default for MemoryBus<E> {
    fn default() -> Self {
        Self {
            accepted: Mutex::new(Vec::new()),
            refuse: Mutex::new(Vec::new()),
        }
    }
}

impl<E: Clone> MemoryBus<E> {
    fn take(&self, events: &[E], id: impl Fn(&E) -> &str) -> Vec<Result<(), StoreError>> {
        let refuse = self.refuse.lock().unwrap().clone();
        events
            .iter()
            .map(|e| {
                if refuse.iter().any(|r| r == id(e)) {
                    Err(StoreError::Unavailable("entry refused".into()))
                } else {
                    self.accepted.lock().unwrap().push(e.clone());
                    Ok(())
                }
            })
            .collect()
    }
}

#[async_trait]
impl EventBus for MemoryBus<CouponEvent> {
    async fn publish(&self, events: &[CouponEvent]) -> Vec<Result<(), StoreError>> {
        self.take(events, |e| &e.event_id)
    }
}

#[async_trait]
impl ReminderBus for MemoryBus<SaleStarting> {
    async fn publish(&self, events: &[SaleStarting]) -> Vec<Result<(), StoreError>> {
        self.take(events, |e| &e.event_id)
    }
}
