//! Metrics as CloudWatch embedded-metric-format (EMF) log lines.
//!
//! In Lambda, a JSON line on stdout with an `_aws` block becomes a CloudWatch
//! metric with no API call and no latency on the request path. The service
//! code talks to the [`Metrics`] trait; tests record instead of printing.

use std::io::Write;
use std::sync::Mutex;

use serde_json::{json, Map, Value};

/// Every metric the functions emit, with the function that emits it and
/// the one dimension it is split by: the single list the template's
/// dashboard and alarms are checked against (`infra/tests`), so a widget
/// can never watch a name nothing emits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Metric {
    /// grab, by `Outcome`: one per press (a code, or `UNAVAILABLE`).
    GrabOutcome,
    /// grab: a win whose grant SQS did not take, or whose claim DynamoDB did
    /// not write first (the press answered BUSY).
    GrantQueueFailed,
    /// grab: a win (or a borrow's step) no replica acknowledged in time,
    /// or that the shard's node no longer holds after a failover (BUSY).
    GrantNotReplicated,
    /// grab: a risk reservation that could not be given back.
    RiskReleaseFailed,
    /// grab: a stock shard with no state in Redis.
    ShardMissing,
    /// grab: a repair request the repair queue did not take.
    RepairRequestFailed,
    /// issuer: a coupon written.
    CouponIssued,
    /// issuer: a grant delivered again (already issued).
    DuplicateDelivery,
    /// issuer: a grant the durable cap or keys refused (Redis lost data).
    GrantRejected,
    /// issuer: a shard's high-water mark not written (its messages retry).
    HighWaterFailed,
    /// reconciler, by `Coupon`: the stock equation's imbalance.
    ReconcileDrift,
    /// reconciler: the imbalance over all coupons (the drift alarm).
    ReconcileDriftTotal,
    /// reconciler, by `Coupon`: won, not yet issued.
    GrantsPending,
    /// reconciler, by `Coupon`: grants sent to the queue again.
    GrantsRedriven,
    /// reconciler, by `Coupon`: grants the durable ledger rejected.
    GrantsRejected,
    /// reconciler, by `Coupon`: shards rebuilt from DynamoDB.
    ShardsRebuilt,
    /// reconciler, by `Coupon`: shards found rolled back and dropped.
    ShardsRolledBack,
    /// reconciler, by `Coupon`: units still on sale (Redis, all shards).
    StockRemaining,
    /// reconciler: messages in the grant dead-letter queue.
    DlqDepth,
    /// notifier, by `Type`: events published.
    CouponEvents,
    /// notifier: events the bus refused (their records come again).
    NotifierFailures,
    /// notifier: stream records it cannot read.
    NotifierUnreadable,
    /// notifier: writes that are no transition.
    NotifierSkipped,
}

impl Metric {
    /// Every metric, in the order of the list above.
    pub const ALL: [Metric; 23] = [
        Self::GrabOutcome,
        Self::GrantQueueFailed,
        Self::GrantNotReplicated,
        Self::RiskReleaseFailed,
        Self::ShardMissing,
        Self::RepairRequestFailed,
        Self::CouponIssued,
        Self::DuplicateDelivery,
        Self::GrantRejected,
        Self::HighWaterFailed,
        Self::ReconcileDrift,
        Self::ReconcileDriftTotal,
        Self::GrantsPending,
        Self::GrantsRedriven,
        Self::GrantsRejected,
        Self::ShardsRebuilt,
        Self::ShardsRolledBack,
        Self::StockRemaining,
        Self::DlqDepth,
        Self::CouponEvents,
        Self::NotifierFailures,
        Self::NotifierUnreadable,
        Self::NotifierSkipped,
    ];

    /// Its CloudWatch name.
    pub fn name(self) -> &'static str {
        match self {
            Self::GrabOutcome => "GrabOutcome",
            Self::GrantQueueFailed => "GrantQueueFailed",
            Self::GrantNotReplicated => "GrantNotReplicated",
            Self::RiskReleaseFailed => "RiskReleaseFailed",
            Self::ShardMissing => "ShardMissing",
            Self::RepairRequestFailed => "RepairRequestFailed",
            Self::CouponIssued => "CouponIssued",
            Self::DuplicateDelivery => "DuplicateDelivery",
            Self::GrantRejected => "GrantRejected",
            Self::HighWaterFailed => "HighWaterFailed",
            Self::ReconcileDrift => "ReconcileDrift",
            Self::ReconcileDriftTotal => "ReconcileDriftTotal",
            Self::GrantsPending => "GrantsPending",
            Self::GrantsRedriven => "GrantsRedriven",
            Self::GrantsRejected => "GrantsRejected",
            Self::ShardsRebuilt => "ShardsRebuilt",
            Self::ShardsRolledBack => "ShardsRolledBack",
            Self::StockRemaining => "StockRemaining",
            Self::DlqDepth => "DlqDepth",
            Self::CouponEvents => "CouponEvents",
            Self::NotifierFailures => "NotifierFailures",
            Self::NotifierUnreadable => "NotifierUnreadable",
            Self::NotifierSkipped => "NotifierSkipped",
        }
    }

    /// The function that emits it (its `Service` dimension).
    pub fn service(self) -> &'static str {
        match self {
            Self::GrabOutcome
            | Self::GrantQueueFailed
            | Self::GrantNotReplicated
            | Self::RiskReleaseFailed
            | Self::ShardMissing
            | Self::RepairRequestFailed => "grab",
            Self::CouponIssued | Self::DuplicateDelivery | Self::GrantRejected | Self::HighWaterFailed => "issuer",
            Self::ReconcileDrift
            | Self::ReconcileDriftTotal
            | Self::GrantsPending
            | Self::GrantsRedriven
            | Self::GrantsRejected
            | Self::ShardsRebuilt
            | Self::ShardsRolledBack
            | Self::StockRemaining
            | Self::DlqDepth => "reconciler",
            Self::CouponEvents | Self::NotifierFailures | Self::NotifierUnreadable | Self::NotifierSkipped => {
                "notifier"
            }
        }
    }

    /// The dimension it is split by, besides `Service`.
    pub fn dimension(self) -> Option<&'static str> {
        match self {
            Self::GrabOutcome => Some("Outcome"),
            Self::CouponEvents => Some("Type"),
            Self::ReconcileDrift
            | Self::GrantsPending
            | Self::GrantsRedriven
            | Self::GrantsRejected
            | Self::ShardsRebuilt
            | Self::ShardsRolledBack
            | Self::StockRemaining => Some("Coupon"),
            _ => None,
        }
    }
}

/// Counts things that operators alarm on.
pub trait Metrics: Send + Sync {
    /// Adds `value` to `metric`, split by the value of its dimension (if it
    /// has one; a value for a metric without one is ignored).
    fn count(&self, metric: Metric, dimension: Option<&str>, value: u64);
}

/// Writes one EMF line per count to stdout.
#[derive(Debug, Clone)]
pub struct EmfMetrics {
    namespace: String,
    service: String,
}

impl EmfMetrics {
    /// Metrics land in `namespace`, every one with a `Service` dimension.
    pub fn new(namespace: impl Into<String>, service: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            service: service.into(),
        }
    }

    /// The EMF document for one count (public for tests and for callers
    /// that want to log a batch of figures in one line).
    pub fn line(&self, name: &str, dimension: Option<(&str, &str)>, value: u64, now_ms: i64) -> Value {
        let mut dims = vec![Value::from("Service")];
        let mut doc = Map::new();
        doc.insert("Service".into(), self.service.clone().into());
        if let Some((k, v)) = dimension {
            dims.push(k.into());
            doc.insert(k.into(), v.into());
        }
        doc.insert(name.into(), value.into());
        doc.insert(
            "_aws".into(),
            json!({
                "Timestamp": now_ms,
                "CloudWatchMetrics": [{
                    "Namespace": self.namespace,
                    "Dimensions": [dims],
                    "Metrics": [{"Name": name, "Unit": "Count"}],
                }],
            }),
        );
        Value::Object(doc)
    }
}

impl Metrics for EmfMetrics {
    fn count(&self, metric: Metric, dimension: Option<&str>, value: u64) {
        let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
        let dimension = metric.dimension().zip(dimension);
        let line = self.line(metric.name(), dimension, value, now);
        // A failed write to stdout loses one data point; never fail a grab for it.
        let _ = writeln!(std::io::stdout().lock(), "{line}");
    }
}

/// One recorded count: name, optional (dimension, value), amount.
type Recorded = (String, Option<(String, String)>, u64);

/// Keeps every count in memory: for tests and benchmarks.
#[derive(Debug, Default)]
pub struct RecordingMetrics(Mutex<Vec<Recorded>>);

impl RecordingMetrics {
    /// The sum of every count of `name` (any dimension).
    pub fn total(&self, name: &str) -> u64 {
        self.0
            .lock()
            .map(|v| v.iter().filter(|(n, _, _)| n == name).map(|(_, _, c)| c).sum())
            .unwrap_or(0)
    }

    /// The sum of counts of `name` with dimension value `value`.
    pub fn total_for(&self, name: &str, value: &str) -> u64 {
        self.0
            .lock()
            .map(|v| {
                v.iter()
                    .filter(|(n, d, _)| n == name && d.as_ref().is_some_and(|(_, dv)| dv == value))
                    .map(|(_, _, c)| c)
                    .sum()
            })
            .unwrap_or(0)
    }
}

impl Metrics for RecordingMetrics {
    fn count(&self, metric: Metric, dimension: Option<&str>, value: u64) {
        if let Ok(mut v) = self.0.lock() {
            v.push((
                metric.name().to_owned(),
                metric
                    .dimension()
                    .zip(dimension)
                    .map(|(k, d)| (k.to_owned(), d.to_owned())),
                value,
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_emf_line_declares_the_metric_it_carries() {
        let line = EmfMetrics::new("CouponGrab", "grab").line("GrabOutcome", Some(("Outcome", "SOLD_OUT")), 1, 7);
        assert_eq!(line["GrabOutcome"], 1);
        assert_eq!(line["Outcome"], "SOLD_OUT");
        let decl = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(decl["Namespace"], "CouponGrab");
        assert_eq!(decl["Dimensions"][0], json!(["Service", "Outcome"]));
        assert_eq!(decl["Metrics"][0]["Name"], "GrabOutcome");
        assert_eq!(line["_aws"]["Timestamp"], 7);
    }

    #[test]
    fn every_metric_is_listed_once_under_its_own_name() {
        let names: std::collections::HashSet<&str> = Metric::ALL.iter().map(|m| m.name()).collect();
        assert_eq!(names.len(), Metric::ALL.len());
        for m in Metric::ALL {
            assert_eq!(format!("{m:?}"), m.name());
        }
    }

    #[test]
    fn a_dimension_value_is_recorded_under_the_metrics_own_dimension_only() {
        let metrics = RecordingMetrics::default();
        metrics.count(Metric::GrabOutcome, Some("SOLD_OUT"), 2);
        metrics.count(Metric::DlqDepth, Some("ignored"), 3);
        assert_eq!(metrics.total_for("GrabOutcome", "SOLD_OUT"), 2);
        assert_eq!(metrics.total_for("DlqDepth", "ignored"), 0);
        assert_eq!(metrics.total("DlqDepth"), 3);
    }
}
