//! Reconciliation: the scheduled job that keeps Redis (fast, volatile) and
//! DynamoDB (durable, the arbiter) honest with each other.
//!
//! Per coupon whose window is open or recently closed, one pass
//! ([`Reconciler::coupon`], whose numbered comments are these steps),
//! reading in the order units flow (Redis stock, outboxes, DynamoDB) so
//! that a unit moving during the pass is never counted nowhere:
//!
//! 0. Rollbacks: a shard whose grant sequence is behind its durable
//!    high-water mark is dropped. Then the coupon's wait for its grants on
//!    their way (`wait.rs`): with any shard lost or restarted, a per-coupon
//!    barrier episode is opened, its barriers sent once the send window
//!    has passed, and repairs of the shards it covers allowed once every
//!    lane has acknowledged. A shard whose Redis server restarted since it
//!    was stamped (it sells nothing until then) is checked then: behind
//!    its mark, or out of stock, it is dropped; otherwise stamped again,
//!    and every epoch bumped.
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
//!    throughout: per-user counts and request outcomes first, then stock
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
//! issuer's conditional writes, a trim only removes confirmed entries, and a
//! restore never overwrites a shard that has state.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tracing::{info, instrument, warn};

use crate::blacklist::{BlacklistFlags, BlacklistRecord};
use crate::clock::Clock;
use crate::coupon::{CouponDefinition, StoredCoupon};
use crate::error::StoreError;
use crate::grab::ports::{BorrowEnd, Claim, Recorded, StockLedger};
use crate::grab::{finish_borrow, home_shard};
use crate::grant::Grant;
use crate::ids::{CouponId, UserId};
use crate::live::{LiveSettings, ShardApply};
use crate::metrics::{Metric, Metrics};
use crate::user_coupon::Held;

mod figures;
pub mod ports;
mod report;
#[cfg(test)]
mod tests;
mod wait;

pub use figures::{balance, restorable, split};
use ports::{DurableFacts, Redrive, StockRepair, Verification};
pub use report::{find, CouponReport, ReconcileReport};
use wait::Gate;

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
    /// back a shard may still land in the grant queue after it: the grab's
    /// send budget (`GRANT_SEND_BUDGET_MS`, 2 s from the decision by default,
    /// enforced whatever `SQS_TIMEOUT_MS` is), with margin for clock skew.
    /// The coupon's barriers (`wait.rs`) are sent only this long after a
    /// pass first found its shards lost or restarted, so they follow every
    /// such send in its lane. (The reconciler's own re-drive checks each
    /// shard just before it sends.)
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
    /// The durable blacklist the flags are restored from.
    pub blacklist: Arc<dyn BlacklistRecord>,
    /// The blacklist flags grabs read.
    pub flags: Arc<dyn BlacklistFlags>,
    /// The operators' settings on each shard, healed when a shard is behind
    /// the stored definition.
    pub live: Arc<dyn LiveSettings>,
    /// The clock every decision reads (a test sets it by hand).
    pub clock: Arc<dyn Clock>,
    /// Where the function's metrics go (EMF lines in Lambda, a recorder in
    /// tests).
    pub metrics: Arc<dyn Metrics>,
}

/// What the shards that kept their state hold, as one pass read them.
#[derive(Debug, Clone, Copy, Default)]
struct Surviving {
    /// Their stock, summed.
    held: i64,
    /// How many computed it from another definition version than the one
    /// the pass read: an operator's change is on its way (or raced the
    /// pass), and `held` and the total disagree by its units.
    other_version: u32,
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
        for def in self.ports.facts.definitions().await? {
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
    #[instrument(skip_all, fields(coupons = coupons.len()))]
    pub async fn repair(&self, coupons: &[CouponId]) -> Result<ReconcileReport, StoreError> {
        let now = self.ports.clock.now_ms();
        let mut report = ReconcileReport {
            started_at_ms: now,
            ..ReconcileReport::default()
        };
        let mut seen = HashSet::new();
        for coupon in coupons.iter().filter(|c| seen.insert(*c)) {
            let Some(stored) = self.ports.facts.stored(coupon).await? else {
                continue;
            };
            let def = &stored.definition;
            if now > def.grab_end_ms.saturating_add(self.settings.retention_ms) {
                continue;
            }
            let figures = self.coupon(def, now).await?;
            self.publish(&figures);
            report.coupons.push(figures);
        }
        info!(coupons = report.coupons.len(), "repaired on request");
        Ok(report)
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

    /// One pass over one coupon.
    ///
    /// Reads in the order units flow (surviving Redis stock, then the
    /// outboxes, then DynamoDB), so a unit that moves between two reads is
    /// counted twice (a rebuild restores too little, which the next sale
    /// figures show) and never zero times (which would sell it again).
    #[instrument(skip_all, fields(coupon = %def.coupon_id))]
    pub async fn coupon(&self, def: &CouponDefinition, now: i64) -> Result<CouponReport, StoreError> {
        let coupon = &def.coupon_id;
        let stored = self.ports.facts.stored(coupon).await?.unwrap_or(StoredCoupon {
            definition: def.clone(),
            version: 0,
        });
        let def = &stored.definition;
        let mut r = CouponReport {
            coupon_id: coupon.to_string(),
            total: def.total_stock,
            ..CouponReport::default()
        };
        // 0. A shard that rolled back (its grant sequence is behind the
        //    durable high-water mark: an old snapshot, a failover to a
        //    replica that never acknowledged) would sell issued units again:
        //    drop it, and it is rebuilt below like a lost one. The mark is
        //    read first, so every sequence in it was minted before Redis is
        //    read; a shard still behind it then has rolled back.
        for (shard, mark) in self.ports.facts.high_water(coupon).await? {
            if shard < def.shards && self.ports.repair.drop_if_behind(coupon, shard, mark).await? {
                warn!(
                    shard,
                    high_water = mark,
                    "shard rolled back behind issued grants; dropped for the rebuild"
                );
                r.shards_rolled_back += 1;
                r.causes.push(format!(
                    "shard {shard} rolled back: its grant sequence was behind {mark}, issued in DynamoDB; dropped and rebuilt from DynamoDB"
                ));
            }
        }
        //    A shard whose server restarted may have rolled back too, with
        //    its sequence not behind the mark yet (the issuer's backlog) or
        //    any more (presses moved it past): it sells nothing until the
        //    mark is final and compared (dropped then, rebuilt below).
        //    Both wait for the coupon's grants on their way (`wait.rs`).
        let mut gate = self.gate(def, now, &mut r).await?;
        self.verify_restarted(def, now, &mut gate, &mut r).await?;
        // 1. Surviving stock, and which shards are gone.
        let mut present = Vec::new();
        let mut missing = Vec::new();
        let mut surviving = Surviving::default();
        for shard in 0..def.shards {
            match self.ports.repair.shard_stock(coupon, shard).await? {
                Some(found) => {
                    present.push(shard);
                    surviving.held += found.stock;
                    surviving.other_version += u32::from(found.version != stored.version);
                }
                None => missing.push(shard),
            }
        }
        // An operator's change that never reached a shard (its Redis step
        // failed, or met a shard that was lost then) is applied now.
        self.heal_settings(&stored, &present, &mut r).await?;

        // 2. Borrows whose caller died (they may add outbox entries), not
        // while a shard is lost: a borrow must not settle SOLD_OUT past a
        // shard that may hold stock once rebuilt; the next pass finishes
        // them. Then every outbox.
        let mut to_redrive: Vec<Grant> = Vec::new();
        let borrowing_shards: &[u32] = if missing.is_empty() { &present } else { &[] };
        for &shard in borrowing_shards {
            for (request, user) in self
                .ports
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
        let mut outboxes = Vec::new();
        for &shard in &present {
            outboxes.push((shard, self.ports.repair.outbox(coupon, shard).await?));
        }

        // 3. The queue's depth, every coupon's: while it holds messages a
        // young pending entry may be one of them, and is not re-driven yet.
        // (Repairs wait for the coupon's own barriers instead, above.)
        let in_flight = match self.ports.redrive.in_flight().await {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %e, "grant queue depth unknown; rebuilds and early re-drives wait");
                None
            }
        };

        // 4. DynamoDB, last: what confirms the entries, then the counters.
        let rejections = self.ports.facts.rejections(coupon).await?;
        let rejected_ids: HashSet<&str> = rejections.iter().map(|g| g.grant_id.as_str()).collect();
        let fresh: HashSet<String> = to_redrive.iter().map(|g| g.grant_id.clone()).collect();
        for (shard, entries) in &outboxes {
            let grants: Vec<Grant> = entries.iter().map(|e| e.grant.clone()).collect();
            let issued = self.ports.facts.issued_grants(&grants).await?;
            let mut confirmed = Vec::new();
            for entry in entries {
                let id = entry.grant.grant_id.as_str();
                if issued.contains(id) || rejected_ids.contains(id) {
                    confirmed.push(entry.seq);
                } else {
                    r.pending += 1;
                    let age = now - entry.grant.granted_at_ms;
                    let horizon = if in_flight == Some(0) {
                        self.settings.grace_ms
                    } else {
                        self.settings.backlog_ms.max(self.settings.grace_ms)
                    };
                    if age >= horizon && !fresh.contains(id) {
                        to_redrive.push(entry.grant.clone());
                    }
                }
            }
            self.ports.repair.trim(coupon, *shard, &confirmed).await?;
            r.trimmed += confirmed.len() as u64;
        }
        r.rejected = rejections.len() as u64;
        r.issued = self.ports.facts.issued(coupon).await?;
        self.keep_unreplicated(def, &mut to_redrive, &mut r, now).await;
        if !to_redrive.is_empty() {
            // Within the grab's budget of a send, from the check just made.
            let within = (self.settings.send_window_ms - 1_000).max(2_000) as u64;
            match self.ports.redrive.redrive(&to_redrive, within).await {
                Ok(n) => r.redriven = n as u64,
                Err(e) => r.causes.push(format!("re-drive failed, retried next run: {e}")),
            }
        }

        if !missing.is_empty() && now < def.grab_end_ms && missing.iter().all(|&s| gate.lets(s)) {
            self.rebuild(&stored, surviving, &missing, &mut gate, &mut r, now)
                .await?;
        } else if !missing.is_empty() && now < def.grab_end_ms {
            if !matches!(gate, Gate::Waiting) {
                // Lost during this pass, after the gate looked: the next
                // pass opens a wait that covers it.
                r.shards_waiting += missing.len() as u32;
                r.causes.push(format!(
                    "{} shard(s) have no Redis state since this pass began; the next pass waits for the grants on their way",
                    missing.len()
                ));
            }
        } else if !missing.is_empty() {
            r.causes.push(format!(
                "{} shard(s) have no Redis state; the window is over, so they are not rebuilt",
                missing.len()
            ));
        }

        for shard in 0..def.shards {
            r.remaining += self
                .ports
                .repair
                .shard_stock(coupon, shard)
                .await?
                .map_or(0, |s| s.stock);
        }
        if r.rejected > 0 && self.ports.facts.was_rebuilt(coupon).await? {
            r.overgranted = r.rejected;
        }
        figures::balance(&mut r);
        Ok(r)
    }

    /// Settles the shards whose server restarted since they were verified
    /// (a snapshot restored, a node restarted): such a shard's state may be
    /// older than grants users were told about, and its sequence alone
    /// cannot say so once traffic has moved it past the durable mark, so
    /// every claim on it answers BUSY (`lua/lib.lua`) until this check.
    /// The check compares the shard's sequence with its durable mark once
    /// the mark is final: once the gate has passed (every grant of the
    /// coupon sent before the restart was found has reached DynamoDB, and
    /// raised its shard's mark). Behind the mark: dropped, and rebuilt by
    /// this pass. Otherwise the shard holds every grant issued and sells
    /// again.
    async fn verify_restarted(
        &self,
        def: &CouponDefinition,
        now: i64,
        gate: &mut Gate,
        r: &mut CouponReport,
    ) -> Result<(), StoreError> {
        let coupon = &def.coupon_id;
        let mut suspects = Vec::new();
        for shard in 0..def.shards {
            if let Verification::Suspect { since_ms } = self.ports.repair.verify(coupon, shard, now, None).await? {
                suspects.push((shard, since_ms));
            }
        }
        // The gate counted them as waiting already; one found suspect since
        // it looked waits for the next pass's.
        if suspects.is_empty() || !suspects.iter().all(|&(s, _)| gate.lets(s)) || !self.enter(def, gate, r).await? {
            return Ok(());
        }
        let marks = self.ports.facts.high_water(coupon).await?;
        let mut confirmed = 0;
        for (shard, _) in suspects {
            let mark = marks.get(&shard).copied().unwrap_or(0);
            match self.ports.repair.verify(coupon, shard, now, Some(mark)).await? {
                Verification::Dropped => {
                    warn!(
                        shard,
                        high_water = mark,
                        "restarted shard rolled back behind issued grants; dropped for the rebuild"
                    );
                    r.shards_rolled_back += 1;
                    r.causes.push(format!(
                        "shard {shard} restarted and rolled back: its grant sequence was behind {mark}, issued in DynamoDB; dropped and rebuilt from DynamoDB"
                    ));
                }
                Verification::Confirmed => {
                    gate.release(shard);
                    info!(
                        shard,
                        high_water = mark,
                        "restarted shard holds every issued grant; selling again"
                    );
                    r.causes.push(format!(
                        "shard {shard} restarted; it holds every grant DynamoDB has (up to {mark}), so it sells again"
                    ));
                    confirmed += 1;
                }
                _ => {}
            }
        }
        if confirmed > 0 {
            // Its state may hold units the other shards saw it without (sold
            // after the snapshot, under grants never sent): their sold-out
            // stamps would refuse presses a borrow from it could serve.
            for shard in 0..def.shards {
                self.ports.repair.bump_epoch(coupon, shard).await?;
            }
        }
        Ok(())
    }

    /// Applies the stored definition to shards still on an older version,
    /// in the same two phases as an operator's change (settings and stock
    /// everywhere, then every epoch). A shard already current costs one
    /// script call that changes nothing.
    async fn heal_settings(
        &self,
        stored: &StoredCoupon,
        shards: &[u32],
        r: &mut CouponReport,
    ) -> Result<(), StoreError> {
        let mut healed = 0;
        for &shard in shards {
            if self.ports.live.apply_shard(stored, shard).await? == ShardApply::Applied {
                healed += 1;
            }
        }
        if healed > 0 {
            for shard in 0..stored.definition.shards {
                self.ports.live.bump_epoch(&stored.definition.coupon_id, shard).await?;
            }
            r.causes.push(format!(
                "{healed} shard(s) were behind the stored definition (version {}); applied",
                stored.version
            ));
        }
        Ok(())
    }

    /// Leaves out of `grants` every grant whose shards (the unit's, and the
    /// user's home shard, which holds the request's record and the user's
    /// count) no replica has acknowledged: a failover now would roll them
    /// back, and a coupon issued for one would hold a unit the promoted
    /// replica sells again. They stay in the outbox for the next run. So
    /// does every grant of a shard that is no longer current (its server
    /// restarted, or it was lost, since this pass read its outbox): the
    /// state now may have forgotten the grant, and sell its unit again.
    async fn keep_unreplicated(&self, def: &CouponDefinition, grants: &mut Vec<Grant>, r: &mut CouponReport, now: i64) {
        let mut acked: HashMap<u32, bool> = HashMap::new();
        let mut kept = 0;
        let mut sendable = Vec::with_capacity(grants.len());
        for grant in grants.drain(..) {
            let mut ok = true;
            for shard in [grant.shard, home_shard(&grant.user_id, def.shards)] {
                let held = match acked.get(&shard) {
                    Some(&held) => held,
                    None => {
                        let held = match self.ports.ledger.replicated(&def.coupon_id, shard).await {
                            Ok(held) => held,
                            Err(e) => {
                                warn!(shard, error = %e, "replica acknowledgement unknown; re-drive waits");
                                false
                            }
                        };
                        let held = held
                            && matches!(
                                self.ports.repair.verify(&def.coupon_id, shard, now, None).await,
                                Ok(Verification::Current)
                            );
                        acked.insert(shard, held);
                        held
                    }
                };
                ok &= held;
            }
            if ok {
                sendable.push(grant);
            } else {
                kept += 1;
            }
        }
        *grants = sendable;
        if kept > 0 {
            r.causes.push(format!(
                "{kept} grant(s) not re-driven: no replica acknowledged their shard yet; the next run tries again"
            ));
        }
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
            self.ports.ledger.settle(&claim, BorrowEnd::AllEmpty).await?;
            return Ok(None);
        }
        let Some(Recorded::Borrowing { ordinal }) = self.ports.ledger.recorded(&claim).await? else {
            // Settled meanwhile, or its record expired: settle only clears
            // the listing then.
            self.ports.ledger.settle(&claim, BorrowEnd::AllEmpty).await?;
            return Ok(None);
        };
        let outcome = finish_borrow(
            self.ports.ledger.as_ref(),
            self.ports.metrics.as_ref(),
            &claim,
            def.shards,
            ordinal,
        )
        .await?;
        Ok(outcome
            .ok()
            .map(|rec| rec.into_grant(def.coupon_id.clone(), user.clone(), request.clone())))
    }

    async fn rebuild(
        &self,
        stored: &StoredCoupon,
        surviving: Surviving,
        missing: &[u32],
        gate: &mut Gate,
        r: &mut CouponReport,
        now: i64,
    ) -> Result<(), StoreError> {
        let def = &stored.definition;
        let coupon = &def.coupon_id;
        // The lost shards get the total less what the others hold, so both
        // must come from one definition version: a change committed during
        // this pass (read again just below) or applied to a shard that was
        // not yet at the version read would be counted in one and not the
        // other. The next pass reads both afresh (and heals the shards
        // behind first).
        let latest = self.ports.facts.stored(coupon).await?.unwrap_or_else(|| stored.clone());
        let Surviving { held, other_version } = surviving;
        if other_version > 0 || latest.version != stored.version {
            r.shards_waiting += missing.len() as u32;
            r.causes.push(format!(
                "{} shard(s) have no Redis state; the definition moved during this pass (version {} read, {} now, {other_version} shard(s) at another), so the rebuild waits for the next one",
                missing.len(),
                stored.version,
                latest.version
            ));
            return Ok(());
        }
        let restorable = figures::restorable(def.total_stock, held, r);
        // Who holds what comes from the by-coupon index, which DynamoDB
        // reads only eventually consistently, and reads now, as the queue
        // has just drained: the index is at its furthest behind. A holder
        // it misses would come back with a count one short and win their
        // own ordinal again. The counters (read consistently, just before)
        // say how many coupons it must list; until it lists them all, the
        // lost shards wait.
        let counted = self.ports.facts.issued(coupon).await?;
        let holdings = self.ports.facts.holdings(coupon).await?;
        let indexed: u64 = holdings.values().map(|held| held.len() as u64).sum();
        if indexed < counted {
            r.shards_waiting += missing.len() as u32;
            r.causes.push(format!(
                "{} shard(s) have no Redis state; the by-coupon index lists {indexed} of the {counted} coupon(s) issued, so the rebuild waits for it to catch up",
                missing.len()
            ));
            return Ok(());
        }
        if !self.enter(def, gate, r).await? {
            return Ok(());
        }
        let marks = self.ports.facts.high_water(coupon).await?;
        let mut restored = 0;
        for (&shard, share) in missing.iter().zip(figures::split(restorable, missing.len())) {
            let holders: Vec<(UserId, Vec<Held>)> = holdings
                .iter()
                .filter(|(user, _)| home_shard(user, def.shards) == shard)
                .map(|(u, held)| (u.clone(), held.clone()))
                .collect();
            // New grant ids start at the current time in ms: far above any
            // sequence the lost shard minted since it was created, and small
            // enough (13 digits) that Lua's `%.14g` number formatting keeps
            // it exact. A shard rebuilt before started at the time then and
            // may have minted more grants than milliseconds have passed:
            // never below its durable mark, the highest sequence issued.
            let mark = marks.get(&shard).copied().unwrap_or(0);
            let seq_base = (now.max(0) as u64).max(mark + 1);
            if self
                .ports
                .repair
                .restore_shard(&latest, shard, share, seq_base, &holders, now)
                .await?
            {
                r.shards_rebuilt += 1;
                restored += share;
            }
        }
        if r.shards_rebuilt > 0 {
            // A change committed after `latest` was read found these shards
            // missing: apply whatever is stored now (a no-op if nothing moved).
            let now_stored = self.ports.facts.stored(coupon).await?.unwrap_or(latest);
            for &shard in missing {
                self.ports.live.apply_shard(&now_stored, shard).await?;
            }
            for shard in 0..def.shards {
                self.ports.repair.bump_epoch(coupon, shard).await?;
            }
            self.ports.facts.record_rebuild(coupon, now, restored).await?;
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
