//! Operating a campaign: the use cases behind the admin API.
//!
//! Every change follows one order, the same as creating a coupon: the
//! durable store first (DynamoDB, the arbiter), then Redis (the fast copy).
//!
//! - **Durable step**: one transaction replaces the definition if its
//!   version is the one read (optimistic concurrency), grows the capped
//!   counters when stock is added, writes the audit entry, and claims the
//!   operation key when the caller sent one. Either all of it happens or
//!   none; concurrent operators retry on a fresh read.
//! - **Redis step**: every shard applies the definition at that version
//!   (`lua/apply_settings.lua`). A shard that has applied a newer version
//!   ignores an older one, so two operators racing can never leave Redis
//!   behind DynamoDB. Stock is applied as a target ("this shard's share of
//!   the total is now X"), never as a bare increment, so re-applying is a
//!   no-op and a retry after a half-failed call finishes the job.
//!
//! Why stock can be added while grabs run without oversell: the durable caps
//! grow before Redis stock does, so every unit Redis can grant already has
//! room in DynamoDB; Redis adds stock to a shard inside the same atomic
//! script that every grab runs after, and bumps every shard's epoch so that
//! no shard answers SOLD_OUT from a scan made before the addition.
//!
//! Stock never shrinks through the API: units may already be granted and in
//! flight, and taking them back is a different operation (end the sale, or
//! take the coupon offline).

use std::sync::Arc;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tracing::{info, instrument, warn};

use crate::clock::Clock;
use crate::coupon::{CouponDefinition, CouponStatus, DefinitionError, StoredCoupon};
use crate::error::StoreError;
use crate::ids::{CouponId, UserId};
use crate::ports::{CouponRepository, DurableFacts, StockPreheater, StockRepair};
use crate::preheat::{create_coupon, CreateError, Created};
use crate::reconcile::{CouponReport, Reconciler};

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

/// The durable side of administration (DynamoDB).
#[async_trait]
pub trait AdminStore: Send + Sync {
    /// The coupon's definition and version.
    async fn stored(&self, coupon: &CouponId) -> Result<Option<StoredCoupon>, StoreError>;
    /// Applies a change atomically (definition, caps, audit, operation key).
    async fn change(&self, change: &CouponChange) -> Result<ChangeResult, StoreError>;
    /// Records an entry on its own (creates, reconciliations). `Ok(false)` if
    /// an entry with this operation id exists already.
    async fn record(&self, target: &AuditTarget, entry: &AuditEntry) -> Result<bool, StoreError>;
    /// A target's latest `limit` entries, newest first, and whether older
    /// ones exist. Reads at most `limit + 1` entries.
    async fn audit(&self, target: &AuditTarget, limit: usize) -> Result<(Vec<AuditEntry>, bool), StoreError>;
    /// Puts the user on or off the durable blacklist, with its entry.
    async fn set_blacklisted(&self, user: &UserId, on: bool, entry: &AuditEntry) -> Result<(), StoreError>;
    /// True if the durable blacklist has the user.
    async fn is_blacklisted(&self, user: &UserId) -> Result<bool, StoreError>;
    /// Keeps a coupon's latest reconciliation report.
    async fn save_report(&self, coupon: &CouponId, report: &Value) -> Result<(), StoreError>;
    /// The latest report, if any.
    async fn last_report(&self, coupon: &CouponId) -> Result<Option<Value>, StoreError>;
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

/// The Redis side of administration.
#[async_trait]
pub trait LiveSettings: Send + Sync {
    /// Applies the stored definition to every shard (status, rate, stock
    /// share), unless a shard has a newer version.
    async fn apply(&self, coupon: &StoredCoupon) -> Result<Applied, StoreError>;
    /// Sets or clears the user's blacklist flag that grabs check.
    async fn set_blacklisted(&self, user: &UserId, on: bool) -> Result<(), StoreError>;
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
    /// (derived; a reconciliation checks it against the outboxes).
    pub pending: i64,
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

/// The dependencies of [`AdminService`], built once per Lambda instance.
pub struct AdminPorts {
    /// Definitions, versions, audit log, blacklist, reports (DynamoDB).
    pub store: Arc<dyn AdminStore>,
    /// Definitions for creation (DynamoDB).
    pub repo: Arc<dyn CouponRepository>,
    /// Redis state for creation.
    pub preheater: Arc<dyn StockPreheater>,
    /// Redis state for changes.
    pub live: Arc<dyn LiveSettings>,
    /// Shard stock reads (Redis).
    pub repair: Arc<dyn StockRepair>,
    /// Issued and rejected counts (DynamoDB).
    pub facts: Arc<dyn DurableFacts>,
    /// Reconciliation on demand.
    pub reconciler: Reconciler,
    /// Time.
    pub clock: Arc<dyn Clock>,
    /// The configured ceiling of a coupon's stock.
    pub max_total_stock: u64,
}

/// The admin use cases.
pub struct AdminService {
    ports: AdminPorts,
}

/// How often a change is retried on a fresh read when other operators
/// changed the coupon in between.
const CHANGE_ATTEMPTS: usize = 4;

/// Most stock one call may add (the configured maximum bounds the total).
pub const MAX_STOCK_ADDITION: u64 = 1_000_000_000;

/// Most audit entries one answer carries.
pub const MAX_AUDIT_PAGE: usize = 1_000;

impl AdminService {
    /// Wires the service.
    pub fn new(ports: AdminPorts) -> Self {
        Self { ports }
    }

    fn entry(&self, ctx: &AdminContext, action: AdminAction, detail: Value) -> AuditEntry {
        AuditEntry {
            operation_id: ctx.operation_id.clone(),
            actor: ctx.actor.clone(),
            action,
            at_ms: self.ports.clock.now_ms(),
            detail,
        }
    }

    /// Creates a coupon: validated, made durable, preheated, recorded.
    /// Idempotent: the same definition again is `Created::Unchanged`.
    #[instrument(skip_all, fields(coupon = %def.coupon_id, actor = ctx.actor.as_str()))]
    pub async fn create(
        &self,
        ctx: &AdminContext,
        def: &CouponDefinition,
    ) -> Result<(Created, CouponView), AdminError> {
        let p = &self.ports;
        let created = create_coupon(def, p.max_total_stock, &*p.repo, &*p.preheater, &*p.clock)
            .await
            .map_err(|e| match e {
                CreateError::Invalid(e) => e.into(),
                CreateError::Conflict(_) => AdminError::CouponConflict,
                CreateError::Unavailable(e) => AdminError::Unavailable(e),
            })?;
        // Recorded under a fixed id per coupon: a retried create (after the
        // audit write failed, say) records it once.
        let mut entry = self.entry(ctx, AdminAction::CreateCoupon, json!({"totalStock": def.total_stock}));
        entry.operation_id = "create".into();
        p.store
            .record(&AuditTarget::Coupon(def.coupon_id.clone()), &entry)
            .await?;
        if created == Created::New {
            info!("coupon created");
        }
        Ok((created, self.view(&def.coupon_id).await?))
    }

    /// The coupon with live figures.
    #[instrument(skip_all, fields(coupon = %coupon))]
    pub async fn view(&self, coupon: &CouponId) -> Result<CouponView, AdminError> {
        let stored = self.ports.store.stored(coupon).await?.ok_or(AdminError::NotFound)?;
        self.view_of(stored).await
    }

    async fn view_of(&self, stored: StoredCoupon) -> Result<CouponView, AdminError> {
        let p = &self.ports;
        let def = &stored.definition;
        let mut figures = CouponFigures {
            total_stock: def.total_stock,
            ..CouponFigures::default()
        };
        for shard in 0..def.shards {
            match p.repair.shard_stock(&def.coupon_id, shard).await? {
                Some(stock) => figures.remaining += stock,
                None => figures.shards_missing += 1,
            }
        }
        figures.issued = p.facts.issued(&def.coupon_id).await?;
        figures.rejected = p.facts.rejections(&def.coupon_id).await?.len() as u64;
        figures.pending = i64::try_from(def.total_stock).unwrap_or(i64::MAX)
            - figures.remaining
            - i64::try_from(figures.issued).unwrap_or(i64::MAX)
            - i64::try_from(figures.rejected).unwrap_or(i64::MAX);
        Ok(CouponView {
            coupon: stored.definition,
            version: stored.version,
            figures,
        })
    }

    /// Takes the coupon online or offline; the next grab sees it.
    pub async fn set_status(
        &self,
        ctx: &AdminContext,
        coupon: &CouponId,
        status: CouponStatus,
    ) -> Result<CouponView, AdminError> {
        self.change(ctx, coupon, AdminAction::SetStatus, |def| {
            let before = def.status;
            def.status = status;
            Ok((0, json!({"before": before, "after": status})))
        })
        .await
    }

    /// Changes the coupon's token-bucket rate and burst.
    pub async fn set_rate(
        &self,
        ctx: &AdminContext,
        coupon: &CouponId,
        rate: RateChange,
    ) -> Result<CouponView, AdminError> {
        if rate.rate_per_sec > 10_000_000 {
            return Err(AdminError::Invalid {
                field: "ratePerSec",
                problem: "must be at most 10000000".into(),
            });
        }
        self.change(ctx, coupon, AdminAction::SetRate, |def| {
            let before = json!({"ratePerSec": def.rate_per_sec, "burst": def.burst});
            def.rate_per_sec = rate.rate_per_sec;
            def.burst = rate.burst;
            Ok((
                0,
                json!({"before": before, "after": {"ratePerSec": rate.rate_per_sec, "burst": rate.burst}}),
            ))
        })
        .await
    }

    /// Adds `add` units to a live coupon. Send an idempotency key: without
    /// one, a retry after a lost answer adds the stock again.
    pub async fn add_stock(&self, ctx: &AdminContext, coupon: &CouponId, add: u64) -> Result<CouponView, AdminError> {
        if add == 0 || add > MAX_STOCK_ADDITION {
            return Err(AdminError::Invalid {
                field: "add",
                problem: format!("must be between 1 and {MAX_STOCK_ADDITION}"),
            });
        }
        self.change(ctx, coupon, AdminAction::AddStock, |def| {
            let before = def.total_stock;
            def.total_stock = before.saturating_add(add);
            Ok((add, json!({"before": before, "after": def.total_stock, "added": add})))
        })
        .await
    }

    /// Reads, edits, validates, writes (retrying when the version moved),
    /// then applies to Redis.
    #[instrument(skip_all, fields(coupon = %coupon, action = ?action, actor = ctx.actor.as_str()))]
    async fn change<F>(
        &self,
        ctx: &AdminContext,
        coupon: &CouponId,
        action: AdminAction,
        edit: F,
    ) -> Result<CouponView, AdminError>
    where
        F: Fn(&mut CouponDefinition) -> Result<(u64, Value), AdminError>,
    {
        let p = &self.ports;
        for _ in 0..CHANGE_ATTEMPTS {
            let stored = p.store.stored(coupon).await?.ok_or(AdminError::NotFound)?;
            let mut after = stored.definition.clone();
            let (added_stock, detail) = edit(&mut after)?;
            after.validate(p.max_total_stock)?;
            if after == stored.definition {
                // Nothing to change; still bring Redis in line (a retry of a
                // call whose Redis step failed lands here).
                p.live.apply(&stored).await?;
                return self.view_of(stored).await;
            }
            let change = CouponChange {
                after,
                expected_version: stored.version,
                added_stock,
                audit: self.entry(ctx, action, detail),
                operation_key: ctx.idempotent.then(|| ctx.operation_id.clone()),
            };
            match p.store.change(&change).await? {
                ChangeResult::VersionMoved => continue,
                ChangeResult::Applied | ChangeResult::AlreadyDone => {
                    let now = p.store.stored(coupon).await?.ok_or(AdminError::NotFound)?;
                    let applied = p.live.apply(&now).await?;
                    info!(
                        version = now.version,
                        applied = applied.applied,
                        missing = applied.missing,
                        "change applied"
                    );
                    return self.view_of(now).await;
                }
            }
        }
        warn!("gave up after concurrent changes");
        Err(AdminError::ConcurrentChange)
    }

    /// Puts a user on (`on`) or off the blacklist: durable first, then the
    /// Redis flag the grab checks.
    #[instrument(skip_all, fields(actor = ctx.actor.as_str(), on))]
    pub async fn set_blacklisted(&self, ctx: &AdminContext, user: &UserId, on: bool) -> Result<(), AdminError> {
        let action = if on {
            AdminAction::BlacklistAdd
        } else {
            AdminAction::BlacklistRemove
        };
        let entry = self.entry(ctx, action, json!({"userId": user}));
        self.ports.store.set_blacklisted(user, on, &entry).await?;
        self.ports.live.set_blacklisted(user, on).await?;
        Ok(())
    }

    /// Whether the user is blacklisted, and the user's latest audit entries
    /// (newest first, at most [`MAX_AUDIT_PAGE`]).
    pub async fn blacklist_entry(&self, user: &UserId) -> Result<(bool, Vec<AuditEntry>), AdminError> {
        let on = self.ports.store.is_blacklisted(user).await?;
        let (audit, _) = self
            .ports
            .store
            .audit(&AuditTarget::User(user.clone()), MAX_AUDIT_PAGE)
            .await?;
        Ok((on, audit))
    }

    /// Runs one reconciliation pass over the coupon now, keeps the report
    /// and records who asked.
    #[instrument(skip_all, fields(coupon = %coupon, actor = ctx.actor.as_str()))]
    pub async fn reconcile(&self, ctx: &AdminContext, coupon: &CouponId) -> Result<Value, AdminError> {
        let p = &self.ports;
        let stored = p.store.stored(coupon).await?.ok_or(AdminError::NotFound)?;
        let now = p.clock.now_ms();
        let report: CouponReport = p.reconciler.coupon(&stored.definition, now).await?;
        let report = json!({"ranAtMs": now, "ranBy": ctx.actor, "report": report});
        p.store.save_report(coupon, &report).await?;
        let entry = self.entry(
            ctx,
            AdminAction::Reconcile,
            json!({"drift": report["report"]["drift"], "redriven": report["report"]["redriven"]}),
        );
        p.store.record(&AuditTarget::Coupon(coupon.clone()), &entry).await?;
        Ok(report)
    }

    /// The coupon's latest reconciliation report.
    pub async fn last_report(&self, coupon: &CouponId) -> Result<Value, AdminError> {
        self.ports.store.stored(coupon).await?.ok_or(AdminError::NotFound)?;
        self.ports
            .store
            .last_report(coupon)
            .await?
            .ok_or(AdminError::ReportNotFound)
    }

    /// The coupon's latest `limit` audit entries, newest first, and whether
    /// there are older ones. Bounded, so a long-running campaign's log never
    /// makes an answer too large for API Gateway and Lambda.
    pub async fn audit(&self, coupon: &CouponId, limit: usize) -> Result<(Vec<AuditEntry>, bool), AdminError> {
        self.ports.store.stored(coupon).await?.ok_or(AdminError::NotFound)?;
        Ok(self
            .ports
            .store
            .audit(&AuditTarget::Coupon(coupon.clone()), limit)
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actors_are_printable_ascii_of_bounded_length() {
        assert!(Actor::parse("arn:aws:iam::123456789012:user/ops").is_ok());
        assert!(Actor::parse("").is_err());
        assert!(Actor::parse("a\nforged log line").is_err());
        assert!(Actor::parse(&"a".repeat(257)).is_err());
        assert!(Actor::parse("运营").is_err());
    }

    #[test]
    fn a_rate_change_refuses_unknown_fields() {
        assert!(serde_json::from_str::<RateChange>(r#"{"ratePerSec": 5}"#).is_ok());
        assert!(serde_json::from_str::<RateChange>(r#"{"ratePerSec": 5, "x": 1}"#).is_err());
        assert!(serde_json::from_str::<RateChange>(r#"{"ratePerSec": -5}"#).is_err());
    }
}
