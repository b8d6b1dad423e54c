//! Grants: the unit of work between the grab and the issuer.
//!
//! A grant is created atomically with the stock deduction (as an outbox entry
//! in Redis) and then sent to SQS. Its key for issuance is (user, coupon,
//! ordinal): the user's n-th claim of that coupon, which the issuer writes
//! with `attribute_not_exists`, so any number of deliveries make one coupon.

use serde::{Deserialize, Serialize};

use crate::ids::{CouponId, GrantId, RequestId, UserId};

/// What a winner gets, and what the issuer receives as the SQS message body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    /// `<couponId>-<shard>-<seq>`: unique per coupon, minted by the script.
    pub grant_id: GrantId,
    /// The coupon granted.
    pub coupon_id: CouponId,
    /// Who it is granted to (from the verified identity).
    pub user_id: UserId,
    /// The user's n-th claim of this coupon, 1-based; part of the DynamoDB key.
    pub ordinal: u32,
    /// The request that won it, for tracing a grant back to a press.
    pub request_id: RequestId,
    /// The stock shard the unit came from.
    pub shard: u32,
    /// When the script decided, ms since epoch.
    pub granted_at_ms: i64,
}

/// The part of a grant the stock ledger records under the request id, so
/// a replay of the request answers with the same grant (the Redis adapter
/// stores it as `W|<grantId>|<ordinal>|<shard>|<grantedAtMs>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRecord {
    /// See [`Grant::grant_id`].
    pub grant_id: GrantId,
    /// See [`Grant::ordinal`].
    pub ordinal: u32,
    /// See [`Grant::shard`].
    pub shard: u32,
    /// See [`Grant::granted_at_ms`].
    pub granted_at_ms: i64,
}

impl GrantRecord {
    /// The record of `grant`: what its request is answered with.
    pub fn of(grant: &Grant) -> Self {
        Self {
            grant_id: grant.grant_id.clone(),
            ordinal: grant.ordinal,
            shard: grant.shard,
            granted_at_ms: grant.granted_at_ms,
        }
    }

    /// The full grant, given who asked.
    pub fn into_grant(self, coupon_id: CouponId, user_id: UserId, request_id: RequestId) -> Grant {
        Grant {
            grant_id: self.grant_id,
            coupon_id,
            user_id,
            ordinal: self.ordinal,
            request_id,
            shard: self.shard,
            granted_at_ms: self.granted_at_ms,
        }
    }
}
