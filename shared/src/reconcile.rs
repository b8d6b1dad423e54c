//! Reconciliation: the scheduled job that keeps Redis (fast, volatile) and
//! DynamoDB (durable, the arbiter) honest with each other.
//!
//! Per coupon whose window is open or recently closed, one pass:
//!
//! 1. Reads every shard; a shard without state while DynamoDB knows the
//!    coupon means Redis lost data.
//! 2. Walks each outbox: entries DynamoDB confirms (issued under that grant
//!    id, or rejected) are trimmed; the rest are pending, and those older
//!    than the grace period are re-driven to SQS (winners whose send failed,
//!    or whose Lambda died after the Lua call).
//! 3. Finishes borrows whose caller died (resumed exactly as a client retry
//!    would: idempotent per user and ordinal).
//! 4. Rebuilds lost shards from DynamoDB: per-user counts first, then stock
//!    (`total - issued - rejected - what surviving shards hold or owe`), then
//!    invalidates every shard's "sold out" stamp.
//! 5. Checks `total = remaining + issued + pending + rejected` and reports
//!    any drift with its cause.
//!
//! Once per run, blacklist flags Redis lost are set again from the durable
//! blacklist (never one an operator lifted meanwhile).
//!
//! Every step is idempotent or guarded, so two runs at once, or a run that
//! dies half way, leave nothing wrong: re-drives are absorbed by the
//! issuer's conditional writes, a trim only removes confirmed entries, and a
//! restore never overwrites a shard that has state.

use std::collections::HashSet;
use std::sync::Arc;

use serde::Serialize;
use tracing::{info, instrument, warn};

use crate::clock::Clock;
use crate::coupon::CouponDefinition;
use crate::error::StoreError;
use crate::grant::Grant;
use crate::ids::{CouponId, UserId};
use crate::metrics::Metrics;
use crate::ports::{Claim, DurableFacts, Recorded, Redrive, StockLedger, StockRepair};
use crate::service::{finish_borrow, home_shard};

/// How a run behaves.
#[derive(Debug, Clone, Copy)]
pub struct ReconcileSettings {
    /// Outbox entries and borrows younger than this are left alone: the
    /// grab that made them may still be sending.
    pub grace_ms: i64,
    /// Coupons whose window closed longer ago than this are not visited.
    pub retention_ms: i64,
}

impl Default for ReconcileSettings {
    fn default() -> Self {
        Self {
            grace_ms: 30_000,
            retention_ms: 7 * 86_400_000,
        }
    }
}

/// The figures of one coupon after a pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CouponReport {
    /// Which coupon.
    pub coupon_id: String,
    /// The definition's stock.
    pub total: u64,
    /// Left in Redis, all shards.
    pub remaining: i64,
    /// Issued in DynamoDB (the capped counters).
    pub issued: u64,
    /// Grants in an outbox that DynamoDB does not have yet.
    pub pending: u64,
    /// Grants recorded as rejected.
    pub rejected: u64,
    /// Of those, grants Redis made beyond the stock after it lost data
    /// (absorbed by the DynamoDB cap and keys): not units of stock.
    pub overgranted: u64,
    /// `total - (remaining + issued + pending + rejected - overgranted)`.
    pub drift: i64,
    /// Grants sent to SQS again in this pass.
    pub redriven: u64,
    /// Confirmed outbox entries removed in this pass.
    pub trimmed: u64,
    /// Borrows whose caller died, finished in this pass.
    pub borrows_finished: u64,
    /// Shards rebuilt from DynamoDB in this pass.
    pub shards_rebuilt: u32,
    /// Units put back into Redis by the rebuild.
    pub restored: u64,
    /// Why the figures are what they are, in words, when anything was off.
    pub causes: Vec<String>,
}

/// The result of one run.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileReport {
    /// When the run started.
    pub started_at_ms: i64,
    /// One report per visited coupon.
    pub coupons: Vec<CouponReport>,
    /// Messages in the dead-letter queue, if it could be read.
    pub dlq_depth: Option<u64>,
    /// Coupons that could not be reconciled this time (they are retried on
    /// the next run).
    pub errors: Vec<String>,
    /// Blacklist flags Redis had lost, set again from the durable list.
    pub blacklist_restored: u64,
}

impl ReconcileReport {
    /// True if every visited coupon balanced and nothing failed.
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty() && self.coupons.iter().all(|c| c.drift == 0)
    }
}

/// The reconciler's dependencies, built once per Lambda instance.
pub struct Reconciler {
    facts: Arc<dyn DurableFacts>,
    repair: Arc<dyn StockRepair>,
    ledger: Arc<dyn StockLedger>,
    redrive: Arc<dyn Redrive>,
    clock: Arc<dyn Clock>,
    metrics: Arc<dyn Metrics>,
    settings: ReconcileSettings,
}

impl Reconciler {
    /// Wires the reconciler.
    pub fn new(
        facts: Arc<dyn DurableFacts>,
        repair: Arc<dyn StockRepair>,
        ledger: Arc<dyn StockLedger>,
        redrive: Arc<dyn Redrive>,
        clock: Arc<dyn Clock>,
        metrics: Arc<dyn Metrics>,
        settings: ReconcileSettings,
    ) -> Self {
        Self {
            facts,
            repair,
            ledger,
            redrive,
            clock,
            metrics,
            settings,
        }
    }

    /// One pass over every coupon that is live or recently ended.
    #[instrument(skip_all)]
    pub async fn run(&self) -> Result<ReconcileReport, StoreError> {
        let now = self.clock.now_ms();
        let mut report = ReconcileReport {
            started_at_ms: now,
            ..ReconcileReport::default()
        };
        for def in self.facts.definitions().await? {
            if now > def.grab_end_ms.saturating_add(self.settings.retention_ms) {
                continue;
            }
            match self.coupon(&def, now).await {
                Ok(figures) => {
                    self.publish(&figures);
                    report.coupons.push(figures);
                }
                Err(e) => {
                    warn!(coupon = %def.coupon_id, error = %e, source = ?std::error::Error::source(&e), "coupon not reconciled");
                    report.errors.push(format!("{}: {e}", def.coupon_id));
                }
            }
        }
        match self.restore_blacklist().await {
            Ok(n) => report.blacklist_restored = n,
            Err(e) => report.errors.push(format!("blacklist: {e}")),
        }
        match self.redrive.dlq_depth().await {
            Ok(depth) => report.dlq_depth = depth,
            Err(e) => report.errors.push(format!("dead-letter queue: {e}")),
        }
        if let Some(depth) = report.dlq_depth {
            self.metrics.count("DlqDepth", None, depth);
        }
        // One figure over all coupons, for the drift alarm.
        let drift: u64 = report.coupons.iter().map(|c| c.drift.unsigned_abs()).sum();
        self.metrics.count("ReconcileDriftTotal", None, drift);
        info!(coupons = report.coupons.len(), clean = report.is_clean(), "reconciled");
        Ok(report)
    }

    /// Sets the blacklist flags Redis lost (after a flush or a failover
    /// without a replica). A flag set here for a user whom an operator took
    /// off the list meanwhile is removed again: the durable list is read
    /// once more after each flag this pass had to set, so a removal is never
    /// undone (the operator's own Redis step runs after the durable delete).
    async fn restore_blacklist(&self) -> Result<u64, StoreError> {
        let mut restored = 0;
        for user in self.facts.blacklisted_users().await? {
            if self.repair.restore_blacklist_flag(&user).await? {
                if self.facts.still_blacklisted(&user).await? {
                    restored += 1;
                } else {
                    self.repair.clear_blacklist_flag(&user).await?;
                }
            }
        }
        if restored > 0 {
            warn!(restored, "blacklist flags restored from the durable list");
        }
        Ok(restored)
    }

    fn publish(&self, r: &CouponReport) {
        let dim = Some(("Coupon", r.coupon_id.as_str()));
        self.metrics.count("ReconcileDrift", dim, r.drift.unsigned_abs());
        self.metrics.count("GrantsPending", dim, r.pending);
        self.metrics.count("GrantsRedriven", dim, r.redriven);
        self.metrics.count("GrantsRejected", dim, r.rejected);
        self.metrics.count("ShardsRebuilt", dim, u64::from(r.shards_rebuilt));
    }

    /// One pass over one coupon.
    #[instrument(skip_all, fields(coupon = %def.coupon_id))]
    pub async fn coupon(&self, def: &CouponDefinition, now: i64) -> Result<CouponReport, StoreError> {
        let coupon = &def.coupon_id;
        let mut r = CouponReport {
            coupon_id: coupon.to_string(),
            total: def.total_stock,
            ..CouponReport::default()
        };
        let mut present = Vec::new();
        let mut missing = Vec::new();
        for shard in 0..def.shards {
            match self.repair.shard_stock(coupon, shard).await? {
                Some(_) => present.push(shard),
                None => missing.push(shard),
            }
        }
        r.issued = self.facts.issued(coupon).await?;
        let rejections = self.facts.rejections(coupon).await?;
        r.rejected = rejections.len() as u64;
        let rejected_ids: HashSet<&str> = rejections.iter().map(|g| g.grant_id.as_str()).collect();

        let mut to_redrive: Vec<Grant> = Vec::new();
        for &shard in &present {
            // Borrows first: a finished borrow may add an outbox entry.
            for (request, user) in self
                .repair
                .stale_borrows(coupon, shard, now - self.settings.grace_ms)
                .await?
            {
                if let Some(grant) = self.finish_stale_borrow(def, shard, &user, &request, now).await? {
                    to_redrive.push(grant);
                }
                r.borrows_finished += 1;
            }
        }
        let fresh: HashSet<String> = to_redrive.iter().map(|g| g.grant_id.clone()).collect();
        for &shard in &present {
            let entries = self.repair.outbox(coupon, shard).await?;
            let grants: Vec<Grant> = entries.iter().map(|e| e.grant.clone()).collect();
            let issued = self.facts.issued_grants(&grants).await?;
            let mut confirmed = Vec::new();
            for entry in &entries {
                let id = entry.grant.grant_id.as_str();
                if issued.contains(id) || rejected_ids.contains(id) {
                    confirmed.push(entry.seq);
                } else {
                    r.pending += 1;
                    let stale = entry.grant.granted_at_ms <= now - self.settings.grace_ms;
                    if stale && !fresh.contains(id) {
                        to_redrive.push(entry.grant.clone());
                    }
                }
            }
            self.repair.trim(coupon, shard, &confirmed).await?;
            r.trimmed += confirmed.len() as u64;
        }
        if !to_redrive.is_empty() {
            match self.redrive.redrive(&to_redrive).await {
                Ok(n) => r.redriven = n as u64,
                Err(e) => r.causes.push(format!("re-drive failed, retried next run: {e}")),
            }
        }

        if !missing.is_empty() && now < def.grab_end_ms {
            self.rebuild(def, &present, &missing, &mut r, now).await?;
        } else if !missing.is_empty() {
            r.causes.push(format!(
                "{} shard(s) have no Redis state; the window is over, so they are not rebuilt",
                missing.len()
            ));
        }

        for shard in 0..def.shards {
            r.remaining += self.repair.shard_stock(coupon, shard).await?.unwrap_or(0);
        }
        if r.rejected > 0 && self.facts.was_rebuilt(coupon).await? {
            r.overgranted = r.rejected;
        }
        let accounted = r.remaining + (r.issued + r.pending + r.rejected - r.overgranted) as i64;
        r.drift = def.total_stock as i64 - accounted;
        if r.drift > 0 {
            r.causes.push(format!(
                "{} unit(s) unaccounted: grants lost with Redis data before they reached SQS or DynamoDB",
                r.drift
            ));
        } else if r.drift < 0 {
            r.causes.push(format!(
                "{} unit(s) granted twice after Redis data loss (in flight during the rebuild); \
                 the DynamoDB cap keeps issued <= total",
                -r.drift
            ));
        }
        Ok(r)
    }

    async fn finish_stale_borrow(
        &self,
        def: &CouponDefinition,
        shard: u32,
        user: &UserId,
        request: &crate::ids::RequestId,
        now: i64,
    ) -> Result<Option<Grant>, StoreError> {
        let claim = Claim {
            coupon: &def.coupon_id,
            home_shard: shard,
            user,
            level: 0,
            request,
            now_ms: now,
        };
        if home_shard(user, def.shards) != shard {
            warn!(%user, shard, "borrow listed on a shard that is not the user's home; dropped");
            self.ledger.settle(&claim, None).await?;
            return Ok(None);
        }
        let Some(Recorded::Borrowing { ordinal }) = self.ledger.recorded(&claim).await? else {
            // Settled meanwhile, or its record expired: settle only clears
            // the listing then.
            self.ledger.settle(&claim, None).await?;
            return Ok(None);
        };
        let outcome = finish_borrow(self.ledger.as_ref(), self.metrics.as_ref(), &claim, def.shards, ordinal).await?;
        Ok(outcome
            .ok()
            .map(|rec| rec.into_grant(def.coupon_id.clone(), user.clone(), request.clone())))
    }

    async fn rebuild(
        &self,
        def: &CouponDefinition,
        present: &[u32],
        missing: &[u32],
        r: &mut CouponReport,
        now: i64,
    ) -> Result<(), StoreError> {
        let coupon = &def.coupon_id;
        let mut held = 0i64;
        for &shard in present {
            held += self.repair.shard_stock(coupon, shard).await?.unwrap_or(0);
        }
        // What the lost shards may hand out again: never more than what no
        // durable record and no surviving shard accounts for.
        let accounted = held.max(0) as u64 + r.issued + r.rejected + r.pending;
        let restorable = def.total_stock.saturating_sub(accounted);
        let holdings = self.facts.holdings(coupon).await?;
        let n = missing.len() as u64;
        let mut restored = 0;
        for (i, &shard) in missing.iter().enumerate() {
            let share = restorable / n + u64::from((i as u64) < restorable % n);
            let holders: Vec<(UserId, u32)> = holdings
                .iter()
                .filter(|(user, _)| home_shard(user, def.shards) == shard)
                .map(|(u, c)| (u.clone(), *c))
                .collect();
            // New grant ids start at the current time in ms: far above any
            // sequence the lost shard minted, and small enough (13 digits)
            // that Lua's `%.14g` number formatting keeps it exact.
            let seq_base = now.max(0) as u64;
            if self
                .repair
                .restore_shard(def, shard, share, seq_base, &holders, now)
                .await?
            {
                r.shards_rebuilt += 1;
                restored += share;
            }
        }
        if r.shards_rebuilt > 0 {
            for shard in 0..def.shards {
                self.repair.bump_epoch(coupon, shard).await?;
            }
            self.facts.record_rebuild(coupon, now, restored).await?;
            r.restored = restored;
            r.causes.push(format!(
                "Redis lost {} shard(s); rebuilt from DynamoDB with {restored} unit(s) and {} holder(s)",
                r.shards_rebuilt,
                holdings.len()
            ));
        }
        Ok(())
    }
}

/// Which coupon a report line is about (for callers that filter).
pub fn find<'a>(report: &'a ReconcileReport, coupon: &CouponId) -> Option<&'a CouponReport> {
    report.coupons.iter().find(|c| c.coupon_id == coupon.as_str())
}
