//! The admin use cases' ports: the durable side (definitions at a version,
//! the audit log, reports) and the live side (Redis shards).

use async_trait::async_trait;
use serde_json::Value;

use super::model::{AuditEntry, AuditTarget, ChangeResult, CouponChange};
use crate::coupon::StoredCoupon;
use crate::error::StoreError;
use crate::ids::{CouponId, UserId};
use crate::issuance::{GrantRef, UserCoupon};

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

/// What one shard did with a definition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardApply {
    /// Applied now.
    Applied,
    /// This version or a newer one was there already.
    Current,
    /// The shard has no state (lost; the reconciler rebuilds it from the
    /// durable definition, which already has the change).
    Missing,
}

/// The Redis side of administration, one shard at a time: the use case
/// runs the two phases (every shard's stock, then every shard's epoch).
#[async_trait]
pub trait LiveSettings: Send + Sync {
    /// Applies the stored definition to one shard (status, rate, stock
    /// share) unless the shard has this version or a newer one. Leaves the
    /// shard's sold-out epoch alone.
    async fn apply_shard(&self, coupon: &StoredCoupon, shard: u32) -> Result<ShardApply, StoreError>;
    /// Invalidates the shard's sold-out stamp (a no-op on a missing shard).
    async fn bump_epoch(&self, coupon: &CouponId, shard: u32) -> Result<(), StoreError>;
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
    async fn revoke(&self, user: &UserId, grant: &GrantRef, entry: &AuditEntry) -> Result<Revoked, StoreError>;
}
