//! What a reconciliation pass reports: per coupon, the stock equation's
//! terms, what was repaired, and why anything was off.

use serde::Serialize;

use crate::ids::CouponId;

/// The figures of one coupon after a pass.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CouponReport {
    /// Which coupon.
    pub coupon_id: String,
    /// The definition's stock.
    pub total: u64,
    /// Left in Redis, all shards.
    pub remaining: i64,
    /// Issued in DynamoDB (the capped counters).
    pub issued: u64,
    /// Grants in an outbox that DynamoDB does not have yet.
    pub pending: u64,
    /// Grants recorded as rejected.
    pub rejected: u64,
    /// Of those, grants Redis made beyond the stock after it lost data
    /// (absorbed by the DynamoDB cap and keys): not units of stock.
    pub overgranted: u64,
    /// `total - (remaining + issued + pending + rejected - overgranted)`.
    pub drift: i64,
    /// Grants sent to SQS again in this pass.
    pub redriven: u64,
    /// Confirmed outbox entries removed in this pass.
    pub trimmed: u64,
    /// Borrows whose caller died, finished in this pass.
    pub borrows_finished: u64,
    /// Shards rebuilt from DynamoDB in this pass.
    pub shards_rebuilt: u32,
    /// Units put back into Redis by the rebuild.
    pub restored: u64,
    /// Shards found rolled back (behind the durable high-water mark) and
    /// dropped for the rebuild in this pass.
    pub shards_rolled_back: u32,
    /// Shards still without Redis state after this pass: their rebuild
    /// waits until the grants on their way have reached DynamoDB.
    pub shards_waiting: u32,
    /// Why the figures are what they are, in words, when anything was off.
    pub causes: Vec<String>,
}

/// The result of one run.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReconcileReport {
    /// When the run started.
    pub started_at_ms: i64,
    /// One report per visited coupon.
    pub coupons: Vec<CouponReport>,
    /// Coupons not visited: settled under the definition they still have
    /// (see `StockRepair::settled`).
    pub settled: u64,
    /// Messages in the dead-letter queue, if it could be read.
    pub dlq_depth: Option<u64>,
    /// Coupons that could not be reconciled this time (they are retried on
    /// the next run).
    pub errors: Vec<String>,
    /// Blacklist flags Redis had lost, set again from the durable list.
    pub blacklist_restored: u64,
}

impl ReconcileReport {
    /// True if every visited coupon balanced and nothing failed.
    pub fn is_clean(&self) -> bool {
        self.errors.is_empty() && self.coupons.iter().all(|c| c.drift == 0)
    }
}

/// Which coupon a report line is about (for callers that filter).
pub fn find<'a>(report: &'a ReconcileReport, coupon: &CouponId) -> Option<&'a CouponReport> {
    report.coupons.iter().find(|c| c.coupon_id == coupon.as_str())
}
