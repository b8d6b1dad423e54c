//! In-memory [`Entries`]: a lottery's registrations and draw.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::error::StoreError;
use crate::ids::{CouponId, UserId};
use crate::lottery::ports::{Drawn, Entries, Lottery, Registered};
use crate::lottery::Seed;

/// Registrations and draws in memory; a coupon is a lottery once given a
/// seed ([`Self::with_seed`]).
#[derive(Default)]
pub struct MemoryEntries {
    entries: Mutex<BTreeMap<(CouponId, u32), BTreeMap<UserId, i64>>>,
    lotteries: Mutex<HashMap<CouponId, Lottery>>,
}

impl MemoryEntries {
    /// Makes `coupon` a lottery drawn with `seed`.
    pub fn with_seed(&self, coupon: &CouponId, seed: Seed) {
        self.lotteries.lock().unwrap().insert(
            coupon.clone(),
            Lottery {
                seed,
                frozen_at_ms: None,
                drawn: None,
            },
        );
    }
}

#[async_trait]
impl Entries for MemoryEntries {
    async fn register(
        &self,
        coupon: &CouponId,
        shard: u32,
        user: &UserId,
        at_ms: i64,
    ) -> Result<Registered, StoreError> {
        let frozen = self
            .lotteries
            .lock()
            .unwrap()
            .get(coupon)
            .is_none_or(|l| l.frozen_at_ms.is_some());
        let mut entries = self.entries.lock().unwrap();
        let shard_entries = entries.entry((coupon.clone(), shard)).or_default();
        if let Some(&at_ms) = shard_entries.get(user) {
            return Ok(Registered::Already { at_ms });
        }
        if frozen {
            return Ok(Registered::Closed);
        }
        shard_entries.insert(user.clone(), at_ms);
        Ok(Registered::New)
    }
    async fn registered(&self, coupon: &CouponId, shard: u32, user: &UserId) -> Result<Option<i64>, StoreError> {
        let entries = self.entries.lock().unwrap();
        Ok(entries.get(&(coupon.clone(), shard)).and_then(|e| e.get(user).copied()))
    }
    async fn entries(&self, coupon: &CouponId, shard: u32) -> Result<Vec<UserId>, StoreError> {
        let entries = self.entries.lock().unwrap();
        Ok(entries
            .get(&(coupon.clone(), shard))
            .map(|e| e.keys().cloned().collect())
            .unwrap_or_default())
    }
    async fn lottery(&self, coupon: &CouponId) -> Result<Option<Lottery>, StoreError> {
        Ok(self.lotteries.lock().unwrap().get(coupon).cloned())
    }
    async fn freeze(&self, coupon: &CouponId, _shards: u32, now_ms: i64) -> Result<Lottery, StoreError> {
        let mut lotteries = self.lotteries.lock().unwrap();
        let lottery = lotteries
            .get_mut(coupon)
            .ok_or_else(|| StoreError::Unavailable("not a lottery".into()))?;
        lottery.frozen_at_ms.get_or_insert(now_ms);
        Ok(lottery.clone())
    }
    async fn record_draw(&self, coupon: &CouponId, drawn: &Drawn) -> Result<(), StoreError> {
        if let Some(lottery) = self.lotteries.lock().unwrap().get_mut(coupon) {
            lottery.drawn.get_or_insert_with(|| drawn.clone());
        }
        Ok(())
    }
}
