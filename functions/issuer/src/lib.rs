//! The issuer function: an SQS batch of grants in, a partial batch response
//! out.
//!
//! The grant queue is FIFO (one message group per lane of a coupon, see
//! `coupon_domain::barrier`), and a batch may hold the reconciler's
//! barriers beside grants. Grants of a batch are issued concurrently. Each one that fails is named
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
//! shard roll back. Barriers come last, in delivery order: one is
//! acknowledged (in DynamoDB) only if every earlier message of its lane in
//! the batch was issued and marked; otherwise it is reported failed with
//! them, and comes back behind them.
//!
//! [`wire`] builds the function over real clients (or, in tests, over a
//! ledger that injects faults), for `main.rs` and the integration tests.

#![warn(missing_docs)]

use std::sync::Arc;

use aws_lambda_events::event::sqs::{BatchItemFailure, SqsBatchResponse, SqsEvent};
use coupon_adapters::aws;
use coupon_adapters::dynamodb::{Client, DynamoCouponRepository, DynamoIssueLedger, Tables};
use coupon_domain::barrier::QueueMessage;
use coupon_domain::clock::{Clock, SystemClock};
use coupon_domain::grant::Grant;
use coupon_domain::grant::GrantRef;
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
    let messages: Vec<(String, Option<QueueMessage>)> = records
        .into_iter()
        .map(|record| {
            let id = record.message_id.unwrap_or_default();
            match QueueMessage::parse(record.body.as_deref().unwrap_or_default()) {
                Ok(message) => (id, Some(message)),
                Err(e) => {
                    error!(message = %id, error = %e, "poison message; it will reach the dead-letter queue");
                    (id, None)
                }
            }
        })
        .collect();
    // 1. Grants, concurrently (their order does not matter: each is
    //    idempotent under its own key).
    let issued: Vec<(usize, bool)> = stream::iter(messages.iter().enumerate())
        .filter_map(|(i, (id, message))| async move {
            let Some(QueueMessage::Grant(grant)) = message else {
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
        .await;
    let mut failed = vec![false; messages.len()];
    for (i, (_, message)) in messages.iter().enumerate() {
        failed[i] = !matches!(message, Some(QueueMessage::Barrier(_)));
    }
    for &(i, ok) in &issued {
        failed[i] = !ok;
    }
    // 2. The marks of the shards that minted them.
    let seen: Vec<Grant> = issued
        .iter()
        .filter(|&&(_, ok)| ok)
        .filter_map(|&(i, _)| match &messages[i].1 {
            Some(QueueMessage::Grant(g)) => Some(g.clone()),
            _ => None,
        })
        .collect();
    let unmarked = issuer.service.raise_high_water(&seen).await;
    for (i, (_, message)) in messages.iter().enumerate() {
        if let Some(QueueMessage::Grant(g)) = message {
            if GrantRef::parse(&g.grant_id)
                .is_some_and(|m| unmarked.iter().any(|(c, s)| *c == m.coupon && *s == m.shard))
            {
                failed[i] = true;
            }
        }
    }
    // 3. Barriers, last and in order: each only behind grants of its lane
    //    that are issued and marked.
    let batch: Vec<(Option<&QueueMessage>, bool)> = messages
        .iter()
        .zip(&failed)
        .map(|((_, m), &f)| (m.as_ref(), f))
        .collect();
    for i in issuer.service.acknowledge_barriers(&batch).await {
        failed[i] = true;
    }
    let failed: Vec<String> = messages
        .into_iter()
        .zip(failed)
        .filter(|(_, f)| *f)
        .map(|((id, _), _)| id)
        .collect();
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
