//! The grab function wired to the real services with a hand-moved clock,
//! and what tests inspect in Redis.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use coupon_adapters::config::{CacheDurability, RedisSettings};
use coupon_adapters::dynamodb::{DynamoCouponRepository, DynamoFacts, DynamoIssueLedger, Tables};
use coupon_adapters::redis::{Redis, RedisBlacklistFlags, RedisLedger, RedisPreheater};
use coupon_domain::catalog::{create_coupon, CreateError, Created};
use coupon_domain::center::CenterSettings;
use coupon_domain::clock::ManualClock;
use coupon_domain::config::RiskLimits;
use coupon_domain::coupon::{CouponDefinition, CouponStatus};
use coupon_domain::ids::CouponId;
use coupon_domain::metrics::RecordingMetrics;
use grab::{Clients, Config, EdgeSettings, GrabApp};
use redis::AsyncCommands;
use serde_json::Value;

use super::events::{send, Event, Resp};
use super::stack::{unique, Stack, HOUR, T0};

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
    /// Another Redis (a test's own master/replica pair), by URL.
    pub redis_url: Option<String>,
    /// Reuse this key prefix (a harness taking over another's data after a
    /// failover); `None`: a fresh one.
    pub key_prefix: Option<String>,
    /// Replicas that must acknowledge a win (`REDIS_REPLICA_ACKS`).
    pub replica_acks: u32,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            risk: RiskLimits {
                daily_claims_per_user: 5,
                users_per_ip: 10,
                users_per_device: 3,
                claims_per_device: 10,
                day_offset_minutes: 0,
            },
            sold_out_memory_ms: 1_000,
            queue_url: None,
            trust_identity_headers: false,
            max_body_bytes: 4_096,
            // The Serverless stand-in is a cluster of one node: every
            // harness speaks cluster mode to it, as the functions do.
            cluster: std::env::var("REDIS_CLUSTER").is_ok_and(|v| v == "true"),
            redis_url: None,
            key_prefix: None,
            replica_acks: 0,
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

/// A user id homed on `shard` of a coupon of `shards` (`label0`, `label1`,
/// ... the first that is).
pub fn homed_on(shard: u32, shards: u32, label: &str) -> String {
    (0..)
        .map(|i| format!("{label}{i}"))
        .find(|u| coupon_domain::grab::home_shard(&coupon_domain::ids::UserId::parse(u).unwrap(), shards) == shard)
        .unwrap()
}

/// A grab function wired to the real services, with a hand-moved clock.
pub struct Harness {
    pub app: Arc<GrabApp>,
    pub config: Config,
    pub redis: Redis,
    pub tables: Tables,
    pub clock: ManualClock,
    pub metrics: Arc<RecordingMetrics>,
    pub queue_url: String,
    pub stack: Stack,
    /// The coupons this harness created: its reconciler visits only these,
    /// so parallel tests never reconcile each other's coupons.
    pub own: Arc<Mutex<HashSet<CouponId>>>,
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
        let redis_settings = RedisSettings {
            url: match (&opts.redis_url, opts.cluster) {
                (Some(url), _) => url.clone(),
                (None, true) => stack.redis_cluster_url.clone(),
                (None, false) => stack.redis_url.clone(),
            },
            key_prefix: opts.key_prefix.clone().unwrap_or_else(|| format!("{}:", unique("t"))),
            response_timeout_ms: 2_000,
            connect_timeout_ms: 2_000,
            // A test's own server (`redis_url`) is never a cluster.
            cluster: opts.cluster && opts.redis_url.is_none(),
            auth_secret_arn: None,
            username: None,
            idempotency_ttl_secs: 86_400,
            replica_acks: opts.replica_acks,
            replica_ack_timeout_ms: 200,
            durability: if opts.replica_acks > 0 {
                CacheDurability::Replicated
            } else {
                CacheDurability::None
            },
        };
        let redis = Redis::connect(&redis_settings)
            .await
            .expect("redis-server must be running (make stack)");
        let config = Config {
            redis: redis_settings,
            queue_url: queue_url.clone(),
            repair_queue_url: stack.new_repair_queue().await,
            coupons_table: stack.tables.coupons.clone(),
            claims_table: stack.tables.claims.clone(),
            sqs: coupon_adapters::config::AwsCallSettings {
                max_attempts: 3,
                operation_timeout_ms: 10_000,
            },
            risk: opts.risk,
            http: EdgeSettings {
                trust_identity_headers: opts.trust_identity_headers,
                user_id_claim: "sub".into(),
                member_level_claim: "member_level".into(),
                device_id_claim: Some("device_id".into()),
                max_body_bytes: opts.max_body_bytes,
                origin_secret_arn: None,
            },
            sold_out_memory_ms: opts.sold_out_memory_ms,
            // As long as the SQS timeout above: moto under the whole suite's
            // load can take seconds to answer, and the tests move the
            // reconciler's send window by hand.
            send_budget_ms: 10_000,
            // Every listing reads again: a test changes the state between
            // two listings without moving the clock.
            center: CenterSettings {
                cache_ms: 0,
                ..CenterSettings::default()
            },
            metrics_namespace: "Test".into(),
        };
        let clock = ManualClock::new(T0);
        let metrics = Arc::new(RecordingMetrics::default());
        let app = Arc::new(grab::wire(
            &config,
            Clients {
                redis: redis.clone(),
                sqs: stack.sqs.clone(),
                dynamodb: stack.ddb.clone(),
                clock: Arc::new(clock.clone()),
                metrics: metrics.clone(),
                origin: None,
            },
        ));
        let tables = Tables::new(stack.ddb.clone(), &stack.tables);
        Self {
            app,
            config,
            redis,
            tables,
            clock,
            metrics,
            queue_url,
            stack,
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
            waves: Vec::new(),
            rollover: true,
            device_required: false,
            mode: Default::default(),
            draw_at_ms: None,
        }
    }

    pub async fn try_create(&self, def: &CouponDefinition) -> Result<Created, CreateError> {
        let repo = DynamoCouponRepository::new(self.tables.clone());
        self.own.lock().unwrap().insert(def.coupon_id.clone());
        let preheater = RedisPreheater::new(self.redis.clone());
        create_coupon(def, 10_000_000, &repo, &preheater, &self.clock).await
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

    /// A grab retried with the same request id while it answers BUSY, as
    /// the app does (a few tries, a short pause between): for a step whose
    /// replicas are healthy but may be slow to acknowledge on a loaded
    /// machine (the harness waits 200 ms for them). A BUSY is no broken
    /// promise, only a pause; the test judges the answer the user ends with.
    pub async fn grab_until_decided(&self, coupon: &CouponId, user: &str, request_id: &str) -> Resp {
        let mut resp = self.grab(coupon, user, request_id).await;
        for _ in 0..10 {
            if resp.code() != "BUSY" {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            resp = self.grab(coupon, user, request_id).await;
        }
        resp
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

    /// A grab instance started now (a cold start): it shares this harness's
    /// stores and settings but has seen no coupon yet.
    pub fn cold_instance(&self) -> Arc<GrabApp> {
        Arc::new(grab::wire(
            &self.config,
            Clients {
                redis: self.redis.clone(),
                sqs: self.stack.sqs.clone(),
                dynamodb: self.stack.ddb.clone(),
                clock: Arc::new(self.clock.clone()),
                metrics: self.metrics.clone(),
                origin: None,
            },
        ))
    }

    /// The same harness (Redis prefix, clock, metrics, coupons) with the grab
    /// function sending winners to `queue_url`: SQS coming back.
    pub fn with_queue(self, queue_url: String) -> Self {
        let mut config = self.config.clone();
        config.queue_url = queue_url.clone();
        let app = Arc::new(grab::wire(
            &config,
            Clients {
                redis: self.redis.clone(),
                sqs: self.stack.sqs.clone(),
                dynamodb: self.stack.ddb.clone(),
                clock: Arc::new(self.clock.clone()),
                metrics: self.metrics.clone(),
                origin: None,
            },
        ));
        Self {
            app,
            config,
            queue_url,
            ..self
        }
    }

    /// The durable facts the reconciler reads (issued, rejections, ...).
    pub fn facts(&self) -> DynamoFacts {
        DynamoFacts::new(self.tables.clone())
    }

    /// The issuer's DynamoDB ledger.
    pub fn issue_ledger(&self) -> DynamoIssueLedger {
        DynamoIssueLedger::new(self.tables.clone())
    }

    /// The grab's Redis stock ledger (one script call at a time).
    pub fn stock_ledger(&self) -> RedisLedger {
        RedisLedger::new(self.redis.clone())
    }

    /// The blacklist flags grabs check.
    pub fn flags(&self) -> RedisBlacklistFlags {
        RedisBlacklistFlags::new(self.redis.clone())
    }

    /// Deletes every Redis key of this harness: what a FLUSHALL does to it.
    /// Until Redis answers again after a restart (the client reconnects on
    /// its own).
    pub async fn wait_for_redis(&self) {
        for _ in 0..100 {
            let mut conn = self.redis.connection();
            if redis::cmd("PING").query_async::<String>(&mut conn).await.is_ok() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        panic!("redis did not come back");
    }

    /// Moves the clock to an instant no other test uses, and answers it.
    pub fn own_epoch(&self) -> i64 {
        let n = coupon_domain::hash::fnv1a64(unique("epoch").as_bytes()) % 40_000;
        let now = T0 + (100 + n as i64) * 24 * HOUR;
        self.clock.set(now);
        now
    }

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
        let keys = super::keys_matching(&mut conn, &pattern).await;
        // One key at a time: on a cluster the keys live in many slots.
        for key in keys {
            let _: () = redis::cmd("DEL").arg(key).query_async(&mut conn).await.unwrap();
        }
    }
}

/// A claim on shard 0 by a user of level 0 without a device: the press a
/// test hands the ledger or the risk guard directly, at `now_ms`.
pub fn plain_claim<'a>(
    coupon: &'a coupon_domain::ids::CouponId,
    user: &'a coupon_domain::ids::UserId,
    request: &'a coupon_domain::ids::RequestId,
    now_ms: i64,
) -> coupon_domain::grab::ports::Claim<'a> {
    coupon_domain::grab::ports::Claim {
        coupon,
        home_shard: 0,
        user,
        level: 0,
        request,
        device: None,
        now_ms,
    }
}
