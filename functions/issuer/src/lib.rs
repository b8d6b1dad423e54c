//! The issuer function: an SQS batch of grants in, a partial batch response
//! out.
//!
//! Messages of a batch are issued concurrently. Each one that fails is named
//! in `batchItemFailures`, so SQS re-delivers exactly those and never the
//! ones that succeeded; a poison message keeps failing until
//! `maxReceiveCount` moves it to the dead-letter queue. A record without a
//! message id fails the whole batch: the response could not name it, and
//! acknowledging it by omission would lose it.

#![warn(missing_docs)]

use std::sync::Arc;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use coupon_shared::clock::Clock;
use coupon_shared::issuance::{IssueFailure, IssuerService};
use futures::stream::{self, StreamExt};
use lambda_runtime::{Error, LambdaEvent};
use tracing::{error, warn};

/// Everything the handler needs, built once per Lambda instance.
pub struct Issuer {
    /// The use case.
    pub service: IssuerService,
    /// Time of issue.
    pub clock: Arc<dyn Clock>,
    /// Messages issued at once.
    pub concurrency: usize,
}

/// Issues one batch.
pub async fn handle(issuer: &Issuer, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
    let records = event.payload.records;
    if let Some(i) = records
        .iter()
        .position(|r| r.message_id.as_deref().is_none_or(str::is_empty))
    {
        error!(record = i, "SQS record without a message id; failing the whole batch");
        return Err(format!("record {i} has no message id").into());
    }
    let now = issuer.clock.now_ms();
    let failed: Vec<String> = stream::iter(records)
        .map(|record| async move {
            let id = record.message_id.unwrap_or_default();
            let body = record.body.unwrap_or_default();
            match issuer.service.issue_message(&body, now).await {
                Ok(_) => None,
                Err(e @ IssueFailure::Poison(_)) => {
                    error!(message = %id, error = %e, "poison message; it will reach the dead-letter queue");
                    Some(id)
                }
                Err(e) => {
                    warn!(message = %id, error = %e, source = ?std::error::Error::source(&e), "issue failed; SQS re-delivers");
                    Some(id)
                }
            }
        })
        .buffer_unordered(issuer.concurrency.max(1))
        .filter_map(futures::future::ready)
        .collect()
        .await;
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = failed
        .into_iter()
        .map(|id| {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            failure
        })
        .collect();
    Ok(response)
}
