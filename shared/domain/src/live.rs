//! Applying a stored definition to the live Redis shards, one shard at a
//! time: the port an operator's change (the admin use case) and the
//! reconciler's healing of shards left behind both drive, in the same two
//! phases (every shard's settings and stock, then every shard's sold-out
//! epoch).

use async_trait::async_trait;

use crate::coupon::StoredCoupon;
use crate::error::StoreError;
use crate::ids::CouponId;

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
    /// The shard's server restarted since it was last verified: left as it
    /// is, so that the reconciler's check judges the state the restart
    /// left (stock added now would hide that it ran dry). The check finds
    /// it behind the durable version and drops it; the rebuild then uses
    /// the durable definition, which has the change.
    Unverified,
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
