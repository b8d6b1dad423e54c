//! The admin vocabulary: who acted, what they did, the audit entry that
//! records it, the change a durable transaction applies, and what the API
//! shows and refuses.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::coupon::{CouponDefinition, DefinitionError};
use crate::error::StoreError;
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

/// Who is asking and under which operation id.
#[derive(Debug, Clone)]
pub struct AdminContext {
    /// The authenticated operator.
    pub actor: Actor,
    /// Unique per operation; the caller's idempotency key when it sent one.
    pub operation_id: String,
    /// True if `operation_id` came from the caller (so a repeat is a replay).
    pub idempotent: bool,
}

/// A change to a coupon's definition, applied in one durable transaction.
#[derive(Debug, Clone)]
pub struct CouponChange {
    /// The definition after the change.
    pub after: CouponDefinition,
    /// The version that was read; the write fails if it moved.
    pub expected_version: u64,
    /// Stock added by this change (0 if none): the counters' caps grow by it.
    pub added_stock: u64,
    /// The entry recorded with it.
    pub audit: AuditEntry,
    /// Claimed in the same transaction when the caller sent an idempotency
    /// key; a second claim means the change was made already.
    pub operation_key: Option<String>,
}

/// What the durable store did with a [`CouponChange`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeResult {
    /// Written.
    Applied,
    /// Someone changed the coupon since it was read; nothing was written.
    VersionMoved,
    /// The operation key was claimed before: this change was made already.
    AlreadyDone,
}

/// How many shards took a definition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Applied {
    /// Shards that applied it now.
    pub applied: u32,
    /// Shards that had it (or a newer one) already.
    pub current: u32,
    /// Shards without state (lost; the reconciler rebuilds them from the
    /// durable definition, which already has the change).
    pub missing: u32,
}

impl Applied {
    /// Counts one shard's answer.
    pub fn count(&mut self, shard: super::ports::ShardApply) {
        use super::ports::ShardApply::*;
        match shard {
            Applied => self.applied += 1,
            Current => self.current += 1,
            Missing => self.missing += 1,
        }
    }
}

/// Live figures of a coupon.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CouponFigures {
    /// Units the coupon has in all (the definition's `totalStock`).
    pub total_stock: u64,
    /// Left in Redis, over the shards that have state.
    pub remaining: i64,
    /// Issued into wallets (the durable counters).
    pub issued: u64,
    /// Won but refused by the durable ledger.
    pub rejected: u64,
    /// Won and not yet issued: `total - remaining - issued - rejected`
    /// (derived; a reconciliation checks it against the outboxes), never
    /// below zero.
    pub pending: u64,
    /// Units granted beyond the stock (only after Redis lost data and a
    /// rebuild offered units still on their way): what `pending` would be
    /// below zero. The DynamoDB cap rejects them; 0 in a healthy sale.
    pub overgranted: u64,
    /// Shards with no Redis state (data loss not yet repaired).
    pub shards_missing: u32,
}

/// A coupon as the admin API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CouponView {
    /// The current definition.
    pub coupon: CouponDefinition,
    /// Its version (0 at creation).
    pub version: u64,
    /// Live figures.
    pub figures: CouponFigures,
}

/// Why an admin operation failed; the edge maps each variant to one code.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The input breaks a rule; nothing was written.
    #[error("invalid {field}: {problem}")]
    Invalid {
        /// The offending field as spelled in JSON.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// No such coupon.
    #[error("coupon not found")]
    NotFound,
    /// No reconciliation report yet.
    #[error("no report yet")]
    ReportNotFound,
    /// The user holds no coupon under this grant id.
    #[error("the user holds no coupon under this grant")]
    GrantNotFound,
    /// The coupon was spent on an order.
    #[error("the coupon was used")]
    CouponUsed,
    /// A different coupon exists under this id.
    #[error("a different coupon exists under this id")]
    CouponConflict,
    /// Other operators kept changing the coupon; nothing was written.
    #[error("the coupon kept changing; read it again and retry")]
    ConcurrentChange,
    /// A store did not answer; safe to retry (with the same idempotency key).
    #[error("store unavailable")]
    Unavailable(#[source] StoreError),
}

impl From<DefinitionError> for AdminError {
    fn from(e: DefinitionError) -> Self {
        AdminError::Invalid {
            field: e.field,
            problem: e.problem,
        }
    }
}

impl From<StoreError> for AdminError {
    fn from(e: StoreError) -> Self {
        AdminError::Unavailable(e)
    }
}

/// A change to the rate limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RateChange {
    /// Grabs per second for the whole coupon; 0 turns the limit off.
    pub rate_per_sec: u32,
    /// Burst; 0 means "same as the rate".
    #[serde(default)]
    pub burst: u32,
}
