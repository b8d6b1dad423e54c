//! The wait before a coupon's lost or restarted shards are repaired: until
//! no send decided before the fault can still land. Every grant that can
//! reach the queue has its claim written first, within the grab's send
//! budget, so once the send window has passed since the fault was found,
//! the claims name every grant of the coupon still on its way: a rebuild
//! (and a restarted shard's check against the grants DynamoDB knows)
//! reads them there, however long the queue's backlog.
//!
//! One episode, durable in DynamoDB so that any pass of any reconciler
//! picks it up, goes through these stages, as far as one pass can take it:
//!
//! 1. Opened when a pass first finds the shards lost or restarted (the
//!    fault happened before).
//! 2. Passed once the send window has gone by since then: the pass may
//!    repair the shards it covers. It closes the episode just before its
//!    first repair (so an episode never outlives a repair to vouch for a
//!    later fault; a pass that dies in between leaves the shards missing,
//!    and the next opens a new wait), and leaves it open if the repair
//!    must wait for something else (the next pass finds it passed),
//!    unless the pass already checked a restarted shard, which closed it:
//!    a rebuild of a shard that check dropped, waiting for something else,
//!    then waits for a new episode (later, never wrong). A shard found lost
//!    or restarted later needs an episode of its own, since sends decided
//!    before its fault may land after this one passed.
//!
//! No episode at all for a coupon whose every unit DynamoDB holds already
//! (its capped counters sum to the total stock): no grant of it can be on
//! its way that a rebuild would miss (one would meet the cap and be
//! rejected, whatever the wait), so its shards are repaired at once. After
//! a snapshot restore or a lost node, that is most coupons (the sales that
//! sold out), and their SOLD_OUT comes back within one pass.

use tracing::info;

use crate::barrier::BarrierRecord;
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
    /// Some are, and sends decided before the fault may still land (the
    /// report says why); nothing is repaired this pass.
    Waiting,
    /// No send decided before these shards were found lost or restarted
    /// can still land, so the claims name every grant of theirs on its
    /// way: this pass may check and rebuild them (and only them), once it
    /// has closed the episode ([`Reconciler::enter`]).
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
    /// later in this pass, sends it decided since may still land, and this
    /// episode's window does not cover them.
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
        if now < rec.send_after_ms {
            return Ok(self.waiting(
                r,
                &affected,
                &format!(
                    "sends decided before the fault may land until {} ms after it was found",
                    rec.send_after_ms - rec.opened_ms
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

    /// Whether a pass over `coupon` could move its repair on now; false
    /// only while it waits for the send window (one read, for callers that
    /// follow a wait closely).
    pub async fn repair_due(&self, coupon: &CouponId) -> Result<bool, StoreError> {
        let now = self.ports.clock.now_ms();
        Ok(match self.ports.facts.barrier(coupon).await? {
            None => true,
            Some(rec) => now >= rec.send_after_ms,
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
