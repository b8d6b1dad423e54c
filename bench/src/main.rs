//! The benchmark behind `make bench` (`infra/harness/bench.sh` starts a dedicated
//! redis-server and a private moto server, then runs this).
//!
//! Every figure is a ratio of two runs in this process, on this machine, one
//! after the other, or a count; nothing is compared with a number measured
//! elsewhere. Scenarios:
//!
//! - **grab vs redis-benchmark**: decisions per second through the real grab
//!   handler (`grab::handle`, fed API Gateway events parsed as the runtime
//!   parses them) against the dedicated redis-server, beside
//!   `redis-benchmark` sending the same EVALSHA (the grab script, same keys
//!   and argument shapes) at the same concurrency. One connection per
//!   concurrent caller, as one Lambda instance has.
//! - **grab vs the seeds' lock flow** (seed 002: `SET NX` lock with a 100 ms
//!   spin, `GET`, `DECR`, compare-and-delete unlock) on the same Redis.
//! - **sold-out speedup**: Redis CPU per rejection after a sell-out with
//!   the per-instance sold-out memory against without it.
//! - **oversell**: a sale of fixed stock through each design; counted.
//! - **press costs**: per outcome (winner, rate limited, already claimed,
//!   not eligible, sold out with and without the memory), with the risk
//!   checks on: round trips and commands counted at the wire by a counting
//!   proxy (`proxy.rs`), and Redis main-thread CPU per press under load.
//! - **AWS calls**: SDK calls counted by an interceptor on the clients the
//!   grab and issuer use; issuer throughput against the local endpoint.
//! - **reconciler**: one pass over a coupon with 100,000 grants; the
//!   scheduled pass over 1,000 coupons (most ended: the first pass settles
//!   them, a later one skips them).
//! - **cluster vs one node**: a sharded hot coupon on the local 3-master
//!   Redis Cluster against the dedicated single node.
//!
//! Results: a table on stdout and `target/bench/summary.json`.

mod counting;
mod lock;
mod proxy;
mod scenarios;

use std::collections::BTreeMap;
use std::time::Duration;

use coupon_adapters::config::TableNames;

use serde_json::{json, Value};

/// Where things are (from `infra/harness/bench.sh`).
pub struct BenchEnv {
    /// The dedicated redis-server (only this benchmark talks to it).
    pub redis_url: String,
    /// Its port, for redis-benchmark.
    pub redis_port: u16,
    /// The local Redis Cluster (a seed node), if running.
    pub cluster_url: Option<String>,
    /// Tables on the private moto server.
    pub tables: TableNames,
    /// The grant queue.
    pub queue_url: String,
    /// How long each throughput run lasts.
    pub run: Duration,
    /// Concurrency levels.
    pub levels: Vec<usize>,
    /// Grants for the reconciler run.
    pub reconcile_grants: u64,
    /// `BENCH_ONLY`: run just these scenarios (names as in
    /// `scenarios_subset`), for working on one figure; no summary is written.
    pub only: Option<Vec<String>>,
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

impl BenchEnv {
    fn from_env() -> Result<Self, String> {
        let need = |n: &str| env(n).ok_or_else(|| format!("{n} is not set (run `make bench`)"));
        let redis_url = need("BENCH_REDIS_URL")?;
        let redis_port = redis_url
            .rsplit(':')
            .next()
            .and_then(|p| p.trim_end_matches('/').parse().ok())
            .ok_or("BENCH_REDIS_URL must end with :<port>")?;
        Ok(Self {
            redis_url,
            redis_port,
            cluster_url: env("BENCH_CLUSTER_URL"),
            tables: TableNames::from_env(&coupon_domain::config::Env::process()).map_err(|e| e.to_string())?,
            queue_url: need("GRANT_QUEUE_URL")?,
            run: Duration::from_millis(env("BENCH_RUN_MS").and_then(|v| v.parse().ok()).unwrap_or(3_000)),
            levels: env("BENCH_LEVELS")
                .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
                .unwrap_or_else(|| vec![1, 8, 32, 128]),
            reconcile_grants: env("BENCH_RECONCILE_GRANTS")
                .and_then(|v| v.parse().ok())
                .unwrap_or(100_000),
            only: env("BENCH_ONLY").map(|v| v.split(',').map(|x| x.trim().to_owned()).collect()),
        })
    }
}

/// One row of the printed table.
pub struct Row {
    /// What was measured.
    pub name: String,
    /// The figure.
    pub value: f64,
    /// Its unit.
    pub unit: &'static str,
    /// What bounds it.
    pub note: String,
}

/// The rows so far; each is printed as it is measured.
#[derive(Default)]
pub struct Table(Vec<Row>);

impl Table {
    /// Records and prints a row.
    pub fn push(&mut self, row: Row) {
        println!("  {:<58} {:>14.2}  {:<10} {}", row.name, row.value, row.unit, row.note);
        self.0.push(row);
    }
}

/// The grab function's allocator (functions/grab/src/main.rs), so the
/// handler is measured as deployed.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    // One thread drives every caller, as redis-benchmark does: on a 2-core
    // machine the other core is Redis's. BENCH_RUNTIME=multi to compare.
    let multi = env("BENCH_RUNTIME").as_deref() == Some("multi");
    let runtime = if multi {
        tokio::runtime::Builder::new_multi_thread().enable_all().build()
    } else {
        tokio::runtime::Builder::new_current_thread().enable_all().build()
    }
    .expect("tokio runtime");
    runtime.block_on(run());
}

async fn run() {
    let env = match BenchEnv::from_env() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("bench: {e}");
            std::process::exit(2);
        }
    };
    let mut rows = Table::default();
    start_from_nothing(&env).await;
    let only = env.only.clone();
    let wanted = |name: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == name));
    if !wanted("all") {
        return scenarios_subset(&env, &mut rows, &wanted).await;
    }
    let (mut summary, oversell) = every_scenario(&env, &mut rows).await;
    summary.insert("oversell".into(), json!(oversell));
    summary.insert("concurrency_levels".into(), json!(env.levels));
    summary.insert("run_ms".into(), json!(env.run.as_millis() as u64));
    summary.insert(
        "cpus".into(),
        json!(std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)),
    );
    report(&rows, summary, oversell);
    if oversell > 0 {
        eprintln!("bench: OVERSELL {oversell}");
        std::process::exit(1);
    }
}

/// The dedicated server is the benchmark's alone: it starts from nothing.
async fn start_from_nothing(env: &BenchEnv) {
    let client = redis::Client::open(env.redis_url.as_str()).expect("BENCH_REDIS_URL");
    let mut conn = client.get_multiplexed_async_connection().await.expect("bench redis");
    let _: () = redis::cmd("FLUSHALL")
        .arg("ASYNC")
        .query_async(&mut conn)
        .await
        .expect("flushall");
}

/// Every scenario in turn, each adding its rows to the table: the summary's
/// figures, and the units sold beyond the stock over all of them.
async fn every_scenario(env: &BenchEnv, rows: &mut Table) -> (BTreeMap<String, Value>, u64) {
    let mut summary: BTreeMap<String, Value> = BTreeMap::new();
    let mut oversell: u64 = 0;
    // First: the pass lists every coupon in DynamoDB, so it runs before
    // any other scenario adds its own.
    let many = scenarios::reconcile_many(env, rows).await;
    summary.insert(
        "reconcile_pass_coupons".into(),
        json!({
            "coupons": many.coupons,
            "firstPassSeconds": many.first_seconds,
            "laterPassSeconds": many.later_seconds,
            "laterPassVisited": many.later_visited,
        }),
    );
    let throughput = scenarios::grab_vs_redis_benchmark(env, rows).await;
    summary.insert("grab_vs_redis_benchmark".into(), json!(throughput.ratio));
    summary.insert(
        "grab_vs_redis_benchmark_by_concurrency".into(),
        throughput.by_level.clone(),
    );

    let lock = scenarios::grab_vs_lock(env, rows).await;
    summary.insert("grab_vs_lock_baseline".into(), json!(lock.ratio));
    summary.insert("grab_vs_lock_baseline_by_concurrency".into(), lock.by_level.clone());

    let sale = scenarios::oversell(env, rows).await;
    oversell += sale;

    let soldout = scenarios::sold_out(env, rows).await;
    summary.insert("soldout_speedup".into(), json!(soldout.speedup));
    summary.insert("soldout_speedup_measured_client_bound".into(), json!(soldout.measured));
    summary.insert(
        "soldout_redis_cpu_us_per_rejection".into(),
        json!({"memoryOn": soldout.redis_us_with, "memoryOff": soldout.redis_us_without}),
    );

    let trips = scenarios::round_trips(env, rows).await;
    summary.insert("redis_round_trips_per_winner".into(), json!(trips.winner));
    summary.insert("redis_round_trips_per_loser".into(), json!(trips.loser));
    summary.insert(
        "redis_round_trips_per_loser_sold_out_memory".into(),
        json!(trips.loser_remembered),
    );
    summary.insert("redis_cpu_us_per_refusal".into(), json!(trips.cpu_per_refusal));
    summary.insert("redis_cpu_us_per_get".into(), json!(trips.cpu_per_get));
    summary.insert("redis_cpu_us_per_win".into(), json!(trips.cpu_per_win));
    let per_get = |us: f64| us / trips.cpu_per_get.max(f64::MIN_POSITIVE);
    summary.insert("redis_cpu_refusal_vs_get".into(), json!(per_get(trips.cpu_per_refusal)));
    summary.insert("redis_cpu_win_vs_get".into(), json!(per_get(trips.cpu_per_win)));
    summary.insert("press_costs_by_outcome".into(), trips.by_outcome.clone());
    summary.insert(
        "dry_run_costs".into(),
        json!({
            "refusedRedisCpuUs": trips.cpu_per_dry_run.0,
            "refusedRoundTrips": trips.dry_run_trips.0,
            "wouldWinRedisCpuUs": trips.cpu_per_dry_run.1,
            "wouldWinRoundTrips": trips.dry_run_trips.1,
        }),
    );

    let center = scenarios::center(env, rows).await;
    summary.insert("coupon_center_costs".into(), center.detail);

    let aws = scenarios::aws_calls(env, rows).await;
    summary.insert("aws_calls_per_issued_coupon".into(), json!(aws.per_coupon));
    summary.insert("dynamodb_calls_per_grant".into(), json!(aws.dynamodb_per_grant));
    summary.insert("issuer_grants_per_sec".into(), json!(aws.issuer_per_sec));
    summary.insert("aws_calls_detail".into(), aws.detail.clone());
    oversell += aws.oversell;

    let rec = scenarios::reconcile(env, rows).await;
    summary.insert("reconcile_grants".into(), json!(rec.grants));
    summary.insert("reconcile_seconds".into(), json!(rec.seconds));

    if env.cluster_url.is_some() {
        let cluster = scenarios::cluster_vs_single(env, rows).await;
        summary.insert("cluster_vs_single_node".into(), json!(cluster.ratio));
        summary.insert("cluster_detail".into(), cluster.detail.clone());
        oversell += cluster.oversell;
    }
    (summary, oversell)
}

/// The table on the terminal, and the summary with it in
/// target/bench/rust.json (bench_extra.py adds its figures to it).
fn report(rows: &Table, mut summary: BTreeMap<String, Value>, oversell: u64) {
    print_table(rows);
    println!("{:<58} {:>14}  count", "oversell (all scenarios)", oversell);

    let dir = std::path::Path::new("target/bench");
    std::fs::create_dir_all(dir).expect("target/bench");
    let rows_json: Vec<Value> = rows
        .0
        .iter()
        .map(|r| json!({"figure": r.name, "value": r.value, "unit": r.unit, "boundBy": r.note}))
        .collect();
    summary.insert("table".into(), json!(rows_json));
    std::fs::write(
        dir.join("rust.json"),
        serde_json::to_string_pretty(&summary).expect("json"),
    )
    .expect("write target/bench/rust.json");
}

/// The whole table on the terminal, after the run.
fn print_table(rows: &Table) {
    println!();
    println!("{:<58} {:>14}  {:<10} bound by", "figure", "value", "unit");
    for r in &rows.0 {
        println!("{:<58} {:>14.2}  {:<10} {}", r.name, r.value, r.unit, r.note);
    }
}

/// Runs the scenarios `BENCH_ONLY` names (each row printed as it is
/// recorded; no summary).
async fn scenarios_subset(env: &BenchEnv, rows: &mut Table, wanted: &dyn Fn(&str) -> bool) {
    if wanted("redis-benchmark") {
        scenarios::grab_vs_redis_benchmark(env, rows).await;
    }
    if wanted("lock") {
        scenarios::grab_vs_lock(env, rows).await;
    }
    if wanted("sold-out") {
        scenarios::sold_out(env, rows).await;
    }
    if wanted("raw") {
        scenarios::raw_client(env, rows).await;
    }
    if wanted("round-trips") {
        scenarios::round_trips(env, rows).await;
    }
    if wanted("center") {
        scenarios::center(env, rows).await;
    }
    if wanted("aws-calls") {
        scenarios::aws_calls(env, rows).await;
    }
    if wanted("reconcile") {
        scenarios::reconcile(env, rows).await;
    }
    if wanted("reconcile-many") {
        scenarios::reconcile_many(env, rows).await;
    }
}
