//! Fakes of the coupon center's ports: a catalogue in memory and shards
//! that answer as scripted, both counting their reads.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::center::{LiveCoupons, Standing, Standings};
use crate::coupon::{CouponDefinition, CouponStatus};
use crate::error::StoreError;
use crate::grab::ports::Peek;
use crate::ids::CouponId;

/// The catalogue: the definitions put in, filtered as the port promises.
#[derive(Default)]
pub struct MemoryLiveCoupons {
    /// Every definition, live or not.
    pub coupons: Mutex<Vec<CouponDefinition>>,
    /// Fail every read (the store is down).
    pub fail: AtomicBool,
    /// Reads made.
    pub reads: AtomicU64,
}

#[async_trait]
impl LiveCoupons for MemoryLiveCoupons {
    async fn live(&self, now_ms: i64) -> Result<Vec<CouponDefinition>, StoreError> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        if self.fail.load(Ordering::Relaxed) {
            return Err(StoreError::Unavailable("catalogue down".into()));
        }
        let coupons = self.coupons.lock().unwrap();
        Ok(coupons
            .iter()
            .filter(|d| d.status == CouponStatus::Online && d.grab_end_ms > now_ms)
            .cloned()
            .collect())
    }
}

/// Shards that answer each coupon as scripted (a coupon not scripted
/// answers with an error, as a shard that is down), and hold the stock set.
#[derive(Default)]
pub struct ScriptedStandings {
    /// Coupon -> the standing every caller gets.
    pub answers: Mutex<HashMap<CouponId, Standing>>,
    /// Coupon -> units left over all shards (absent: the read fails).
    pub remaining: Mutex<HashMap<CouponId, u64>>,
    /// Every standing asked, as (coupon, home shard), in order.
    pub asked: Mutex<Vec<(CouponId, u32)>>,
    /// Stock reads made.
    pub stock_reads: AtomicU64,
}

#[async_trait]
impl Standings for ScriptedStandings {
    async fn standings(&self, asks: &[Peek<'_>]) -> Vec<Result<Standing, StoreError>> {
        let answers = self.answers.lock().unwrap();
        let mut asked = self.asked.lock().unwrap();
        asks.iter()
            .map(|ask| {
                asked.push((ask.coupon.clone(), ask.home_shard));
                answers
                    .get(ask.coupon)
                    .cloned()
                    .ok_or_else(|| StoreError::Unavailable("shard down".into()))
            })
            .collect()
    }

    async fn remaining(&self, coupon: &CouponId, _shards: u32, _now_ms: i64) -> Result<u64, StoreError> {
        self.stock_reads.fetch_add(1, Ordering::Relaxed);
        self.remaining
            .lock()
            .unwrap()
            .get(coupon)
            .copied()
            .ok_or_else(|| StoreError::Unavailable("shard down".into()))
    }
}
