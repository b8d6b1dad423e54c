//! One pass over one coupon ([`Reconciler::coupon`]), in the numbered
//! steps the module documentation lists, each a method of its own.

use std::collections::HashSet;

use tracing::{instrument, warn};

use crate::coupon::{CouponDefinition, StoredCoupon};
use crate::error::StoreError;
use crate::grant::Grant;
use crate::ids::GrantId;

use super::ports::OutboxEntry;
use super::wait::Gate;
use super::{figures, CouponReport, Reconciler, Surviving};

/// What step 2 read of the grants not confirmed yet: every shard's outbox
/// (a dropped shard keeps its own), and the donors' grants each settled for
/// its users.
#[derive(Default)]
pub(super) struct Unsent {
    pub(super) outboxes: Vec<(u32, Vec<OutboxEntry>)>,
    pub(super) borrowed: Vec<(u32, Vec<Grant>)>,
}

/// Which shards of a coupon kept their state, as step 1 read them.
struct Survey {
    /// The shards with state, in order.
    present: Vec<u32>,
    /// The shards without (lost, or dropped in step 0).
    missing: Vec<u32>,
    /// What the present ones hold.
    surviving: Surviving,
}

impl Reconciler {
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
        // 0. Rollbacks, then the coupon's wait for its grants on their way,
        //    then the shards whose server restarted.
        self.drop_rolled_back(def, &mut r).await?;
        let mut gate = self.gate(&stored, now, &mut r).await?;
        self.verify_restarted(&stored, now, &mut gate, &mut r).await?;
        // 1. Surviving stock, and which shards are gone. An operator's
        //    change that never reached a shard (its Redis step failed, or
        //    met a shard that was lost then) is applied now.
        let mut survey = self.survey(&stored).await?;
        self.heal_settings(&stored, &survey.present, &mut r).await?;
        // 2. Borrows whose caller died (they may add outbox entries), not
        //    while a shard is lost: a borrow must not settle SOLD_OUT past a
        //    shard that may hold stock once rebuilt; the next pass finishes
        //    them. Then every outbox.
        let mut to_redrive = if survey.missing.is_empty() {
            self.finish_stale_borrows(def, &survey.present, now, &mut r).await?
        } else {
            Vec::new()
        };
        // A lottery's draw, once due, with every shard there (its claims
        // borrow across them): the winners' grants go with the re-drives.
        // A draw that fails (a store, or a winner refused: the coupon taken
        // offline) is reported and tried again by the next pass; it holds
        // up none of the pass's other work.
        if survey.missing.is_empty() && gate.is_clear() {
            if let Err(e) = self.draw_lottery(def, now, &mut to_redrive, &mut r).await {
                warn!(coupon = %coupon, error = %e, "lottery draw not finished");
                r.causes
                    .push(format!("lottery draw not finished ({e}); the next pass goes on"));
            }
        }
        // Every shard's outbox, a missing one's too: a shard dropped for a
        // rollback or a restart keeps its outbox (verify.lua), whose grants
        // were minted and whose requests' records survive the drop, so a
        // retry can still replay and send one: counted on their way, their
        // units and users stay theirs in the rebuild. (A lost shard's went
        // with it.)
        let mut unsent = Unsent::default();
        for shard in 0..def.shards {
            unsent
                .outboxes
                .push((shard, self.ports.repair.outbox(coupon, shard).await?));
        }
        self.void_reminted(def, &survey.missing, &mut unsent, &mut r).await?;
        // After the outboxes: a grant taken and settled between the two
        // reads is counted twice (restoring too little), never not at all.
        for &shard in &survey.present {
            unsent
                .borrowed
                .push((shard, self.ports.repair.borrowed(coupon, shard).await?));
        }
        // 3. The queue's depth, every coupon's: while it holds messages a
        //    young pending entry may be one of them, and is not re-driven
        //    yet. (Repairs read the coupon's claims instead.)
        let in_flight = match self.ports.redrive.in_flight().await {
            Ok(n) => n,
            Err(e) => {
                warn!(error = %e, "grant queue depth unknown; early re-drives wait");
                None
            }
        };
        // 4. DynamoDB, last: what confirms the entries, then the counters;
        //    the pending re-driven, the lost shards rebuilt.
        let mut pending = self
            .confirm_outboxes(def, &unsent, in_flight, &mut to_redrive, now, &mut r)
            .await?;
        // The lost shards' grants on their way, from their claims, when a
        // rebuild may follow: before the counters, so a grant issued
        // between the reads is counted twice (restoring too little), never
        // not at all.
        if !survey.missing.is_empty() && survey.missing.iter().all(|&s| gate.lets(s)) && !gate.all_issued() {
            let (claimed, accounted) = self.claimed_on_their_way(def, &mut pending, &mut r).await?;
            survey.surviving.claimed = claimed;
            survey.surviving.accounted = accounted;
        }
        r.issued = self.ports.facts.issued(coupon).await?;
        // The re-drive's budget counts from the first check, as a grab's
        // counts from its decision: a claim or send landing later could
        // land after a rebuild trusted the send window.
        let checked_from = self.ports.clock.now_ms();
        self.keep_unreplicated(def, &mut to_redrive, &mut r, now).await;
        self.redrive(&to_redrive, def.shards, checked_from, &mut r).await;
        survey.surviving.pending = pending;
        self.rebuild_or_wait(&stored, survey, &mut gate, &mut r, now).await?;
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

    /// Step 1: each shard's state, if it has any, with its stock and its
    /// definition version.
    async fn survey(&self, stored: &StoredCoupon) -> Result<Survey, StoreError> {
        let def = &stored.definition;
        let mut survey = Survey {
            present: Vec::new(),
            missing: Vec::new(),
            surviving: Surviving::default(),
        };
        for shard in 0..def.shards {
            match self.ports.repair.shard_stock(&def.coupon_id, shard).await? {
                Some(found) => {
                    survey.present.push(shard);
                    survey.surviving.held += found.stock;
                    survey.surviving.other_version += u32::from(found.version != stored.version);
                }
                None => survey.missing.push(shard),
            }
        }
        Ok(survey)
    }

    /// Step 2: finishes the borrows whose caller died, as a retry of the
    /// caller would; the grants they won, to be sent.
    async fn finish_stale_borrows(
        &self,
        def: &CouponDefinition,
        shards: &[u32],
        now: i64,
        r: &mut CouponReport,
    ) -> Result<Vec<Grant>, StoreError> {
        let mut won = Vec::new();
        for &shard in shards {
            for (request, user) in self
                .ports
                .repair
                .stale_borrows(&def.coupon_id, shard, now - self.settings.grace_ms)
                .await?
            {
                match self.finish_stale_borrow(def, shard, &user, &request, now).await {
                    Ok(Some(grant)) => won.push(grant),
                    Ok(None) => {}
                    // A donor not rebuilt yet, a replica behind: this borrow
                    // waits for the next pass, the coupon's pass goes on.
                    Err(e @ StoreError::Unavailable(_)) => {
                        warn!(shard, user = %user, error = %e, "stale borrow not finished; the next pass resumes it");
                        r.causes.push(format!(
                            "a borrow whose caller died waits on shard {shard} for the next pass"
                        ));
                        continue;
                    }
                    Err(e) => return Err(e),
                }
                r.borrows_finished += 1;
            }
        }
        Ok(won)
    }

    /// Step 4: trims every outbox entry DynamoDB confirms (issued under
    /// its grant id, or rejected); counts the others as pending, and adds
    /// to `to_redrive` those past the grace period (past the backlog
    /// horizon while the queue holds messages).
    async fn confirm_outboxes(
        &self,
        def: &CouponDefinition,
        unsent: &Unsent,
        in_flight: Option<u64>,
        to_redrive: &mut Vec<Grant>,
        now: i64,
        r: &mut CouponReport,
    ) -> Result<Vec<Grant>, StoreError> {
        let coupon = &def.coupon_id;
        let mut pending = Vec::new();
        let rejections = self.ports.facts.rejections(coupon).await?;
        let rejected_ids: HashSet<&GrantId> = rejections.iter().map(|g| &g.grant_id).collect();
        let fresh: HashSet<GrantId> = to_redrive.iter().map(|g| g.grant_id.clone()).collect();
        let horizon = if in_flight == Some(0) {
            self.settings.grace_ms
        } else {
            self.settings.backlog_ms.max(self.settings.grace_ms)
        };
        for (shard, entries) in &unsent.outboxes {
            let grants: Vec<Grant> = entries.iter().map(|e| e.grant.clone()).collect();
            let issued = self.ports.facts.issued_grants(&grants).await?;
            let mut confirmed = Vec::new();
            for entry in entries {
                let id = &entry.grant.grant_id;
                if issued.contains(id) || rejected_ids.contains(id) {
                    confirmed.push(entry.seq);
                } else {
                    r.pending += 1;
                    pending.push(entry.grant.clone());
                    let age = now - entry.grant.granted_at_ms;
                    if age >= horizon && !fresh.contains(id) {
                        to_redrive.push(entry.grant.clone());
                    }
                }
            }
            self.ports.repair.trim(coupon, *shard, &confirmed).await?;
            r.trimmed += confirmed.len() as u64;
        }
        // A borrowed grant whose donor's outbox does not list it: the donor
        // lost its state (rebuilt since, or not yet) after giving the
        // unit. The claim and the record are on the home shard, which
        // keeps it until it is issued: pending, so a rebuild does not
        // restore its unit, and re-driven in time as any pending grant.
        let listed: HashSet<&GrantId> = unsent
            .outboxes
            .iter()
            .flat_map(|(_, entries)| entries.iter().map(|e| &e.grant.grant_id))
            .collect();
        for (shard, grants) in &unsent.borrowed {
            let issued = self.ports.facts.issued_grants(grants).await?;
            let mut confirmed = Vec::new();
            for grant in grants {
                let id = &grant.grant_id;
                if issued.contains(id) || rejected_ids.contains(id) {
                    confirmed.push(id.clone());
                } else if !listed.contains(id) {
                    r.pending += 1;
                    pending.push(grant.clone());
                    if now - grant.granted_at_ms >= horizon && !fresh.contains(id) {
                        to_redrive.push(grant.clone());
                    }
                }
            }
            self.ports.repair.forget_borrowed(coupon, *shard, &confirmed).await?;
        }
        r.rejected = rejections.len() as u64;
        Ok(pending)
    }

    /// Step 4, before a rebuild: adds to `pending` every grant claimed
    /// (sent, or about to be, before the fault: the gate let the send
    /// window pass) that DynamoDB has neither issued nor rejected and no
    /// outbox lists. Those are the units, the users' claims and the
    /// requests' outcomes the lost shards' state held on their way to the
    /// issuer, however long the queue's backlog: the rebuild restores them
    /// as it restores what DynamoDB holds, instead of waiting for them.
    /// Returns every claim not rejected, and the grants the durable records name as
    /// having taken a unit (claimed, pending or rejected): claims are
    /// never deleted, so that set does not depend on when the issuer took
    /// each grant, as issued plus pending would.
    async fn claimed_on_their_way(
        &self,
        def: &CouponDefinition,
        pending: &mut Vec<Grant>,
        r: &mut CouponReport,
    ) -> Result<(Vec<Grant>, HashSet<GrantId>), StoreError> {
        let coupon = &def.coupon_id;
        let claimed = self.ports.facts.claims(coupon).await?;
        let rejected: HashSet<GrantId> = self
            .ports
            .facts
            .rejections(coupon)
            .await?
            .into_iter()
            .map(|g| g.grant_id)
            .collect();
        let mut known: HashSet<GrantId> = pending.iter().map(|g| g.grant_id.clone()).collect();
        let fresh: Vec<Grant> = claimed
            .iter()
            .filter(|g| !known.contains(&g.grant_id) && !rejected.contains(&g.grant_id))
            .cloned()
            .collect();
        known.extend(claimed.iter().map(|g| g.grant_id.clone()));
        let issued = self.ports.facts.issued_grants(&fresh).await?;
        let before = pending.len();
        pending.extend(fresh.into_iter().filter(|g| !issued.contains(&g.grant_id)));
        r.pending += (pending.len() - before) as u64;
        let standing = claimed
            .into_iter()
            .filter(|g| !rejected.contains(&g.grant_id))
            .collect();
        let accounted: HashSet<GrantId> = known.into_iter().chain(rejected).collect();
        Ok((standing, accounted))
    }

    /// Step 4: rebuilds the lost shards once the coupon's wait lets every
    /// one of them; says why not otherwise.
    async fn rebuild_or_wait(
        &self,
        stored: &StoredCoupon,
        survey: Survey,
        gate: &mut Gate,
        r: &mut CouponReport,
        now: i64,
    ) -> Result<(), StoreError> {
        let missing = &survey.missing;
        if missing.is_empty() {
            return Ok(());
        }
        if now >= stored.definition.sells_until_ms() {
            r.causes.push(format!(
                "{} shard(s) have no Redis state; the window is over, so they are not rebuilt",
                missing.len()
            ));
        } else if missing.iter().all(|&s| gate.lets(s)) {
            self.rebuild(stored, survey.surviving, missing, gate, r, now).await?;
        } else if !matches!(gate, Gate::Waiting) {
            // Lost during this pass, after the gate looked: the next pass
            // opens a wait that covers it.
            r.shards_waiting += missing.len() as u32;
            r.causes.push(format!(
                "{} shard(s) have no Redis state since this pass began; the next pass waits for the grants on their way",
                missing.len()
            ));
        }
        Ok(())
    }
}
