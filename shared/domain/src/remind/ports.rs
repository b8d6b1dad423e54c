//! The reminders' ports: where a user's reminders are kept (DynamoDB), and
//! the bus their events go to (EventBridge, the coupon event bus).

use async_trait::async_trait;

use super::{Reminder, SaleStarting};
use crate::error::StoreError;
use crate::ids::{CouponId, UserId};

/// Every reminder, readable by its user and by its coupon.
#[async_trait]
pub trait ReminderStore: Send + Sync {
    /// Stores `reminder` unless the user has one for that coupon already
    /// (`Ok(false)`: a repeated subscription changes nothing, not even
    /// what it was last sent for).
    async fn put(&self, reminder: &Reminder) -> Result<bool, StoreError>;
    /// Removes the user's reminder for `coupon`; `Ok(false)` if there was
    /// none.
    async fn delete(&self, user: &UserId, coupon: &CouponId) -> Result<bool, StoreError>;
    /// The user's reminders, oldest first.
    async fn of_user(&self, user: &UserId) -> Result<Vec<Reminder>, StoreError>;
    /// Every reminder for `coupon`.
    async fn of_coupon(&self, coupon: &CouponId) -> Result<Vec<Reminder>, StoreError>;
    /// Records that the reminder was sent for the opening at `opens_at_ms`,
    /// on the condition that it was sent for an earlier one (or none) and
    /// still exists: `Ok(false)` if another pass marked it first or the
    /// user cancelled meanwhile.
    async fn mark_sent(&self, user: &UserId, coupon: &CouponId, opens_at_ms: i64) -> Result<bool, StoreError>;
}

/// Where reminder events are published.
#[async_trait]
pub trait ReminderBus: Send + Sync {
    /// Publishes `events`, one result per event in order (a bus accepts or
    /// refuses entries one by one; only the refused come again).
    async fn publish(&self, events: &[SaleStarting]) -> Vec<Result<(), StoreError>>;
}
