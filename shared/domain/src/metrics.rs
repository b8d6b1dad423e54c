//! Metrics as CloudWatch embedded-metric-format (EMF) log lines.
//!
//! In Lambda, a JSON line on stdout with an `_aws` block becomes a CloudWatch
//! metric with no API call and no latency on the request path. The service
//! code talks to the [`Metrics`] trait; tests record instead of printing.

use std::io::Write;
use std::sync::Mutex;

use serde_json::{json, Map, Value};

/// Counts things that operators alarm on.
pub trait Metrics: Send + Sync {
    /// Adds `value` to the counter `name`, optionally split by one dimension.
    fn count(&self, name: &'static str, dimension: Option<(&'static str, &str)>, value: u64);
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
    fn count(&self, name: &'static str, dimension: Option<(&'static str, &str)>, value: u64) {
        let now = crate::clock::Clock::now_ms(&crate::clock::SystemClock);
        let line = self.line(name, dimension, value, now);
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
    fn count(&self, name: &'static str, dimension: Option<(&'static str, &str)>, value: u64) {
        if let Ok(mut v) = self.0.lock() {
            v.push((
                name.to_owned(),
                dimension.map(|(k, d)| (k.to_owned(), d.to_owned())),
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
        let line = EmfMetrics::new("CouponGrab", "grab").line("GrabOutcome", Some(("Code", "SOLD_OUT")), 1, 7);
        assert_eq!(line["GrabOutcome"], 1);
        assert_eq!(line["Code"], "SOLD_OUT");
        let decl = &line["_aws"]["CloudWatchMetrics"][0];
        assert_eq!(decl["Namespace"], "CouponGrab");
        assert_eq!(decl["Dimensions"][0], json!(["Service", "Code"]));
        assert_eq!(decl["Metrics"][0]["Name"], "GrabOutcome");
        assert_eq!(line["_aws"]["Timestamp"], 7);
    }
}
