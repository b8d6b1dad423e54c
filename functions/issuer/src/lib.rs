//! The issuer function: an SQS batch of grants in, a partial batch response
//! out.
//!
//! The grant queue is FIFO (one message group per lane of a coupon, see
//! `coupon_domain::barrier::LANES`). Grants of a batch are issued concurrently.
//! Each one that fails is named
//! in `batchItemFailures`, so SQS re-delivers exactly those and never the
//! ones that succeeded; a poison message keeps failing until
//! `maxReceiveCount` moves it to the dead-letter queue (holding the rest
//! of its lane, its message group, meanwhile). A record without a
//! message id fails the whole batch: the response could not name it, and
//! acknowledging it by omission would lose it.
//!
//! After the batch, each stock shard that minted one of its grants gets its
//! durable high-water mark raised (one write per shard, not per grant); a
//! grant whose shard's mark could not be written is reported failed, so no
//! message is acknowledged before the mark that lets the reconciler see its
//! shard roll back.
//!
//! [`wire`] builds the function over real clients (or, in tests, over a
//! ledger that injects faults), for `main.rs` and the integration tests.

#![warn(missing_docs)]

use std::sync::Arc;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent, SqsMessage};
use coupon_adapters::aws;
use coupon_adapters::dynamodb::{Client, DynamoCouponRepository, DynamoIssueLedger, Tables};
use coupon_domain::clock::{Clock, SystemClock};
use coupon_domain::grant::Grant;
use coupon_domain::issuance::{IssueFailure, IssueLedger, IssuerService};
use coupon_domain::metrics::{EmfMetrics, Metrics};
use futures::stream::{self, StreamExt};
use lambda_runtime::{Error, LambdaEvent};
use tracing::{error, warn};

pub mod config;

pub use config::Config;

/// Everything the handler needs, built once per Lambda instance.
pub struct Issuer {
    /// The use case the handler drives, over the instance's ports.
    pub service: IssuerService,
    /// Time of issue.
    pub clock: Arc<dyn Clock>,
    /// Messages issued at once.
    pub concurrency: usize,
}

/// A batch's messages by message id, in delivery order; `None` for one
/// that is not a grant (poison).
type Batch = Vec<(String, Option<Grant>)>;

/// Issues one batch: its grants, then the marks of the shards that minted
/// them; names every message that must come back.
pub async fn handle(issuer: &Issuer, event: LambdaEvent<SqsEvent>) -> Result<SqsBatchResponse, Error> {
    let messages = parse_batch(event.payload.records)?;
    let now = issuer.clock.now_ms();
    // Poison fails; a grant as step 1 says.
    let mut failed = vec![true; messages.len()];
    // 1. Grants, concurrently (their order does not matter: each is
    //    idempotent under its own key).
    let issued = issue_grants(issuer, &messages, now).await;
    for &(i, ok) in &issued {
        failed[i] = !ok;
    }
    // 2. The marks of the shards that minted them.
    for i in unmarked(issuer, &messages, &issued).await {
        failed[i] = true;
    }
    Ok(failures(messages, &failed))
}

/// The records' messages, parsed; poison is logged and kept as `None` (it
/// is reported failed, so its receive count moves it to the dead-letter
/// queue). A record without a message id fails the whole batch.
fn parse_batch(records: Vec<SqsMessage>) -> Result<Batch, Error> {
    if let Some(i) = records
        .iter()
        .position(|r| r.message_id.as_deref().is_none_or(str::is_empty))
    {
        error!(record = i, "SQS record without a message id; failing the whole batch");
        return Err(format!("record {i} has no message id").into());
    }
    Ok(records
        .into_iter()
        .map(|record| {
            let id = record.message_id.unwrap_or_default();
            match Grant::from_message(record.body.as_deref().unwrap_or_default()) {
                Ok(message) => (id, Some(message)),
                Err(e) => {
                    error!(message = %id, error = %e, "poison message; it will reach the dead-letter queue");
                    (id, None)
                }
            }
        })
        .collect())
}

/// Issues the batch's grants, `issuer.concurrency` at a time: each grant's
/// index in the batch, and whether it is issued (or was already).
async fn issue_grants(issuer: &Issuer, messages: &Batch, now: i64) -> Vec<(usize, bool)> {
    stream::iter(messages.iter().enumerate())
        .filter_map(|(i, (id, message))| async move {
            let Some(grant) = message else {
                return None;
            };
            Some((i, id, grant))
        })
        .map(|(i, id, grant)| async move {
            match issuer.service.issue(grant, now).await {
                Ok(_) => (i, true),
                Err(e @ IssueFailure::Poison(_)) => {
                    error!(message = %id, error = %e, "poison message; it will reach the dead-letter queue");
                    (i, false)
                }
                Err(e) => {
                    warn!(message = %id, error = %e, source = ?std::error::Error::source(&e), "issue failed; SQS re-delivers");
                    (i, false)
                }
            }
        })
        .buffer_unordered(issuer.concurrency.max(1))
        .collect()
        .await
}

/// Raises the high-water mark of every shard that minted an issued grant;
/// the indexes of the grants whose shard's mark could not be written (they
/// come back, so none is acknowledged before its mark).
async fn unmarked(issuer: &Issuer, messages: &Batch, issued: &[(usize, bool)]) -> Vec<usize> {
    let seen: Vec<Grant> = issued
        .iter()
        .filter(|&&(_, ok)| ok)
        .filter_map(|&(i, _)| messages[i].1.clone())
        .collect();
    let shards = issuer.service.raise_high_water(&seen).await;
    messages
        .iter()
        .enumerate()
        .filter_map(|(i, (_, message))| {
            let g = message.as_ref()?;
            shards
                .iter()
                .any(|(c, s)| c == g.grant_id.coupon() && *s == g.grant_id.shard())
                .then_some(i)
        })
        .collect()
}

/// The partial batch response naming every failed message.
fn failures(messages: Batch, failed: &[bool]) -> SqsBatchResponse {
    let mut response = SqsBatchResponse::default();
    response.batch_item_failures = messages
        .into_iter()
        .zip(failed)
        .filter(|(_, &f)| f)
        .map(|((id, _), _)| {
            let mut failure = BatchItemFailure::default();
            failure.item_identifier = id;
            failure
        })
        .collect();
    response
}

/// What an issuer instance is built from, made once at cold start.
pub struct Clients {
    /// The DynamoDB client, built once per instance.
    pub dynamodb: Client,
    /// The clock every decision reads (a test sets it by hand).
    pub clock: Arc<dyn Clock>,
    /// Where the function's metrics go (EMF lines in Lambda, a recorder in
    /// tests).
    pub metrics: Arc<dyn Metrics>,
}

impl Clients {
    /// The real clients.
    pub async fn connect(config: &Config) -> Self {
        Self {
            dynamodb: Client::new(&aws::load(config.dynamodb).await),
            clock: Arc::new(SystemClock),
            metrics: Arc::new(EmfMetrics::new(config.metrics_namespace.clone(), "issuer")),
        }
    }

    /// The tables of `config` over this client.
    pub fn tables(&self, config: &Config) -> Tables {
        Tables::new(self.dynamodb.clone(), &config.tables)
    }
}

/// The issuer over `clients`, writing through the DynamoDB ledger.
pub fn wire(config: &Config, clients: Clients) -> Issuer {
    let ledger = Arc::new(DynamoIssueLedger::new(clients.tables(config)));
    wire_with(config, clients, ledger)
}

/// The issuer over `clients`, writing through `ledger` (tests wrap the real
/// ledger to inject faults).
pub fn wire_with(config: &Config, clients: Clients, ledger: Arc<dyn IssueLedger>) -> Issuer {
    Issuer {
        service: IssuerService::new(
            ledger,
            Arc::new(DynamoCouponRepository::new(clients.tables(config))),
            clients.metrics,
        ),
        clock: clients.clock,
        concurrency: config.concurrency,
    }
}
