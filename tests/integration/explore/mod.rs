//! The explorer: seeded schedules of presses, retries, the issuer and the
//! reconciler's pass over the real scripts and use cases, with faults
//! between any two steps, each judged against the promise after healing.
//!
//! # Layout
//!
//! - `world.rs`: what a seed draws, the world it builds, the schedule.
//! - `actors.rs`: the users, the twin presses, the issuer, the reconciler.
//! - `heal.rs`: the faults, the healing, the judgement.
//! - `sched.rs`: the seeded scheduler every step waits for.
//! - `gated.rs`: the real adapters behind the scheduler's gate.
//!
//! - `explore::fixed_seeds`: the seeds every CI run replays (on each
//!   engine the integration tests run on).
//! - `explore::search` (ignored; `make explore`): schedules for
//!   `EXPLORE_SECONDS` (or `EXPLORE_SCHEDULES`) from seed
//!   `EXPLORE_FIRST_SEED`, or the one seed `EXPLORE_SEED` with its story;
//!   writes `target/explore/report.json`.

mod actors;
mod gated;
mod heal;
mod sched;
mod world;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

/// The seeds CI replays: each ends with no violation today, so a change
/// that breaks one of their schedules fails CI with the schedule's story.
const FIXED_SEEDS: std::ops::RangeInclusive<u64> = 1..=12;

fn print_failure(o: &world::Outcome) {
    eprintln!("seed {} ({}): {} violation(s)", o.seed, o.shape, o.violations.len());
    for (n, line) in o.story.iter().enumerate() {
        eprintln!("  {:>3}. {line}", n + 1);
    }
    for v in &o.violations {
        eprintln!("  VIOLATED: {v}");
    }
    eprintln!("  replay: make explore EXPLORE_SEED={}", o.seed);
}

#[tokio::test]
async fn fixed_seeds_keep_every_promise_after_healing() {
    let mut failed = Vec::new();
    for seed in FIXED_SEEDS {
        let outcome = world::explore(seed).await;
        if !outcome.violations.is_empty() {
            print_failure(&outcome);
            failed.push(seed);
        }
    }
    assert!(failed.is_empty(), "seeds {failed:?} broke the promise (stories above)");
}

/// Seeds the search found breaking the promise, each kept as a regression
/// case until the protocol keeps it (`make explore EXPLORE_SEED=<seed>`
/// tells its story). Both are the first finding of issue 34, a borrow's
/// unit on one shard and its claim on another, one of them lost:
///
/// - 24 (on both engines, four shards, twin presses): u1, homed on shard
///   3, takes a unit of shard 0 (its grant 0-2 in shard 0's outbox) and
///   settles it at home; then shard 0's node loses its data. The rebuild
///   counts shard 0's units from DynamoDB's holdings, which do not hold
///   0-2 yet, so shard 0 sells that unit again while u1's retry replays
///   its win from the home shard and 0-2 is issued: the stock equation
///   ends one unit over (an oversell the issuer's total would refuse,
///   after a SUCCESS).
/// - 101 (on both engines, two shards, twin presses): u4, homed on shard 0, takes a unit
///   of shard 1; shard 0's node loses its data before the settle. The
///   rebuild restores shard 0 sold out and knows nothing of u4's claim, so
///   u4's retry hears SOLD_OUT, while the reconciler re-drives the unit
///   shard 1 gave and u4 is issued a coupon it was told it did not get.
const KNOWN_FINDINGS: &[u64] = &[24, 101];

#[tokio::test]
#[ignore = "findings of the search the protocol does not keep yet (issue 34)"]
async fn known_findings_keep_every_promise_after_healing() {
    let mut failed = Vec::new();
    for &seed in KNOWN_FINDINGS {
        let outcome = world::explore(seed).await;
        if !outcome.violations.is_empty() {
            print_failure(&outcome);
            failed.push(seed);
        }
    }
    assert!(failed.is_empty(), "seeds {failed:?} broke the promise (stories above)");
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[tokio::test]
#[ignore = "make explore: a time-boxed search"]
async fn search() {
    let started = Instant::now();
    let budget = Duration::from_secs(env_u64("EXPLORE_SECONDS").unwrap_or(600));
    let count = env_u64("EXPLORE_SCHEDULES");
    let (first, only) = match env_u64("EXPLORE_SEED") {
        Some(seed) => (seed, true),
        None => (env_u64("EXPLORE_FIRST_SEED").unwrap_or(1_000), false),
    };
    let engine = std::env::var("REDIS_ENGINE").unwrap_or_else(|_| "redis".into());
    let mut schedules = 0u64;
    let mut steps = 0u64;
    let mut faults: BTreeMap<String, u64> = BTreeMap::new();
    let mut branches: BTreeMap<String, u64> = BTreeMap::new();
    let mut failures = Vec::new();
    let mut seed = first;
    loop {
        let outcome = world::explore(seed).await;
        schedules += 1;
        steps += outcome.steps;
        for (k, v) in &outcome.faults {
            *faults.entry(k.clone()).or_default() += v;
        }
        for (k, v) in &outcome.branches {
            *branches.entry(k.clone()).or_default() += v;
        }
        if only {
            for (n, line) in outcome.story.iter().enumerate() {
                println!("  {:>3}. {line}", n + 1);
            }
        }
        if !outcome.violations.is_empty() {
            print_failure(&outcome);
            failures.push(json!({"seed": seed, "shape": outcome.shape, "violations": outcome.violations}));
        }
        println!(
            "explore {engine}: seed {seed}: {} steps, {} fault(s), {} violation(s)",
            outcome.steps,
            outcome.faults.values().sum::<u64>(),
            outcome.violations.len()
        );
        seed += 1;
        let done = only || count.is_some_and(|n| schedules >= n) || (count.is_none() && started.elapsed() >= budget);
        if done {
            break;
        }
    }
    let report = json!({
        "engine": engine,
        "firstSeed": first,
        "schedules": schedules,
        "steps": steps,
        "seconds": started.elapsed().as_secs_f64(),
        "faults": faults,
        "branches": branches,
        "violations": failures.len(),
        "failures": failures,
    });
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/explore");
    std::fs::create_dir_all(&dir).expect("target/explore");
    std::fs::write(
        dir.join(format!("report-{engine}.json")),
        serde_json::to_string_pretty(&report).unwrap(),
    )
    .expect("report");
    println!("explore {engine}: {schedules} schedules, {steps} steps, faults {faults:?}");
    assert!(failures.is_empty(), "{} schedule(s) broke the promise", failures.len());
}
