//! Reconciliation: the scheduled job that keeps Redis (fast, volatile) and
//! DynamoDB (durable, the arbiter) honest with each other.
//!
//! Per coupon whose window is open or recently closed, one pass
//! ([`Reconciler::coupon`], whose numbered comments are these steps),
//! reading in the order units flow (Redis stock, outboxes, DynamoDB) so
//! that a unit moving during the pass is never counted nowhere:
//!
//! 0. Rollbacks: a shard whose grant sequence is behind its durable
//!    high-water mark is dropped. Then the coupon's wait (`wait.rs`): with
//!    any shard lost or restarted, a per-coupon episode is opened, and
//!    repairs of the shards it covers are allowed once the send window
//!    has passed (no send decided before the fault, nor its claim, can
//!    land after that); no episode when DynamoDB holds every unit of
//!    the coupon (nothing can be on its way). A shard whose Redis server
//!    restarted since it
//!    was stamped (it sells nothing until then) is checked then: behind
//!    its mark or a claimed grant, or out of stock, it is dropped;
//!    otherwise stamped again; every epoch is bumped before the check.
//! 1. Surviving stock, each shard with its definition version; a shard
//!    without state while DynamoDB knows the coupon means Redis lost it.
//!    Shards still on an older version get the stored definition (an
//!    operator's change whose Redis step failed).
//! 2. Borrows whose caller died, finished exactly as a client retry would
//!    (idempotent per user and ordinal), not while a shard is lost; then
//!    every outbox is read.
//! 3. The grant queue's depth (every coupon's): while it holds messages a
//!    young pending entry may be one of them.
//! 4. DynamoDB: outbox entries it confirms (issued under that grant id, or
//!    rejected) are trimmed; the others are pending, and those past the
//!    grace period (past the backlog horizon while the queue holds
//!    messages) are re-driven to SQS, only from shards a replica holds and
//!    that are still current. Then lost shards are rebuilt, once the
//!    coupon's wait has passed, the `by-coupon` index lists every coupon
//!    the counters count and the pass read one definition version
//!    throughout: the grants on their way (claimed, and neither issued
//!    nor rejected, read before the counters) count as pending;
//!    per-user counts, request outcomes and the lost shard's outbox
//!    first, then stock
//!    (`total - issued - rejected - pending - what surviving shards hold`)
//!    at that version, then every shard's "sold out" stamp is voided.
//!
//! The pass ends with the stock equation,
//! `total = remaining + issued + pending + rejected - overgranted`
//! ([`figures::balance`]), any drift reported with its cause.
//!
//! Once per run, blacklist flags Redis lost are set again from the durable
//! blacklist (never one an operator lifted meanwhile).
//!
//! Every step is idempotent or guarded, so two runs at once, or a run that
//! dies half way, leave nothing wrong: re-drives are absorbed by the
//! issuer's conditional writes, a trim only removes confirmed entries, a
//! restore never overwrites a shard that has state, and the sold-out stamps
//! a rebuild or a restart's check must void are voided before it repairs
//! (a run that dies after the repair would leave them: the next finds every
//! shard current). Open: an operator's change that the pass applies to a
//! shard (`repair.rs`, and the rebuild's `settle_rebuild`) is followed by
//! its bumps, and a run dying between the two leaves the stamps until the
//! next stock change (docs/protocol.md lists these cases).
//!
//! # Layout
//!
//! - `mod.rs`: the run over every live coupon, a repair request's run over
//!   named ones, the blacklist restore, the metrics of a pass.
//! - `pass.rs`: one coupon's pass, the steps above each a method.
//! - `restarts.rs`: step 0, shards behind DynamoDB (rolled back, or
//!   restarted and checked).
//! - `repair.rs`: the small repairs (settings healed, re-drives held back
//!   from unreplicated shards, borrows finished).
//! - `rebuild.rs`: lost shards rebuilt from DynamoDB.
//! - `void.rs`: step 2, the entries a rolled-back state minted again,
//!   trimmed from the outboxes dropped shards kept.
//! - `redrive.rs`: the pending grants sent again, claimed first.
//! - `wait.rs`: the per-coupon wait for grants on their way.
//! - `figures.rs`: the stock arithmetic, pure functions.
//! - `report.rs`, `ports.rs`: what a pass reports; what it needs.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tracing::{info, instrument, warn};

use crate::blacklist::{BlacklistFlags, BlacklistRecord};
use crate::clock::Clock;
use crate::coupon::CouponDefinition;
use crate::error::StoreError;
use crate::grab::ports::{GrantClaims, StockLedger};
use crate::ids::CouponId;
use crate::live::LiveSettings;
use crate::lottery::ports::Entries;
use crate::metrics::{Metric, Metrics};

mod draw;
mod figures;
mod pass;
pub mod ports;
mod rebuild;
mod redrive;
mod repair;
mod report;
mod restarts;
#[cfg(test)]
mod tests;
mod void;
mod wait;

pub use figures::{balance, restorable, split};
use ports::{DurableFacts, Redrive, StockRepair};
pub use report::{find, CouponReport, ReconcileReport};

/// How a run behaves.
#[derive(Debug, Clone, Copy)]
pub struct ReconcileSettings {
    /// Outbox entries and borrows younger than this are left alone: the
    /// grab that made them may still be sending.
    pub grace_ms: i64,
    /// Coupons whose window closed longer ago than this are not visited.
    pub retention_ms: i64,
    /// While the grant queue holds messages, a pending outbox entry may be
    /// one of them (a backlog the issuer has not reached): it is re-driven
    /// only once older than this, so a normal backlog is not duplicated
    /// every pass. With the queue empty, a pending entry was never sent and
    /// is re-driven after `grace_ms`.
    pub backlog_ms: i64,
    /// The longest a send of a grant decided before Redis lost or rolled
    /// back a shard (and the claim written before it) may still land after
    /// it: the grab's send budget (`GRANT_SEND_BUDGET_MS`, 2 s from the
    /// decision by default, enforced whatever `SQS_TIMEOUT_MS` is), with
    /// margin for clock skew. A lost or restarted shard is repaired only
    /// this long after a pass first found it (`wait.rs`), when the claims
    /// name every grant of it on its way. (The reconciler's own re-drive
    /// checks each shard just before it claims and sends.)
    pub send_window_ms: i64,
}

impl Default for ReconcileSettings {
    fn default() -> Self {
        Self {
            grace_ms: 30_000,
            retention_ms: 7 * 86_400_000,
            backlog_ms: 15 * 60_000,
            send_window_ms: 3_000,
        }
    }
}

/// The reconciler's dependencies, built once per Lambda instance (and by
/// the admin API, which reconciles one coupon on demand).
pub struct ReconcilePorts {
    /// What DynamoDB knows: definitions, issued, rejected, holdings.
    pub facts: Arc<dyn DurableFacts>,
    /// The Redis state it reads and repairs.
    pub repair: Arc<dyn StockRepair>,
    /// The grab's stock operations, to finish borrows whose caller died.
    pub ledger: Arc<dyn StockLedger>,
    /// The queue grants are re-driven to, and the DLQ's depth.
    pub redrive: Arc<dyn Redrive>,
    /// Where a re-driven grant's claim is written before it goes.
    pub claims: Arc<dyn GrantClaims>,
    /// The durable blacklist the flags are restored from.
    pub blacklist: Arc<dyn BlacklistRecord>,
    /// The blacklist flags grabs read.
    pub flags: Arc<dyn BlacklistFlags>,
    /// The operators' settings on each shard, healed when a shard is behind
    /// the stored definition.
    pub live: Arc<dyn LiveSettings>,
    /// A lottery's entries and draw, for the draw when it is due.
    pub entries: Arc<dyn Entries>,
    /// The clock every decision reads (a test sets it by hand).
    pub clock: Arc<dyn Clock>,
    /// Where the function's metrics go (EMF lines in Lambda, a recorder in
    /// tests).
    pub metrics: Arc<dyn Metrics>,
}

/// What the shards that kept their state hold, as one pass read them.
#[derive(Debug, Clone, Default)]
struct Surviving {
    /// Their stock, summed.
    held: i64,
    /// How many computed it from another definition version than the one
    /// the pass read: an operator's change is on its way (or raced the
    /// pass), and `held` and the total disagree by its units.
    other_version: u32,
    /// The grants in their outboxes not yet issued or rejected (each a
    /// claim of its user, whichever shard is their home), and, before a
    /// rebuild, the claimed grants on their way.
    pending: Vec<crate::grant::Grant>,
    /// Before a rebuild: every grant of the coupon claimed and not
    /// rejected (issued since or not), each a claim of its user. (A
    /// rejected grant holds no claim: restoring it would count a coupon
    /// its user never got and replay its request as a win.)
    claimed: Vec<crate::grant::Grant>,
    /// Before a rebuild: the grants that took units from the shards, as
    /// far as the durable records name them (claimed, listed in a
    /// surviving outbox, or rejected); empty when not read.
    accounted: HashSet<crate::ids::GrantId>,
}

/// How many coupons of one repair batch are repaired at once: enough for
/// the coupons one node held (a repair-queue batch names at most ten), few
/// enough that the passes' reads do not crowd each other out on the
/// stores' connections.
pub const REPAIR_AT_ONCE: usize = 4;

/// How long after a coupon's selling is over (a lottery's draw window
/// included) a pass may settle it: long enough for every send decided
/// before the end, a re-drive of the dead-letter queue by an operator the
/// same hour, and a late rebuild's figures to have come and been seen.
pub const SETTLED_AFTER_MS: i64 = 3_600_000;

/// True if a pass that found `r` for `def` at `now` leaves it nothing to
/// do again while its definition stays as it is: selling over for
/// [`SETTLED_AFTER_MS`], the stock equation balanced, no grant on its way
/// and nothing repaired, re-driven, finished or explained in this pass.
/// (A definition changed by an operator has another fingerprint, and is
/// visited again.)
pub fn settles(def: &CouponDefinition, r: &CouponReport, now: i64) -> bool {
    now >= def.sells_until_ms().saturating_add(SETTLED_AFTER_MS)
        && r.drift == 0
        && r.pending == 0
        && r.redriven == 0
        && r.borrows_finished == 0
        && r.shards_rebuilt == 0
        && r.shards_rolled_back == 0
        && r.shards_waiting == 0
        && r.causes.is_empty()
}

/// The reconciliation use case.
pub struct Reconciler {
    ports: ReconcilePorts,
    settings: ReconcileSettings,
}

impl Reconciler {
    /// Wires the reconciler.
    pub fn new(ports: ReconcilePorts, settings: ReconcileSettings) -> Self {
        Self { ports, settings }
    }

    /// One pass over every coupon that is live or recently ended.
    #[instrument(skip_all)]
    pub async fn run(&self) -> Result<ReconcileReport, StoreError> {
        let now = self.ports.clock.now_ms();
        let mut report = ReconcileReport {
            started_at_ms: now,
            ..ReconcileReport::default()
        };
        // Settled coupons are skipped while their definition is unchanged;
        // unknown (the read failed), every coupon is visited.
        let settled = self.ports.repair.settled().await.unwrap_or_else(|e| {
            warn!(error = %e, "settled coupons unknown; every coupon is visited");
            HashMap::new()
        });
        let (mut still, mut newly) = (HashSet::new(), Vec::new());
        for def in self.ports.facts.definitions().await? {
            if now > def.sells_until_ms().saturating_add(self.settings.retention_ms) {
                continue;
            }
            let fingerprint = def.fingerprint();
            if settled.get(&def.coupon_id) == Some(&fingerprint) {
                still.insert(def.coupon_id.clone());
                report.settled += 1;
                continue;
            }
            match self.coupon(&def, now).await {
                Ok(figures) => {
                    self.publish(&figures);
                    if settles(&def, &figures, now) {
                        newly.push((def.coupon_id.clone(), fingerprint));
                    }
                    report.coupons.push(figures);
                }
                Err(e) => {
                    warn!(coupon = %def.coupon_id, error = %e, source = ?std::error::Error::source(&e), "coupon not reconciled");
                    report.errors.push(format!("{}: {e}", def.coupon_id));
                }
            }
        }
        let forgotten: Vec<CouponId> = settled
            .into_keys()
            .filter(|c| !still.contains(c) && !newly.iter().any(|(n, _)| n == c))
            .collect();
        if !newly.is_empty() || !forgotten.is_empty() {
            if let Err(e) = self.ports.repair.settle(&newly, &forgotten).await {
                warn!(error = %e, "settled coupons not recorded; the next pass visits them again");
            }
        }
        match self.restore_blacklist().await {
            Ok(n) => report.blacklist_restored = n,
            Err(e) => report.errors.push(format!("blacklist: {e}")),
        }
        match self.ports.redrive.dlq_depth().await {
            Ok(depth) => report.dlq_depth = depth,
            Err(e) => report.errors.push(format!("dead-letter queue: {e}")),
        }
        if let Some(depth) = report.dlq_depth {
            self.ports.metrics.count(Metric::DlqDepth, None, depth);
        }
        // One figure over all coupons, for the drift alarm.
        let drift: u64 = report.coupons.iter().map(|c| c.drift.unsigned_abs()).sum();
        self.ports.metrics.count(Metric::ReconcileDriftTotal, None, drift);
        info!(coupons = report.coupons.len(), clean = report.is_clean(), "reconciled");
        Ok(report)
    }

    /// A pass over the named coupons only: what a grab asks for when it
    /// finds a coupon's Redis state gone (the repair queue), so the sale
    /// heals in seconds instead of at the next scheduled pass. Coupons that
    /// do not exist (or whose window is long over) are skipped; the rest are
    /// reconciled exactly as [`Self::run`] does it. A coupon whose repair
    /// still waits for its grants on their way reports `shards_waiting` >
    /// 0; the caller follows it ([`Self::repair_due`]) or asks again later.
    ///
    /// The coupons are repaired side by side ([`REPAIR_AT_ONCE`] at a
    /// time), not one after another: a node restored from a snapshot loses
    /// every coupon it held at once, and the batch that names them must not
    /// keep the last one's sale shut while the first ones are rebuilt (a
    /// rebuild reads every claim of its coupon: seconds for a big sale).
    /// Passes over different coupons share nothing, and a pass is safe
    /// beside any other (every step is conditional), so this changes only
    /// when each sale opens again. The report keeps the batch's order; every
    /// pass runs to its end, and then an error in any fails the batch, as
    /// one pass failing did before (the caller runs the whole batch again,
    /// which is safe).
    #[instrument(skip_all, fields(coupons = coupons.len()))]
    pub async fn repair(&self, coupons: &[CouponId]) -> Result<ReconcileReport, StoreError> {
        use futures::stream::{self, StreamExt};

        let now = self.ports.clock.now_ms();
        let mut seen = HashSet::new();
        // The futures made first, then run: a closure inside the stream
        // would make the whole future's `Send` depend on every lifetime.
        let passes: Vec<_> = coupons
            .iter()
            .filter(|c| seen.insert(*c))
            .enumerate()
            .map(|(n, coupon)| async move { (n, self.repair_one(coupon, now).await) })
            .collect();
        // Unordered, so a slow rebuild holds only its own slot (an ordered
        // buffer keeps the finished ones behind it counted until it ends,
        // and the batch's later coupons wait for it); sorted back after.
        // Every pass runs to its end, then an error in any fails the batch:
        // one pass's error does not cut the others short.
        let mut results: Vec<(usize, Result<Option<CouponReport>, StoreError>)> =
            stream::iter(passes).buffer_unordered(REPAIR_AT_ONCE).collect().await;
        results.sort_by_key(|(n, _)| *n);
        let repaired = results
            .into_iter()
            .map(|(_, result)| result)
            .collect::<Result<Vec<_>, _>>()?;
        let report = ReconcileReport {
            started_at_ms: now,
            coupons: repaired.into_iter().flatten().collect(),
            ..ReconcileReport::default()
        };
        info!(coupons = report.coupons.len(), "repaired on request");
        Ok(report)
    }

    /// One coupon of [`Self::repair`]'s batch; `None` if it does not exist
    /// or its window is long over.
    async fn repair_one(&self, coupon: &CouponId, now: i64) -> Result<Option<CouponReport>, StoreError> {
        let Some(stored) = self.ports.facts.stored(coupon).await? else {
            return Ok(None);
        };
        let def = &stored.definition;
        if now > def.sells_until_ms().saturating_add(self.settings.retention_ms) {
            return Ok(None);
        }
        let figures = self.coupon(def, now).await?;
        self.publish(&figures);
        Ok(Some(figures))
    }

    /// Sets the blacklist flags Redis lost (after a flush or a failover
    /// without a replica). A flag set here for a user whom an operator took
    /// off the list meanwhile is removed again: the durable list is read
    /// once more after each flag this pass had to set, so a removal is never
    /// undone (the operator's own Redis step runs after the durable delete).
    async fn restore_blacklist(&self) -> Result<u64, StoreError> {
        let mut restored = 0;
        for user in self.ports.blacklist.users().await? {
            if self.ports.flags.restore_flag(&user).await? {
                if self.ports.blacklist.contains(&user).await? {
                    restored += 1;
                } else {
                    self.ports.flags.set_flag(&user, false).await?;
                }
            }
        }
        if restored > 0 {
            warn!(restored, "blacklist flags restored from the durable list");
        }
        Ok(restored)
    }

    fn publish(&self, r: &CouponReport) {
        let dim = Some(r.coupon_id.as_str());
        let m = &self.ports.metrics;
        m.count(Metric::ReconcileDrift, dim, r.drift.unsigned_abs());
        m.count(Metric::GrantsPending, dim, r.pending);
        m.count(Metric::GrantsRedriven, dim, r.redriven);
        m.count(Metric::GrantsRejected, dim, r.rejected);
        m.count(Metric::ShardsRebuilt, dim, u64::from(r.shards_rebuilt));
        m.count(Metric::ShardsRolledBack, dim, u64::from(r.shards_rolled_back));
        m.count(Metric::StockRemaining, dim, u64::try_from(r.remaining).unwrap_or(0));
    }
}
