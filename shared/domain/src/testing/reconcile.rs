//! Fakes of the reconciler's durable ports: what DynamoDB knows and the
//! blacklist record, in memory, and a queue that keeps what it is sent
//! (the Redis side is in `shards.rs`).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::audit::AuditEntry;
use crate::barrier::BarrierRecord;
use crate::blacklist::BlacklistRecord;
use crate::coupon::{CouponDefinition, StoredCoupon};
use crate::error::{PublishError, StoreError};
use crate::grab::ports::{ClaimError, GrantClaims};
use crate::grant::Grant;
use crate::ids::{CouponId, GrantId, UserId};
use crate::reconcile::ports::{DurableFacts, Redrive, RejectedGrant};
use crate::user_coupon::{Held, Holdings};

/// What DynamoDB would know, and the durable blacklist.
#[derive(Default)]
pub struct MemoryFacts {
    /// Coupon definitions.
    pub definitions: Mutex<Vec<CouponDefinition>>,
    /// Issued units per coupon.
    pub issued: Mutex<HashMap<CouponId, u64>>,
    /// Issued grant ids.
    pub issued_grants: Mutex<HashSet<GrantId>>,
    /// Rejections per coupon.
    pub rejections: Mutex<HashMap<CouponId, Vec<RejectedGrant>>>,
    /// Holdings per coupon.
    pub holdings: Mutex<HashMap<CouponId, Holdings>>,
    /// Rebuilds recorded: (coupon, restored units).
    pub rebuilds: Mutex<Vec<(CouponId, u64)>>,
    /// The durable blacklist.
    pub blacklist: Mutex<HashSet<UserId>>,
    /// Users taken off the list right after their flag is restored (an
    /// operator's removal racing the reconciler).
    pub lift_after_restore: Mutex<HashSet<UserId>>,
    /// Definition versions (0 when absent).
    pub versions: Mutex<HashMap<CouponId, u64>>,
    /// High-water marks per coupon and shard (what the issuer raises).
    pub high_water: Mutex<HashMap<CouponId, HashMap<u32, u64>>>,
    /// An operator's change committed just after the next read of a
    /// definition (one racing the pass that read it): the new definition
    /// and its version.
    pub change_after_read: Mutex<Option<(CouponDefinition, u64)>>,
    /// Each coupon's open barrier episode.
    pub barriers: Mutex<HashMap<CouponId, BarrierRecord>>,
    /// The grants claimed (the grab's and the re-drive's claims), in order.
    pub claims: Mutex<Vec<Grant>>,
}

impl MemoryFacts {
    /// Records `grant` as issued.
    pub fn issue(&self, grant: &Grant) {
        *self.issued.lock().unwrap().entry(grant.coupon_id.clone()).or_default() += 1;
        self.issued_grants.lock().unwrap().insert(grant.grant_id.clone());
        self.holdings
            .lock()
            .unwrap()
            .entry(grant.coupon_id.clone())
            .or_default()
            .entry(grant.user_id.clone())
            .or_default()
            .push(Held::of(grant));
    }
}

#[async_trait]
impl GrantClaims for MemoryFacts {
    /// As the claims table does when it guards ordinals: a new claim, or
    /// the same grant again, is written; a grant id claimed for another
    /// grant is refused, and so is a user's ordinal or request claimed for
    /// another grant that was not rejected.
    async fn claim(&self, grants: &[Grant], _within_ms: u64) -> Vec<Result<(), ClaimError>> {
        let rejections = self.rejections.lock().unwrap();
        let rejected = |c: &Grant| {
            rejections
                .get(&c.coupon_id)
                .is_some_and(|r| r.iter().any(|r| r.grant_id == c.grant_id))
        };
        let mut claims = self.claims.lock().unwrap();
        grants
            .iter()
            .map(|g| {
                let held = |same: &dyn Fn(&Grant) -> bool| {
                    claims.iter().any(|c| {
                        c.coupon_id == g.coupon_id
                            && c.user_id == g.user_id
                            && same(c)
                            && c.grant_id != g.grant_id
                            && !rejected(c)
                    })
                };
                let ordinal_held = held(&|c| c.ordinal == g.ordinal);
                let request_held = held(&|c| c.request_id == g.request_id);
                match claims.iter().find(|c| c.grant_id == g.grant_id) {
                    Some(c) if !c.same_as(g) => Err(ClaimError::Reminted(g.grant_id.clone())),
                    Some(_) => Ok(()),
                    None if ordinal_held => Err(ClaimError::OrdinalClaimed(g.grant_id.clone())),
                    None if request_held => Err(ClaimError::RequestClaimed(g.grant_id.clone())),
                    None => {
                        claims.push(g.clone());
                        Ok(())
                    }
                }
            })
            .collect()
    }

    async fn holds(&self, grant: &Grant) -> Result<bool, StoreError> {
        let rejected = self
            .rejections
            .lock()
            .unwrap()
            .get(&grant.coupon_id)
            .is_some_and(|r| r.iter().any(|r| r.grant_id == grant.grant_id));
        Ok(!rejected && self.claims.lock().unwrap().iter().any(|c| c.same_as(grant)))
    }
}

#[async_trait]
impl DurableFacts for MemoryFacts {
    async fn definitions(&self) -> Result<Vec<CouponDefinition>, StoreError> {
        Ok(self.definitions.lock().unwrap().clone())
    }
    async fn stored(&self, coupon: &CouponId) -> Result<Option<StoredCoupon>, StoreError> {
        let def = self
            .definitions
            .lock()
            .unwrap()
            .iter()
            .find(|d| &d.coupon_id == coupon)
            .cloned();
        let version = self.versions.lock().unwrap().get(coupon).copied().unwrap_or(0);
        if let Some((changed, to)) = self.change_after_read.lock().unwrap().take() {
            let mut defs = self.definitions.lock().unwrap();
            defs.retain(|d| d.coupon_id != changed.coupon_id);
            self.versions.lock().unwrap().insert(changed.coupon_id.clone(), to);
            defs.push(changed);
        }
        Ok(def.map(|definition| StoredCoupon { definition, version }))
    }
    async fn issued(&self, coupon: &CouponId) -> Result<u64, StoreError> {
        Ok(self.issued.lock().unwrap().get(coupon).copied().unwrap_or(0))
    }
    async fn rejections(&self, coupon: &CouponId) -> Result<Vec<RejectedGrant>, StoreError> {
        Ok(self.rejections.lock().unwrap().get(coupon).cloned().unwrap_or_default())
    }
    async fn issued_grants(&self, grants: &[Grant]) -> Result<HashSet<GrantId>, StoreError> {
        let issued = self.issued_grants.lock().unwrap();
        Ok(grants
            .iter()
            .filter(|g| issued.contains(&g.grant_id))
            .map(|g| g.grant_id.clone())
            .collect())
    }
    async fn holdings(&self, coupon: &CouponId) -> Result<Holdings, StoreError> {
        Ok(self.holdings.lock().unwrap().get(coupon).cloned().unwrap_or_default())
    }
    async fn claims(&self, coupon: &CouponId) -> Result<Vec<Grant>, StoreError> {
        let mut seen = HashSet::new();
        Ok(self
            .claims
            .lock()
            .unwrap()
            .iter()
            .filter(|g| &g.coupon_id == coupon && seen.insert(g.grant_id.clone()))
            .cloned()
            .collect())
    }
    async fn record_rebuild(&self, coupon: &CouponId, _: i64, restored: u64) -> Result<(), StoreError> {
        self.rebuilds.lock().unwrap().push((coupon.clone(), restored));
        Ok(())
    }
    async fn raise_high_water(&self, coupon: &CouponId, shard: u32, seq: u64) -> Result<(), StoreError> {
        let mut marks = self.high_water.lock().unwrap();
        let mark = marks.entry(coupon.clone()).or_default().entry(shard).or_default();
        *mark = (*mark).max(seq);
        Ok(())
    }
    async fn high_water(&self, coupon: &CouponId) -> Result<HashMap<u32, u64>, StoreError> {
        Ok(self.high_water.lock().unwrap().get(coupon).cloned().unwrap_or_default())
    }
    async fn barrier(&self, coupon: &CouponId) -> Result<Option<BarrierRecord>, StoreError> {
        Ok(self.barriers.lock().unwrap().get(coupon).cloned())
    }
    async fn open_barrier(
        &self,
        coupon: &CouponId,
        record: &BarrierRecord,
        replacing: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut barriers = self.barriers.lock().unwrap();
        if barriers.get(coupon).map(|r| r.id.as_str()) != replacing {
            return Ok(false);
        }
        barriers.insert(coupon.clone(), record.clone());
        Ok(true)
    }
    async fn close_barrier(&self, coupon: &CouponId, id: &str) -> Result<bool, StoreError> {
        let mut barriers = self.barriers.lock().unwrap();
        if barriers.get(coupon).is_some_and(|r| r.id == id) {
            barriers.remove(coupon);
            return Ok(true);
        }
        Ok(false)
    }
    async fn was_rebuilt(&self, coupon: &CouponId) -> Result<bool, StoreError> {
        Ok(self.rebuilds.lock().unwrap().iter().any(|(c, _)| c == coupon))
    }
}

#[async_trait]
impl BlacklistRecord for MemoryFacts {
    async fn set(&self, user: &UserId, on: bool, _: &AuditEntry) -> Result<(), StoreError> {
        let mut list = self.blacklist.lock().unwrap();
        if on {
            list.insert(user.clone());
        } else {
            list.remove(user);
        }
        Ok(())
    }
    async fn contains(&self, user: &UserId) -> Result<bool, StoreError> {
        if self.lift_after_restore.lock().unwrap().remove(user) {
            self.blacklist.lock().unwrap().remove(user);
        }
        Ok(self.blacklist.lock().unwrap().contains(user))
    }
    async fn users(&self) -> Result<Vec<UserId>, StoreError> {
        Ok(self.blacklist.lock().unwrap().iter().cloned().collect())
    }
}

/// A queue that keeps what is re-driven to it.
#[derive(Default)]
pub struct FakeRedrive {
    /// Every grant sent, in order.
    pub sent: Mutex<Vec<Grant>>,
    /// The dead-letter queue's depth to report.
    pub dlq_depth: Option<u64>,
    /// Messages still on their way to the issuer, every coupon's (`None`:
    /// 0).
    pub in_flight: Mutex<Option<u64>>,
}

#[async_trait]
impl Redrive for FakeRedrive {
    async fn redrive(&self, grants: &[Grant], _within_ms: u64) -> Result<usize, PublishError> {
        self.sent.lock().unwrap().extend_from_slice(grants);
        Ok(grants.len())
    }
    async fn dlq_depth(&self) -> Result<Option<u64>, PublishError> {
        Ok(self.dlq_depth)
    }
    async fn in_flight(&self) -> Result<Option<u64>, PublishError> {
        Ok(Some(self.in_flight.lock().unwrap().unwrap_or(0)))
    }
}
