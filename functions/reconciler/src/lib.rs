//! The reconciler function: runs on a schedule (EventBridge Scheduler), does
//! one reconciliation pass (`coupon_domain::reconcile`) and returns its
//! report as JSON, with the ElastiCache replication group's status when one
//! is configured. It also consumes the repair queue: a grab that finds a
//! coupon's Redis state gone asks there, and the named coupons get a pass
//! at once instead of at the next scheduled run.
//!
//! Each scheduled invocation also sends the reminders that are due
//! (`CouponSaleStarting`, `coupon_domain::remind`) when `EVENT_BUS_NAME`
//! is set ([`remind`]), beside the pass rather than after it, so neither a
//! long pass nor a failed one holds a reminder back past its opening.
//!
//! Safe to run twice at once and to die half way; see the module docs of
//! `coupon_domain::reconcile`. [`wire`] builds it over real clients, for
//! `main.rs` and the integration tests.

#![warn(missing_docs)]

use std::sync::Arc;

use coupon_adapters::assemble::reconcile_ports;
use coupon_adapters::dynamodb::{self, DynamoFacts, DynamoLiveCoupons, DynamoReminders, Tables};
use coupon_adapters::elasticache::{self, Client};
use coupon_adapters::eventbridge::{self, EventBridgeBus};
use coupon_adapters::redis::Redis;
use coupon_adapters::sqs::{self, parse_repair_message, SqsRedrive};
use coupon_adapters::{aws, secrets};
use coupon_domain::center::ports::LiveCoupons;
use coupon_domain::clock::{Clock, SystemClock};
use coupon_domain::ids::CouponId;
use coupon_domain::metrics::{EmfMetrics, Metrics};
use coupon_domain::reconcile::ports::DurableFacts;
use coupon_domain::reconcile::{ReconcilePorts, ReconcileSettings, Reconciler};
use coupon_domain::remind::ReminderSender;
use lambda_runtime::{Error, LambdaEvent};
use serde_json::{json, Value};
use tracing::warn;

pub mod config;

pub use config::{Config, RedisSource};

/// Everything the handler needs, built once per Lambda instance.
pub struct App {
    /// The reconciliation pass, over the instance's ports.
    pub reconciler: Reconciler,
    /// The replication group to report on, if configured.
    pub elasticache: Option<(Client, String)>,
    /// How long a repair invocation keeps passing over a coupon that still
    /// waits for its grants on their way (`RECONCILE_REPAIR_FOLLOW_MS`).
    pub repair_follow: std::time::Duration,
    /// The reminders' sender and the live coupons it looks at, when a bus
    /// is configured.
    pub reminders: Option<Reminding>,
}

/// What a pass needs to send the reminders that are due.
pub struct Reminding {
    /// Sends them.
    pub sender: ReminderSender,
    /// The coupons whose window is not over (the `live` index).
    pub live: Arc<dyn LiveCoupons>,
    /// The clock the pass reads.
    pub clock: Arc<dyn Clock>,
}

/// Between two looks at a waiting coupon's episode (one DynamoDB read);
/// a full pass runs only once one can move the repair on.
const REPAIR_STEP: std::time::Duration = std::time::Duration::from_millis(250);

/// One invocation: a batch from the repair queue (an SQS event) repairs
/// the coupons it names; anything else is the schedule (its payload is not
/// read) and runs the whole pass.
pub async fn handle(app: &App, event: LambdaEvent<Value>) -> Result<Value, Error> {
    if let Some(coupons) = repair_requests(&event.payload) {
        // The whole batch succeeds or fails together. A pass that fails
        // (Redis or DynamoDB failing during it: the first command on a
        // connection a server restart broke fails, and the connection
        // comes back by itself) is tried again every step until
        // `repair_follow` is spent, and only then handed back to SQS,
        // which delivers it again only after the queue's visibility
        // timeout: the restart that broke the connection is the fault
        // being repaired, and its users wait for this pass. Every step of
        // a pass is conditional, so running it again is safe. A coupon
        // whose repair waits out the send window is followed while the
        // wait lasts: its episode is looked at every step (one read), and
        // a pass runs as soon as the window is over, so the sale reopens
        // within a step of it, not at the next request; past
        // `repair_follow`, the grabs that keep finding it gone ask again
        // (or the schedule heals it if nobody presses).
        let deadline = tokio::time::Instant::now() + app.repair_follow;
        let mut report = loop {
            match app.reconciler.repair(&coupons).await {
                Ok(report) => break report,
                Err(e) if tokio::time::Instant::now() + REPAIR_STEP <= deadline => {
                    warn!(error = %e, source = ?std::error::Error::source(&e), "repair pass failed; tried again");
                    tokio::time::sleep(REPAIR_STEP).await;
                }
                Err(e) => return Err(e.into()),
            }
        };
        loop {
            let waiting: Vec<CouponId> = report
                .coupons
                .iter()
                .filter(|c| c.shards_waiting > 0)
                .filter_map(|c| CouponId::parse(&c.coupon_id).ok())
                .collect();
            if waiting.is_empty() || tokio::time::Instant::now() + REPAIR_STEP > deadline {
                break;
            }
            tokio::time::sleep(REPAIR_STEP).await;
            // The requests' first pass is done: a failure while following
            // (Redis or DynamoDB failing meanwhile) is tried again at the
            // next step, until the follow is over; then the grabs' next
            // requests, or the schedule, carry the repair on.
            let mut due = Vec::new();
            for coupon in waiting {
                match app.reconciler.repair_due(&coupon).await {
                    Ok(true) => due.push(coupon),
                    Ok(false) => {}
                    Err(e) => {
                        warn!(coupon = %coupon, error = %e, "repair not looked at this step");
                    }
                }
            }
            if due.is_empty() {
                continue;
            }
            let again = match app.reconciler.repair(&due).await {
                Ok(again) => again,
                Err(e) => {
                    warn!(error = %e, source = ?std::error::Error::source(&e), "repair pass failed; tried again");
                    continue;
                }
            };
            for figures in again.coupons {
                match report.coupons.iter_mut().find(|c| c.coupon_id == figures.coupon_id) {
                    Some(slot) => *slot = figures,
                    None => report.coupons.push(figures),
                }
            }
        }
        return Ok(serde_json::to_value(&report)?);
    }
    // The reminders go out beside the pass, not after it: a pass over many
    // coupons (or one held up by a store) takes seconds to minutes, and a
    // reminder computed after it could find its wave already open and be
    // skipped; nor may a pass that fails keep them back.
    let (report, reminders) = tokio::join!(app.reconciler.run(), remind(app));
    let mut out = serde_json::to_value(&report?)?;
    if let Some(reminders) = reminders {
        out["reminders"] = reminders;
    }
    if let Some((client, group)) = &app.elasticache {
        out["redis"] = match elasticache::describe(client, group).await {
            Ok(g) => json!({"replicationGroup": group, "status": g.status, "clusterMode": g.cluster_mode}),
            Err(e) => {
                warn!(group = %group, error = %e, "replication group status unknown");
                json!({"replicationGroup": group, "status": "unknown", "error": e.to_string()})
            }
        };
    }
    Ok(out)
}

/// The schedule's reminder step: every reminder due among the live coupons
/// goes out (its report), or `None` without a bus. A failed read of the
/// live coupons is reported and left to the next pass, a minute later
/// (the lead spans five of them).
pub async fn remind(app: &App) -> Option<Value> {
    let reminding = app.reminders.as_ref()?;
    Some(match reminding.live.live(reminding.clock.now_ms()).await {
        Ok(defs) => json!(reminding.sender.send_due(&defs).await),
        Err(e) => {
            warn!(error = %e, "live coupons not read; reminders wait for the next pass");
            json!({"error": e.to_string()})
        }
    })
}

/// The coupons a repair-queue batch names, or `None` if the event is not an
/// SQS batch. A body that names no coupon is dropped with a warning: no
/// retry could make it useful.
pub fn repair_requests(event: &Value) -> Option<Vec<CouponId>> {
    let records = event.get("Records")?.as_array()?;
    if records.is_empty() || records.iter().any(|r| r.get("eventSource") != Some(&json!("aws:sqs"))) {
        return None;
    }
    Some(
        records
            .iter()
            .filter_map(|r| {
                let body = r.get("body").and_then(Value::as_str).unwrap_or_default();
                let coupon = parse_repair_message(body);
                if coupon.is_none() {
                    warn!(body = %body.chars().take(200).collect::<String>(), "not a repair request; dropped");
                }
                coupon
            })
            .collect(),
    )
}

/// What a reconciler instance is built from, made once at cold start.
pub struct Clients {
    /// The one Redis connection of the instance, shared by every adapter.
    pub redis: Redis,
    /// The DynamoDB client, built once per instance.
    pub dynamodb: dynamodb::Client,
    /// SQS (re-drive, DLQ depth).
    pub sqs: sqs::Client,
    /// ElastiCache, to report the replication group's status.
    pub elasticache: Client,
    /// EventBridge, for the reminders.
    pub events: eventbridge::Client,
    /// The clock every decision reads (a test sets it by hand).
    pub clock: Arc<dyn Clock>,
    /// Where the function's metrics go (EMF lines in Lambda, a recorder in
    /// tests).
    pub metrics: Arc<dyn Metrics>,
}

impl Clients {
    /// The real clients; Redis is found through ElastiCache when the
    /// configuration names a replication group instead of a URL.
    pub async fn connect(config: &Config) -> Result<Self, Error> {
        let sdk = aws::load(config.aws).await;
        let cache = Client::new(&sdk);
        let redis_settings = match &config.redis {
            RedisSource::Url(settings) => settings.clone(),
            RedisSource::ReplicationGroup { group, settings } => {
                let found = elasticache::describe(&cache, group).await?;
                let url = found
                    .url
                    .ok_or_else(|| format!("replication group {group} has no endpoint yet ({})", found.status))?;
                let mut settings = settings.clone();
                settings.url = url;
                settings.cluster = found.cluster_mode;
                settings
            }
        };
        Ok(Self {
            redis: secrets::connect_redis(&redis_settings, &sdk).await?,
            dynamodb: dynamodb::Client::new(&sdk),
            sqs: sqs::Client::new(&sdk),
            elasticache: cache,
            events: eventbridge::Client::new(&sdk),
            clock: Arc::new(SystemClock),
            metrics: Arc::new(EmfMetrics::new(config.metrics_namespace.clone(), "reconciler")),
        })
    }
}

/// The reconciler's ports over real clients, reading durable facts through
/// `facts` (the integration tests narrow it to their own coupons).
pub fn ports(config: &Config, clients: &Clients, facts: Arc<dyn DurableFacts>) -> ReconcilePorts {
    reconcile_ports(
        &clients.redis,
        &tables(config, clients),
        SqsRedrive::new(clients.sqs.clone(), &config.queue_url, config.dlq_url.clone()),
        facts,
        clients.clock.clone(),
        clients.metrics.clone(),
    )
}

/// The tables of `config` over the clients' DynamoDB.
pub fn tables(config: &Config, clients: &Clients) -> Tables {
    Tables::new(clients.dynamodb.clone(), &config.tables)
}

/// The settings of a pass, from the configuration.
pub fn settings(config: &Config) -> ReconcileSettings {
    ReconcileSettings {
        grace_ms: config.grace_ms,
        retention_ms: config.retention_hours * 3_600_000,
        backlog_ms: config.backlog_ms,
        send_window_ms: config.send_window_ms,
    }
}

/// The reconciler function over `clients`: the one wiring `main.rs` and
/// the integration tests share.
pub fn wire(config: &Config, clients: Clients) -> App {
    let facts = Arc::new(DynamoFacts::new(tables(config, &clients)));
    let reconciler = Reconciler::new(ports(config, &clients, facts), settings(config));
    let reminders = config.event_bus.as_ref().map(|bus| Reminding {
        sender: ReminderSender::new(
            Arc::new(DynamoReminders::new(tables(config, &clients))),
            Arc::new(EventBridgeBus::new(clients.events.clone(), bus.clone())),
            clients.clock.clone(),
            config.reminder_lead_ms,
        ),
        live: Arc::new(DynamoLiveCoupons::new(
            clients.dynamodb.clone(),
            config.tables.coupons.clone(),
        )),
        clock: clients.clock.clone(),
    });
    App {
        reconciler,
        elasticache: config.replication_group.clone().map(|g| (clients.elasticache, g)),
        repair_follow: std::time::Duration::from_millis(config.repair_follow_ms),
        reminders,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_sqs_batch_is_a_repair_request_and_a_schedule_event_is_not() {
        let batch = json!({"Records": [
            {"eventSource": "aws:sqs", "messageId": "1", "body": "{\"couponId\":\"spring-20\"}"},
            {"eventSource": "aws:sqs", "messageId": "2", "body": "garbage"},
        ]});
        let coupons = repair_requests(&batch).expect("a repair batch");
        assert_eq!(coupons, vec![CouponId::parse("spring-20").unwrap()]);
        assert_eq!(repair_requests(&json!({})), None);
        assert_eq!(repair_requests(&json!({"source": "aws.scheduler"})), None);
        assert_eq!(repair_requests(&json!({"Records": []})), None);
    }
}
