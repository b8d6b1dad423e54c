//! The redemption's port: the user's coupon as the order service spends and
//! returns it (DynamoDB, conditional writes).

use async_trait::async_trait;

use crate::error::StoreError;
use crate::ids::GrantId;
use crate::ids::{OrderId, UserId};
use crate::user_coupon::UserCoupon;

/// The outcome of a conditional write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written {
    /// Written; the coupon after it.
    Done(Box<UserCoupon>),
    /// The coupon was no longer as read (another order, a revocation, a
    /// return): nothing written; read again and decide.
    Changed,
}

/// The users' coupons, as orders use them.
#[async_trait]
pub trait Redemptions: Send + Sync {
    /// The coupon the user holds under `grant`, as stored.
    async fn find(&self, user: &UserId, grant: &GrantId) -> Result<Option<UserCoupon>, StoreError>;
    /// `UNUSED -> USED` by `order` at `now_ms`, only if it is still the same
    /// grant, unused, and `valid_from <= now < valid_until`.
    async fn redeem(
        &self,
        user: &UserId,
        coupon: &UserCoupon,
        order: &OrderId,
        now_ms: i64,
    ) -> Result<Written, StoreError>;
    /// `USED -> UNUSED`, only if `order` is the one that used it; records
    /// the order among those that gave it back.
    async fn give_back(
        &self,
        user: &UserId,
        coupon: &UserCoupon,
        order: &OrderId,
        now_ms: i64,
    ) -> Result<Written, StoreError>;
}
