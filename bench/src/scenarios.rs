//! The scenarios of the benchmark; see the crate docs for what each shows.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use coupon_shared::adapters::dynamodb::{coupon_pk, user_coupon_sk, user_pk, DynamoCouponRepository, DynamoLedger};
use coupon_shared::adapters::redis::RedisStore;
use coupon_shared::adapters::sqs::{SqsPublisher, SqsRedrive};
use coupon_shared::clock::{Clock, SystemClock};
use coupon_shared::config::{AwsCallSettings, HttpSettings, RedisSettings, RiskLimits};
use coupon_shared::coupon::{CouponDefinition, CouponStatus};
use coupon_shared::ids::CouponId;
use coupon_shared::issuance::IssuerService;
use coupon_shared::ports::{CouponRepository, GrantPublisher, RiskGuard, StockPreheater};
use coupon_shared::reconcile::{ReconcileSettings, Reconciler};
use coupon_shared::service::GrabService;
use futures::StreamExt;
use grab::GrabApp;
use redis::AsyncCommands;
use serde_json::{json, Value};

use crate::counting::{CallCounter, CountingPublisher, NoRisk, Quiet};
use crate::{lock, BenchEnv, Row, Table};

const HOUR: i64 = 3_600_000;

fn now_ms() -> i64 {
    SystemClock.now_ms()
}

fn unique(label: &str) -> String {
    format!("{label}-{}", now_ms() % 100_000_000)
}

fn coupon(id: &str, stock: u64, shards: u32) -> CouponDefinition {
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

async fn store(url: &str, cluster: bool, risk: RiskLimits) -> RedisStore {
    let settings = RedisSettings {
        url: url.to_owned(),
        key_prefix: "bench:".into(),
        response_timeout_ms: 5_000,
        connect_timeout_ms: 2_000,
        cluster,
        auth_secret_arn: None,
    };
    RedisStore::connect(&settings, 3_600, risk)
        .await
        .expect("redis for the benchmark")
}

fn edge() -> HttpSettings {
    HttpSettings {
        trust_identity_headers: false,
        user_id_claim: "sub".into(),
        member_level_claim: "member_level".into(),
        max_body_bytes: 4_096,
    }
}

/// How the grab function is wired for a run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wiring {
    /// Exactly the deployed wiring except the queue: risk checks on.
    Production,
    /// Risk checks off: one EVALSHA per decision, as redis-benchmark sends.
    ScriptOnly,
}

/// `callers` grab functions, each with its own Redis connection (one Lambda
/// instance each), sharing one in-memory publisher.
async fn apps(
    url: &str,
    cluster: bool,
    callers: usize,
    wiring: Wiring,
    sold_out_ms: u64,
    publisher: Arc<dyn GrantPublisher>,
) -> Vec<Arc<GrabApp>> {
    let mut out = Vec::new();
    for _ in 0..callers {
        let redis = Arc::new(store(url, cluster, RiskLimits::default()).await);
        let risk: Arc<dyn RiskGuard> = match wiring {
            Wiring::Production => redis.clone(),
            Wiring::ScriptOnly => Arc::new(NoRisk),
        };
        let service = GrabService::new(
            redis,
            risk,
            publisher.clone(),
            Arc::new(SystemClock),
            Arc::new(Quiet),
            sold_out_ms,
        );
        out.push(Arc::new(GrabApp { service, edge: edge() }));
    }
    out
}

/// The API Gateway event of a grab, as a template with four holes.
fn template() -> String {
    let mut v: Value = serde_json::from_str(include_str!("../../tests/fixtures/grab_jwt.json")).expect("fixture");
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

/// What a handler run did.
#[derive(Debug, Default)]
struct Drive {
    elapsed: Duration,
    by_status: BTreeMap<u16, u64>,
    total: u64,
}

impl Drive {
    fn per_sec(&self) -> f64 {
        self.total as f64 / self.elapsed.as_secs_f64()
    }
    fn status(&self, s: u16) -> u64 {
        self.by_status.get(&s).copied().unwrap_or(0)
    }
}

/// Drives each app from its own task, with fresh users, until `run` passes
/// or `limit` requests were made in all. Every request goes through
/// `lambda_http::request::from_str` (what the runtime does with the bytes
/// API Gateway sends) and `grab::handle`.
async fn drive(apps: &[Arc<GrabApp>], coupon: &str, label: &str, run: Duration, limit: u64) -> Drive {
    drive_fed(apps, coupon, label, run, limit, Feed::Events).await
}

/// A request built directly, as `lambda_http` would hand it over: the
/// template's parsed parts, with this caller's claims, address and body.
fn built(base: &lambda_http::http::request::Parts, coupon: &str, user: &str, request: &str) -> lambda_http::Request {
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

async fn drive_fed(apps: &[Arc<GrabApp>], coupon: &str, label: &str, run: Duration, limit: u64, feed: Feed) -> Drive {
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
                .map(|i| built(&parts, coupon, &format!("{label}-{t}-{i}"), &format!("r{i}")))
                .collect(),
            Feed::Events => Vec::new(),
        });
    }
    let start = Instant::now();
    let deadline = start + run;
    let mut tasks = Vec::new();
    for ((t, app), mut pool) in apps.iter().enumerate().zip(pools) {
        let (app, tpl, made) = (app.clone(), tpl.clone(), made.clone());
        let coupon = coupon.to_owned();
        let label = label.to_owned();
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
                        let raw = event(&tpl, &coupon, &format!("{label}-{t}-{i}"), &format!("r{i}"), n);
                        lambda_http::request::from_str(&raw).expect("a valid event")
                    }
                    Feed::Requests => match pool.pop() {
                        Some(r) => r,
                        None => panic!("request pool of {per_task} exhausted: lengthen it"),
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

/// The grab script's SHA as the adapter loads it (lib.lua + grab.lua).
async fn load_grab_script(url: &str) -> String {
    let text = concat!(include_str!("../../lua/lib.lua"), include_str!("../../lua/grab.lua"));
    let client = redis::Client::open(url).expect("url");
    let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
    redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(text)
        .query_async(&mut conn)
        .await
        .expect("script load")
}

/// redis-benchmark sending the grab script's EVALSHA with the adapter's key
/// layout, fresh users and request ids (`__rand_int__`); requests per second.
fn redis_benchmark(port: u16, callers: usize, requests: u64, sha: &str, coupon: &str) -> f64 {
    let tag = format!("bench:{{cpn:{coupon}:0}}");
    let out = std::process::Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args([
            "-c",
            &callers.to_string(),
            "-n",
            &requests.to_string(),
            "-r",
            "1000000000",
            "--csv",
        ])
        .arg("EVALSHA")
        .arg(sha)
        .arg("5")
        .arg(format!("{tag}:meta"))
        .arg(format!("{tag}:users"))
        .arg(format!("{tag}:req:u__rand_int__:r__rand_int__"))
        .arg(format!("{tag}:outbox"))
        .arg(format!("{tag}:borrowing"))
        .arg("u__rand_int__")
        .arg("0")
        .arg("r__rand_int__")
        .arg(now_ms().to_string())
        .arg("3600000")
        .output()
        .expect("redis-benchmark (apt: redis-tools)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .filter(|l| l.starts_with("\"EVALSHA"))
        .find_map(|l| l.split(',').nth(1).and_then(|v| v.trim_matches('"').parse().ok()))
        .unwrap_or_else(|| {
            panic!(
                "redis-benchmark output: {text} {}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
}

/// The result of a comparison at several concurrency levels.
const ROUNDS: usize = 3;

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

pub struct Ratios {
    /// The headline ratio.
    pub ratio: f64,
    /// Per level.
    pub by_level: Value,
}

pub async fn grab_vs_redis_benchmark(env: &BenchEnv, rows: &mut Table) -> Ratios {
    let mut levels = Vec::new();
    let mut worst = f64::MAX;
    let sha = load_grab_script(&env.redis_url).await;
    for &c in &env.levels {
        let publisher = Arc::new(CountingPublisher::default());
        let rb_id = unique(&format!("rb{c}"));
        let h_id = unique(&format!("h{c}"));
        let setup = store(&env.redis_url, false, RiskLimits::default()).await;
        setup
            .preheat(&coupon(&rb_id, 1_000_000_000, 1), now_ms())
            .await
            .expect("preheat");
        setup
            .preheat(&coupon(&h_id, 1_000_000_000, 1), now_ms())
            .await
            .expect("preheat");
        let apps = apps(&env.redis_url, false, c, Wiring::ScriptOnly, 0, publisher.clone()).await;
        let parsed = drive_fed(&apps, &h_id, &format!("e{c}"), env.run, u64::MAX, Feed::Events).await;
        assert_eq!(
            parsed.status(200),
            parsed.total,
            "every decision a win: {:?}",
            parsed.by_status
        );
        // Three alternating rounds, the median of each side: this machine's
        // two cores are shared and noisy.
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            let handler = drive_fed(
                &apps,
                &h_id,
                &format!("h{c}r{round}"),
                env.run,
                u64::MAX,
                Feed::Requests,
            )
            .await;
            assert_eq!(
                handler.status(200),
                handler.total,
                "every decision a win: {:?}",
                handler.by_status
            );
            let requests = ((handler.per_sec() * env.run.as_secs_f64()) as u64).max(10_000);
            ours.push(handler.per_sec());
            theirs.push(redis_benchmark(env.redis_port, c, requests, &sha, &rb_id));
        }
        let (handler_rate, rb) = (median(&mut ours), median(&mut theirs));
        let ratio = handler_rate / rb;
        worst = worst.min(ratio);
        rows.push(Row {
            name: format!("grab::handle, script only, {c} callers"),
            value: handler_rate,
            unit: "grabs/s",
            note: format!("median of {ROUNDS}; the handler and Redis share 2 cores"),
        });
        rows.push(Row {
            name: "  the same, each event parsed from JSON first".into(),
            value: parsed.per_sec(),
            unit: "grabs/s",
            note: "plus lambda_http's event parsing (the runtime's work)".into(),
        });
        rows.push(Row {
            name: format!("redis-benchmark, same EVALSHA, {c} clients"),
            value: rb,
            unit: "req/s",
            note: format!("median of {ROUNDS}; Redis CPU"),
        });
        levels.push(json!({"concurrency": c, "handler_per_sec": handler_rate, "handler_rounds": ours, "handler_with_event_parsing_per_sec": parsed.per_sec(), "redis_benchmark_per_sec": rb, "redis_benchmark_rounds": theirs, "ratio": ratio, "ratio_with_event_parsing": parsed.per_sec() / rb}));
    }
    rows.push(Row {
        name: "grab_vs_redis_benchmark (lowest over levels)".into(),
        value: worst,
        unit: "ratio",
        note: "target >= 0.8".into(),
    });
    Ratios {
        ratio: worst,
        by_level: json!(levels),
    }
}

pub async fn grab_vs_lock(env: &BenchEnv, rows: &mut Table) -> Ratios {
    let mut levels = Vec::new();
    let mut at_max = 0.0;
    for &c in &env.levels {
        let publisher = Arc::new(CountingPublisher::default());
        let id = unique(&format!("full{c}"));
        store(&env.redis_url, false, RiskLimits::default())
            .await
            .preheat(&coupon(&id, 1_000_000_000, 1), now_ms())
            .await
            .expect("preheat");
        let production = apps(&env.redis_url, false, c, Wiring::Production, 0, publisher.clone()).await;
        let full = drive_fed(&production, &id, &format!("f{c}"), env.run, u64::MAX, Feed::Requests).await;
        let lean = apps(&env.redis_url, false, c, Wiring::ScriptOnly, 0, publisher).await;
        let script = drive_fed(&lean, &id, &format!("s{c}"), env.run, u64::MAX, Feed::Requests).await;
        let baseline = lock::run(&env.redis_url, &unique("lock"), 1_000_000_000, c, env.run, u64::MAX).await;
        let lock_rate = baseline.decided as f64 / baseline.elapsed.as_secs_f64();
        let ratio = script.per_sec() / lock_rate;
        at_max = ratio;
        rows.push(Row {
            name: format!("grab::handle, script only, {c} callers"),
            value: script.per_sec(),
            unit: "grabs/s",
            note: "the same decision work as the lock flow, and more (limit, idempotency, outbox)".into(),
        });
        rows.push(Row {
            name: format!("grab handler, production wiring, {c} callers"),
            value: full.per_sec(),
            unit: "grabs/s",
            note: "3 scripts (risk user, risk IP, grab), 2 round trips".into(),
        });
        rows.push(Row {
            name: format!("seed 002 lock flow, {c} callers"),
            value: lock_rate,
            unit: "grabs/s",
            note: format!("the lock: 100 ms spins; {} gave up after 5 s", baseline.gave_up),
        });
        levels.push(json!({"concurrency": c, "grab_per_sec": script.per_sec(), "grab_production_wiring_per_sec": full.per_sec(), "lock_per_sec": lock_rate, "lock_gave_up": baseline.gave_up, "ratio": ratio, "ratio_production_wiring": full.per_sec() / lock_rate}));
    }
    rows.push(Row {
        name: format!(
            "grab_vs_lock_baseline (at {} callers)",
            env.levels.last().copied().unwrap_or(0)
        ),
        value: at_max,
        unit: "ratio",
        note: "target >= 10".into(),
    });
    Ratios {
        ratio: at_max,
        by_level: json!(levels),
    }
}

/// A sale of 1,000 units pressed 3,000 times by 32 callers, through both
/// designs; returns the units sold beyond the stock (must be 0).
pub async fn oversell(env: &BenchEnv, rows: &mut Table) -> u64 {
    const STOCK: u64 = 1_000;
    let publisher = Arc::new(CountingPublisher::default());
    let id = unique("sale");
    let setup = store(&env.redis_url, false, RiskLimits::default()).await;
    setup.preheat(&coupon(&id, STOCK, 4), now_ms()).await.expect("preheat");
    let apps = apps(&env.redis_url, false, 32, Wiring::Production, 1_000, publisher.clone()).await;
    let sale = drive(&apps, &id, "sale", Duration::from_secs(600), 3 * STOCK).await;
    let won = sale.status(200);
    let published = publisher.published.load(Ordering::Relaxed);
    let mut conn = setup.connection();
    let mut left = 0i64;
    for s in 0..4 {
        let v: i64 = conn
            .hget(setup.keys().shard(&CouponId::parse(&id).unwrap(), s).meta(), "stock")
            .await
            .expect("stock");
        left += v;
    }
    let grab_over = won.saturating_sub(STOCK) + published.saturating_sub(STOCK) + u64::from(left < 0);
    assert_eq!(won as i64 + left, STOCK as i64, "grab: won + left = stock");

    let baseline = lock::run(
        &env.redis_url,
        &unique("locksale"),
        STOCK as i64,
        32,
        Duration::from_secs(600),
        3 * STOCK,
    )
    .await;
    let lock_over = baseline.won.saturating_sub(STOCK);
    rows.push(Row {
        name: "sale: 1000 units, 3000 presses, 32 callers: grab winners".into(),
        value: won as f64,
        unit: "units",
        note: format!("oversell {grab_over}"),
    });
    rows.push(Row {
        name: "sale: same through the seed 002 lock flow: winners".into(),
        value: baseline.won as f64,
        unit: "units",
        note: format!("oversell {lock_over}; {} presses gave up waiting", baseline.gave_up),
    });
    grab_over + lock_over
}

pub async fn sold_out(env: &BenchEnv, rows: &mut Table) -> SoldOut {
    let c = env.levels.last().copied().unwrap_or(32);
    let id = unique("gone");
    let setup = store(&env.redis_url, false, RiskLimits::default()).await;
    setup.preheat(&coupon(&id, 50, 4), now_ms()).await.expect("preheat");
    let publisher = Arc::new(CountingPublisher::default());
    let sell = apps(&env.redis_url, false, 8, Wiring::Production, 0, publisher.clone()).await;
    let sale = drive(&sell, &id, "sellout", Duration::from_secs(60), 500).await;
    assert_eq!(sale.status(200), 50, "{:?}", sale.by_status);
    let remembered = apps(&env.redis_url, false, c, Wiring::Production, 60_000, publisher.clone()).await;
    // Each instance learns the sell-out on its first press.
    drive_fed(
        &remembered,
        &id,
        "learn",
        Duration::from_secs(60),
        c as u64,
        Feed::Requests,
    )
    .await;
    let cpu0 = redis_cpu(&env.redis_url).await;
    let with = drive_fed(&remembered, &id, "mem", env.run, u64::MAX, Feed::Requests).await;
    let cpu1 = redis_cpu(&env.redis_url).await;
    let forgetful = apps(&env.redis_url, false, c, Wiring::Production, 0, publisher).await;
    let without = drive_fed(&forgetful, &id, "nomem", env.run, u64::MAX, Feed::Requests).await;
    let cpu2 = redis_cpu(&env.redis_url).await;
    assert_eq!(with.status(410), with.total, "{:?}", with.by_status);
    assert_eq!(without.status(410), without.total, "{:?}", without.by_status);
    // Redis CPU per rejection: what one Redis can serve is its inverse.
    let us_with = (cpu1 - cpu0) * 1e6 / with.total as f64;
    let us_without = (cpu2 - cpu1) * 1e6 / without.total as f64;
    let speedup = us_without / us_with;
    let measured = with.per_sec() / without.per_sec();
    rows.push(Row {
        name: "Redis CPU per rejection, memory on / off".into(),
        value: us_with,
        unit: "us",
        note: format!("{us_without:.1} us with the memory off"),
    });
    rows.push(Row {
        name: "measured on this machine (client-bound): on / off".into(),
        value: measured,
        unit: "ratio",
        note: "one process drives all callers; in AWS each Lambda instance has its own CPU".into(),
    });
    rows.push(Row {
        name: format!("after sell-out, sold-out memory on, {c} callers"),
        value: with.per_sec(),
        unit: "rejects/s",
        note: "one GET per press (a replay of a win must still hear SUCCESS)".into(),
    });
    rows.push(Row {
        name: format!("after sell-out, memory off (Redis-bound), {c} callers"),
        value: without.per_sec(),
        unit: "rejects/s",
        note: "risk reserve, grab script, risk release".into(),
    });
    rows.push(Row {
        name: "soldout_speedup (Redis-bound rejections/s, on / off)".into(),
        value: speedup,
        unit: "ratio",
        note: "target >= 5".into(),
    });
    SoldOut {
        speedup,
        measured,
        redis_us_with: us_with,
        redis_us_without: us_without,
    }
}

/// The sold-out memory's effect.
pub struct SoldOut {
    /// Redis-bound rejection rate with the memory over without it.
    pub speedup: f64,
    /// Rejections per second with over without, as measured here.
    pub measured: f64,
    /// Redis CPU per rejection with the memory (microseconds).
    pub redis_us_with: f64,
    /// And without.
    pub redis_us_without: f64,
}

/// Seconds of CPU the Redis main thread has used.
async fn redis_cpu(url: &str) -> f64 {
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

/// Redis commands per grab, counted at the wire by [`crate::proxy`].
pub struct Trips {
    /// Per winner.
    pub winner: f64,
    /// Per loser (sold out, memory off).
    pub loser: f64,
    /// Per loser with the sold-out memory on.
    pub loser_remembered: f64,
    /// Commands by name per scenario.
    pub detail: Value,
}

pub async fn round_trips(env: &BenchEnv, rows: &mut Table) -> Trips {
    const N: u64 = 2_000;
    let upstream = env
        .redis_url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let (port, wire) = crate::proxy::start(upstream).await;
    let url = format!("redis://127.0.0.1:{port}");
    let publisher = Arc::new(CountingPublisher::default());
    let id = unique("trips");
    let setup = store(&env.redis_url, false, RiskLimits::default()).await;
    setup.preheat(&coupon(&id, N, 1), now_ms()).await.expect("preheat");
    let one = apps(&url, false, 1, Wiring::Production, 0, publisher.clone()).await;
    // Warm: the shard count is read once per instance, scripts loaded once.
    drive(&one, &id, "warm", Duration::from_secs(60), 1).await;
    let measure = |label: &'static str, apps: Vec<Arc<GrabApp>>, n: u64, expect: u16| {
        let id = id.clone();
        let wire = wire.clone();
        async move {
            let before = wire.get();
            let d = drive(&apps, &id, label, Duration::from_secs(600), n).await;
            assert_eq!(d.status(expect), n, "{label}: {:?}", d.by_status);
            (wire.get() - before) as f64 / n as f64
        }
    };
    let winner = measure("win", one.clone(), N - 1, 200).await;
    let loser = measure("lose", one.clone(), N, 410).await;
    let remembering = apps(&url, false, 1, Wiring::Production, 600_000, publisher).await;
    drive(&remembering, &id, "learn", Duration::from_secs(60), 1).await;
    let remembered = measure("mem", remembering, N, 410).await;
    rows.push(Row {
        name: "Redis commands per winner (production wiring)".into(),
        value: winner,
        unit: "commands",
        note: "risk user + risk IP (sent together: 1 round trip of latency) + grab".into(),
    });
    rows.push(Row {
        name: "Redis commands per loser (sold out, memory off)".into(),
        value: loser,
        unit: "commands",
        note: "risk reserve x2, grab, risk release x2".into(),
    });
    rows.push(Row {
        name: "Redis commands per loser (sold-out memory on)".into(),
        value: remembered,
        unit: "commands",
        note: "the request id's record, read once".into(),
    });
    Trips {
        winner,
        loser,
        loser_remembered: remembered,
        detail: json!({"countedAt": "the wire (a counting proxy)", "warmup": "one grab per instance first"}),
    }
}

async fn sdk(counter: Option<&CallCounter>) -> (aws_sdk_sqs::Client, aws_sdk_dynamodb::Client) {
    let conf = coupon_shared::adapters::aws::load(AwsCallSettings {
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

/// AWS calls per issued coupon and the issuer's pace.
pub struct Aws {
    /// Grab's SQS sends plus the issuer's DynamoDB calls, per coupon issued.
    pub per_coupon: f64,
    /// The issuer's DynamoDB calls per grant.
    pub dynamodb_per_grant: f64,
    /// Grants issued per second (the issuer handler's time only).
    pub issuer_per_sec: f64,
    /// Calls by operation.
    pub detail: Value,
    /// Coupons issued beyond the stock.
    pub oversell: u64,
}

pub async fn aws_calls(env: &BenchEnv, rows: &mut Table) -> Aws {
    const STOCK: u64 = 400;
    let counter = CallCounter::default();
    let (sqs, ddb) = sdk(Some(&counter)).await;
    let (plain_sqs, plain_ddb) = sdk(None).await;
    let id = unique("aws");
    let def = coupon(&id, STOCK, 2);
    let redis = Arc::new(store(&env.redis_url, false, RiskLimits::default()).await);
    let repo = DynamoCouponRepository::new(plain_ddb.clone(), &env.coupons_table);
    coupon_shared::preheat::create_coupon(&def, 10_000_000, &repo, redis.as_ref(), &SystemClock)
        .await
        .expect("create");
    // The sale: 8 instances with the deployed wiring and the real SQS publisher.
    let mut apps = Vec::new();
    for _ in 0..8 {
        let redis = Arc::new(store(&env.redis_url, false, RiskLimits::default()).await);
        let service = GrabService::new(
            redis.clone(),
            redis,
            Arc::new(SqsPublisher::new(sqs.clone(), env.queue_url.clone())),
            Arc::new(SystemClock),
            Arc::new(Quiet),
            1_000,
        );
        apps.push(Arc::new(GrabApp { service, edge: edge() }));
    }
    let sale = drive(&apps, &id, "aws", Duration::from_secs(600), STOCK + 100).await;
    let won = sale.status(200);
    let grab_calls = counter.snapshot();
    counter.reset();

    // The issuer, as the SQS event source mapping would call it.
    let issuer = issuer::Issuer {
        service: IssuerService::new(
            Arc::new(DynamoLedger::new(
                ddb.clone(),
                &env.coupons_table,
                &env.user_coupons_table,
            )),
            Arc::new(DynamoCouponRepository::new(ddb.clone(), &env.coupons_table)),
            Arc::new(Quiet),
        ),
        clock: Arc::new(SystemClock),
        concurrency: 16,
    };
    let mut issuing = Duration::ZERO;
    let mut delivered = 0u64;
    loop {
        let got = plain_sqs
            .receive_message()
            .queue_url(&env.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(0)
            .send()
            .await
            .expect("receive");
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        let records: Vec<Value> = messages
            .iter()
            .map(|m| json!({"messageId": m.message_id(), "receiptHandle": m.receipt_handle(), "body": m.body(), "eventSource": "aws:sqs"}))
            .collect();
        let event: aws_lambda_events::event::sqs::SqsEvent =
            serde_json::from_value(json!({"Records": records})).expect("event");
        let start = Instant::now();
        let response = issuer::handle(&issuer, lambda_runtime::LambdaEvent::new(event, Default::default()))
            .await
            .expect("batch");
        issuing += start.elapsed();
        assert!(response.batch_item_failures.is_empty(), "issuer failures");
        for m in &messages {
            plain_sqs
                .delete_message()
                .queue_url(&env.queue_url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("delete");
        }
        delivered += messages.len() as u64;
    }
    let issuer_calls = counter.snapshot();
    let ledger = DynamoLedger::new(plain_ddb, &env.coupons_table, &env.user_coupons_table);
    let issued = coupon_shared::ports::DurableFacts::issued(&ledger, &def.coupon_id)
        .await
        .expect("issued");
    assert_eq!(
        (won, delivered, issued),
        (STOCK, STOCK, STOCK),
        "every winner issued once"
    );
    let sends: u64 = grab_calls.values().sum();
    let ddb_calls: u64 = issuer_calls.values().sum();
    let per_coupon = (sends + ddb_calls) as f64 / issued as f64;
    let per_grant = ddb_calls as f64 / issued as f64;
    let per_sec = issued as f64 / issuing.as_secs_f64();
    rows.push(Row {
        name: "AWS calls per issued coupon (grab SQS + issuer DynamoDB)".into(),
        value: per_coupon,
        unit: "calls",
        note: format!("grab {grab_calls:?}; issuer {issuer_calls:?}"),
    });
    rows.push(Row {
        name: "issuer: DynamoDB calls per grant".into(),
        value: per_grant,
        unit: "calls",
        note: "one TransactWriteItems; the definition read once per instance".into(),
    });
    rows.push(Row {
        name: "issuer: grants issued per second (local endpoint)".into(),
        value: per_sec,
        unit: "grants/s",
        note: "moto: one Python process, transactions serialized and copying tables".into(),
    });
    Aws {
        per_coupon,
        dynamodb_per_grant: per_grant,
        issuer_per_sec: per_sec,
        detail: json!({"grab": grab_calls, "issuer": issuer_calls, "issued": issued}),
        oversell: issued.saturating_sub(STOCK),
    }
}

/// A reconciliation pass over many grants.
pub struct Reconcile {
    /// Grants in the outboxes, all issued in DynamoDB.
    pub grants: u64,
    /// Seconds for the pass.
    pub seconds: f64,
}

pub async fn reconcile(env: &BenchEnv, rows: &mut Table) -> Reconcile {
    let grants = env.reconcile_grants;
    const SHARDS: u32 = 4;
    let (plain_sqs, ddb) = sdk(None).await;
    let id = unique("rec");
    let def = coupon(&id, grants, SHARDS);
    let cid = def.coupon_id.clone();
    let redis = Arc::new(store(&env.redis_url, false, RiskLimits::default()).await);
    let repo = DynamoCouponRepository::new(ddb.clone(), &env.coupons_table);
    repo.put_definition(&def).await.expect("definition");
    redis.preheat(&def, now_ms()).await.expect("preheat");
    let granted_at = now_ms() - HOUR;

    // Redis: every unit granted, each grant in its shard's outbox.
    let mut conn = redis.connection();
    for shard in 0..SHARDS {
        let keys = redis.keys().shard(&cid, shard);
        let n = def.shard_stock(shard);
        let mut seq = 0;
        while seq < n {
            let mut pipe = redis::pipe();
            for _ in 0..1_000.min(n - seq) {
                seq += 1;
                let user = format!("u{shard}-{seq}");
                pipe.cmd("XADD")
                    .arg(keys.outbox())
                    .arg(format!("{seq}-0"))
                    .arg("grant_id")
                    .arg(format!("{cid}-{shard}-{seq}"))
                    .arg("coupon_id")
                    .arg(cid.as_str())
                    .arg("user_id")
                    .arg(&user)
                    .arg("ordinal")
                    .arg(1)
                    .arg("request_id")
                    .arg("r1")
                    .arg("shard")
                    .arg(shard)
                    .arg("granted_at_ms")
                    .arg(granted_at)
                    .ignore();
                pipe.cmd("HSET").arg(keys.users()).arg(&user).arg(1).ignore();
            }
            pipe.query_async::<()>(&mut conn).await.expect("fill outbox");
        }
        let _: () = conn
            .hset_multiple(keys.meta(), &[("stock", "0".to_owned()), ("seq", n.to_string())])
            .await
            .expect("meta");
    }

    // DynamoDB: every grant issued (the wallets and the counters).
    let mut batches = Vec::new();
    let mut batch = Vec::new();
    for shard in 0..SHARDS {
        for seq in 1..=def.shard_stock(shard) {
            let user = coupon_shared::ids::UserId::parse(&format!("u{shard}-{seq}")).unwrap();
            let item = std::collections::HashMap::from([
                ("pk".to_owned(), AttributeValue::S(user_pk(&user))),
                ("sk".to_owned(), AttributeValue::S(user_coupon_sk(&cid, 1))),
                ("coupon_id".to_owned(), AttributeValue::S(cid.to_string())),
                ("user_id".to_owned(), AttributeValue::S(user.to_string())),
                ("ordinal".to_owned(), AttributeValue::N("1".into())),
                ("grant_id".to_owned(), AttributeValue::S(format!("{cid}-{shard}-{seq}"))),
                ("status".to_owned(), AttributeValue::S("UNUSED".into())),
            ]);
            batch.push(
                WriteRequest::builder()
                    .put_request(PutRequest::builder().set_item(Some(item)).build().unwrap())
                    .build(),
            );
            if batch.len() == 25 {
                batches.push(std::mem::take(&mut batch));
            }
        }
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    let table = env.user_coupons_table.clone();
    futures::stream::iter(batches)
        .for_each_concurrent(8, |b| {
            let ddb = ddb.clone();
            let table = table.clone();
            async move {
                let mut pending = Some(std::collections::HashMap::from([(table.clone(), b)]));
                while let Some(items) = pending.take() {
                    let out = ddb
                        .batch_write_item()
                        .set_request_items(Some(items))
                        .send()
                        .await
                        .expect("batch write");
                    pending = out.unprocessed_items.filter(|u| u.values().any(|v| !v.is_empty()));
                }
            }
        })
        .await;
    for k in 0..def.counter_items() {
        ddb.update_item()
            .table_name(&env.coupons_table)
            .key("pk", AttributeValue::S(coupon_pk(&cid)))
            .key("sk", AttributeValue::S(format!("COUNTER#{k}")))
            .update_expression("SET issued = #cap")
            .expression_attribute_names("#cap", "cap")
            .send()
            .await
            .expect("counter");
    }

    let ledger = Arc::new(DynamoLedger::new(ddb, &env.coupons_table, &env.user_coupons_table));
    let reconciler = Reconciler::new(
        ledger,
        redis.clone(),
        redis.clone(),
        Arc::new(SqsRedrive::new(plain_sqs, &env.queue_url, None)),
        Arc::new(SystemClock),
        Arc::new(Quiet),
        ReconcileSettings {
            grace_ms: 30_000,
            ..ReconcileSettings::default()
        },
    );
    let start = Instant::now();
    let report = reconciler.coupon(&def, now_ms()).await.expect("reconcile");
    let seconds = start.elapsed().as_secs_f64();
    assert_eq!(
        (report.issued, report.trimmed, report.pending, report.drift),
        (grants, grants, 0, 0),
        "{report:?}"
    );
    rows.push(Row {
        name: format!("reconciler: one pass over {grants} grants (all issued, trimmed)"),
        value: seconds,
        unit: "s",
        note: "the local endpoint's BatchGetItem (moto), 100 keys per call".into(),
    });
    Reconcile { grants, seconds }
}

/// Cluster against one node.
pub struct Cluster {
    /// Cluster throughput over single-node throughput.
    pub ratio: f64,
    /// Figures.
    pub detail: Value,
    /// Units sold beyond the stock.
    pub oversell: u64,
}

pub async fn cluster_vs_single(env: &BenchEnv, rows: &mut Table) -> Cluster {
    let cluster_url = env.cluster_url.clone().expect("cluster url");
    let c = env.levels.last().copied().unwrap_or(32);
    const SHARDS: u32 = 12;
    let mut figures = Vec::new();
    let mut oversell = 0;
    for (name, url, cluster) in [
        ("single node", env.redis_url.clone(), false),
        ("3-master cluster", cluster_url, true),
    ] {
        let id = unique(if cluster { "cl" } else { "sn" });
        let setup = store(&url, cluster, RiskLimits::default()).await;
        setup
            .preheat(&coupon(&id, 1_000_000_000, SHARDS), now_ms())
            .await
            .expect("preheat");
        let publisher = Arc::new(CountingPublisher::default());
        let apps = apps(&url, cluster, c, Wiring::ScriptOnly, 0, publisher.clone()).await;
        let d = drive(&apps, &id, name.split(' ').next().unwrap_or("x"), env.run, u64::MAX).await;
        assert_eq!(d.status(200), d.total);
        oversell += publisher
            .published
            .load(Ordering::Relaxed)
            .saturating_sub(d.status(200));
        rows.push(Row {
            name: format!("hot coupon, {SHARDS} shards, {c} callers: {name}"),
            value: d.per_sec(),
            unit: "grabs/s",
            note: "all Redis processes and the client share 2 cores here".into(),
        });
        figures.push((name, d.per_sec()));
    }
    let ratio = figures[1].1 / figures[0].1;
    rows.push(Row {
        name: "cluster_vs_single_node".into(),
        value: ratio,
        unit: "ratio",
        note: "see docs/performance.md for AWS".into(),
    });
    Cluster {
        ratio,
        detail: json!({"single_per_sec": figures[0].1, "cluster_per_sec": figures[1].1, "shards": SHARDS, "callers": c}),
        oversell,
    }
}

/// Diagnostics: the grab script through redis-rs alone (no handler), one
/// caller, to split the handler's overhead from the client library's.
pub async fn raw_client(env: &BenchEnv, rows: &mut Table) {
    let sha = load_grab_script(&env.redis_url).await;
    let id = unique("raw");
    let setup = store(&env.redis_url, false, RiskLimits::default()).await;
    setup
        .preheat(&coupon(&id, 1_000_000_000, 1), now_ms())
        .await
        .expect("preheat");
    let tag = format!("bench:{{cpn:{id}:0}}");
    let client = redis::Client::open(env.redis_url.as_str()).expect("url");
    for (name, mut conn) in [
        (
            "multiplexed",
            RawConn::Mux(client.get_multiplexed_async_connection().await.expect("redis")),
        ),
        (
            "manager",
            RawConn::Mgr(redis::aio::ConnectionManager::new(client.clone()).await.expect("redis")),
        ),
        (
            "manager with the adapter's timeouts",
            RawConn::Mgr(
                redis::aio::ConnectionManager::new_with_config(
                    client.clone(),
                    redis::aio::ConnectionManagerConfig::new()
                        .set_response_timeout(Some(Duration::from_millis(5_000)))
                        .set_connection_timeout(Some(Duration::from_millis(2_000)))
                        .set_number_of_retries(2),
                )
                .await
                .expect("redis"),
            ),
        ),
    ] {
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < env.run {
            n += 1;
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&sha)
                .arg(5)
                .arg(format!("{tag}:meta"))
                .arg(format!("{tag}:users"))
                .arg(format!("{tag}:req:u{n}:r{n}"))
                .arg(format!("{tag}:outbox"))
                .arg(format!("{tag}:borrowing"))
                .arg(format!("u{n}"))
                .arg(0)
                .arg(format!("r{n}"))
                .arg(now_ms())
                .arg(3_600_000);
            let _: Vec<String> = match &mut conn {
                RawConn::Mux(c) => cmd.query_async(c).await.expect("evalsha"),
                RawConn::Mgr(c) => cmd.query_async(c).await.expect("evalsha"),
            };
        }
        rows.push(Row {
            name: format!("diagnostic: redis-rs {name}, grab script, 1 caller"),
            value: n as f64 / start.elapsed().as_secs_f64(),
            unit: "req/s",
            note: String::new(),
        });
    }
}

enum RawConn {
    Mux(redis::aio::MultiplexedConnection),
    Mgr(redis::aio::ConnectionManager),
}
