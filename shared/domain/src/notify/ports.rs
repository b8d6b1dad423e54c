//! The notifier's port: the bus domain events go to (EventBridge).

use async_trait::async_trait;

use super::CouponEvent;
use crate::error::StoreError;

/// Where coupon events are published for any consumer to subscribe.
#[async_trait]
pub trait EventBus: Send + Sync {
    /// Publishes `events` (as many calls as the bus needs) and answers one
    /// result per event, in order: a bus accepts or refuses entries one by
    /// one, and only the refused ones must come again.
    async fn publish(&self, events: &[CouponEvent]) -> Vec<Result<(), StoreError>>;
}
