//! Step 4 of a pass, its last send: the pending grants re-driven, each
//! claimed first as the grab claims it, and a shard that minted a claimed
//! id again dropped for its rebuild.

use tracing::warn;

use crate::grab::ports::ClaimError;
use crate::grant::Grant;

use super::{CouponReport, Reconciler};

impl Reconciler {
    /// Step 4: sends the pending grants again, their claims written first
    /// as the grab writes them, within the grab's budget of a send counted
    /// from the checks just made (`keep_unreplicated`, begun at
    /// `checked_from`). Only the grants whose claims were written are
    /// sent. A grant whose id is claimed for another grant was minted again
    /// by a shard that rolled back past the first (a failover to a replica
    /// that lacked it): that shard is dropped, and rebuilt from the claims
    /// like a lost one, so it mints no such id again and its users' presses
    /// are decided afresh instead of replaying a grant that can never be
    /// sent. A grant whose user and ordinal are claimed for another grant
    /// names a home shard (of the coupon's `shards`) that rolled back past
    /// a win its user was told (`ClaimError::OrdinalClaimed`): that shard,
    /// and the one that minted the grant (whose outbox holds it), are
    /// dropped and rebuilt the same way.
    pub(super) async fn redrive(&self, grants: &[Grant], shards: u32, checked_from: i64, r: &mut CouponReport) {
        if grants.is_empty() {
            return;
        }
        let budget = (self.settings.send_window_ms - 1_000).max(2_000);
        let left = |clock: &dyn crate::clock::Clock| budget - (clock.now_ms() - checked_from).max(0);
        let within = left(self.ports.clock.as_ref());
        if within <= 0 {
            r.causes
                .push("re-drive not sent (its checks took its budget), retried next run".into());
            return;
        }
        let mut answers = self.ports.claims.claim(grants, within as u64).await.into_iter();
        let mut claimed = Vec::with_capacity(grants.len());
        let mut reminted = std::collections::BTreeSet::new();
        let mut void: Vec<&Grant> = Vec::new();
        let mut unwritten = None;
        for grant in grants {
            match answers.next() {
                Some(Ok(())) => claimed.push(grant.clone()),
                Some(Err(ClaimError::Reminted(_))) => {
                    // The shard that minted it; and, for a borrow, its
                    // home, whose record of the win would replay it.
                    void.push(grant);
                    reminted.insert(grant.grant_id.shard());
                    reminted.insert(crate::grab::home_shard(&grant.user_id, shards));
                }
                Some(Err(ClaimError::OrdinalClaimed(_) | ClaimError::RequestClaimed(_))) => {
                    // The home shard counted its user short; the shard
                    // that minted the grant (a donor, for a borrow) holds
                    // it in its outbox: dropped too, so the next pass trims
                    // it there and the rebuild gives its unit back.
                    void.push(grant);
                    reminted.insert(crate::grab::home_shard(&grant.user_id, shards));
                    reminted.insert(grant.grant_id.shard());
                }
                Some(Err(e)) => unwritten = Some(e.to_string()),
                None => unwritten = Some("no answer".into()),
            }
        }
        if let Some(e) = unwritten {
            r.causes.push(format!(
                "{} of {} grant(s) not re-driven (claims not written), retried next run: {e}",
                grants.len() - claimed.len() - void.len(),
                grants.len()
            ));
        }
        // A borrowed grant is also listed on its home shard (`borrowed`),
        // which a drop keeps: one that can never be claimed is forgotten
        // there, or every pass would count it pending, re-drive it, meet
        // the same refusal and drop its shards again, for good.
        for grant in void
            .iter()
            .filter(|g| g.shard != crate::grab::home_shard(&g.user_id, shards))
        {
            let home = crate::grab::home_shard(&grant.user_id, shards);
            let forgotten = self
                .ports
                .repair
                .forget_borrowed(&grant.coupon_id, home, std::slice::from_ref(&grant.grant_id))
                .await;
            if let Err(e) = forgotten {
                r.causes.push(format!(
                    "grant {} can never be claimed and could not be forgotten on shard {home}, retried next run: {e}",
                    grant.grant_id
                ));
            }
        }
        for shard in reminted {
            // Whatever its sequence: the shard's history is not the one the
            // claims were written from. (Should another pass have rebuilt it
            // meanwhile, this costs one more rebuild, nothing else.)
            let coupon = &grants[0].coupon_id;
            match self.ports.repair.drop_if_behind(coupon, shard, u64::MAX).await {
                Ok(true) => {
                    warn!(coupon = %coupon, shard, "shard minted a grant claimed for another (its id, or its user's ordinal); dropped for the rebuild");
                    r.shards_rolled_back += 1;
                    r.causes.push(format!(
                        "shard {shard} rolled back: it minted a grant whose id or user's ordinal is already claimed for another grant; dropped and rebuilt from DynamoDB"
                    ));
                }
                Ok(false) => {}
                Err(e) => r.causes.push(format!(
                    "shard {shard} minted a grant claimed for another and could not be dropped, retried next run: {e}"
                )),
            }
        }
        if claimed.is_empty() {
            return;
        }
        let left = left(self.ports.clock.as_ref());
        if left <= 0 {
            r.causes
                .push("re-drive failed (its budget went on the claims), retried next run".into());
            return;
        }
        match self.ports.redrive.redrive(&claimed, left as u64).await {
            Ok(n) => r.redriven = n as u64,
            Err(e) => r.causes.push(format!("re-drive failed, retried next run: {e}")),
        }
    }
}
