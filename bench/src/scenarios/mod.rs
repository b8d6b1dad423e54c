//! The scenarios of the benchmark, one file each (see the crate docs for
//! what each shows), and what they share: coupons, the grab function wired
//! as deployed, the drivers that press it, redis-benchmark, Redis CPU.

use std::sync::Arc;

use coupon_adapters::config::{AwsCallSettings, CacheDurability, RedisSettings};
use coupon_adapters::redis::{Redis, RedisPreheater};
use coupon_domain::catalog::StockPreheater;
use coupon_domain::clock::{Clock, SystemClock};
use coupon_domain::config::RiskLimits;
use coupon_domain::coupon::{CouponDefinition, CouponStatus};
use coupon_domain::grab::ports::GrantPublisher;
use coupon_domain::ids::CouponId;
use coupon_domain::testing::FakeClaims;
use coupon_edge::EdgeSettings;
use grab::GrabApp;

use coupon_domain::testing::{AllowAll, Silent};

use crate::counting::CallCounter;

mod aws_calls;
mod center;
mod cluster;
mod drive;
mod oversell;
mod raw_client;
mod reconcile;
mod reconcile_many;
mod round_trips;
mod sold_out;
mod vs_lock;
mod vs_redis;

pub use aws_calls::aws_calls;
pub use center::center;
pub use cluster::cluster_vs_single;
pub use drive::Feed;
pub(crate) use drive::{built, drive, drive_as, drive_fed, template};
pub use oversell::oversell;
pub use raw_client::raw_client;
pub use reconcile::reconcile;
pub use reconcile_many::reconcile_many;
pub use round_trips::round_trips;
pub use sold_out::sold_out;
pub use vs_lock::grab_vs_lock;
pub use vs_redis::{grab_vs_redis_benchmark, Ratios};

pub(crate) const HOUR: i64 = 3_600_000;

pub(crate) fn now_ms() -> i64 {
    SystemClock.now_ms()
}

pub(crate) fn unique(label: &str) -> String {
    format!("{label}-{}", now_ms() % 100_000_000)
}

pub(crate) fn coupon(id: &str, stock: u64, shards: u32) -> CouponDefinition {
    let now = now_ms();
    CouponDefinition {
        coupon_id: CouponId::parse(id).expect("coupon id"),
        name: "bench".into(),
        amount: 100,
        total_stock: stock,
        per_user_limit: 1,
        min_member_level: 0,
        grab_start_ms: now - HOUR,
        grab_end_ms: now + 24 * HOUR,
        valid_from_ms: now,
        valid_until_ms: now + 48 * HOUR,
        shards,
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

fn redis_settings(url: &str, cluster: bool) -> RedisSettings {
    RedisSettings {
        url: url.to_owned(),
        key_prefix: "bench:".into(),
        response_timeout_ms: 5_000,
        connect_timeout_ms: 2_000,
        cluster,
        auth_secret_arn: None,
        username: None,
        idempotency_ttl_secs: 3_600,
        replica_acks: 0,
        replica_ack_timeout_ms: 100,
        durability: CacheDurability::None,
    }
}

/// One Redis connection with the benchmark's key prefix.
pub(crate) async fn store(url: &str, cluster: bool) -> Redis {
    Redis::connect(&redis_settings(url, cluster))
        .await
        .expect("redis for the benchmark")
}

/// Preheats `def` on `redis`.
pub(crate) async fn preheat(redis: &Redis, def: &CouponDefinition) {
    RedisPreheater::new(redis.clone())
        .preheat(def, now_ms())
        .await
        .expect("preheat");
}

/// The grab function's configuration for a run: the deployed defaults,
/// with the given sold-out memory.
pub(crate) fn grab_config(url: &str, cluster: bool, queue_url: &str, sold_out_ms: u64) -> grab::Config {
    grab::Config {
        redis: redis_settings(url, cluster),
        queue_url: queue_url.to_owned(),
        // Only used when Redis lost a coupon, which no scenario does.
        repair_queue_url: "http://unused.invalid/repairs.fifo".into(),
        coupons_table: "unused".into(),
        claims_table: "unused".into(),
        sqs: AwsCallSettings {
            max_attempts: 3,
            operation_timeout_ms: 30_000,
        },
        risk: RiskLimits::default(),
        http: EdgeSettings {
            trust_identity_headers: false,
            user_id_claim: "sub".into(),
            member_level_claim: "member_level".into(),
            device_id_claim: None,
            max_body_bytes: 4_096,
            origin_secret_arn: None,
        },
        sold_out_memory_ms: sold_out_ms,
        // As long as the SQS timeout: the benchmark measures, it does not
        // race a reconciler.
        send_budget_ms: 30_000,
        center: coupon_domain::center::CenterSettings::default(),
        metrics_namespace: "Bench".into(),
    }
}

/// The grab function as `main.rs` wires it, on `redis` and `sqs`.
pub(crate) fn grab_clients(
    redis: Redis,
    sqs: aws_sdk_sqs::Client,
    dynamodb: aws_sdk_dynamodb::Client,
) -> grab::Clients {
    grab::Clients {
        redis,
        sqs,
        dynamodb,
        clock: Arc::new(SystemClock),
        metrics: Arc::new(Silent),
        origin: None,
    }
}

/// How the grab function is wired for a run.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wiring {
    /// Exactly the deployed wiring except the queue: risk checks on.
    Production,
    /// Risk checks off: one EVALSHA per decision, as redis-benchmark sends.
    ScriptOnly,
}

/// `callers` grab functions, each with its own Redis connection (one Lambda
/// instance each), sharing one in-memory publisher.
pub(crate) async fn apps(
    url: &str,
    cluster: bool,
    callers: usize,
    wiring: Wiring,
    sold_out_ms: u64,
    publisher: Arc<dyn GrantPublisher>,
) -> Vec<Arc<GrabApp>> {
    let config = grab_config(url, cluster, "http://unused.invalid/queue", sold_out_ms);
    let (sqs, ddb) = sdk(None).await;
    let mut out = Vec::new();
    for _ in 0..callers {
        let mut ports = grab::ports(
            &config,
            grab_clients(store(url, cluster).await, sqs.clone(), ddb.clone()),
        );
        ports.grab.publisher = publisher.clone();
        ports.grab.claims = Arc::new(FakeClaims::default());
        if wiring == Wiring::ScriptOnly {
            ports.grab.risk = Arc::new(AllowAll);
        }
        out.push(Arc::new(grab::wire_ports(&config, ports)));
    }
    out
}

/// Seconds of CPU the Redis main thread has used.
pub(crate) async fn redis_cpu(url: &str) -> f64 {
    let client = redis::Client::open(url).expect("url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(&mut conn)
        .await
        .expect("info");
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':')?.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    field("used_cpu_sys_main_thread") + field("used_cpu_user_main_thread")
}

pub(crate) async fn sdk(counter: Option<&CallCounter>) -> (aws_sdk_sqs::Client, aws_sdk_dynamodb::Client) {
    let conf = coupon_adapters::aws::load(AwsCallSettings {
        max_attempts: 3,
        operation_timeout_ms: 30_000,
    })
    .await;
    let mut sqs = aws_sdk_sqs::config::Builder::from(&conf);
    let mut ddb = aws_sdk_dynamodb::config::Builder::from(&conf);
    if let Some(c) = counter {
        sqs = sqs.interceptor(c.clone());
        ddb = ddb.interceptor(c.clone());
    }
    (
        aws_sdk_sqs::Client::from_conf(sqs.build()),
        aws_sdk_dynamodb::Client::from_conf(ddb.build()),
    )
}
