//! Fakes of the reconciler's ports: durable facts and the blacklist record
//! in memory, Redis shards (stock, outboxes, blacklist flags) in memory,
//! and a queue that keeps what it is sent.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::audit::AuditEntry;
use crate::barrier::{Barrier, BarrierRecord};
use crate::blacklist::{BlacklistFlags, BlacklistRecord};
use crate::coupon::{CouponDefinition, CouponStatus, StoredCoupon};
use crate::error::{PublishError, StoreError};
use crate::grant::{Grant, GrantRecord};
use crate::ids::{CouponId, RequestId, UserId};
use crate::live::{LiveSettings, ShardApply};
use crate::reconcile::ports::{
    DurableFacts, OutboxEntry, Redrive, RejectedGrant, ShardStock, StockRepair, Verification,
};
use crate::user_coupon::{Held, Holdings};

/// What DynamoDB would know, and the durable blacklist.
#[derive(Default)]
pub struct MemoryFacts {
    /// Coupon definitions.
    pub definitions: Mutex<Vec<CouponDefinition>>,
    /// Issued units per coupon.
    pub issued: Mutex<HashMap<CouponId, u64>>,
    /// Issued grant ids.
    pub issued_grants: Mutex<HashSet<String>>,
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
}

impl MemoryFacts {
    /// What the issuer records on a barrier's arrival.
    pub fn acknowledge(&self, barrier: &Barrier) {
        if let Some(rec) = self.barriers.lock().unwrap().get_mut(&barrier.coupon_id) {
            if rec.id == barrier.barrier_id {
                rec.lanes_done += 1;
            }
        }
    }

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
    async fn issued_grants(&self, grants: &[Grant]) -> Result<HashSet<String>, StoreError> {
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
    async fn record_rebuild(&self, coupon: &CouponId, _: i64, restored: u64) -> Result<(), StoreError> {
        self.rebuilds.lock().unwrap().push((coupon.clone(), restored));
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
    async fn barrier_sent(&self, coupon: &CouponId, id: &str, sent_ms: i64) -> Result<bool, StoreError> {
        Ok(match self.barriers.lock().unwrap().get_mut(coupon) {
            Some(rec) if rec.id == id => {
                rec.sent_ms = Some(sent_ms);
                true
            }
            _ => false,
        })
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

/// One shard's state.
#[derive(Debug, Clone, Default)]
pub struct ShardState {
    /// Remaining stock.
    pub stock: i64,
    /// The definition version applied.
    pub version: u64,
    /// The status applied.
    pub status: Option<CouponStatus>,
    /// Outbox entries, oldest first.
    pub outbox: Vec<OutboxEntry>,
    /// Times its sold-out epoch was bumped.
    pub epochs: u32,
    /// Per-user claim counts (set by a restore).
    pub users: Vec<(UserId, u32)>,
    /// Request outcomes (set by a restore): who, which request, what it won.
    pub outcomes: Vec<(UserId, (RequestId, GrantRecord))>,
    /// The shard's grant sequence (the last one minted).
    pub seq: u64,
    /// Its server restarted since it was verified (`Some`), and since when
    /// a pass has found it so (`Some(None)`: not looked at yet).
    pub restarted: Option<Option<i64>>,
}

/// A change to the shards made at a chosen moment of a pass: what a grab or
/// the issuer does while the reconciler reads.
pub type ShardsHook = Box<dyn FnOnce(&mut HashMap<(CouponId, u32), ShardState>) + Send>;

/// Redis shards and blacklist flags in memory. A shard absent from the map
/// has lost its state.
#[derive(Default)]
pub struct MemoryShards {
    /// Shards by (coupon, index).
    pub shards: Mutex<HashMap<(CouponId, u32), ShardState>>,
    /// Users whose blacklist flag is set.
    pub flags: Mutex<HashSet<UserId>>,
    /// Runs once, right after the first outbox read of a pass.
    pub after_outbox_read: Mutex<Option<ShardsHook>>,
}

impl MemoryShards {
    /// Creates a shard with `stock` units and an empty outbox.
    pub fn put(&self, coupon: &CouponId, shard: u32, stock: i64) {
        self.shards.lock().unwrap().insert(
            (coupon.clone(), shard),
            ShardState {
                stock,
                ..ShardState::default()
            },
        );
    }

    /// Appends a grant to its shard's outbox (the shard must exist).
    pub fn push(&self, grant: &Grant) {
        let mut shards = self.shards.lock().unwrap();
        let state = shards
            .get_mut(&(grant.coupon_id.clone(), grant.shard))
            .expect("the grant's shard exists");
        let seq = state.outbox.last().map(|e| e.seq + 1).unwrap_or(1);
        state.seq = state.seq.max(seq);
        state.outbox.push(OutboxEntry {
            seq,
            grant: grant.clone(),
        });
    }

    /// A copy of a shard's state, if it has any.
    pub fn state(&self, coupon: &CouponId, shard: u32) -> Option<ShardState> {
        self.shards.lock().unwrap().get(&(coupon.clone(), shard)).cloned()
    }
}

#[async_trait]
impl StockRepair for MemoryShards {
    async fn shard_stock(&self, coupon: &CouponId, shard: u32) -> Result<Option<ShardStock>, StoreError> {
        Ok(self.state(coupon, shard).map(|s| ShardStock {
            stock: s.stock,
            version: s.version,
        }))
    }
    async fn outbox(&self, coupon: &CouponId, shard: u32) -> Result<Vec<OutboxEntry>, StoreError> {
        let entries = self.state(coupon, shard).map(|s| s.outbox).unwrap_or_default();
        if let Some(hook) = self.after_outbox_read.lock().unwrap().take() {
            hook(&mut self.shards.lock().unwrap());
        }
        Ok(entries)
    }
    async fn trim(&self, coupon: &CouponId, shard: u32, seqs: &[u64]) -> Result<(), StoreError> {
        if let Some(s) = self.shards.lock().unwrap().get_mut(&(coupon.clone(), shard)) {
            s.outbox.retain(|e| !seqs.contains(&e.seq));
        }
        Ok(())
    }
    async fn restore_shard(
        &self,
        coupon: &StoredCoupon,
        shard: u32,
        stock: u64,
        seq_base: u64,
        holders: &[(UserId, Vec<Held>)],
        _now_ms: i64,
    ) -> Result<bool, StoreError> {
        let mut shards = self.shards.lock().unwrap();
        let key = (coupon.definition.coupon_id.clone(), shard);
        if shards.contains_key(&key) {
            return Ok(false);
        }
        shards.insert(
            key,
            ShardState {
                stock: stock as i64,
                users: holders.iter().map(|(u, held)| (u.clone(), held.len() as u32)).collect(),
                outcomes: holders
                    .iter()
                    .flat_map(|(u, held)| held.iter().filter_map(|h| h.outcome.clone()).map(|o| (u.clone(), o)))
                    .collect(),
                version: coupon.version,
                status: Some(coupon.definition.status),
                seq: seq_base,
                ..ShardState::default()
            },
        );
        Ok(true)
    }
    async fn drop_if_behind(&self, coupon: &CouponId, shard: u32, high_water: u64) -> Result<bool, StoreError> {
        let mut shards = self.shards.lock().unwrap();
        let key = (coupon.clone(), shard);
        if shards
            .get(&key)
            .is_some_and(|s| s.seq < high_water && s.restarted.is_none())
        {
            shards.remove(&key);
            return Ok(true);
        }
        Ok(false)
    }
    async fn verify(
        &self,
        coupon: &CouponId,
        shard: u32,
        now_ms: i64,
        high_water: Option<u64>,
    ) -> Result<Verification, StoreError> {
        let mut shards = self.shards.lock().unwrap();
        let key = (coupon.clone(), shard);
        let Some(s) = shards.get_mut(&key) else {
            return Ok(Verification::Missing);
        };
        let Some(since) = s.restarted else {
            return Ok(Verification::Current);
        };
        Ok(match high_water {
            None => {
                let since_ms = since.unwrap_or(now_ms);
                s.restarted = Some(Some(since_ms));
                Verification::Suspect { since_ms }
            }
            // As verify.lua: behind the mark, or out of stock (claims may
            // have been filled by borrows, which move no sequence).
            Some(mark) if s.seq < mark || s.stock <= 0 => {
                shards.remove(&key);
                Verification::Dropped
            }
            Some(_) => {
                s.restarted = None;
                Verification::Confirmed
            }
        })
    }
    async fn bump_epoch(&self, coupon: &CouponId, shard: u32) -> Result<(), StoreError> {
        if let Some(s) = self.shards.lock().unwrap().get_mut(&(coupon.clone(), shard)) {
            s.epochs += 1;
        }
        Ok(())
    }
    async fn stale_borrows(&self, _: &CouponId, _: u32, _: i64) -> Result<Vec<(RequestId, UserId)>, StoreError> {
        Ok(Vec::new())
    }
}

#[async_trait]
impl LiveSettings for MemoryShards {
    async fn apply_shard(&self, coupon: &StoredCoupon, shard: u32) -> Result<ShardApply, StoreError> {
        let mut shards = self.shards.lock().unwrap();
        let Some(s) = shards.get_mut(&(coupon.definition.coupon_id.clone(), shard)) else {
            return Ok(ShardApply::Missing);
        };
        if s.version >= coupon.version {
            return Ok(ShardApply::Current);
        }
        s.version = coupon.version;
        s.status = Some(coupon.definition.status);
        Ok(ShardApply::Applied)
    }
    async fn bump_epoch(&self, coupon: &CouponId, shard: u32) -> Result<(), StoreError> {
        StockRepair::bump_epoch(self, coupon, shard).await
    }
}

#[async_trait]
impl BlacklistFlags for MemoryShards {
    async fn set_flag(&self, user: &UserId, on: bool) -> Result<(), StoreError> {
        let mut flags = self.flags.lock().unwrap();
        if on {
            flags.insert(user.clone());
        } else {
            flags.remove(user);
        }
        Ok(())
    }
    async fn restore_flag(&self, user: &UserId) -> Result<bool, StoreError> {
        Ok(self.flags.lock().unwrap().insert(user.clone()))
    }
}

/// A queue that keeps what is re-driven to it, in front of an issuer that
/// acknowledges barriers in `issuer` (the durable facts): at once, unless
/// `hold_barriers` says the coupon's own grants are still ahead of them
/// (then on [`FakeRedrive::deliver`]).
#[derive(Default)]
pub struct FakeRedrive {
    /// Every grant sent, in order.
    pub sent: Mutex<Vec<Grant>>,
    /// The dead-letter queue's depth to report.
    pub dlq_depth: Option<u64>,
    /// Messages still on their way to the issuer, every coupon's (`None`:
    /// 0).
    pub in_flight: Mutex<Option<u64>>,
    /// True while barriers wait behind grants of their own lanes.
    pub hold_barriers: Mutex<bool>,
    /// Where barriers are acknowledged.
    pub issuer: Option<Arc<MemoryFacts>>,
    /// Barriers sent and not yet acknowledged.
    pub barriers: Mutex<Vec<Barrier>>,
    /// How many barriers were sent in all.
    pub barriers_sent: Mutex<usize>,
}

impl FakeRedrive {
    /// A queue whose barriers the issuer acknowledges in `facts`.
    pub fn feeding(facts: Arc<MemoryFacts>) -> Self {
        Self {
            issuer: Some(facts),
            ..Self::default()
        }
    }

    /// The issuer reaches every barrier waiting in the queue (and the grants
    /// ahead of them), and acknowledges it; later ones come through at once.
    pub fn deliver(&self) {
        *self.hold_barriers.lock().unwrap() = false;
        let waiting = std::mem::take(&mut *self.barriers.lock().unwrap());
        if let Some(facts) = &self.issuer {
            for b in &waiting {
                facts.acknowledge(b);
            }
        }
    }
}

#[async_trait]
impl Redrive for FakeRedrive {
    async fn redrive(&self, grants: &[Grant], _within_ms: u64) -> Result<usize, PublishError> {
        self.sent.lock().unwrap().extend_from_slice(grants);
        Ok(grants.len())
    }
    async fn send_barriers(&self, barriers: &[Barrier]) -> Result<(), PublishError> {
        *self.barriers_sent.lock().unwrap() += barriers.len();
        self.barriers.lock().unwrap().extend_from_slice(barriers);
        if !*self.hold_barriers.lock().unwrap() {
            self.deliver();
        }
        Ok(())
    }
    async fn dlq_depth(&self) -> Result<Option<u64>, PublishError> {
        Ok(self.dlq_depth)
    }
    async fn in_flight(&self) -> Result<Option<u64>, PublishError> {
        Ok(Some(self.in_flight.lock().unwrap().unwrap_or(0)))
    }
}
