//! Lost shards rebuilt from DynamoDB (step 4 of a pass, once the
//! coupon's wait lets it): the per-user counts, the request outcomes and
//! the lost shard's outbox first, then its stock, from the figures one
//! definition version gives; and the highest sequence DynamoDB knows per
//! shard, which a rebuilt or restarted shard must stay above.

use std::collections::{BTreeMap, HashMap};

use crate::coupon::{CouponDefinition, StoredCoupon};
use crate::error::StoreError;
use crate::grab::home_shard;
use crate::grant::{Grant, GrantRecord};
use crate::ids::{CouponId, UserId};
use crate::user_coupon::{Held, Holdings};

use super::wait::Gate;
use super::{figures, CouponReport, Reconciler, Surviving};

impl Reconciler {
    /// Rebuilds the lost shards from DynamoDB once the figures it restores
    /// from agree: one definition version throughout the pass, and a
    /// `by-coupon` index that lists every coupon the counters count. The
    /// lost shards share the total less what the others hold.
    pub(super) async fn rebuild(
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
        let Surviving {
            held,
            other_version,
            pending,
            claimed,
            accounted,
        } = surviving;
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
        let claims_read = !accounted.is_empty();
        let mut accounted = accounted;
        // Every grant each user's claims stand on: pending, or claimed
        // (issued since or not: the `by-coupon` index may not list an
        // issue yet), each once.
        let mut seen: std::collections::HashSet<_> = claimed.iter().map(|g| g.grant_id.clone()).collect();
        // A grant a surviving outbox lists may have no claim yet (its grab
        // died between the replica's acknowledgement and the claim): the
        // rebuild restores its user's count and its request from it, so it
        // is claimed first, or the shard that holds it could be lost in
        // turn with nothing durable left of it while the restored records
        // still point at it.
        let unclaimed: Vec<Grant> = pending
            .iter()
            .filter(|g| !seen.contains(&g.grant_id))
            .cloned()
            .collect();
        if claims_read && !unclaimed.is_empty() {
            let within = self.settings.send_window_ms.max(1) as u64;
            let answers = self.ports.claims.claim(&unclaimed, within).await;
            if let Some(e) = answers.into_iter().find_map(Result::err) {
                r.shards_waiting += missing.len() as u32;
                r.causes.push(format!(
                    "{} shard(s) have no Redis state; a grant on its way could not be claimed, so the rebuild waits for the next pass: {e}",
                    missing.len()
                ));
                return Ok(());
            }
        }
        let records: Vec<Grant> = claimed
            .into_iter()
            .chain(pending.iter().filter(|g| seen.insert(g.grant_id.clone())).cloned())
            .collect();
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
        // The units the lost shards may hand out again: the total less
        // what the surviving shards hold and every grant the durable
        // records name (claimed, pending, rejected, or issued, as the
        // index lists it: a grant issued before claims were written is in
        // no claim), never less than the counters say was issued.
        let restorable = if claims_read {
            accounted.extend(
                holdings
                    .values()
                    .flatten()
                    .filter_map(|h| h.outcome.as_ref().map(|(_, rec)| rec.grant_id.clone())),
            );
            let named = (accounted.len() as u64).max(r.issued.saturating_add(r.rejected));
            def.total_stock.saturating_sub(held.max(0) as u64).saturating_sub(named)
        } else {
            figures::restorable(def.total_stock, held, r)
        };
        if !self.enter(def, gate, r).await? {
            return Ok(());
        }
        // Every shard's sold-out stamp is voided before the lost shards get
        // their units back, as well as after (`settle_rebuild`): a pass
        // that dies between the restore and those bumps would otherwise
        // leave the other shards answering SOLD_OUT beside a shard with
        // stock, for good (the next pass finds every shard there). No stamp
        // can be made meanwhile: a borrow that meets a lost shard ends
        // without one.
        for shard in 0..def.shards {
            self.ports.repair.bump_epoch(&def.coupon_id, shard).await?;
        }
        let restored = self
            .restore_lost(&latest, missing, restorable, &holdings, (&pending, &records), r, now)
            .await?;
        if r.shards_rebuilt > 0 {
            self.settle_rebuild(latest, missing, restored, holdings.len(), r, now)
                .await?;
        }
        Ok(())
    }

    /// After the lost shards were rebuilt: a change committed after `latest`
    /// was read found them missing, so whatever is stored now is applied (a
    /// no-op if nothing moved); every shard's epoch moves on (a sold-out
    /// stamp of the old state no longer holds) and the rebuild is recorded.
    async fn settle_rebuild(
        &self,
        latest: StoredCoupon,
        missing: &[u32],
        restored: u64,
        holders: usize,
        r: &mut CouponReport,
        now: i64,
    ) -> Result<(), StoreError> {
        let coupon = latest.definition.coupon_id.clone();
        let shards = latest.definition.shards;
        let now_stored = self.ports.facts.stored(&coupon).await?.unwrap_or(latest);
        for &shard in missing {
            self.ports.live.apply_shard(&now_stored, shard).await?;
        }
        for shard in 0..shards {
            self.ports.repair.bump_epoch(&coupon, shard).await?;
        }
        self.ports.facts.record_rebuild(&coupon, now, restored).await?;
        r.restored = restored;
        r.causes.push(format!(
            "Redis lost {} shard(s); rebuilt from DynamoDB with {restored} unit(s) and {holders} holder(s)",
            r.shards_rebuilt
        ));
        Ok(())
    }

    /// The highest grant sequence DynamoDB knows of, per shard: its durable
    /// mark, or above it any sequence the issued (`holdings`), rejected and
    /// claimed grants carry. A mark can lag the grants it covers: its write
    /// failed, and the batch comes back after the visibility timeout, or
    /// never, once it went to the dead-letter queue; and it knows nothing
    /// of the grants still on their way, which only their claims name.
    pub(super) async fn durable_tops(
        &self,
        coupon: &CouponId,
        holdings: &Holdings,
    ) -> Result<HashMap<u32, u64>, StoreError> {
        let mut tops = self.ports.facts.high_water(coupon).await?;
        let rejected = self.ports.facts.rejections(coupon).await?;
        let claimed = self.ports.facts.claims(coupon).await?;
        let issued_ids = holdings
            .values()
            .flatten()
            .filter_map(|h| h.outcome.as_ref().map(|(_, record)| &record.grant_id));
        let others = rejected
            .iter()
            .map(|g| &g.grant_id)
            .chain(claimed.iter().map(|g| &g.grant_id));
        for id in issued_ids.chain(others) {
            let top = tops.entry(id.shard()).or_default();
            *top = (*top).max(id.seq());
        }
        Ok(tops)
    }

    /// Writes each lost shard afresh: its share of `restorable`, its
    /// holders' counts and request outcomes, and a grant sequence above
    /// anything it minted. The units restored.
    ///
    /// A shard's holders are every claim its users have anywhere: the
    /// coupons DynamoDB holds, the grants still on their way (`pending`:
    /// in the other shards' outboxes, a borrow's unit taken from a donor
    /// before the loss took the home's record of it; or claimed), and
    /// every grant claimed (`records`: pending or not, since the
    /// `by-coupon` index may not list an issue yet). Without those, the
    /// user's retry would find no record and claim again at home while
    /// the grant goes out to them anyway: a SUCCESS after SOLD_OUT, or a
    /// SUCCESS then `ORDINAL_TAKEN`.
    #[allow(clippy::too_many_arguments)]
    async fn restore_lost(
        &self,
        latest: &StoredCoupon,
        missing: &[u32],
        restorable: u64,
        holdings: &Holdings,
        (on_their_way, pending): (&[Grant], &[Grant]),
        r: &mut CouponReport,
        now: i64,
    ) -> Result<u64, StoreError> {
        let def = &latest.definition;
        let seen = self.durable_tops(&def.coupon_id, holdings).await?;
        // The clock now, not when the run began (a pass may reach this
        // coupon seconds later).
        let now_seq = now.max(self.ports.clock.now_ms()).max(0) as u64;
        let mut restored = 0;
        let held: Vec<u64> = missing.iter().map(|&s| def.shard_held_back(s, now)).collect();
        let left: Vec<Option<u64>> = missing
            .iter()
            .map(|&s| wave_left(def, s, holdings, pending, now))
            .collect();
        for (&shard, units) in missing.iter().zip(figures::split_rebuild(restorable, &held, &left)) {
            let holders = holders_of(def, shard, holdings, pending);
            let taken = taken_from(def, shard, holdings, pending);
            // Its own grants on their way (their outbox went with it): the
            // rebuilt outbox lists them again. A surviving shard's are in
            // its own outbox, a lost one's came from their claims.
            let outbox: Vec<Grant> = on_their_way.iter().filter(|g| g.shard == shard).cloned().collect();
            // The new state's incarnation: its grant ids start above every
            // sequence any earlier state of the shard minted, known to
            // DynamoDB or not (a grant never claimed, in a snapshot that may
            // come back). Each state started at its base, which the durable
            // mark holds (raised before the state was written, below), and
            // mints one sequence per unit it sells, so never past its base
            // plus the total stock: above the highest sequence known plus
            // the total, nothing was minted. At least the current time in
            // ms, small enough (13 digits) that Lua's `%.14g` number
            // formatting keeps it exact. Request records are stamped with
            // it (lua/lib.lua, own_record()), so no earlier state's record
            // is honoured here.
            let top = outbox
                .iter()
                .map(|g| g.grant_id.seq())
                .chain(seen.get(&shard).copied())
                .max()
                .unwrap_or(0);
            let seq_base = now_seq.max(top + def.total_stock + 1);
            // The state starts at `seq_base`: any older one (a snapshot from
            // before this loss, restored later) is behind it and dropped,
            // not judged on what it held (a unit the rebuild gave another
            // shard, and no trace of a borrow for its users since). The mark
            // is raised before the state exists, so a run that dies between
            // the two leaves a mark with no state under it (the next run
            // rebuilds above it), never a state no mark guards. Two runs
            // rebuilding one shard at once: the lower state is dropped and
            // rebuilt once more, a loss handled as any other.
            self.ports
                .facts
                .raise_high_water(&def.coupon_id, shard, seq_base)
                .await?;
            if self
                .ports
                .repair
                .restore_shard(latest, shard, units, seq_base, &holders, &taken, &outbox, now)
                .await?
            {
                r.shards_rebuilt += 1;
                restored += units.stock + units.expired;
            }
        }
        Ok(restored)
    }
}

/// The claims of the users homed on `shard`: their coupons in DynamoDB,
/// and the grants pending for them in other shards' outboxes (each once).
fn holders_of(def: &CouponDefinition, shard: u32, holdings: &Holdings, pending: &[Grant]) -> Vec<(UserId, Vec<Held>)> {
    let mut holders: BTreeMap<UserId, Vec<Held>> = holdings
        .iter()
        .filter(|(user, _)| home_shard(user, def.shards) == shard)
        .map(|(u, held)| (u.clone(), held.clone()))
        .collect();
    for grant in pending.iter().filter(|g| home_shard(&g.user_id, def.shards) == shard) {
        let held = holders.entry(grant.user_id.clone()).or_default();
        let known = held.iter().any(|h| {
            h.outcome
                .as_ref()
                .is_some_and(|(_, rec)| rec.grant_id == grant.grant_id)
        });
        if !known {
            held.push(Held::of(grant));
        }
    }
    holders.into_iter().collect()
}

/// The units `shard` gave borrows: issued grants of this shard to users
/// homed elsewhere, and those still `pending` (a home's list of borrowed
/// grants keeps them once the donor lost its outbox). A borrow whose home
/// still holds its reservation open (its caller died after the take, and
/// the grant was re-driven) finds its unit again when it resumes on the
/// rebuilt donor, where it would otherwise take a second unit for the same
/// claim; and a retry replaying a borrowed win finds the take its
/// acknowledgement vouches for (`Decision::Took`).
fn taken_from(
    def: &CouponDefinition,
    shard: u32,
    holdings: &Holdings,
    pending: &[Grant],
) -> Vec<(UserId, GrantRecord)> {
    let issued = holdings.iter().flat_map(|(user, held)| {
        held.iter()
            .filter_map(|h| h.outcome.as_ref())
            .map(move |(_, record)| (user.clone(), record.clone()))
    });
    let on_their_way = pending.iter().map(|g| (g.user_id.clone(), GrantRecord::of(g)));
    let mut taken: BTreeMap<String, (UserId, GrantRecord)> = BTreeMap::new();
    for (user, record) in issued.chain(on_their_way) {
        if record.grant_id.shard() == shard && home_shard(&user, def.shards) != shard {
            taken.insert(record.grant_id.as_str().to_owned(), (user, record));
        }
    }
    taken.into_values().collect()
}

/// Without rollover, what the wave out now has left on lost shard `shard`:
/// its share less what that shard minted since the wave's instant (the
/// issued grants, and those claimed or pending, carry where and when;
/// each counted once). `None` with rollover, or before the first wave:
/// the shard may sell all that is not held back. What earlier waves left
/// was written off in the state the loss took; the rebuild writes it off
/// again, or the wave would sell past its share.
fn wave_left(def: &CouponDefinition, shard: u32, holdings: &Holdings, records: &[Grant], now: i64) -> Option<u64> {
    if def.rollover {
        return None;
    }
    let (at, share) = def.shard_wave_out(shard, now)?;
    let issued = holdings
        .values()
        .flatten()
        .filter_map(|h| h.outcome.as_ref())
        .map(|(_, record)| record.clone());
    let recorded = records.iter().map(GrantRecord::of);
    let mut seen = std::collections::HashSet::new();
    let sold = issued
        .chain(recorded)
        .filter(|record| record.grant_id.shard() == shard && record.granted_at_ms >= at)
        .filter(|record| seen.insert(record.grant_id.clone()))
        .count() as u64;
    Some(share.saturating_sub(sold))
}
