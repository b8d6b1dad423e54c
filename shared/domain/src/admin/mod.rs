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
//!
//! Layout: this file holds the coupon's own changes (create, view, status,
//! rate, stock, waves); `oversight.rs` the users and the books (blacklist,
//! revocations, a reconciliation on demand, the audit log); `model.rs` the
//! requests and answers; `ports.rs` the ports.

use std::sync::Arc;

use serde_json::{json, Value};
use tracing::{info, instrument, warn};

use crate::blacklist::{BlacklistFlags, BlacklistRecord};
use crate::catalog::{create_coupon, CouponRepository, CreateError, Created, StockPreheater};
use crate::clock::Clock;
use crate::coupon::{CouponDefinition, CouponStatus, StoredCoupon, Wave};
use crate::ids::CouponId;
use crate::reconcile::ports::{DurableFacts, StockRepair};
use crate::reconcile::Reconciler;

mod model;
mod oversight;
pub mod ports;

pub use model::{AdminContext, AdminError, Applied, ChangeResult, CouponChange, CouponFigures, CouponView, RateChange};
pub use ports::{AdminStore, CouponRevocations, Revoked};

use crate::audit::{AdminAction, AuditEntry, AuditTarget};
use crate::live::LiveSettings;

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
    /// The durable blacklist (DynamoDB).
    pub blacklist: Arc<dyn BlacklistRecord>,
    /// Users' coupons taken back (DynamoDB).
    pub revocations: Arc<dyn CouponRevocations>,
    /// Users' coupons spent and given back by orders (DynamoDB): the order
    /// routes the same IAM-authorized function serves.
    pub redemptions: Arc<dyn crate::redemption::Redemptions>,
    /// The blacklist flags grabs check (Redis).
    pub flags: Arc<dyn BlacklistFlags>,
    /// Issued and rejected counts (DynamoDB).
    pub facts: Arc<dyn DurableFacts>,
    /// Reconciliation on demand.
    pub reconciler: Reconciler,
    /// The clock every decision reads (a test sets it by hand).
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

/// Without rollover, stock added this close before a wave joins that wave:
/// joined to the wave out, it would expire when the next is released, and
/// the change reaches the shards a few milliseconds after it is committed
/// (or, if Redis does not answer, at the reconciler's next pass).
pub const ADD_STOCK_WAVE_LEAD_MS: i64 = 10_000;

/// Which wave (index into `def.waves`) stock added at `now_ms` joins: the
/// wave out now (the first, before any is), so it sells at once, as without
/// waves, while the waves to come keep exactly theirs; without rollover,
/// the next wave if it is less than [`ADD_STOCK_WAVE_LEAD_MS`] away.
/// `None` without waves.
pub fn wave_for_added_stock(def: &CouponDefinition, now_ms: i64) -> Option<usize> {
    if def.waves.is_empty() {
        return None;
    }
    let out = def.waves.iter().rposition(|w| w.at_ms <= now_ms);
    let next = out.map_or(0, |i| i + 1);
    match (out, def.waves.get(next)) {
        (None, _) => Some(0),
        (Some(_), Some(wave)) if !def.rollover && wave.at_ms - now_ms < ADD_STOCK_WAVE_LEAD_MS => Some(next),
        (Some(i), _) => Some(i),
    }
}

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
                Some(shard) => figures.remaining += shard.stock,
                None => figures.shards_missing += 1,
            }
        }
        figures.issued = p.facts.issued(&def.coupon_id).await?;
        figures.rejected = p.facts.rejections(&def.coupon_id).await?.len() as u64;
        let derived = i64::try_from(def.total_stock).unwrap_or(i64::MAX)
            - figures.remaining
            - i64::try_from(figures.issued).unwrap_or(i64::MAX)
            - i64::try_from(figures.rejected).unwrap_or(i64::MAX);
        figures.pending = derived.max(0) as u64;
        figures.overgranted = derived.min(0).unsigned_abs();
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
        let now_ms = self.ports.clock.now_ms();
        self.change(ctx, coupon, AdminAction::AddStock, |def| {
            if def.mode == crate::coupon::Mode::Lottery {
                return Err(AdminError::Invalid {
                    field: "add",
                    problem: "a lottery's stock is fixed at creation: its draw is for that many winners".into(),
                });
            }
            let before = def.total_stock;
            def.total_stock = before.saturating_add(add);
            if let Some(wave) = wave_for_added_stock(def, now_ms).and_then(|i| def.waves.get_mut(i)) {
                wave.units = wave.units.saturating_add(add);
            }
            Ok((add, json!({"before": before, "after": def.total_stock, "added": add})))
        })
        .await
    }

    /// Adds a release wave of `units` at `at_ms` to a live coupon: the
    /// stock grows by them, held back until that instant on every shard.
    /// A coupon without waves gets its stock so far as a first wave at its
    /// window's start. Send an idempotency key: without one, a retry after
    /// a lost answer adds the wave's units again.
    pub async fn add_wave(&self, ctx: &AdminContext, coupon: &CouponId, wave: Wave) -> Result<CouponView, AdminError> {
        if wave.units == 0 || wave.units > MAX_STOCK_ADDITION {
            return Err(AdminError::Invalid {
                field: "units",
                problem: format!("must be between 1 and {MAX_STOCK_ADDITION}"),
            });
        }
        let now_ms = self.ports.clock.now_ms();
        if wave.at_ms <= now_ms {
            return Err(AdminError::Invalid {
                field: "atMs",
                problem: "a wave added while the sale runs must be in the future".into(),
            });
        }
        self.change(ctx, coupon, AdminAction::AddWave, |def| {
            if def.waves.is_empty() {
                def.waves.push(Wave {
                    at_ms: def.grab_start_ms,
                    units: def.total_stock,
                });
            }
            // The same wave already there: a retry whose answer was lost
            // (with its key or without), which changes nothing more.
            if def.waves.contains(&wave) {
                return Ok((0, json!({"atMs": wave.at_ms, "units": wave.units, "already": true})));
            }
            if def.waves.iter().any(|w| w.at_ms == wave.at_ms) {
                return Err(AdminError::Invalid {
                    field: "atMs",
                    problem: "a wave is already released at this instant".into(),
                });
            }
            def.waves.push(wave);
            def.waves.sort_by_key(|w| w.at_ms);
            def.total_stock = def.total_stock.saturating_add(wave.units);
            Ok((
                wave.units,
                json!({"atMs": wave.at_ms, "units": wave.units, "totalStock": def.total_stock}),
            ))
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
                self.apply_live(&stored).await?;
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
                    let applied = self.apply_live(&now).await?;
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

    /// Brings every shard to the stored definition in two phases: first
    /// every shard's settings and stock share, then every shard's sold-out
    /// epoch. Stock added to one shard must void a sold-out stamp on every
    /// other shard, and only once that stock is there: a borrow that scans a
    /// shard not yet given its share stamps its home shard at the epoch of
    /// the moment, which phase 2 then voids (one phase per shard would let
    /// an already-bumped shard keep that stamp for good).
    async fn apply_live(&self, stored: &StoredCoupon) -> Result<Applied, AdminError> {
        let live = &self.ports.live;
        let def = &stored.definition;
        let mut applied = Applied::default();
        for shard in 0..def.shards {
            applied.count(live.apply_shard(stored, shard).await?);
        }
        for shard in 0..def.shards {
            live.bump_epoch(&def.coupon_id, shard).await?;
        }
        Ok(applied)
    }
}

#[cfg(test)]
mod tests;
