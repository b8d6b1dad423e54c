//! Step 0 of a pass: shards whose state is older than what DynamoDB
//! knows. One behind its durable high-water mark rolled back (a failover
//! to a replica that never acknowledged, an old snapshot) and is dropped
//! at once; one whose server restarted since it was stamped is checked
//! once the coupon's wait has passed, then dropped or stamped again.

use tracing::{info, warn};

use crate::coupon::{CouponDefinition, StoredCoupon};
use crate::error::StoreError;

use super::ports::{DurableBound, Verification};
use super::wait::Gate;
use super::{CouponReport, Reconciler};

/// Reports a shard dropped for having rolled back behind its durable mark
/// (`how`: how it came to, for the cause's text).
fn rolled_back(r: &mut CouponReport, shard: u32, mark: u64, how: &str) {
    warn!(
        coupon = %r.coupon_id,
        shard,
        high_water = mark,
        "shard{how} rolled back behind issued grants; dropped for the rebuild"
    );
    r.shards_rolled_back += 1;
    r.causes.push(format!(
        "shard {shard}{how} rolled back: its grant sequence was behind {mark}, issued in DynamoDB; dropped and rebuilt from DynamoDB"
    ));
}

impl Reconciler {
    /// Step 0: drops every shard that rolled back (its grant sequence is
    /// behind the durable high-water mark: an old snapshot, a failover to
    /// a replica that never acknowledged), which would sell issued units
    /// again; it is rebuilt in step 4 like a lost one. The mark is read
    /// first, so every sequence in it was minted before Redis is read; a
    /// shard still behind it then has rolled back. (A shard whose server
    /// restarted may have rolled back too, with its sequence not behind the
    /// mark yet, or any more: [`Self::verify_restarted`] settles it.)
    pub(super) async fn drop_rolled_back(
        &self,
        def: &CouponDefinition,
        r: &mut CouponReport,
    ) -> Result<(), StoreError> {
        let coupon = &def.coupon_id;
        // In shard order, so the steps come in the same order every time
        // (the explorer replays a schedule by its seed).
        let mut marks: Vec<(u32, u64)> = self.ports.facts.high_water(coupon).await?.into_iter().collect();
        marks.sort_unstable();
        for (shard, mark) in marks {
            if shard < def.shards && self.ports.repair.drop_if_behind(coupon, shard, mark).await? {
                rolled_back(r, shard, mark, "");
            }
        }
        Ok(())
    }

    /// Settles the shards whose server restarted since they were verified
    /// (a snapshot restored, a node restarted): such a shard's state may be
    /// older than grants users were told about, and its sequence alone
    /// cannot say so once traffic has moved it past the durable mark, so
    /// every claim on it answers BUSY (`lua/lib.lua`) until this check.
    /// The check compares the shard's sequence with the highest sequence
    /// DynamoDB knows for it (its durable mark, or an issued or rejected
    /// grant's above it) once the mark is final: once the gate has passed (every grant of the
    /// coupon sent before the restart was found has reached DynamoDB, and
    /// raised its shard's mark). Behind the mark: dropped, and rebuilt by
    /// this pass. Otherwise the shard holds every grant issued and sells
    /// again.
    pub(super) async fn verify_restarted(
        &self,
        stored: &StoredCoupon,
        now: i64,
        gate: &mut Gate,
        r: &mut CouponReport,
    ) -> Result<(), StoreError> {
        let def = &stored.definition;
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
        // The mark, or any higher sequence DynamoDB's grants carry: a mark
        // can lag them (rebuild.rs, durable_tops).
        let holdings = self.ports.facts.holdings(coupon).await?;
        let mut marks = self.durable_tops(coupon, &holdings).await?;
        // And every grant a home settled from a donor and still lists as
        // borrowed: a restart that lost that take must be dropped, not
        // confirmed, or it mints the grant's id again for another user
        // while the re-drive sends it to the borrower.
        for home in 0..def.shards {
            for grant in self.ports.repair.borrowed(coupon, home).await? {
                let top = marks.entry(grant.grant_id.shard()).or_default();
                *top = (*top).max(grant.grant_id.seq());
            }
        }
        // Every shard's sold-out stamp is voided before the checks, not
        // after: a shard confirmed may hold units the other shards saw it
        // without (sold after the snapshot, under grants never sent), and
        // their stamps would refuse presses a borrow from it could serve.
        // After the checks, a pass that dies between a confirmation and the
        // bumps would leave those stamps for good (the next pass finds the
        // shard current and bumps nothing); before, a pass that dies leaves
        // the shard suspect and the next pass does it all again. No stamp
        // can be made meanwhile: a borrow passes a suspect shard only on an
        // answer that is not EMPTY, and ends without a stamp.
        for shard in 0..def.shards {
            self.ports.repair.bump_epoch(coupon, shard).await?;
        }
        for (shard, _) in suspects {
            // With every unit issued, stock left on a restarted shard can
            // only be a rollback's (and a mark may still rise under a grant
            // the cap will reject): each is dropped, and rebuilt empty.
            let mark = match gate.all_issued() {
                true => u64::MAX,
                false => marks.get(&shard).copied().unwrap_or(0),
            };
            let bound = DurableBound {
                high_water: mark,
                version: stored.version,
            };
            match self.ports.repair.verify(coupon, shard, now, Some(bound)).await? {
                Verification::Dropped if mark == u64::MAX => {
                    info!(
                        shard,
                        "restarted shard of a coupon whose every unit is issued; rebuilt from DynamoDB"
                    );
                    r.causes.push(format!(
                        "shard {shard} restarted; every unit is issued, so it is dropped and rebuilt from DynamoDB"
                    ));
                }
                Verification::Dropped => {
                    rolled_back(r, shard, mark, " restarted and");
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
                }
                _ => {}
            }
        }
        Ok(())
    }
}
