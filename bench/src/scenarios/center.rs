//! The coupon center (`GET /coupons`): listings per second per instance
//! and Redis CPU per listing, for a page of coupons all coming up (the
//! instance's cached copy alone: no Redis read) and for the same page in
//! its window (plus one read-only script per coupon on the caller's home
//! shard). The catalogue is in memory here: in AWS it is one query per
//! instance per `CENTER_CACHE_MS`, whoever asks, so it is not a per-call
//! cost.

use std::sync::Arc;
use std::time::Instant;

use coupon_adapters::redis::RedisStandings;
use coupon_domain::testing::{CountingQueue, MemoryLiveCoupons};
use grab::{CenterPorts, GrabApp, Ports};
use serde_json::{json, Value};

use super::{coupon, grab_clients, grab_config, preheat, redis_cpu, sdk, store, unique};
use crate::{BenchEnv, Row, Table};

/// Coupons on a page, as an app's first screen asks for.
const PAGE: usize = 10;
/// Listings per caller in each run.
const CALLS: usize = 2_000;

/// The figures of the summary.
pub struct CenterCosts {
    /// By case: listings per second of one instance, Redis CPU per listing.
    pub detail: Value,
}

/// `callers` grab functions whose center lists `defs` (each already
/// preheated), with their own Redis connections.
async fn centers(
    env: &BenchEnv,
    callers: usize,
    defs: &[coupon_domain::coupon::CouponDefinition],
) -> Vec<Arc<GrabApp>> {
    let config = grab_config(&env.redis_url, false, "http://unused.invalid/queue", 1_000);
    let (sqs, ddb) = sdk(None).await;
    let mut out = Vec::new();
    for _ in 0..callers {
        let redis = store(&env.redis_url, false).await;
        let mut ports = grab::ports(&config, grab_clients(redis.clone(), sqs.clone(), ddb.clone()));
        ports.grab.publisher = Arc::new(CountingQueue::default());
        ports.grab.claims = Arc::new(coupon_domain::testing::FakeClaims::default());
        let live = MemoryLiveCoupons::default();
        *live.coupons.lock().unwrap() = defs.to_vec();
        let center = CenterPorts {
            live: Arc::new(live),
            standings: Arc::new(RedisStandings::new(redis)),
        };
        out.push(Arc::new(grab::wire_ports(
            &config,
            Ports {
                grab: ports.grab,
                center,
            },
        )));
    }
    out
}

/// `CALLS` listings as distinct users, parsed before the clock starts.
fn listings(caller: usize) -> Vec<lambda_http::Request> {
    let mut v: Value = serde_json::from_str(include_str!("../../../tests/fixtures/center_jwt.json")).expect("fixture");
    v["rawQueryString"] = format!("limit={PAGE}").into();
    v["queryStringParameters"] = json!({"limit": PAGE.to_string()});
    (0..CALLS)
        .map(|i| {
            v["requestContext"]["authorizer"]["jwt"]["claims"]["sub"] = format!("viewer-{caller}-{i}").into();
            lambda_http::request::from_str(&v.to_string()).expect("a center event")
        })
        .collect()
}

/// Every caller lists `CALLS` times at once; the seconds it took and the
/// listings made.
async fn drive(apps: &[Arc<GrabApp>]) -> (f64, u64) {
    let pools: Vec<Vec<lambda_http::Request>> = (0..apps.len()).map(listings).collect();
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for (app, pool) in apps.iter().cloned().zip(pools) {
        tasks.spawn(async move {
            let mut ok = 0u64;
            for req in pool {
                let resp = grab::handle(&app, req).await.expect("infallible");
                assert_eq!(resp.status(), 200, "a listing failed");
                ok += 1;
            }
            ok
        });
    }
    let mut total = 0;
    while let Some(done) = tasks.join_next().await {
        total += done.expect("caller");
    }
    (start.elapsed().as_secs_f64(), total)
}

pub async fn center(env: &BenchEnv, rows: &mut Table) -> CenterCosts {
    let c = env.levels.last().copied().unwrap_or(32);
    let setup = store(&env.redis_url, false).await;
    let mut detail = serde_json::Map::new();
    for (case, upcoming) in [
        ("coming up (cached part only)", true),
        ("in their window (+ per-user part)", false),
    ] {
        let mut defs = Vec::new();
        for _ in 0..PAGE {
            let mut def = coupon(&unique("center"), 1_000_000, 4);
            if upcoming {
                def.grab_start_ms = def.grab_end_ms - 1_000;
            }
            preheat(&setup, &def).await;
            defs.push(def);
        }
        // One instance, one listing at a time: what a Lambda instance serves.
        let one = centers(env, 1, &defs).await;
        let (secs, calls) = drive(&one).await;
        let per_instance = calls as f64 / secs;
        // Every caller at once, for Redis CPU per listing.
        let many = centers(env, c, &defs).await;
        let cpu0 = redis_cpu(&env.redis_url).await;
        let (_, calls) = drive(&many).await;
        let cpu_us = (redis_cpu(&env.redis_url).await - cpu0) * 1e6 / calls as f64;
        rows.push(Row {
            name: format!("coupon center, {PAGE} coupons {case}"),
            value: per_instance,
            unit: "lists/s",
            note: format!("one instance; {cpu_us:.1} us Redis CPU per listing at {c} callers"),
        });
        detail.insert(
            case.into(),
            json!({"listingsPerSecPerInstance": per_instance, "redisCpuUsPerListing": cpu_us, "page": PAGE}),
        );
    }
    CenterCosts {
        detail: Value::Object(detail),
    }
}
