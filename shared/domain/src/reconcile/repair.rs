//! The small repairs a pass makes ([`super::pass`] calls them): settings
//! healed on shards behind the stored definition, re-drives held back from
//! shards no replica holds, and borrows finished for callers that died.
//! Lost shards are rebuilt in [`super::rebuild`], shards behind DynamoDB
//! dropped in [`super::restarts`].

use std::collections::HashMap;

use tracing::warn;

use crate::coupon::{CouponDefinition, StoredCoupon};
use crate::error::StoreError;
use crate::grab::ports::{BorrowEnd, Claim, Decision, Recorded};
use crate::grab::{finish_borrow, home_shard};
use crate::grant::{Grant, GrantRecord};
use crate::ids::UserId;
use crate::live::ShardApply;

use super::ports::Verification;
use super::{CouponReport, Reconciler};

impl Reconciler {
    /// Applies the stored definition to shards still on an older version,
    /// in the same two phases as an operator's change (settings and stock
    /// everywhere, then every epoch). A shard already current costs one
    /// script call that changes nothing.
    pub(super) async fn heal_settings(
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
    pub(super) async fn keep_unreplicated(
        &self,
        def: &CouponDefinition,
        grants: &mut Vec<Grant>,
        r: &mut CouponReport,
        now: i64,
    ) {
        // Per shard: still current (checked once a pass).
        let mut current: HashMap<u32, bool> = HashMap::new();
        let mut kept = 0;
        let mut sendable = Vec::with_capacity(grants.len());
        for grant in grants.drain(..) {
            let home = home_shard(&grant.user_id, def.shards);
            // The grant itself must be on the node that answers: the pass
            // read the outbox before, and a failover since may have promoted
            // a replica that never had it (and sells its unit again).
            let record = GrantRecord::of(&grant);
            let pending = Decision::Pending {
                user: &grant.user_id,
                record: &record,
            };
            let on_unit = self.acknowledged(def, grant.shard, pending, &mut current, now).await;
            let ok = if home == grant.shard {
                on_unit
            } else if on_unit {
                // A borrow's: the home's writes hold the claim it counted.
                self.acknowledged(def, home, Decision::Writes, &mut current, now).await
            } else {
                // Its donor lost it: the home's list of borrowed grants
                // holds it, and the donor is back (rebuilt, not counting it).
                self.acknowledged(def, home, pending, &mut current, now).await
                    && self
                        .acknowledged(def, grant.shard, Decision::Writes, &mut current, now)
                        .await
            };
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

    /// Whether `shard`'s node holds `decision` and a replica acknowledged
    /// it, and the shard is still current (its server did not restart
    /// since it was checked; asked once per shard and pass).
    async fn acknowledged(
        &self,
        def: &CouponDefinition,
        shard: u32,
        decision: Decision<'_>,
        current: &mut HashMap<u32, bool>,
        now: i64,
    ) -> bool {
        match self.ports.ledger.replicated(&def.coupon_id, shard, decision).await {
            Ok(true) => {}
            Ok(false) => return false,
            Err(e) => {
                warn!(shard, error = %e, "replica acknowledgement unknown; re-drive waits");
                return false;
            }
        }
        if let Some(&known) = current.get(&shard) {
            return known;
        }
        let known = matches!(
            self.ports.repair.verify(&def.coupon_id, shard, now, None).await,
            Ok(Verification::Current)
        );
        current.insert(shard, known);
        known
    }

    pub(super) async fn finish_stale_borrow(
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
            device: None,
            now_ms: now,
        };
        if home_shard(user, def.shards) != shard {
            warn!(%user, shard, "borrow listed on a shard that is not the user's home; dropped");
            self.ports.ledger.settle(&claim, BorrowEnd::AllEmpty).await?;
            return Ok(None);
        }
        let Some(Recorded::Borrowing { ordinal, at_ms }) = self.ports.ledger.recorded(&claim).await? else {
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
            at_ms,
        )
        .await?;
        Ok(outcome
            .ok()
            .map(|rec| rec.into_grant(def.coupon_id.clone(), user.clone(), request.clone())))
    }
}
