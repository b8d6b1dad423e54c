//! Grants: the unit of work between the grab and the issuer.
//!
//! A grant is created atomically with the stock deduction (as an outbox entry
//! in Redis) and then sent to SQS. Its key for issuance is (user, coupon,
//! ordinal): the user's n-th claim of that coupon, which the issuer writes
//! with `attribute_not_exists`, so any number of deliveries make one coupon.

use serde::{Deserialize, Serialize};

use crate::ids::{CouponId, RequestId, UserId};

/// What a winner gets, and what the issuer receives as the SQS message body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    /// `<couponId>-<shard>-<seq>`: unique per coupon, minted by the script.
    pub grant_id: String,
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
    pub grant_id: String,
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

/// A grant id taken apart: `<couponId>-<shard>-<seq>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRef {
    /// The whole id.
    pub grant_id: String,
    /// The coupon.
    pub coupon: CouponId,
    /// The stock shard.
    pub shard: u32,
    /// The shard's grant sequence number (the outbox stream id `<seq>-0`).
    pub seq: u64,
}

impl GrantRef {
    /// Parses a grant id from the right (coupon ids may contain `-`).
    pub fn parse(raw: &str) -> Option<Self> {
        let (rest, seq) = raw.rsplit_once('-')?;
        let (coupon, shard) = rest.rsplit_once('-')?;
        Some(Self {
            grant_id: raw.to_owned(),
            coupon: CouponId::parse(coupon).ok()?,
            shard: shard.parse().ok()?,
            seq: seq.parse().ok()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_ids_parse_from_the_right() {
        let g = GrantRef::parse("spring-20-3-117").unwrap();
        assert_eq!((g.coupon.as_str(), g.shard, g.seq), ("spring-20", 3, 117));
        for bad in ["", "x", "c-1", "c-x-1", "c-1-y", "-1-2", "a:b-1-2"] {
            assert!(GrantRef::parse(bad).is_none(), "{bad}");
        }
    }
}
