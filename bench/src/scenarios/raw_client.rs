//! Diagnostics: the grab script through redis-rs alone, without the
//! handler, to split the handler's overhead from the client library's.

use std::time::{Duration, Instant};

use super::vs_redis::load_grab_script;
use super::{coupon, now_ms, preheat, store, unique};
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
