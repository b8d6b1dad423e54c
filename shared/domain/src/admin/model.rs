//! The admin vocabulary: who is asking, the change a durable transaction
//! applies, and what the API shows and refuses (who acted and what they did
//! is the audit module).

use serde::{Deserialize, Serialize};

use crate::audit::{Actor, AuditEntry};
use crate::coupon::{CouponDefinition, DefinitionError};
use crate::error::StoreError;

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
    /// Shards without state (lost), or whose server restarted and which
    /// the reconciler has not checked yet: it rebuilds them from the
    /// durable definition, which already has the change.
    pub missing: u32,
}

impl Applied {
    /// Counts one shard's answer.
    pub fn count(&mut self, shard: crate::live::ShardApply) {
        use crate::live::ShardApply::*;
        match shard {
            Applied => self.applied += 1,
            Current => self.current += 1,
            // Dropped at its check and rebuilt with the change, as a lost one.
            Missing | Unverified => self.missing += 1,
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
