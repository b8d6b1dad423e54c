//! The notifier function: a batch of the user-coupons table's change stream
//! in, one event per coupon transition out to the EventBridge bus, and a
//! partial batch response naming what must come again.
//!
//! The stream is the outbox (see `coupon_domain::notify`): no writer
//! publishes, so nothing is told that did not happen. The event source
//! mapping (template.yaml) reports batch item failures, bisects a failing
//! batch, retries a bounded number of times and then sends the record's
//! description to an SQS on-failure destination with an alarm on it:
//! nothing is dropped in silence. A record without a sequence number fails
//! the whole batch (the response could not name it, and acknowledging it
//! by omission would lose it).
//!
//! [`wire`] builds the function over real clients (or, in tests, over any
//! [`EventBus`]), for `main.rs` and the integration tests.

#![warn(missing_docs)]

use std::sync::Arc;

use aws_lambda_events::event::streams::{DynamoDbBatchItemFailure, DynamoDbEventResponse};
use coupon_adapters::aws;
use coupon_adapters::dynamodb::stream_record;
use coupon_adapters::eventbridge::EventBridgeBus;
use coupon_domain::metrics::{EmfMetrics, Metrics};
use coupon_domain::notify::{EventBus, NotifierService};
use lambda_runtime::{Error, LambdaEvent};
use serde_json::Value;
use tracing::error;

pub mod config;

pub use config::Config;

/// Everything the handler needs, built once per Lambda instance.
pub struct Notifier {
    /// The use case the handler drives, over the instance's ports.
    pub service: NotifierService,
}

/// Publishes one batch of stream records.
pub async fn handle(notifier: &Notifier, event: LambdaEvent<Value>) -> Result<DynamoDbEventResponse, Error> {
    let records: Vec<_> = match event.payload.get("Records") {
        Some(Value::Array(records)) => records.iter().map(stream_record).collect(),
        _ => return Err("a stream event without Records".into()),
    };
    if let Some(i) = records.iter().position(|r| r.id.is_empty()) {
        error!(
            record = i,
            "stream record without a sequence number; failing the whole batch"
        );
        return Err(format!("record {i} has no sequence number").into());
    }
    let failed = notifier.service.handle(records).await;
    let mut response = DynamoDbEventResponse::default();
    response.batch_item_failures = failed
        .into_iter()
        .map(|id| {
            let mut failure = DynamoDbBatchItemFailure::default();
            failure.item_identifier = Some(id);
            failure
        })
        .collect();
    Ok(response)
}

/// What a notifier instance is built from, made once at cold start.
pub struct Clients {
    /// Where events go.
    pub bus: Arc<dyn EventBus>,
    /// Where the function's metrics go (EMF lines in Lambda, a recorder in
    /// tests).
    pub metrics: Arc<dyn Metrics>,
}

impl Clients {
    /// The real clients.
    pub async fn connect(config: &Config) -> Self {
        let sdk = aws::load(config.events).await;
        Self {
            bus: Arc::new(EventBridgeBus::new(
                coupon_adapters::eventbridge::Client::new(&sdk),
                config.bus.clone(),
            )),
            metrics: Arc::new(EmfMetrics::new(config.metrics_namespace.clone(), "notifier")),
        }
    }
}

/// The notifier over `clients`.
pub fn wire(clients: Clients) -> Notifier {
    Notifier {
        service: NotifierService::new(clients.bus, clients.metrics),
    }
}

#[cfg(test)]
mod tests;
