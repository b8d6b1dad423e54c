//! The wait before a coupon's lost or restarted shards are repaired: until
//! every grant sent before the fault has reached DynamoDB, a unit on its
//! way is in no store a rebuild (or a restarted shard's check against its
//! mark) can read. The wait is per coupon ([`crate::barrier`]): another
//! sale's backlog in the same queue does not hold it up.
//!
//! One episode, durable in DynamoDB so that any pass of any reconciler
//! picks it up, goes through these stages, as far as one pass can take it:
//!
//! 1. Opened when a pass first finds the shards lost or restarted (the
//!    fault happened before).
//! 2. Once the send window has passed since then, so that no send decided
//!    before the fault can still land after them, a barrier goes into each
//!    of the coupon's lanes.
//! 3. Each lane's barrier is acknowledged by the issuer once everything
//!    before it in the lane has been issued (or has failed for good).
//! 4. With every lane acknowledged, the pass may repair the shards it
//!    covers. It closes the episode just before its first repair (so an
//!    episode never outlives a repair to vouch for a later fault; a pass
//!    that dies in between leaves the shards missing, and the next opens a
//!    new wait), and leaves it open if the repair must wait for something
//!    else (the next pass finds it passed), unless the pass already
//!    checked a restarted shard, which closed it: a rebuild of a shard
//!    that check dropped, waiting for something else, then waits for a new
//!    episode (later, never wrong). A shard found lost or
//!    restarted later needs an episode of its own, since its grants may
//!    have been sent after these barriers.
//!
//! No episode at all for a coupon whose every unit DynamoDB holds already
//! (its capped counters sum to the total stock): no grant of it can be on
//! its way that a rebuild would miss (one would meet the cap and be
//! rejected, whatever the wait), so its shards are repaired at once. After
//! a snapshot restore or a lost node, that is most coupons (the sales that
//! sold out), and their SOLD_OUT comes back within one pass, with no
//! barriers in the queue ahead of the sales that still sell.

use tracing::{info, warn};

use crate::barrier::{Barrier, BarrierRecord, LANES};
use crate::coupon::{CouponDefinition, StoredCoupon};
use crate::error::StoreError;
use crate::ids::CouponId;

use super::ports::Verification;
use super::{CouponReport, Reconciler};

/// Where a pass stands on the coupon's grants on their way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Gate {
    /// No shard is lost or restarted.
    Clear,
    /// Some are, and grants may still be on their way (the report says
    /// why); nothing is repaired this pass.
    Waiting,
    /// Every grant of the coupon sent before these shards were found lost
    /// or restarted has arrived: this pass may check and rebuild them (and
    /// only them), once it has closed the episode ([`Reconciler::enter`]).
    Passed {
        /// The episode; `None` when none is needed (every unit issued).
        id: Option<String>,
        /// The shards it covers.
        shards: Vec<u32>,
        /// True once this pass closed it.
        closed: bool,
    },
}

impl Gate {
    /// True if no shard is lost or restarted: every shard sells.
    pub(super) fn is_clear(&self) -> bool {
        *self == Self::Clear
    }

    /// True if `shard` may be repaired this pass.
    pub(super) fn lets(&self, shard: u32) -> bool {
        matches!(self, Self::Passed { shards, .. } if shards.contains(&shard))
    }

    /// True if the gate passed because DynamoDB holds every unit of the
    /// coupon (no episode): nothing can be on its way.
    pub(super) fn all_issued(&self) -> bool {
        matches!(self, Self::Passed { id: None, .. })
    }

    /// `shard` sells again (confirmed by its check): should it be lost
    /// later in this pass, its new grants may be on their way, and no
    /// barrier of this episode follows them.
    pub(super) fn release(&mut self, shard: u32) {
        if let Self::Passed { shards, .. } = self {
            shards.retain(|&s| s != shard);
        }
    }
}

impl Reconciler {
    /// Takes the coupon's wait as far as it can go this pass.
    pub(super) async fn gate(&self, stored: &StoredCoupon, now: i64, r: &mut CouponReport) -> Result<Gate, StoreError> {
        let def = &stored.definition;
        let coupon = &def.coupon_id;
        let affected = self.affected(def, now).await?;
        let current = self.ports.facts.barrier(coupon).await?;
        if affected.is_empty() {
            // Healed (or never needed): an episode left open must not vouch
            // for a later fault.
            if let Some(rec) = current {
                self.ports.facts.close_barrier(coupon, &rec.id).await?;
            }
            return Ok(Gate::Clear);
        }
        if self.all_issued(stored).await? {
            // Nothing on its way to wait for. An open episode is closed
            // first: it must not vouch for a later fault.
            if let Some(rec) = current {
                self.ports.facts.close_barrier(coupon, &rec.id).await?;
            }
            info!(coupon = %coupon, shards = ?affected, "shards lost or restarted; every unit is issued, so nothing is on its way: repaired now");
            return Ok(Gate::Passed {
                id: None,
                shards: affected,
                closed: true,
            });
        }
        let Some(rec) = self.episode(coupon, current, &affected, now).await? else {
            return Ok(self.waiting(r, &affected, "another reconciler pass is opening its wait"));
        };
        let now = now.max(self.ports.clock.now_ms());
        let rec = match self.send_due_barriers(coupon, rec, now).await? {
            Ok(rec) => rec,
            Err(why) => return Ok(self.waiting(r, &affected, &why)),
        };
        if rec.sent_ms.is_none() {
            return Ok(self.waiting(
                r,
                &affected,
                &format!(
                    "sends decided before the fault may land until {} ms after it was found",
                    rec.send_after_ms - rec.opened_ms
                ),
            ));
        }
        if !rec.passed() {
            return Ok(self.waiting(
                r,
                &affected,
                &format!(
                    "{} of {LANES} lanes have delivered every grant sent before the fault",
                    rec.lanes_done.min(LANES)
                ),
            ));
        }
        Ok(Gate::Passed {
            id: Some(rec.id),
            shards: rec.shards,
            closed: false,
        })
    }

    /// True if DynamoDB holds every unit of the coupon as `stored` defines
    /// it: the issued counters reach its total, and the definition is still
    /// that version once they were read. (A stock addition raises the total
    /// and the caps in one write: against a total read before it, units
    /// still to sell, or on their way, would count as issued.)
    async fn all_issued(&self, stored: &StoredCoupon) -> Result<bool, StoreError> {
        let coupon = &stored.definition.coupon_id;
        if self.ports.facts.issued(coupon).await? < stored.definition.total_stock {
            return Ok(false);
        }
        // As the pass read it (version 0 when the store has no copy).
        let version = self.ports.facts.stored(coupon).await?.map_or(0, |now| now.version);
        Ok(version == stored.version)
    }

    /// The coupon's shards that wait for its grants: restarted (suspect),
    /// or lost while the sale runs.
    async fn affected(&self, def: &CouponDefinition, now: i64) -> Result<Vec<u32>, StoreError> {
        let mut affected = Vec::new();
        for shard in 0..def.shards {
            match self.ports.repair.verify(&def.coupon_id, shard, now, None).await? {
                Verification::Suspect { .. } => affected.push(shard),
                Verification::Missing if now < def.sells_until_ms() => affected.push(shard),
                _ => {}
            }
        }
        Ok(affected)
    }

    /// The episode that covers `affected`: the open one if it does, else a
    /// new one replacing it. `None` if another pass opened or replaced it
    /// first.
    async fn episode(
        &self,
        coupon: &CouponId,
        current: Option<BarrierRecord>,
        affected: &[u32],
        now: i64,
    ) -> Result<Option<BarrierRecord>, StoreError> {
        match current {
            Some(rec) if rec.covers(affected) => Ok(Some(rec)),
            other => {
                // Opened at the time now, not when the pass began (a run
                // that reached this coupon late must not date the fault
                // before it happened).
                let opened = now.max(self.ports.clock.now_ms());
                let rec = BarrierRecord::open(opened, self.settings.send_window_ms, affected.to_vec());
                let replacing = other.as_ref().map(|o| o.id.as_str());
                if !self.ports.facts.open_barrier(coupon, &rec, replacing).await? {
                    return Ok(None);
                }
                info!(coupon = %coupon, shards = ?affected, "shards lost or restarted; waiting for the coupon's grants on their way");
                Ok(Some(rec))
            }
        }
    }

    /// Sends the episode's barriers into every lane when they are due (the
    /// send window over, or a resend after a backlog), and reads the
    /// episode again: with nothing ahead of them, the issuer may have
    /// acknowledged them already. `Err` says why the coupon still waits.
    async fn send_due_barriers(
        &self,
        coupon: &CouponId,
        rec: BarrierRecord,
        now: i64,
    ) -> Result<Result<BarrierRecord, String>, StoreError> {
        if !self.barriers_due(&rec, now) {
            return Ok(Ok(rec));
        }
        let facts = &self.ports.facts;
        if let Err(e) = self
            .ports
            .redrive
            .send_barriers(&Barrier::every_lane(coupon, &rec.id))
            .await
        {
            warn!(coupon = %coupon, error = %e, "barriers not sent; the next pass sends them");
            return Ok(Err(format!("its barriers could not be sent ({e}); sent next pass")));
        }
        let replaced = || "another reconciler pass replaced its wait".to_owned();
        if !facts.barrier_sent(coupon, &rec.id, now).await? {
            return Ok(Err(replaced()));
        }
        match facts.barrier(coupon).await? {
            Some(again) if again.id == rec.id => Ok(Ok(again)),
            _ => Ok(Err(replaced())),
        }
    }

    /// Called before the first repair a passed gate allows: closes the
    /// episode (once per pass). False if another pass closed or replaced it
    /// meanwhile: this pass then repairs nothing.
    pub(super) async fn enter(
        &self,
        def: &CouponDefinition,
        gate: &mut Gate,
        r: &mut CouponReport,
    ) -> Result<bool, StoreError> {
        let Gate::Passed { id, shards, closed } = gate else {
            return Ok(false);
        };
        let Some(id) = id.as_ref().filter(|_| !*closed) else {
            return Ok(true);
        };
        if self.ports.facts.close_barrier(&def.coupon_id, id).await? {
            *closed = true;
            return Ok(true);
        }
        let shards = shards.clone();
        *gate = self.waiting(r, &shards, "another reconciler pass closed its wait");
        Ok(false)
    }

    /// True if a pass over `rec`'s coupon has something to do now: send
    /// its barriers (the send window is over, or their last sending is a
    /// backlog horizon old: a barrier that went to the dead-letter queue
    /// never comes back), or repair once they all came through.
    pub(super) fn barriers_due(&self, rec: &BarrierRecord, now: i64) -> bool {
        match rec.sent_ms {
            None => now >= rec.send_after_ms,
            Some(sent) => now - sent >= self.settings.backlog_ms,
        }
    }

    /// Whether a pass over `coupon` could move its repair on now; false
    /// only while it waits for barriers still on their way or for the send
    /// window (one read, for callers that follow a wait closely).
    pub async fn repair_due(&self, coupon: &CouponId) -> Result<bool, StoreError> {
        let now = self.ports.clock.now_ms();
        Ok(match self.ports.facts.barrier(coupon).await? {
            None => true,
            Some(rec) => rec.passed() || self.barriers_due(&rec, now),
        })
    }

    fn waiting(&self, r: &mut CouponReport, shards: &[u32], why: &str) -> Gate {
        r.shards_waiting += shards.len() as u32;
        r.causes.push(format!(
            "{} shard(s) lost or restarted ({shards:?}); repaired once the coupon's grants on their way have arrived: {why}",
            shards.len()
        ));
        Gate::Waiting
    }
}
