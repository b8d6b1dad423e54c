//! Step 2 of a pass, on the outboxes dropped shards kept: the entries
//! minted again by a state that had rolled back (their grant id, their
//! user's ordinal or their request claimed for another grant) are void,
//! trimmed, forgotten on their homes, and those homes dropped.

use std::collections::{HashMap, HashSet};

use tracing::warn;

use crate::coupon::CouponDefinition;
use crate::error::StoreError;
use crate::grant::Grant;
use crate::ids::{GrantId, RequestId, UserId};

use super::pass::Unsent;
use super::ports::OutboxEntry;
use super::{CouponReport, Reconciler};

impl Reconciler {
    /// Step 2, on the outboxes dropped shards kept: an entry whose grant
    /// id DynamoDB has claimed for another grant (another user, ordinal or
    /// request) was minted again by a state that had rolled back (a replica
    /// promoted without the first, which then sold on). It took a unit the
    /// first grant had taken: not on its way, never re-driven, trimmed, so
    /// the rebuild lists the claimed grant instead. So was an unclaimed
    /// entry whose user and ordinal DynamoDB has claimed for another grant
    /// the issuer did not reject: its home shard had rolled back past the
    /// first and counted its user one claim short, and where claims guard
    /// ordinals (`ClaimError::OrdinalClaimed`) it can never be claimed; and
    /// one whose request is claimed for another grant (its record lost,
    /// the press decided afresh: `ClaimError::RequestClaimed`).
    /// (A present shard's are found by the re-drive's claim, which drops
    /// the shard.)
    pub(super) async fn void_reminted(
        &self,
        def: &CouponDefinition,
        missing: &[u32],
        unsent: &mut Unsent,
        r: &mut CouponReport,
    ) -> Result<(), StoreError> {
        let kept = |shard: &u32, entries: &Vec<OutboxEntry>| missing.contains(shard) && !entries.is_empty();
        if !unsent.outboxes.iter().any(|(shard, entries)| kept(shard, entries)) {
            return Ok(());
        }
        let claims = self.ports.facts.claims(&def.coupon_id).await?;
        let rejections = self.ports.facts.rejections(&def.coupon_id).await?;
        let rejected: HashSet<&GrantId> = rejections.iter().map(|g| &g.grant_id).collect();
        let claimed: HashMap<&GrantId, &Grant> = claims.iter().map(|g| (&g.grant_id, g)).collect();
        let live = || claims.iter().filter(|g| !rejected.contains(&g.grant_id));
        let ordinals: HashMap<(&UserId, u32), &GrantId> =
            live().map(|g| ((&g.user_id, g.ordinal), &g.grant_id)).collect();
        let requests: HashMap<(&UserId, &RequestId), &GrantId> =
            live().map(|g| ((&g.user_id, &g.request_id), &g.grant_id)).collect();
        let mut homes = std::collections::BTreeSet::new();
        for (shard, entries) in unsent.outboxes.iter_mut() {
            if !kept(shard, entries) {
                continue;
            }
            let (void, live): (Vec<OutboxEntry>, Vec<OutboxEntry>) =
                entries.drain(..).partition(|e| match claimed.get(&e.grant.grant_id) {
                    Some(c) => !c.same_as(&e.grant),
                    None => [
                        ordinals.get(&(&e.grant.user_id, e.grant.ordinal)),
                        requests.get(&(&e.grant.user_id, &e.grant.request_id)),
                    ]
                    .into_iter()
                    .flatten()
                    .any(|holder| **holder != e.grant.grant_id),
                });
            *entries = live;
            if void.is_empty() {
                continue;
            }
            for e in &void {
                let home = crate::grab::home_shard(&e.grant.user_id, def.shards);
                if home != *shard {
                    // A borrow: its home lists it as `borrowed` (a drop
                    // keeps that list), and would count it on its way.
                    self.ports
                        .repair
                        .forget_borrowed(&def.coupon_id, home, std::slice::from_ref(&e.grant.grant_id))
                        .await?;
                }
                if !missing.contains(&home) {
                    homes.insert(home);
                }
            }
            let seqs: Vec<u64> = void.iter().map(|e| e.seq).collect();
            self.ports.repair.trim(&def.coupon_id, *shard, &seqs).await?;
            warn!(coupon = %def.coupon_id, shard, grants = void.len(),
                "dropped shard's outbox listed grant ids claimed for other grants; trimmed");
            r.causes.push(format!(
                "{} grant(s) in dropped shard {shard}'s outbox reuse ids or users' ordinals claimed for other grants; trimmed, not re-driven",
                void.len()
            ));
        }
        // A borrow's home records the grant it settled (the request's win,
        // the user's count): one that is void there replays a grant that
        // can never be claimed, for good. Dropped too, and rebuilt from the
        // claims, its presses decided afresh.
        for home in homes {
            if self.ports.repair.drop_if_behind(&def.coupon_id, home, u64::MAX).await? {
                warn!(coupon = %def.coupon_id, shard = home, "home shard recorded a void borrowed grant; dropped for the rebuild");
                r.shards_rolled_back += 1;
                r.causes.push(format!(
                    "shard {home} recorded a borrowed grant claimed for another; dropped and rebuilt from DynamoDB"
                ));
            }
        }
        Ok(())
    }
}
