//! Test harness: real redis-server and local AWS endpoint, every test
//! isolated by its own Redis key prefix, SQS queue and coupon ids, so tests
//! run in parallel. Requests go through the real handler as API Gateway
//! events built from `tests/fixtures/`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use aws_lambda_events::event::sqs::SqsEvent;
use aws_sdk_sqs::config::Credentials;
use coupon_shared::adapters::dynamodb::{DynamoCouponRepository, DynamoLedger};
use coupon_shared::adapters::redis::RedisStore;
use coupon_shared::adapters::sqs::SqsPublisher;
use coupon_shared::adapters::sqs::SqsRedrive;
use coupon_shared::clock::ManualClock;
use coupon_shared::config::{RedisSettings, RiskLimits};
use coupon_shared::coupon::{CouponDefinition, CouponStatus};
use coupon_shared::grant::Grant;
use coupon_shared::ids::CouponId;
use coupon_shared::issuance::IssuerService;
use coupon_shared::metrics::RecordingMetrics;
use coupon_shared::ports::{DurableFacts, IssueLedger};
use coupon_shared::preheat::{create_coupon, CreateError, Created};
use coupon_shared::reconcile::{CouponReport, ReconcileSettings, Reconciler};
use coupon_shared::service::GrabService;
use grab::{EdgeSettings, GrabApp};
use lambda_http::Body;
use redis::AsyncCommands;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::sync::Mutex;

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
    pub elasticache: coupon_shared::adapters::elasticache::Client,
    pub redis_url: String,
    pub redis_cluster_url: String,
    pub coupons_table: String,
    pub user_coupons_table: String,
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
            elasticache: coupon_shared::adapters::elasticache::Client::new(&sdk),
            redis_url: env_or("REDIS_URL", "redis://127.0.0.1:6379"),
            redis_cluster_url: env_or("REDIS_CLUSTER_URL", "redis://127.0.0.1:7001"),
            coupons_table: env_or("COUPONS_TABLE", "coupons"),
            user_coupons_table: env_or("USER_COUPONS_TABLE", "user-coupons"),
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
    /// Run against the local 3-master Redis Cluster instead of one server.
    pub cluster: bool,
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
            cluster: false,
        }
    }
}

impl Options {
    /// Every fixture request comes from one source IP: tests with many users
    /// turn the per-IP rule off (it has its own tests).
    pub fn without_ip_limit() -> Self {
        let mut opts = Self::default();
        opts.risk.users_per_ip = 0;
        opts
    }

    /// The same, on the local Redis Cluster.
    pub fn on_cluster(mut self) -> Self {
        self.cluster = true;
        self
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
    pub ledger: DynamoLedger,
    /// The coupons this harness created: its reconciler visits only these,
    /// so parallel tests never reconcile each other's coupons.
    pub own: Arc<Mutex<HashSet<CouponId>>>,
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
            url: if opts.cluster {
                stack.redis_cluster_url.clone()
            } else {
                stack.redis_url.clone()
            },
            key_prefix: format!("{}:", unique("t")),
            response_timeout_ms: 2_000,
            connect_timeout_ms: 2_000,
            cluster: opts.cluster,
            auth_secret_arn: None,
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
        let ledger = DynamoLedger::new(
            stack.ddb.clone(),
            stack.coupons_table.clone(),
            stack.user_coupons_table.clone(),
        );
        Self {
            app,
            redis,
            clock,
            metrics,
            queue_url,
            stack,
            ledger,
            own: Arc::default(),
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
        let repo = DynamoCouponRepository::new(self.stack.ddb.clone(), self.stack.coupons_table.clone());
        self.own.lock().unwrap().insert(def.coupon_id.clone());
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
        self.send(Event::grab(coupon.as_str(), user, request_id).build()).await
    }

    /// Remaining stock over all shards.
    pub async fn stock(&self, def: &CouponDefinition) -> i64 {
        let mut conn = self.redis.connection();
        let mut total = 0;
        for shard in 0..def.shards {
            let s: i64 = conn
                .hget(self.redis.keys().shard(&def.coupon_id, shard).meta(), "stock")
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

impl Harness {
    /// The issuer function as deployed, over `ledger`.
    pub fn issuer_with(&self, ledger: Arc<dyn IssueLedger>) -> issuer::Issuer {
        issuer::Issuer {
            service: IssuerService::new(
                ledger,
                Arc::new(DynamoCouponRepository::new(
                    self.stack.ddb.clone(),
                    self.stack.coupons_table.clone(),
                )),
                self.metrics.clone(),
            ),
            clock: Arc::new(self.clock.clone()),
            concurrency: 8,
        }
    }

    /// The issuer function over the real DynamoDB ledger.
    pub fn issuer(&self) -> issuer::Issuer {
        self.issuer_with(Arc::new(self.ledger.clone()))
    }

    /// Receives up to 10 messages (visible now) from the harness queue.
    pub async fn receive(&self) -> Vec<aws_sdk_sqs::types::Message> {
        self.stack
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(0)
            .send()
            .await
            .expect("receive")
            .messages
            .unwrap_or_default()
    }

    /// What the SQS event source mapping does: messages in, one issuer
    /// invocation, the failed ones left on the queue (made visible again
    /// only after the test says so), the rest deleted. Returns the ids the
    /// issuer reported failed.
    pub async fn deliver(&self, issuer: &issuer::Issuer, messages: &[aws_sdk_sqs::types::Message]) -> Vec<String> {
        let response = issuer::handle(
            issuer,
            lambda_runtime::LambdaEvent::new(sqs_event(messages), Default::default()),
        )
        .await
        .expect("the batch is answered");
        let failed: Vec<String> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect();
        for m in messages {
            if !failed.iter().any(|id| Some(id.as_str()) == m.message_id()) {
                self.stack
                    .sqs
                    .delete_message()
                    .queue_url(&self.queue_url)
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .send()
                    .await
                    .expect("delete");
            }
        }
        failed
    }

    /// Delivers everything on the queue to the issuer until it is empty.
    /// Returns how many messages were delivered.
    pub async fn pump(&self) -> usize {
        let issuer = self.issuer();
        let mut delivered = 0;
        loop {
            let messages = self.receive().await;
            if messages.is_empty() {
                return delivered;
            }
            delivered += messages.len();
            let failed = self.deliver(&issuer, &messages).await;
            assert!(failed.is_empty(), "issuer failures while pumping: {failed:?}");
        }
    }

    /// The reconciler as deployed, re-driving to `queue_url`.
    pub fn reconciler_to(&self, queue_url: &str) -> Reconciler {
        Reconciler::new(
            Arc::new(OwnCoupons {
                inner: self.ledger.clone(),
                own: self.own.clone(),
            }),
            Arc::new(self.redis.clone()),
            Arc::new(self.redis.clone()),
            Arc::new(SqsRedrive::new(self.stack.sqs.clone(), queue_url, None)),
            Arc::new(self.clock.clone()),
            self.metrics.clone(),
            ReconcileSettings {
                grace_ms: 30_000,
                retention_ms: 7 * 24 * HOUR,
            },
        )
    }

    /// One reconciliation pass over this harness's coupons; the report of
    /// `def`'s coupon.
    pub async fn reconcile(&self, def: &CouponDefinition) -> CouponReport {
        let report = self.reconciler_to(&self.queue_url).run().await.expect("reconcile");
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        coupon_shared::reconcile::find(&report, &def.coupon_id)
            .expect("the coupon was visited")
            .clone()
    }

    /// The user's coupons in DynamoDB, of this harness's coupons (user names
    /// repeat across test runs; coupon ids never do).
    pub async fn coupons_of(&self, user: &str) -> Vec<coupon_shared::issuance::UserCoupon> {
        use coupon_shared::ports::WalletStore;
        let own = self.own.lock().unwrap().clone();
        self.ledger
            .coupons(&coupon_shared::ids::UserId::parse(user).unwrap())
            .await
            .unwrap()
            .into_iter()
            .filter(|c| own.contains(&c.coupon_id))
            .collect()
    }

    /// The wallet function as deployed.
    pub fn wallet(&self) -> wallet::Wallet {
        wallet::Wallet {
            store: Arc::new(self.ledger.clone()),
            outbox: Arc::new(self.redis.clone()),
            edge: self.app.edge.clone(),
        }
    }

    /// A GET through the wallet handler as `user`.
    pub async fn wallet_get(&self, path: &str, user: &str) -> Resp {
        let event = Event::grab("x", user, "r").method("GET").path(path).body("").build();
        let req = lambda_http::request::from_str(&event.to_string()).expect("event");
        let resp = wallet::handle(&self.wallet(), req).await.expect("infallible");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = match resp.body() {
            Body::Text(t) => serde_json::from_str(t).expect("JSON body"),
            other => panic!("unexpected body {other:?}"),
        };
        Resp { status, body, headers }
    }

    /// Deletes every Redis key of this harness: what a FLUSHALL does to it.
    pub async fn flush_redis(&self) {
        let mut conn = self.redis.connection();
        let pattern = format!(
            "{}*",
            self.redis
                .keys()
                .shard(&CouponId::parse("x").unwrap(), 0)
                .meta()
                .split('{')
                .next()
                .unwrap()
        );
        let keys: Vec<String> = redis::cmd("KEYS").arg(&pattern).query_async(&mut conn).await.unwrap();
        // One key at a time: on a cluster the keys live in many slots.
        for key in keys {
            let _: () = redis::cmd("DEL").arg(key).query_async(&mut conn).await.unwrap();
        }
    }
}

/// The durable facts of the real ledger, limited to one harness's coupons.
struct OwnCoupons {
    inner: DynamoLedger,
    own: Arc<Mutex<HashSet<CouponId>>>,
}

#[async_trait::async_trait]
impl DurableFacts for OwnCoupons {
    async fn definitions(&self) -> Result<Vec<CouponDefinition>, coupon_shared::error::StoreError> {
        let own = self.own.lock().unwrap().clone();
        // Read through the real scan, then keep this test's coupons.
        Ok(self
            .inner
            .definitions()
            .await?
            .into_iter()
            .filter(|d| own.contains(&d.coupon_id))
            .collect())
    }
    async fn issued(&self, c: &CouponId) -> Result<u64, coupon_shared::error::StoreError> {
        self.inner.issued(c).await
    }
    async fn rejections(
        &self,
        c: &CouponId,
    ) -> Result<Vec<coupon_shared::ports::RejectedGrant>, coupon_shared::error::StoreError> {
        self.inner.rejections(c).await
    }
    async fn issued_grants(&self, g: &[Grant]) -> Result<HashSet<String>, coupon_shared::error::StoreError> {
        self.inner.issued_grants(g).await
    }
    async fn holdings(
        &self,
        c: &CouponId,
    ) -> Result<coupon_shared::issuance::Holdings, coupon_shared::error::StoreError> {
        self.inner.holdings(c).await
    }
    async fn record_rebuild(&self, c: &CouponId, now: i64, n: u64) -> Result<(), coupon_shared::error::StoreError> {
        self.inner.record_rebuild(c, now, n).await
    }
    async fn was_rebuilt(&self, c: &CouponId) -> Result<bool, coupon_shared::error::StoreError> {
        self.inner.was_rebuilt(c).await
    }
    async fn blacklisted_users(&self) -> Result<Vec<coupon_shared::ids::UserId>, coupon_shared::error::StoreError> {
        self.inner.blacklisted_users().await
    }
    async fn still_blacklisted(
        &self,
        u: &coupon_shared::ids::UserId,
    ) -> Result<bool, coupon_shared::error::StoreError> {
        self.inner.still_blacklisted(u).await
    }
}

/// An SQS event as the event source mapping sends it.
pub fn sqs_event(messages: &[aws_sdk_sqs::types::Message]) -> SqsEvent {
    let records: Vec<Value> = messages
        .iter()
        .map(|m| {
            json!({
                "messageId": m.message_id(),
                "receiptHandle": m.receipt_handle(),
                "body": m.body(),
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1796040000000"},
                "messageAttributes": {},
                "md5OfBody": m.md5_of_body(),
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:coupon-grants",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records })).expect("an SQS event")
}

/// Sends an event through a handler (for concurrent use with a shared app).
pub async fn send(app: &GrabApp, event: Value) -> Resp {
    let req = lambda_http::request::from_str(&event.to_string()).expect("a valid API Gateway event");
    let resp = grab::handle(app, req).await.expect("infallible");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = match resp.body() {
        Body::Text(t) => serde_json::from_str(t).expect("JSON body"),
        other => panic!("unexpected body {other:?}"),
    };
    assert!(status < 500 || status == 503, "no 5xx but BUSY: {status} {body}");
    Resp { status, body, headers }
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

    pub fn query(mut self, raw: &str) -> Self {
        self.0["rawQueryString"] = raw.into();
        self
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

/// The admin function, wired as `main.rs` wires it, on this harness's Redis
/// prefix, queue and clock.
impl Harness {
    pub fn admin(&self) -> admin::AdminApp {
        let config = coupon_shared::config::AdminConfig {
            redis: RedisSettings {
                url: self.stack.redis_url.clone(),
                key_prefix: String::new(),
                response_timeout_ms: 2_000,
                connect_timeout_ms: 2_000,
                cluster: false,
                auth_secret_arn: None,
            },
            coupons_table: self.stack.coupons_table.clone(),
            user_coupons_table: self.stack.user_coupons_table.clone(),
            queue_url: self.queue_url.clone(),
            dlq_url: None,
            max_total_stock: 1_000_000,
            local_mode: true,
            max_body_bytes: 4_096,
            aws: coupon_shared::config::AwsCallSettings {
                max_attempts: 3,
                operation_timeout_ms: 10_000,
            },
            grace_ms: 30_000,
            metrics_namespace: "Test".into(),
        };
        admin::wire(
            &config,
            Arc::new(self.redis.clone()),
            self.stack.ddb.clone(),
            self.stack.sqs.clone(),
            Arc::new(self.clock.clone()),
        )
    }

    /// An admin call signed by an IAM operator (the fixture's principal).
    pub async fn admin_call(&self, method: &str, path: &str, body: Option<Value>) -> Resp {
        self.admin_send(Event::admin(method, path, body).build()).await
    }

    /// An admin call with an idempotency key.
    pub async fn admin_call_keyed(&self, method: &str, path: &str, body: Value, key: &str) -> Resp {
        self.admin_send(
            Event::admin(method, path, Some(body))
                .header("idempotency-key", key)
                .build(),
        )
        .await
    }

    /// Any event through the admin handler.
    pub async fn admin_send(&self, event: Value) -> Resp {
        let req = lambda_http::request::from_str(&event.to_string()).expect("a valid API Gateway event");
        let resp = admin::handle(&self.admin(), req).await.expect("infallible");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = match resp.body() {
            Body::Text(t) => serde_json::from_str(t).expect("JSON body"),
            other => panic!("unexpected body {other:?}"),
        };
        assert!(status < 500 || status == 503, "no 5xx but BUSY: {status} {body}");
        Resp { status, body, headers }
    }

    /// Creates `def` through the admin API and counts it as this harness's.
    pub async fn admin_create(&self, def: &CouponDefinition) -> Resp {
        self.own.lock().unwrap().insert(def.coupon_id.clone());
        self.admin_call("POST", "/admin/coupons", Some(serde_json::to_value(def).unwrap()))
            .await
    }
}

impl Event {
    /// Wraps an event built elsewhere.
    pub fn from_value(v: Value) -> Self {
        Self(v)
    }

    /// `tests/fixtures/admin_iam.json`: an IAM-signed admin call.
    pub fn admin(method: &str, path: &str, body: Option<Value>) -> Self {
        let mut v: Value = serde_json::from_str(include_str!("../fixtures/admin_iam.json")).unwrap();
        if let Some(h) = v["headers"].as_object_mut() {
            h.remove("idempotency-key");
        }
        if let Some(ctx) = v.as_object_mut() {
            ctx.remove("pathParameters");
        }
        let e = Self(v).path(path).method(method);
        match body {
            Some(b) => e.body(&b.to_string()),
            None => e.body(""),
        }
    }
}
