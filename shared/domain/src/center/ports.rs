//! The coupon center's ports: the catalogue of coupons on sale or coming
//! up (durable, read a few times a minute per instance), and the caller's
//! standing on each coupon's home shard (Redis, read per request, never
//! written).

use async_trait::async_trait;

use crate::coupon::CouponDefinition;
use crate::error::StoreError;
use crate::grab::ports::{Peek, PeekReply};
use crate::ids::CouponId;

/// The coupons an app may list: ONLINE, and their grab window not over.
#[async_trait]
pub trait LiveCoupons: Send + Sync {
    /// Every coupon whose status is ONLINE and whose window ends after
    /// `now_ms`, in any order. Eventually consistent: a change shows within
    /// the store's replication lag (the center caches it longer anyway).
    async fn live(&self, now_ms: i64) -> Result<Vec<CouponDefinition>, StoreError>;
}

/// The home shard's answer: what the shard would refuse a press with (the
/// rate limit aside: a listing says what the button is, not whether this
/// second's tokens are gone), and how many of the coupon the caller holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// As a dry run's admission answers ([`PeekReply`]), never
    /// `RateLimited`.
    pub shard: PeekReply,
    /// Claims of this coupon the caller holds (on their home shard, where
    /// every one of their claims is counted).
    pub held: u32,
}

/// Reads of the coupons' Redis state, none of which writes.
#[async_trait]
pub trait Standings: Send + Sync {
    /// The caller's standing on each coupon asked (who, which coupon, their
    /// home shard: a dry run's [`Peek`]), in the order asked, each
    /// answered or failed on its own (one shard down fails only its
    /// coupons). The adapter may send them together; each is one read on
    /// one shard.
    async fn standings(&self, asks: &[Peek<'_>]) -> Vec<Result<Standing, StoreError>>;
    /// The units a coupon's shards may sell at `now_ms` (released by its
    /// waves), summed; an error if any shard
    /// has no state (lost, its repair under way), since its units are then
    /// not known to be gone.
    async fn remaining(&self, coupon: &CouponId, shards: u32, now_ms: i64) -> Result<u64, StoreError>;
}
