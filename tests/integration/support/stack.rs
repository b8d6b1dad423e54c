//! Clients for the local services, and names no other test uses.

use std::sync::atomic::{AtomicU64, Ordering};

use aws_sdk_sqs::config::Credentials;
use coupon_adapters::config::TableNames;
use coupon_domain::grant::Grant;

/// The instant tests start at: 2049-03-22T04:26:40Z. The tests' clock runs
/// ahead of the Redis server's, never behind it: a press whose clock lags
/// the server's by more than two seconds is refused a borrow (lua/grab.lua),
/// so a test that means to lag sets its clock from the server's own.
pub const T0: i64 = 2_500_000_000_000;
/// One hour in ms.
pub const HOUR: i64 = 3_600_000;

/// A variable, or `default` when unset or empty.
pub fn env_or(var: &str, default: &str) -> String {
    std::env::var(var)
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| default.to_owned())
}

/// A name no other test (in this run or an earlier one) uses.
pub fn unique(label: &str) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "{label}-{:x}-{:x}-{}",
        std::process::id(),
        nanos % 0xffff_ffff_ffff,
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// Clients for the local services.
#[derive(Clone)]
pub struct Stack {
    /// The SDK configuration the clients share (for clients a test needs once).
    pub sdk: aws_config::SdkConfig,
    pub sqs: aws_sdk_sqs::Client,
    pub ddb: aws_sdk_dynamodb::Client,
    pub elasticache: coupon_adapters::elasticache::Client,
    pub redis_url: String,
    pub redis_cluster_url: String,
    pub tables: TableNames,
}

impl Stack {
    pub async fn connect() -> Self {
        // The endpoints as infra/local/env.sh sets them, resolved by the SDK as
        // the functions resolve them: a service's own
        // AWS_ENDPOINT_URL_<SERVICE> (LOCAL_AWS=localstack: SQS and
        // EventBridge) before AWS_ENDPOINT_URL. Only with neither set does
        // the test name the default local endpoint itself.
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest());
        if std::env::var_os("AWS_ENDPOINT_URL").is_none() {
            loader = loader.endpoint_url("http://127.0.0.1:4566");
        }
        let sdk = loader
            .region(aws_config::Region::new(env_or("AWS_REGION", "us-east-1")))
            .credentials_provider(Credentials::new("test", "test", None, None, "tests"))
            .timeout_config(
                aws_config::timeout::TimeoutConfig::builder()
                    .operation_timeout(std::time::Duration::from_secs(10))
                    .build(),
            )
            .load()
            .await;
        Self {
            sqs: aws_sdk_sqs::Client::new(&sdk),
            ddb: aws_sdk_dynamodb::Client::new(&sdk),
            elasticache: coupon_adapters::elasticache::Client::new(&sdk),
            redis_url: env_or("REDIS_URL", "redis://127.0.0.1:6379"),
            redis_cluster_url: env_or("REDIS_CLUSTER_URL", "redis://127.0.0.1:7001"),
            tables: TableNames {
                coupons: env_or("COUPONS_TABLE", "coupons"),
                user_coupons: env_or("USER_COUPONS_TABLE", "user-coupons"),
                claims: env_or("CLAIMS_TABLE", "claims"),
            },
            sdk,
        }
    }

    /// A grant queue of the test's own (FIFO, as the template declares it:
    /// one message group per lane of a coupon).
    pub async fn new_queue(&self) -> String {
        self.sqs
            .create_queue()
            .queue_name(format!("{}.fifo", unique("grants")))
            .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
            .attributes(
                aws_sdk_sqs::types::QueueAttributeName::DeduplicationScope,
                "messageGroup",
            )
            .attributes(
                aws_sdk_sqs::types::QueueAttributeName::FifoThroughputLimit,
                "perMessageGroupId",
            )
            .send()
            .await
            .expect("create queue")
            .queue_url
            .expect("queue url")
    }

    /// A standard queue of the test's own (a bus rule's tap).
    pub async fn new_standard_queue(&self) -> String {
        self.sqs
            .create_queue()
            .queue_name(unique("tap"))
            .send()
            .await
            .expect("create queue")
            .queue_url
            .expect("queue url")
    }

    /// A repair queue of the test's own (FIFO, as the template declares it).
    pub async fn new_repair_queue(&self) -> String {
        self.sqs
            .create_queue()
            .queue_name(format!("{}.fifo", unique("repairs")))
            .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
            .send()
            .await
            .expect("create repair queue")
            .queue_url
            .expect("queue url")
    }

    /// Every grant on `queue_url`, received and deleted.
    pub async fn drain(&self, queue_url: &str) -> Vec<Grant> {
        self.drain_bodies(queue_url)
            .await
            .iter()
            .map(|body| Grant::from_message(body).expect("a grant"))
            .collect()
    }

    /// Every message body on `queue_url`, received and deleted (two empty
    /// polls in a row end it).
    pub async fn drain_bodies(&self, queue_url: &str) -> Vec<String> {
        let mut bodies = Vec::new();
        let mut empty_polls = 0;
        while empty_polls < 2 {
            let out = self
                .sqs
                .receive_message()
                .queue_url(queue_url)
                .max_number_of_messages(10)
                .wait_time_seconds(0)
                .send()
                .await
                .expect("receive");
            let messages = out.messages.unwrap_or_default();
            if messages.is_empty() {
                empty_polls += 1;
                continue;
            }
            empty_polls = 0;
            for m in messages {
                bodies.push(m.body().unwrap_or("").to_owned());
                self.sqs
                    .delete_message()
                    .queue_url(queue_url)
                    .receipt_handle(m.receipt_handle().unwrap_or(""))
                    .send()
                    .await
                    .expect("delete");
            }
        }
        bodies
    }
}
