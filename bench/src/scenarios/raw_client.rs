//! Diagnostics (`BENCH_ONLY=raw`): one caller through the whole handler
//! against the grab script through redis-rs alone, each with the client's
//! and Redis's CPU per request, to split the handler's own cost from the
//! client library's and the network's (docs/performance.md, "Where a
//! round trip goes").

use std::sync::Arc;
use std::time::{Duration, Instant};

use coupon_domain::testing::CountingQueue;

use super::vs_redis::load_grab_script;
use super::{apps, coupon, now_ms, preheat, store, unique, Wiring};
use crate::{BenchEnv, Row, Table};

/// Diagnostics: the grab script through redis-rs alone (no handler), one
/// caller, to split the handler's overhead from the client library's.
pub async fn raw_client(env: &BenchEnv, rows: &mut Table) {
    let sha = load_grab_script(&env.redis_url).await;
    let id = unique("raw");
    let setup = store(&env.redis_url, false).await;
    preheat(&setup, &coupon(&id, 1_000_000_000, 1)).await;
    let tag = format!("bench:{{cpn:{id}:0}}");
    let client = redis::Client::open(env.redis_url.as_str()).expect("url");
    let one = apps(
        &env.redis_url,
        false,
        1,
        Wiring::ScriptOnly,
        0,
        Arc::new(CountingQueue::default()),
    )
    .await;
    let tpl = super::template();
    let (parts, _) = lambda_http::request::from_str(&tpl).expect("template").into_parts();
    // Two rounds of each, alternating: this machine's speed drifts.
    for round in 0..2 {
        let app = one[0].clone();
        let mut reqs: Vec<_> = (0..40_000)
            .map(|i| super::built(&parts, &id, &format!("inline{round}-{i}"), "r1"))
            .collect();
        let cpu = on_cpu_ns();
        let rcpu = super::redis_cpu(&env.redis_url).await;
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < env.run {
            let Some(req) = reqs.pop() else { break };
            n += 1;
            let resp = grab::handle(&app, req).await.expect("infallible");
            assert_eq!(resp.status(), 200);
        }
        rows.push(Row {
            name: "diagnostic: grab::handle, script only, 1 caller".into(),
            value: n as f64 / start.elapsed().as_secs_f64(),
            unit: "req/s",
            note: costs(&env.redis_url, cpu, rcpu, n).await,
        });
        raw_loop(env, rows, &client, &sha, &tag).await;
    }
}

async fn raw_loop(env: &BenchEnv, rows: &mut Table, client: &redis::Client, sha: &str, tag: &str) {
    let think = Duration::from_micros(
        std::env::var("BENCH_RAW_THINK_US")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0),
    );
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
        let cpu = on_cpu_ns();
        let rcpu = super::redis_cpu(&env.redis_url).await;
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < env.run {
            n += 1;
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(sha)
                .arg(5)
                .arg(format!("{tag}:meta"))
                .arg(format!("{tag}:users"))
                .arg(format!("{tag}:req:u{n}:r{n}"))
                .arg(format!("{tag}:outbox"))
                .arg(format!("{tag}:borrowing"))
                .arg("whole")
                .arg(format!("u{n}"))
                .arg(0)
                .arg(now_ms())
                .arg("")
                .arg(format!("r{n}"))
                .arg(3_600_000);
            // BENCH_RAW_THINK_US: client work before each request, to see
            // what a slower client costs in wall time (more than the work).
            if think > Duration::ZERO {
                let t = Instant::now();
                while t.elapsed() < think {
                    std::hint::spin_loop();
                }
            }
            let _: Vec<String> = match &mut conn {
                RawConn::Mux(c) => cmd.query_async(c).await.expect("evalsha"),
                RawConn::Mgr(c) => cmd.query_async(c).await.expect("evalsha"),
            };
        }
        rows.push(Row {
            name: format!("diagnostic: redis-rs {name}, grab script, 1 caller"),
            value: n as f64 / start.elapsed().as_secs_f64(),
            unit: "req/s",
            note: costs(&env.redis_url, cpu, rcpu, n).await,
        });
    }
}

enum RawConn {
    Mux(redis::aio::MultiplexedConnection),
    Mgr(redis::aio::ConnectionManager),
}

/// Nanoseconds this thread has run on a CPU (the benchmark drives every
/// caller from this one thread), from the scheduler's own accounting.
pub(crate) fn on_cpu_ns() -> u64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// Client and Redis CPU per request since `cpu` (this thread's, ns) and
/// `rcpu` (Redis's, s) were read, over `n` requests.
async fn costs(url: &str, cpu: u64, rcpu: f64, n: u64) -> String {
    format!(
        "{:.1} us of client CPU, {:.1} us of Redis CPU per request",
        (on_cpu_ns() - cpu) as f64 / 1e3 / n as f64,
        (super::redis_cpu(url).await - rcpu) * 1e6 / n as f64
    )
}
