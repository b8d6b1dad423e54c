//! Fakes of the reconciler's Redis ports: shards (stock, outboxes, the
//! restart check), operators' live settings and blacklist flags, in memory.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::blacklist::BlacklistFlags;
use crate::coupon::{CouponStatus, StoredCoupon};
use crate::error::StoreError;
use crate::grant::{Grant, GrantRecord};
use crate::ids::{CouponId, GrantId, RequestId, UserId};
use crate::live::{LiveSettings, ShardApply};
use crate::reconcile::ports::{DurableBound, OutboxEntry, ShardStock, ShardUnits, StockRepair, Verification};
use crate::user_coupon::Held;

/// One shard's state.
#[derive(Debug, Clone, Default)]
pub struct ShardState {
    /// Remaining stock.
    pub stock: i64,
    /// Units written off by waves gone by without rollover; the reconciler
    /// reads them with the stock, as the Redis adapter reports them.
    pub expired: i64,
    /// The definition version applied.
    pub version: u64,
    /// The status applied.
    pub status: Option<CouponStatus>,
    /// Outbox entries, oldest first.
    pub outbox: Vec<OutboxEntry>,
    /// Donors' grants settled here for this shard's users, not yet
    /// confirmed issued.
    pub borrowed: Vec<Grant>,
    /// Times its sold-out epoch was bumped.
    pub epochs: u32,
    /// Per-user claim counts (set by a restore).
    pub users: Vec<(UserId, u32)>,
    /// Request outcomes (set by a restore): who, which request, what it won.
    pub outcomes: Vec<(UserId, (RequestId, GrantRecord))>,
    /// Takes restored by a rebuild: the user and the unit this shard gave
    /// their borrow, as DynamoDB holds it.
    pub taken: Vec<(UserId, GrantRecord)>,
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
    /// The coupons the reconciler settled, with their fingerprints.
    pub settled: Mutex<HashMap<CouponId, String>>,
    /// The next rebuild's write dies (the reconciler crashed, or Redis
    /// went away), once.
    pub restore_dies: Mutex<bool>,
    /// Once set, the pass dies right after its next repair (a restarted
    /// shard confirmed, or a lost one restored): every epoch bump after it
    /// fails, as if the function had timed out there.
    pub dies_after_repair: Mutex<bool>,
    /// Set by the repair `dies_after_repair` waits for.
    repaired: Mutex<bool>,
    /// The outboxes of shards dropped (for a rollback or a restart), kept
    /// as the drop scripts keep them, until a rebuild writes the shard.
    kept: Mutex<HashMap<(CouponId, u32), Vec<OutboxEntry>>>,
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

    /// Lists `grant` (a donor's) as settled on `home` for its user, as
    /// `settle.lua` does.
    pub fn lend(&self, home: u32, grant: &Grant) {
        let mut shards = self.shards.lock().unwrap();
        let state = shards
            .get_mut(&(grant.coupon_id.clone(), home))
            .expect("the home shard exists");
        state.borrowed.push(grant.clone());
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

    /// Drops a shard's state but keeps its outbox, as `verify.lua` and
    /// `drop_if_behind.lua` do.
    fn drop_keeping_outbox(&self, shards: &mut HashMap<(CouponId, u32), ShardState>, key: &(CouponId, u32)) {
        if let Some(state) = shards.remove(key) {
            self.kept.lock().unwrap().insert(key.clone(), state.outbox);
        }
    }
}

#[async_trait]
impl StockRepair for MemoryShards {
    async fn settled(&self) -> Result<HashMap<CouponId, String>, StoreError> {
        Ok(self.settled.lock().unwrap().clone())
    }
    async fn settle(&self, settled: &[(CouponId, String)], forgotten: &[CouponId]) -> Result<(), StoreError> {
        let mut map = self.settled.lock().unwrap();
        for c in forgotten {
            map.remove(c);
        }
        map.extend(settled.iter().cloned());
        Ok(())
    }
    async fn shard_stock(&self, coupon: &CouponId, shard: u32) -> Result<Option<ShardStock>, StoreError> {
        Ok(self.state(coupon, shard).map(|s| ShardStock {
            stock: s.stock + s.expired,
            version: s.version,
        }))
    }
    async fn outbox(&self, coupon: &CouponId, shard: u32) -> Result<Vec<OutboxEntry>, StoreError> {
        let entries = match self.state(coupon, shard) {
            Some(s) => s.outbox,
            None => self
                .kept
                .lock()
                .unwrap()
                .get(&(coupon.clone(), shard))
                .cloned()
                .unwrap_or_default(),
        };
        if let Some(hook) = self.after_outbox_read.lock().unwrap().take() {
            hook(&mut self.shards.lock().unwrap());
        }
        Ok(entries)
    }
    async fn trim(&self, coupon: &CouponId, shard: u32, seqs: &[u64]) -> Result<(), StoreError> {
        let key = (coupon.clone(), shard);
        if let Some(s) = self.shards.lock().unwrap().get_mut(&key) {
            s.outbox.retain(|e| !seqs.contains(&e.seq));
        } else if let Some(kept) = self.kept.lock().unwrap().get_mut(&key) {
            kept.retain(|e| !seqs.contains(&e.seq));
        }
        Ok(())
    }
    async fn borrowed(&self, coupon: &CouponId, shard: u32) -> Result<Vec<Grant>, StoreError> {
        Ok(self.state(coupon, shard).map(|s| s.borrowed).unwrap_or_default())
    }
    async fn forget_borrowed(&self, coupon: &CouponId, shard: u32, grants: &[GrantId]) -> Result<(), StoreError> {
        if let Some(s) = self.shards.lock().unwrap().get_mut(&(coupon.clone(), shard)) {
            s.borrowed.retain(|g| !grants.contains(&g.grant_id));
        }
        Ok(())
    }
    async fn restore_shard(
        &self,
        coupon: &StoredCoupon,
        shard: u32,
        units: ShardUnits,
        seq_base: u64,
        holders: &[(UserId, Vec<Held>)],
        taken: &[(UserId, GrantRecord)],
        outbox: &[Grant],
        _now_ms: i64,
    ) -> Result<bool, StoreError> {
        if std::mem::take(&mut *self.restore_dies.lock().unwrap()) {
            return Err(StoreError::Unavailable("the rebuild's write died".into()));
        }
        let mut shards = self.shards.lock().unwrap();
        let key = (coupon.definition.coupon_id.clone(), shard);
        if shards.contains_key(&key) {
            return Ok(false);
        }
        // A dropped shard's kept entries stay, the rebuild's are added after
        // the last of them (as restore_outbox.lua does).
        let mut entries = self.kept.lock().unwrap().remove(&key).unwrap_or_default();
        let last = entries.last().map(|e| e.seq).unwrap_or(0);
        entries.extend(outbox.iter().filter(|g| g.grant_id.seq() > last).map(|g| OutboxEntry {
            seq: g.grant_id.seq(),
            grant: g.clone(),
        }));
        shards.insert(
            key,
            ShardState {
                stock: units.stock as i64,
                expired: units.expired as i64,
                users: holders.iter().map(|(u, held)| (u.clone(), held.len() as u32)).collect(),
                outcomes: holders
                    .iter()
                    .flat_map(|(u, held)| held.iter().filter_map(|h| h.outcome.clone()).map(|o| (u.clone(), o)))
                    .collect(),
                taken: taken.to_vec(),
                outbox: entries,
                version: coupon.version,
                status: Some(coupon.definition.status),
                seq: seq_base,
                ..ShardState::default()
            },
        );
        *self.repaired.lock().unwrap() = true;
        Ok(true)
    }
    async fn drop_if_behind(&self, coupon: &CouponId, shard: u32, high_water: u64) -> Result<bool, StoreError> {
        let mut shards = self.shards.lock().unwrap();
        let key = (coupon.clone(), shard);
        if shards
            .get(&key)
            .is_some_and(|s| s.seq < high_water && s.restarted.is_none())
        {
            self.drop_keeping_outbox(&mut shards, &key);
            return Ok(true);
        }
        Ok(false)
    }
    async fn verify(
        &self,
        coupon: &CouponId,
        shard: u32,
        now_ms: i64,
        bound: Option<DurableBound>,
    ) -> Result<Verification, StoreError> {
        let mut shards = self.shards.lock().unwrap();
        let key = (coupon.clone(), shard);
        let Some(s) = shards.get_mut(&key) else {
            return Ok(Verification::Missing);
        };
        let Some(since) = s.restarted else {
            return Ok(Verification::Current);
        };
        Ok(match bound {
            None => {
                let since_ms = since.unwrap_or(now_ms);
                s.restarted = Some(Some(since_ms));
                Verification::Suspect { since_ms }
            }
            // As verify.lua: behind the mark or the definition, or out of
            // stock (claims may have been filled by borrows, which move no
            // sequence).
            Some(b) if s.seq < b.high_water || s.version < b.version || s.stock <= 0 => {
                self.drop_keeping_outbox(&mut shards, &key);
                Verification::Dropped
            }
            Some(_) => {
                s.restarted = None;
                *self.repaired.lock().unwrap() = true;
                Verification::Confirmed
            }
        })
    }
    async fn bump_epoch(&self, coupon: &CouponId, shard: u32) -> Result<(), StoreError> {
        if *self.dies_after_repair.lock().unwrap() && *self.repaired.lock().unwrap() {
            return Err(StoreError::Conflict("the pass died after its repair".into()));
        }
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
        if s.restarted.is_some() {
            return Ok(ShardApply::Unverified);
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
