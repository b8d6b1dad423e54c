//! The blacklist: one concern, one port per store.
//!
//! An operator's decision is durable first ([`BlacklistRecord`], DynamoDB,
//! with its audit entry), then reaches the flag every grab's risk check
//! reads ([`BlacklistFlags`], Redis). The reconciler restores flags Redis
//! lost from the record, and never one an operator lifted meanwhile (see
//! `reconcile`).

use async_trait::async_trait;

use crate::audit::AuditEntry;
use crate::error::StoreError;
use crate::ids::UserId;

/// The durable blacklist: what operators decided, and the source the fast
/// flags are rebuilt from.
#[async_trait]
pub trait BlacklistRecord: Send + Sync {
    /// Puts the user on (`on`) or off the list, with the audit entry, in one
    /// write.
    async fn set(&self, user: &UserId, on: bool, entry: &AuditEntry) -> Result<(), StoreError>;
    /// True if the user is on the list now.
    async fn contains(&self, user: &UserId) -> Result<bool, StoreError>;
    /// Every user on the list.
    async fn users(&self) -> Result<Vec<UserId>, StoreError>;
}

/// The flags the grab's risk check reads, one per user.
#[async_trait]
pub trait BlacklistFlags: Send + Sync {
    /// Sets (`on`) or clears the user's flag.
    async fn set_flag(&self, user: &UserId, on: bool) -> Result<(), StoreError>;
    /// Sets the flag unless it is there; `Ok(true)` if it had to be set (it
    /// was lost).
    async fn restore_flag(&self, user: &UserId) -> Result<bool, StoreError>;
}
