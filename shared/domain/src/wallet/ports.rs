//! The wallet's ports: what a user can read about their coupons, and the
//! grants still on their way (in a Redis outbox).

use async_trait::async_trait;

use crate::error::StoreError;
use crate::ids::GrantId;
use crate::ids::UserId;
use crate::user_coupon::{GrantStatus, UserCoupon};

/// What a user can read about their coupons (DynamoDB).
#[async_trait]
pub trait WalletStore: Send + Sync {
    /// The user's coupons, newest first.
    async fn coupons(&self, user: &UserId) -> Result<Vec<UserCoupon>, StoreError>;
    /// Issued or rejected, if the durable store knows the grant for this user.
    async fn grant_status(&self, user: &UserId, grant: &GrantId) -> Result<Option<GrantStatus>, StoreError>;
}

/// Grants still in a Redis outbox.
#[async_trait]
pub trait OutboxLookup: Send + Sync {
    /// True if the grant is in its shard's outbox and belongs to `user`.
    async fn is_pending(&self, user: &UserId, grant: &GrantId) -> Result<bool, StoreError>;
}
