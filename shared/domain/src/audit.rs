//! The audit log's vocabulary, shared by every use case that records an
//! operator's act (a coupon change, a blacklist entry, a revocation): who
//! acted, what they did, what it was about, and the entry that records it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::coupon::DefinitionError;
use crate::ids::{CouponId, UserId};

/// Who made an admin change: the IAM principal in AWS, a named operator in
/// the local mode. Printable ASCII, 1 to 256 characters: it is stored and
/// shown, so nothing that could forge a log line gets in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Actor(String);

impl Actor {
    /// Parses an actor.
    pub fn parse(raw: &str) -> Result<Self, DefinitionError> {
        if raw.is_empty() || raw.len() > 256 || !raw.bytes().all(|b| (0x20..0x7f).contains(&b)) {
            return Err(DefinitionError {
                field: "actor",
                problem: "must be 1 to 256 printable ASCII characters".into(),
            });
        }
        Ok(Self(raw.to_owned()))
    }

    /// The actor as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// What an operator did; the audit log's vocabulary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum AdminAction {
    /// Created (or re-created, a no-op) a coupon.
    CreateCoupon,
    /// Took a coupon online or offline.
    SetStatus,
    /// Added stock.
    AddStock,
    /// Added a release wave.
    AddWave,
    /// Changed the rate limit.
    SetRate,
    /// Put a user on the blacklist.
    BlacklistAdd,
    /// Took a user off the blacklist.
    BlacklistRemove,
    /// Ran a reconciliation.
    Reconcile,
    /// Revoked one user's coupon.
    RevokeCoupon,
}

/// What an audit entry is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditTarget {
    /// A coupon.
    Coupon(CouponId),
    /// A user (the blacklist).
    User(UserId),
}

/// One recorded admin change: who, what, when, and the details.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AuditEntry {
    /// The operation's id (the idempotency key when one was sent).
    pub operation_id: String,
    /// Who.
    pub actor: Actor,
    /// What.
    pub action: AdminAction,
    /// When (ms since epoch).
    pub at_ms: i64,
    /// Before/after values and anything else worth keeping.
    pub detail: Value,
}
