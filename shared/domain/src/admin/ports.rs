//! The admin use cases' ports: the durable side (definitions at a version,
//! the audit log, reports) and revocations; the live side (Redis shards) is
//! the live module, shared with the reconciler.

use async_trait::async_trait;
use serde_json::Value;

use super::model::{ChangeResult, CouponChange};
use crate::audit::{AuditEntry, AuditTarget};
use crate::coupon::StoredCoupon;
use crate::error::StoreError;
use crate::ids::GrantId;
use crate::ids::{CouponId, UserId};
use crate::user_coupon::UserCoupon;

/// The durable side of administration (DynamoDB).
#[async_trait]
pub trait AdminStore: Send + Sync {
    /// The coupon's definition and version.
    async fn stored(&self, coupon: &CouponId) -> Result<Option<StoredCoupon>, StoreError>;
    /// Applies a change atomically (definition, caps, audit, operation key).
    async fn change(&self, change: &CouponChange) -> Result<ChangeResult, StoreError>;
    /// Records an entry on its own (creates, reconciliations). `Ok(false)` if
    /// an entry with this operation id exists already.
    async fn record(&self, target: &AuditTarget, entry: &AuditEntry) -> Result<bool, StoreError>;
    /// A target's latest `limit` entries, newest first, and whether older
    /// ones exist. Reads at most `limit + 1` entries.
    async fn audit(&self, target: &AuditTarget, limit: usize) -> Result<(Vec<AuditEntry>, bool), StoreError>;
    /// Keeps a coupon's latest reconciliation report.
    async fn save_report(&self, coupon: &CouponId, report: &Value) -> Result<(), StoreError>;
    /// The latest report, if any.
    async fn last_report(&self, coupon: &CouponId) -> Result<Option<Value>, StoreError>;
}

/// What a revocation found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revoked {
    /// Revoked now, together with its audit entry.
    Now(UserCoupon),
    /// It had been revoked before (a retry, or another operator): nothing
    /// was written; the coupon as it is.
    Already(UserCoupon),
    /// The user holds no coupon under that grant id.
    NotFound,
    /// It was spent on an order: a used coupon is not revoked (the order
    /// service gives it back first, if it must).
    Used,
}

/// The users' coupons as operators change them (DynamoDB).
#[async_trait]
pub trait CouponRevocations: Send + Sync {
    /// Marks the user's coupon issued under `grant` REVOKED, in one write
    /// with `entry` (audited on the coupon), only if it is still unused.
    async fn revoke(&self, user: &UserId, grant: &GrantId, entry: &AuditEntry) -> Result<Revoked, StoreError>;
}
