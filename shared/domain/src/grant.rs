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

impl Grant {
    /// Whether `other` is this grant: the same id, won by the same request
    /// for the same user and ordinal. The instant it was decided at is not
    /// part of it: a press decided afresh after a failover rolled its win
    /// back mints the same id for the same request again, a moment later,
    /// and it is the same grant (its claim, its coupon), not another.
    pub fn same_as(&self, other: &Grant) -> bool {
        self.grant_id == other.grant_id
            && self.coupon_id == other.coupon_id
            && self.user_id == other.user_id
            && self.ordinal == other.ordinal
            && self.request_id == other.request_id
            && self.shard == other.shard
    }

    /// Parses a grant queue message's body; the error names what is wrong
    /// without echoing the body (which may be anything).
    pub fn from_message(body: &str) -> Result<Self, String> {
        serde_json::from_str::<Self>(body).map_err(|e| {
            let why = match e.classify() {
                serde_json::error::Category::Io => "io",
                serde_json::error::Category::Syntax => "invalid JSON",
                serde_json::error::Category::Data => "wrong fields",
                serde_json::error::Category::Eof => "truncated JSON",
            };
            format!("not a grant: {why}")
        })
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_message_parses_as_the_grant_it_carries_and_anything_else_is_named_not_echoed() {
        let grant = Grant {
            grant_id: GrantId::parse("spring-0-7").unwrap(),
            coupon_id: CouponId::parse("spring").unwrap(),
            user_id: UserId::parse("u1").unwrap(),
            ordinal: 1,
            request_id: RequestId::parse("r1").unwrap(),
            shard: 0,
            granted_at_ms: 5,
        };
        let body = serde_json::to_string(&grant).unwrap();
        assert_eq!(Grant::from_message(&body), Ok(grant));
        assert_eq!(Grant::from_message("{}"), Err("not a grant: wrong fields".into()));
        let err = Grant::from_message("{\"secret\": ").unwrap_err();
        assert_eq!(err, "not a grant: truncated JSON");
    }
}
