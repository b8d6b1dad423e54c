//! A fake of the notifier's port: an event bus that keeps what it was
//! given and refuses the events it is told to.

use std::sync::Mutex;

use async_trait::async_trait;

use crate::error::StoreError;
use crate::notify::{CouponEvent, EventBus};

/// Keeps every accepted event; refuses the ids in `refuse`.
#[derive(Debug, Default)]
pub struct MemoryBus {
    /// Accepted, in order.
    pub accepted: Mutex<Vec<CouponEvent>>,
    /// Event ids refused (as a bus refuses single entries).
    pub refuse: Mutex<Vec<String>>,
}

#[async_trait]
impl EventBus for MemoryBus {
    async fn publish(&self, events: &[CouponEvent]) -> Vec<Result<(), StoreError>> {
        let refuse = self.refuse.lock().unwrap().clone();
        events
            .iter()
            .map(|e| {
                if refuse.contains(&e.event_id) {
                    Err(StoreError::Unavailable("entry refused".into()))
                } else {
                    self.accepted.lock().unwrap().push(e.clone());
                    Ok(())
                }
            })
            .collect()
    }
}
