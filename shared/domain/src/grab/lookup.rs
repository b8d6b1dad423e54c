//! Step 0 of a press: which coupon is this, and how many shards does it
//! have? Answered from the instance's memory, Redis, or the durable
//! catalogue, in that order; a coupon that exists but whose Redis state is
//! gone asks for its repair.

use tracing::warn;

use crate::error::StoreError;
use crate::ids::CouponId;
use crate::metrics::Metric;

use super::GrabService;

impl GrabService {
    /// Step 0: the coupon's shard count, from the instance's memory, else
    /// Redis, else the durable catalogue; `None` for a coupon never
    /// created, BUSY (and a repair request) for one whose Redis state is
    /// gone.
    pub(super) async fn shard_count(&self, coupon: &CouponId, now_ms: i64) -> Result<Option<u32>, StoreError> {
        if let Some(n) = self.shard_counts.read().ok().and_then(|m| m.get(coupon).copied()) {
            return Ok(Some(n));
        }
        // Shards are fixed at creation, so a known count never goes stale.
        if let Some(n) = self.ledger.shard_count(coupon).await? {
            self.remember_shards(coupon, n);
            return Ok(Some(n));
        }
        // Redis knows nothing of it: it does not exist, or Redis lost it.
        // Only the durable catalogue can tell (and an unknown id is looked
        // up once per window, however often it is pressed).
        if self.unknown.contains(coupon, now_ms) {
            return Ok(None);
        }
        match self.catalog.shard_count(coupon).await? {
            None => {
                self.unknown.remember(coupon, now_ms);
                Ok(None)
            }
            Some(n) => {
                self.remember_shards(coupon, n);
                warn!("coupon exists but Redis has no state for it; BUSY until it is rebuilt");
                self.state_lost(coupon, now_ms).await;
                Err(StoreError::Unavailable(
                    "the coupon exists but its Redis state is gone".into(),
                ))
            }
        }
    }

    /// Remembers a coupon's shard count for the instance's life (shards
    /// are fixed at creation).
    fn remember_shards(&self, coupon: &CouponId, shards: u32) {
        if let Ok(mut m) = self.shard_counts.write() {
            m.insert(coupon.clone(), shards);
        }
    }

    /// A coupon that exists has no Redis state (a flush, a node replaced):
    /// count it and ask for its rebuild now, once per window per instance.
    pub(super) async fn state_lost(&self, coupon: &CouponId, now_ms: i64) {
        self.metrics.count(Metric::ShardMissing, None, 1);
        self.ask_repair(coupon, now_ms).await;
    }

    /// Asks for the coupon's repair now, once per window per instance.
    pub(super) async fn ask_repair(&self, coupon: &CouponId, now_ms: i64) {
        if !self.repair_asked.first_in_window(coupon, now_ms) {
            return;
        }
        if let Err(e) = self.repairs.request_repair(coupon, now_ms).await {
            // The scheduled pass repairs it anyway, a minute later at most.
            warn!(error = %e, "repair request not sent");
            self.metrics.count(Metric::RepairRequestFailed, None, 1);
        }
    }
}
