//! Test harness: real redis-server and local AWS endpoint, every test
//! isolated by its own Redis key prefix, SQS queue and coupon ids, so tests
//! run in parallel. Requests go through the real handler as API Gateway
//! events built from `tests/fixtures/`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aws_sdk_sqs::config::Credentials;
use coupon_shared::adapters::dynamodb::DynamoCouponRepository;
use coupon_shared::adapters::redis::RedisStore;
use coupon_shared::adapters::sqs::SqsPublisher;
use coupon_shared::clock::ManualClock;
use coupon_shared::config::{RedisSettings, RiskLimits};
use coupon_shared::coupon::{CouponDefinition, CouponStatus};
use coupon_shared::grant::Grant;
use coupon_shared::ids::CouponId;
use coupon_shared::metrics::RecordingMetrics;
use coupon_shared::preheat::{create_coupon, CreateError, Created};
use coupon_shared::service::GrabService;
use grab::{EdgeSettings, GrabApp};
use lambda_http::Body;
use redis::AsyncCommands;
use serde_json::{json, Value};

/// The instant tests start at: 2027-01-15T08:00:00Z.
pub const T0: i64 = 1_800_000_000_000;
pub const HOUR: i64 = 3_600_000;

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
    pub sqs: aws_sdk_sqs::Client,
    pub ddb: aws_sdk_dynamodb::Client,
    pub redis_url: String,
    pub coupons_table: String,
}

impl Stack {
    pub async fn connect() -> Self {
        let endpoint = env_or("AWS_ENDPOINT_URL", "http://127.0.0.1:4566");
        let sdk = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .endpoint_url(endpoint)
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
            redis_url: env_or("REDIS_URL", "redis://127.0.0.1:6379"),
            coupons_table: env_or("COUPONS_TABLE", "coupons"),
        }
    }

    pub async fn new_queue(&self) -> String {
        self.sqs
            .create_queue()
            .queue_name(unique("grants"))
            .send()
            .await
            .expect("create queue")
            .queue_url
            .expect("queue url")
    }

    /// Every grant on `queue_url`, received and deleted.
    pub async fn drain(&self, queue_url: &str) -> Vec<Grant> {
        let mut grants = Vec::new();
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
                grants.push(serde_json::from_str(m.body().unwrap_or("")).expect("grant json"));
                self.sqs
                    .delete_message()
                    .queue_url(queue_url)
                    .receipt_handle(m.receipt_handle().unwrap_or(""))
                    .send()
                    .await
                    .expect("delete");
            }
        }
        grants
    }
}

/// How a harness is set up.
#[derive(Clone)]
pub struct Options {
    pub risk: RiskLimits,
    pub sold_out_memory_ms: u64,
    /// `None`: a fresh queue; `Some(url)`: that URL (e.g. one nobody serves).
    pub queue_url: Option<String>,
    pub trust_identity_headers: bool,
    pub max_body_bytes: usize,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            risk: RiskLimits {
                daily_claims_per_user: 5,
                users_per_ip: 10,
                day_offset_minutes: 0,
            },
            sold_out_memory_ms: 1_000,
            queue_url: None,
            trust_identity_headers: false,
            max_body_bytes: 4_096,
        }
    }
}

/// A grab function wired to the real services, with a hand-moved clock.
pub struct Harness {
    pub app: Arc<GrabApp>,
    pub redis: RedisStore,
    pub clock: ManualClock,
    pub metrics: Arc<RecordingMetrics>,
    pub queue_url: String,
    pub stack: Stack,
}

/// A response, decoded.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub body: Value,
    pub headers: lambda_http::http::HeaderMap,
}

impl Resp {
    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("<no code>")
    }
    pub fn grant_id(&self) -> Option<String> {
        self.body["data"]["grantId"].as_str().map(str::to_owned)
    }
}

impl Harness {
    pub async fn new() -> Self {
        Self::with(Options::default()).await
    }

    pub async fn with(opts: Options) -> Self {
        let stack = Stack::connect().await;
        let queue_url = match opts.queue_url.clone() {
            Some(url) => url,
            None => stack.new_queue().await,
        };
        let settings = RedisSettings {
            url: stack.redis_url.clone(),
            key_prefix: format!("{}:", unique("t")),
            response_timeout_ms: 2_000,
            connect_timeout_ms: 2_000,
        };
        let redis = RedisStore::connect(&settings, 86_400, opts.risk)
            .await
            .expect("redis-server must be running (make stack)");
        let clock = ManualClock::new(T0);
        let metrics = Arc::new(RecordingMetrics::default());
        let service = GrabService::new(
            Arc::new(redis.clone()),
            Arc::new(redis.clone()),
            Arc::new(SqsPublisher::new(stack.sqs.clone(), queue_url.clone())),
            Arc::new(clock.clone()),
            metrics.clone(),
            opts.sold_out_memory_ms,
        );
        let app = Arc::new(GrabApp {
            service,
            edge: EdgeSettings {
                trust_identity_headers: opts.trust_identity_headers,
                user_id_claim: "sub".into(),
                member_level_claim: "member_level".into(),
                max_body_bytes: opts.max_body_bytes,
            },
        });
        Self {
            app,
            redis,
            clock,
            metrics,
            queue_url,
            stack,
        }
    }

    /// A valid definition around [`T0`]; tweak before creating.
    pub fn coupon(&self, stock: u64) -> CouponDefinition {
        CouponDefinition {
            coupon_id: CouponId::parse(&unique("cpn")).unwrap(),
            name: "20 off orders over 199".into(),
            amount: 2_000,
            total_stock: stock,
            per_user_limit: 1,
            min_member_level: 0,
            grab_start_ms: T0 - HOUR,
            grab_end_ms: T0 + HOUR,
            valid_from_ms: T0,
            valid_until_ms: T0 + 7 * 24 * HOUR,
            shards: 1,
            rate_per_sec: 0,
            burst: 0,
            status: CouponStatus::Online,
        }
    }

    pub async fn try_create(&self, def: &CouponDefinition) -> Result<Created, CreateError> {
        let repo =
            DynamoCouponRepository::new(self.stack.ddb.clone(), self.stack.coupons_table.clone());
        create_coupon(def, 10_000_000, &repo, &self.redis, &self.clock).await
    }

    pub async fn create(&self, def: &CouponDefinition) -> CouponId {
        self.try_create(def).await.expect("create coupon");
        def.coupon_id.clone()
    }

    /// Sends an event through the real handler.
    pub async fn send(&self, event: Value) -> Resp {
        send(&self.app, event).await
    }

    /// A grab as `user` (JWT claims), from `ip`.
    pub async fn grab(&self, coupon: &CouponId, user: &str, request_id: &str) -> Resp {
        self.send(Event::grab(coupon.as_str(), user, request_id).build())
            .await
    }

    /// Remaining stock over all shards.
    pub async fn stock(&self, def: &CouponDefinition) -> i64 {
        let mut conn = self.redis.connection();
        let mut total = 0;
        for shard in 0..def.shards {
            let s: i64 = conn
                .hget(
                    self.redis.keys().shard(&def.coupon_id, shard).meta(),
                    "stock",
                )
                .await
                .unwrap();
            total += s;
        }
        total
    }

    /// Outbox entries over all shards.
    pub async fn outbox_len(&self, def: &CouponDefinition) -> u64 {
        let mut conn = self.redis.connection();
        let mut total = 0;
        for shard in 0..def.shards {
            let n: u64 = conn
                .xlen(self.redis.keys().shard(&def.coupon_id, shard).outbox())
                .await
                .unwrap();
            total += n;
        }
        total
    }

    /// The grant ids in the outboxes.
    pub async fn outbox_grant_ids(&self, def: &CouponDefinition) -> Vec<String> {
        let mut conn = self.redis.connection();
        let mut ids = Vec::new();
        for shard in 0..def.shards {
            let entries: redis::streams::StreamRangeReply = conn
                .xrange_all(self.redis.keys().shard(&def.coupon_id, shard).outbox())
                .await
                .unwrap();
            for e in entries.ids {
                ids.push(e.get::<String>("grant_id").expect("grant_id field"));
            }
        }
        ids
    }
}

/// Sends an event through a handler (for concurrent use with a shared app).
pub async fn send(app: &GrabApp, event: Value) -> Resp {
    let req =
        lambda_http::request::from_str(&event.to_string()).expect("a valid API Gateway event");
    let resp = grab::handle(app, req).await.expect("infallible");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = match resp.body() {
        Body::Text(t) => serde_json::from_str(t).expect("JSON body"),
        other => panic!("unexpected body {other:?}"),
    };
    assert!(
        status < 500 || status == 503,
        "no 5xx but BUSY: {status} {body}"
    );
    Resp {
        status,
        body,
        headers,
    }
}

/// Builds API Gateway HTTP API events from the fixtures.
pub struct Event(Value);

impl Event {
    /// `tests/fixtures/grab_jwt.json`, for `user` (level 2) grabbing `coupon`.
    pub fn grab(coupon: &str, user: &str, request_id: &str) -> Self {
        let mut v: Value = serde_json::from_str(include_str!("../fixtures/grab_jwt.json")).unwrap();
        v["requestContext"]["authorizer"]["jwt"]["claims"]["sub"] = user.into();
        let mut e = Self(v).path(&format!("/coupons/{coupon}/grab"));
        e.0["pathParameters"]["couponId"] = coupon.into();
        e.body(&json!({ "requestId": request_id }).to_string())
    }

    /// `tests/fixtures/grab_function_url.json`: no JWT, identity headers.
    pub fn function_url() -> Self {
        Self(serde_json::from_str(include_str!("../fixtures/grab_function_url.json")).unwrap())
    }

    pub fn path(mut self, path: &str) -> Self {
        self.0["rawPath"] = path.into();
        self.0["requestContext"]["http"]["path"] = path.into();
        self
    }

    pub fn method(mut self, method: &str) -> Self {
        self.0["requestContext"]["http"]["method"] = method.into();
        self
    }

    pub fn body(mut self, body: &str) -> Self {
        self.0["body"] = body.into();
        self.0["isBase64Encoded"] = false.into();
        self
    }

    pub fn base64_body(mut self, encoded: &str) -> Self {
        self.0["body"] = encoded.into();
        self.0["isBase64Encoded"] = true.into();
        self
    }

    pub fn level(mut self, level: &str) -> Self {
        self.0["requestContext"]["authorizer"]["jwt"]["claims"]["member_level"] = level.into();
        self
    }

    pub fn ip(mut self, ip: &str) -> Self {
        self.0["requestContext"]["http"]["sourceIp"] = ip.into();
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.0["headers"][name] = value.into();
        self
    }

    pub fn without_authorizer(mut self) -> Self {
        if let Some(ctx) = self.0["requestContext"].as_object_mut() {
            ctx.remove("authorizer");
        }
        self
    }

    pub fn build(self) -> Value {
        self.0
    }
}
