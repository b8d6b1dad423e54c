//! The scenarios of the benchmark, one file each (see the crate docs for
//! what each shows), and what they share: coupons, the grab function wired
//! as deployed, the drivers that press it, redis-benchmark, Redis CPU.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use coupon_adapters::config::{AwsCallSettings, RedisSettings};
use coupon_adapters::redis::{Redis, RedisPreheater};
use coupon_domain::catalog::StockPreheater;
use coupon_domain::clock::{Clock, SystemClock};
use coupon_domain::config::RiskLimits;
use coupon_domain::coupon::{CouponDefinition, CouponStatus};
use coupon_domain::grab::ports::GrantPublisher;
use coupon_domain::ids::CouponId;
use coupon_edge::EdgeSettings;
use grab::GrabApp;
use serde_json::Value;

use coupon_domain::testing::{AllowAll, Silent};

use crate::counting::CallCounter;

mod aws_calls;
mod cluster;
mod oversell;
mod raw_client;
mod reconcile;
mod round_trips;
mod sold_out;
mod vs_lock;
mod vs_redis;

pub use aws_calls::aws_calls;
pub use cluster::cluster_vs_single;
pub use oversell::oversell;
pub use raw_client::raw_client;
pub use reconcile::reconcile;
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
        idempotency_ttl_secs: 3_600,
        replica_acks: 0,
        replica_ack_timeout_ms: 100,
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
        sqs: AwsCallSettings {
            max_attempts: 3,
            operation_timeout_ms: 30_000,
        },
        risk: RiskLimits::default(),
        http: EdgeSettings {
            trust_identity_headers: false,
            user_id_claim: "sub".into(),
            member_level_claim: "member_level".into(),
            max_body_bytes: 4_096,
        },
        sold_out_memory_ms: sold_out_ms,
        // As long as the SQS timeout: the benchmark measures, it does not
        // race a reconciler.
        send_budget_ms: 30_000,
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
        ports.publisher = publisher.clone();
        if wiring == Wiring::ScriptOnly {
            ports.risk = Arc::new(AllowAll);
        }
        out.push(Arc::new(grab::wire_ports(&config, ports)));
    }
    out
}

/// The API Gateway event of a grab, as a template with four holes.
pub(crate) fn template() -> String {
    let mut v: Value = serde_json::from_str(include_str!("../../../tests/fixtures/grab_jwt.json")).expect("fixture");
    v["requestContext"]["authorizer"]["jwt"]["claims"]["sub"] = "@USER@".into();
    v["rawPath"] = "/coupons/@COUPON@/grab".into();
    v["requestContext"]["http"]["path"] = "/coupons/@COUPON@/grab".into();
    v["requestContext"]["http"]["sourceIp"] = "@IP@".into();
    v["pathParameters"]["couponId"] = "@COUPON@".into();
    v["body"] = "{\"requestId\":\"@REQ@\"}".into();
    v.to_string()
}

/// Unique client addresses over the whole run (the per-IP risk rule would
/// otherwise refuse the benchmark's own callers).
static IPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn next_ip() -> String {
    let n = IPS.fetch_add(1, Ordering::Relaxed);
    format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff)
}

/// How requests reach the handler.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Feed {
    /// As the runtime does: the event's bytes parsed by `lambda_http`.
    Events,
    /// An already-parsed request (what the runtime hands `grab::handle`).
    Requests,
}

fn event(tpl: &str, coupon: &str, user: &str, request: &str, _n: u64) -> String {
    let ip = next_ip();
    tpl.replace("@COUPON@", coupon)
        .replace("@USER@", user)
        .replace("@REQ@", request)
        .replace("@IP@", &ip)
}

/// Who presses in a run: a fresh user per request, or each caller's users
/// in turn from `cycle` of them.
#[derive(Clone)]
struct Names {
    label: String,
    cycle: Option<u64>,
}

impl Names {
    fn user(&self, caller: usize, i: u64) -> String {
        match self.cycle {
            Some(n) => format!("held-{caller}-{}", i % n),
            None => format!("{}-{caller}-{i}", self.label),
        }
    }

    /// Cycling users are the same in every run (they hold the coupon from
    /// an earlier one), so their request ids carry the run's label.
    fn request(&self, i: u64) -> String {
        match self.cycle {
            Some(_) => format!("{}-{i}", self.label),
            None => format!("r{i}"),
        }
    }
}

/// What a handler run did.
#[derive(Debug, Default)]
pub(crate) struct Drive {
    pub elapsed: Duration,
    pub by_status: BTreeMap<u16, u64>,
    pub total: u64,
}

impl Drive {
    pub fn per_sec(&self) -> f64 {
        self.total as f64 / self.elapsed.as_secs_f64()
    }
    pub fn status(&self, s: u16) -> u64 {
        self.by_status.get(&s).copied().unwrap_or(0)
    }
}

/// Drives each app from its own task, with fresh users, until `run` passes
/// or `limit` requests were made in all. Every request goes through
/// `lambda_http::request::from_str` (what the runtime does with the bytes
/// API Gateway sends) and `grab::handle`.
pub(crate) async fn drive(apps: &[Arc<GrabApp>], coupon: &str, label: &str, run: Duration, limit: u64) -> Drive {
    drive_fed(apps, coupon, label, run, limit, Feed::Events).await
}

/// A request built directly, as `lambda_http` would hand it over: the
/// template's parsed parts, with this caller's claims, address and body.
pub(crate) fn built(
    base: &lambda_http::http::request::Parts,
    coupon: &str,
    user: &str,
    request: &str,
) -> lambda_http::Request {
    use lambda_http::request::RequestContext;
    let mut req = lambda_http::http::Request::builder()
        .method(base.method.clone())
        .uri(format!(
            "https://abc123.execute-api.us-east-1.amazonaws.com/coupons/{coupon}/grab"
        ))
        .body(lambda_http::Body::Text(format!("{{\"requestId\":\"{request}\"}}")))
        .expect("request");
    *req.headers_mut() = base.headers.clone();
    *req.extensions_mut() = base.extensions.clone();
    if let Some(RequestContext::ApiGatewayV2(ctx)) = req.extensions_mut().get_mut::<RequestContext>() {
        ctx.http.source_ip = Some(next_ip());
        if let Some(jwt) = ctx.authorizer.as_mut().and_then(|a| a.jwt.as_mut()) {
            jwt.claims.insert("sub".into(), user.into());
        }
    }
    req
}

pub(crate) async fn drive_fed(
    apps: &[Arc<GrabApp>],
    coupon: &str,
    label: &str,
    run: Duration,
    limit: u64,
    feed: Feed,
) -> Drive {
    drive_as(apps, coupon, label, run, limit, feed, None).await
}

/// [`drive_fed`] with each caller's users taken in turn from `cycle` of
/// them (`None`: a fresh user per request), every request with its own id:
/// users who press again, as those already holding the coupon do.
pub(crate) async fn drive_as(
    apps: &[Arc<GrabApp>],
    coupon: &str,
    label: &str,
    run: Duration,
    limit: u64,
    feed: Feed,
    cycle: Option<u64>,
) -> Drive {
    let names = Names {
        label: label.to_owned(),
        cycle,
    };
    let tpl = Arc::new(template());
    let (parts, _) = lambda_http::request::from_str(&tpl).expect("template").into_parts();
    let made = Arc::new(std::sync::atomic::AtomicU64::new(0));
    // Requests are built before the clock starts (the runtime's work, not
    // the handler's); events are built and parsed inside the timed loop.
    let per_task = (150_000 / apps.len().max(1)).clamp(1_000, 40_000).min(limit as usize);
    let mut pools: Vec<Vec<lambda_http::Request>> = Vec::new();
    for t in 0..apps.len() {
        pools.push(match feed {
            Feed::Requests => (1..=per_task)
                .rev()
                .map(|i| built(&parts, coupon, &names.user(t, i as u64), &names.request(i as u64)))
                .collect(),
            Feed::Events => Vec::new(),
        });
    }
    let start = Instant::now();
    let deadline = start + run;
    let mut tasks = Vec::new();
    for ((t, app), mut pool) in apps.iter().enumerate().zip(pools) {
        let (app, tpl, made, parts) = (app.clone(), tpl.clone(), made.clone(), parts.clone());
        let coupon = coupon.to_owned();
        let names = names.clone();
        tasks.push(tokio::spawn(async move {
            let mut by_status: BTreeMap<u16, u64> = BTreeMap::new();
            let mut i = 0u64;
            loop {
                let n = made.fetch_add(1, Ordering::Relaxed);
                if n >= limit || Instant::now() >= deadline {
                    break;
                }
                i += 1;
                let req = match feed {
                    Feed::Events => {
                        let raw = event(&tpl, &coupon, &names.user(t, i), &names.request(i), n);
                        lambda_http::request::from_str(&raw).expect("a valid event")
                    }
                    // A machine faster than the pool was sized for: build
                    // the rest as it goes (timed, so the figure is lower,
                    // never a crash).
                    Feed::Requests => match pool.pop() {
                        Some(r) => r,
                        None => built(&parts, &coupon, &names.user(t, i), &format!("x{i}")),
                    },
                };
                let resp = grab::handle(&app, req).await.expect("infallible");
                *by_status.entry(resp.status().as_u16()).or_default() += 1;
            }
            by_status
        }));
    }
    let mut out = Drive::default();
    for t in tasks {
        for (s, c) in t.await.expect("task") {
            *out.by_status.entry(s).or_default() += c;
            out.total += c;
        }
    }
    out.elapsed = start.elapsed();
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
