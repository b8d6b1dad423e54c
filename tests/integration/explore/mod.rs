//! The explorer: seeded schedules of presses, retries, the issuer and the
//! reconciler's pass over the real scripts and use cases, with faults
//! between any two steps, each judged against the promise after healing.
//!
//! # Layout
//!
//! - `world.rs`: what a seed draws, the world it builds, the schedule.
//! - `actors.rs`: the users, the twin presses, the issuer, the reconciler.
//! - `heal.rs`: the faults, the healing, the judgement.
//! - `nodes.rs`: each shard's node, its replica and its snapshots.
//! - `sched.rs`: the seeded scheduler every step waits for.
//! - `gated.rs`: the real adapters behind the scheduler's gate.
//!
//! - `explore::fixed_seeds`: the seeds every CI run replays (on each
//!   engine the integration tests run on), and `FINDINGS`, the seeds the
//!   search once found breaking the promise.
//! - `explore::search` (ignored; `make explore`): schedules for
//!   `EXPLORE_SECONDS` (or `EXPLORE_SCHEDULES`) from seed
//!   `EXPLORE_FIRST_SEED`, or the one seed `EXPLORE_SEED` with its story;
//!   writes `target/explore/report.json`.

mod actors;
mod gated;
mod heal;
mod nodes;
mod sched;
mod world;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::support::ReplicaSet;

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
    let nodes = ReplicaSet::start();
    let mut failed = Vec::new();
    for seed in FIXED_SEEDS {
        let outcome = world::explore(seed, &nodes.primary.url()).await;
        if !outcome.violations.is_empty() {
            print_failure(&outcome);
            failed.push(seed);
        }
    }
    assert!(failed.is_empty(), "seeds {failed:?} broke the promise (stories above)");
}

/// Seeds the search found breaking the promise, each kept as a regression
/// case once the protocol keeps it (`make explore EXPLORE_SEED=<seed>`
/// tells its story), replayed by every CI run on every engine:
///
/// - 15 (a lottery beside the sale, two shared devices, one claim each):
///   u2 and u3 register for the lottery from their phones, then every
///   press of theirs is refused `DEVICE_CLAIM_LIMIT` with no win on either
///   device: the device's claims counted lottery entries.
/// - 1 (two release waves, twin presses): u2's r1 is sent twice, one copy
///   on a clock 957 ms behind; that copy reserves the borrow and finds the
///   donor empty before the first wave, the other copy takes the donor's
///   unit after it: copies of one press judged one donor at two instants,
///   one settling a loss while the other took a unit (every take is now
///   judged at the reservation's instant).
/// - 24 (four shards, twin presses): u1, homed on shard 3, takes a unit of
///   shard 0 and settles it at home; then shard 0's node loses its data.
///   The rebuild counted shard 0's units from DynamoDB only, so shard 0
///   sold that unit again while u1's retry replayed its win: the stock
///   equation ended one unit over (the home's `borrowed` list now tells
///   the donor's rebuild). Once each borrow step waited for a replica (two
///   more steps), the seed took another path and found another break:
///   u1's twin copy skipped shard 0 (lost) and took shard 1's unit, its
///   answer arriving after its caller gave up; after shard 0's rebuild the
///   retry took shard 0's unit and was told SUCCESS, and shard 1's grant,
///   re-driven, took the ordinal first (a lost donor now ends the walk).
/// - 101 (two shards, twin presses): u4, homed on shard 0, takes a unit of
///   shard 1; shard 0's node loses its data before the settle. The rebuilt
///   home knew nothing of u4's claim, so u4's retry heard SOLD_OUT while
///   the donor's unit was re-driven and issued to u4 (the rebuild now
///   counts the grants pending for its users in other shards' outboxes).
/// - 145 (a lottery, shared devices): an attempt that decided u0's loss
///   had its answer lost before it released its risk places; the retry
///   heard the loss replayed and released nothing, so the device later
///   refused u4's third claim with two wins on it (a replayed loss now
///   gives the press's places back).
/// - 192 (two shards, two release waves, node faults): u1, homed on shard
///   1, presses before the first wave, finds the donor empty and settles
///   BETWEEN_WAVES; shard 1's node fails over to a replica that held the
///   reservation open, not the settle. The reconciler finished the borrow
///   after the wave and settled it with shard 1's new unit: a coupon from
///   a press told it had none (the settle now judges the home at the
///   reservation's instant, as the takes judge the donors).
/// - 1002 (four shards, two release waves, twin presses; found on Redis
///   7.0 by a ten-minute search on 2026-12-06): u0's r1 is sent twice;
///   the twin, on a clock 1.5 s ahead, resumes the borrow reserved before
///   the first wave, finds every donor empty and settles BETWEEN_WAVES,
///   a record kept only until the wave; the other copy's retry, after the
///   wave, is decided afresh and wins; then the twin gives back the
///   press's risk places, the winner's among them: a win the user's daily
///   claims do not count (a settled BETWEEN_WAVES is now kept as long as
///   any refusal of a press that began).
/// - 1232 (found on Redis 7.0 by a ten-minute search on 2026-12-06): u0
///   and u4 share d0 (two claims a day); u4's r1 borrows, finds every
///   donor empty and settles BETWEEN_WAVES; shard 0 is lost before a
///   replica vouches for the loss, so r1 keeps its places, and was told
///   its loss: nobody would ever give them back. Once u0 won, u4's r2 heard
///   DEVICE_CLAIM_LIMIT with one win on the phone, for the rest of the day
///   (a loss no replica holds now answers BUSY, and the retry gives the
///   places back or decides afresh).
/// - 1025 (one shard, one unit, node faults, stalled instances; found on
///   Redis 7.0 by a five-minute search on 2026-12-07): u3 wins the unit,
///   but the replica's acknowledgement lands after its caller gave up, so
///   no claim is written; a snapshot holds the win; the node restarts from
///   it; the restart check finds the shard dry since its stamp and drops
///   it, its outbox with it, but not u3's request record, which a drop
///   cannot find. The rebuild, knowing nothing of the grant, sold the unit
///   again to u4, and u3's retry replayed its win and was told SUCCESS:
///   the grant was REJECTED (a record is now honoured only by the shard's
///   incarnation that wrote it, and a replayed win only once that state is
///   verified: u3's retry hears BUSY until the check, then is decided
///   afresh).
/// - 1102 (three shards, four units, limit three, stalls, expiring
///   reservations; found on Redis 7.0 by a ten-minute search of a fresh
///   clone on 2026-12-07): u0's r1 borrows ordinal 1 and takes unit 0-2
///   from shard 0; its reservation's record expires before the settle,
///   which kept the count but recorded nothing; the caller heard BUSY, its
///   retries were decided afresh (ordinals 2 and 3) until ALREADY_CLAIMED,
///   and the re-drive issued 0-2 to u0 from r1 all the same.
/// - 6046 (two shards, four units, limit one, a twin, node faults, stalls,
///   expiring reservations; found on Redis 7.0 the same day): u1's r1 twin
///   reserves a borrow (ordinal 1) and its caller gives up; the record
///   expires, the count stays; the twin's retry hears ALREADY_CLAIMED from
///   its own reservation; a failover then rolls the shard back past it and
///   the first copy of r1 wins unit 1-1, which u1 holds from a request told
///   ALREADY_CLAIMED.
///
///   Both needed a reservation's record to expire while its borrow stayed
///   open. It now lives until the borrow is settled (30 days at most,
///   `RESERVATION_TTL_MS` in `lua/lib.lua`), so the search no longer
///   expires one; and a settle that finds its record gone records the
///   donor's grant under the request id
///   (`reconcile::borrows::a_borrow_whose_record_expired_after_a_donors_take_replays_the_donors_grant`).
///   Both seeds now take other paths.
///
/// Since a restart starts the repair request's follow (an actor of its
/// own), 101 and 192 take another path after their restart (steps 62 and
/// 81), which comes after what each found; since instances stall (a
/// stream of their own) and the calls on a restarting node wait it out,
/// the seeds with node faults or stalls do too.
const FINDINGS: &[u64] = &[15, 1, 24, 101, 145, 192, 1002, 1232, 1025, 1102, 6046];

/// The seeds that once broke the promise on the Serverless stand-in (no
/// `WAIT`; replicas that catch up when the seed says; `nodes.rs`), replayed
/// there beside `FINDINGS`:
///
/// - 1063 (two shards, six units, limit two, twins, node faults; found by
///   a five-minute search on 2026-12-08): failovers roll both shards back
///   past told wins; u0's borrowed grant 1-3 and u5's 0-2 are minted
///   again for other users, their claims refused. The re-drive dropped
///   only the shard that minted each, so the borrower's home kept the
///   grant in its `borrowed` list (which a drop keeps) and the request's
///   record: every pass re-drove the grant, met the refusal and dropped a
///   shard again, and u5's r3 replayed its record, BUSY for good. A grant
///   that can never be claimed now drops its home too, and is forgotten
///   from the home's `borrowed` list; one trimmed from a dropped shard's
///   outbox drops its home the same way.
/// - 1164 (three shards, three units, limit two, waves, node faults; the
///   same search): u0's r1 wins 1-1 and is told; a failover loses it;
///   u0's r2 wins 1-1 again (the same id, user and ordinal, another
///   request). Its claim is refused, but the pass took its outbox entry for
///   the issued r1 grant (it matched grants by id, user and ordinal) and
///   trimmed it, so no pass dropped the shard and r2 replayed 1-1, BUSY for
///   good. A grant is now issued only as itself, its request included, and
///   an entry minted again for another request is void.
/// - 1214, 1318 (the same search, a third ten minutes; both are judged on
///   today's code by their first violation): in 1214 u5's r1 won 0-1,
///   whose claim and send were done, but heard BUSY (the send answered
///   after its caller gave up); a failover took the win, and the retry,
///   decided afresh, was told SOLD_OUT while 0-1 was issued to u5. On
///   Serverless that is the cost the engine's lost writes leave (a press
///   never told SUCCESS may be refused afresh and still get the grant its
///   claim names: docs/faults.md, "Engines"), and the judge allows it
///   there and nowhere else. 2143 (a fourth search) is the same with
///   twins: one copy of u0's r1 won 1-1 and a failover took it before
///   the copy claimed it, sent it and was told SUCCESS; the other copy,
///   decided afresh, was told BETWEEN_WAVES; u0 holds 1-1. 1318 left u2's presses BUSY for good behind
///   grants minted again whose entries the pass re-drove only past its
///   horizon; the grab now drops the shards its claim proves rolled back
///   at once, and a grant minted again for the same request at another
///   instant is the same claim (`Grant::same_as`).
const SERVERLESS_FINDINGS: &[u64] = &[1063, 1164, 1214, 1318, 2143];

#[tokio::test]
async fn seeds_that_once_broke_the_promise_keep_it_after_healing() {
    let nodes = ReplicaSet::start();
    let mut failed = Vec::new();
    let serverless = if world::serverless() { SERVERLESS_FINDINGS } else { &[] };
    for &seed in FINDINGS.iter().chain(serverless) {
        let outcome = world::explore(seed, &nodes.primary.url()).await;
        if !outcome.violations.is_empty() {
            print_failure(&outcome);
            failed.push(seed);
        }
    }
    assert!(failed.is_empty(), "seeds {failed:?} broke the promise (stories above)");
}

/// The protocol's branches a search should reach, each as the branch count
/// that shows it (`port.method:Answer`), with what it is in the protocol's
/// words; the report lists the ones a run never reached, so a branch the
/// explorer stopped reaching is seen. (A wave's instant crossed shows in
/// its refusals and wins, and a rebuild's shortcut, every unit issued, in
/// the pass's reports: neither is one port call's answer.)
const BRANCHES: &[(&str, &str)] = &[
    ("ledger.claim:Won", "a win on the home shard"),
    ("ledger.claim:Borrow", "a borrow begun"),
    ("ledger.take:Won", "a donor's unit taken"),
    ("ledger.take:Missing", "a donor lost"),
    ("ledger.settle:Some.Won", "a borrow settled with its unit"),
    ("ledger.settle:Some.Closed", "a borrow settled BETWEEN_WAVES or closed"),
    ("ledger.settle:None", "a settle that found its reservation gone"),
    ("ledger.claim:Replay.Won", "a win replayed"),
    // (Its other answer, a remembered win no claim names, needs a caller
    // that died between its script and its claim, a snapshot after that,
    // a restart and the press sent again: seen now and then, not every
    // ten minutes; the failover test of a win never claimed holds it.)
    (
        "dynamodb.holds:true",
        "a win a restarted shard remembers, replayed on its claim before the check",
    ),
    ("ledger.claim:Rejected.SoldOut", "a sell-out"),
    ("risk.reserve:Refused.DeviceClaimLimit", "a device's claims full"),
    ("ledger.replicated:false", "a decision no replica holds yet"),
    ("repair.restore_shard:true", "a lost shard rebuilt"),
    ("repair.verify:Dropped", "a restarted shard dropped"),
    ("repair.verify:Confirmed", "a restarted shard confirmed"),
    ("ledger.draw_claim:Won", "a draw's claim"),
    ("ledger.draw_claim:Replay.Won", "a draw's claim replayed"),
    ("dynamodb.issue:Duplicate", "a grant delivered again"),
];

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

#[tokio::test]
#[ignore = "make explore: a time-boxed search"]
async fn search() {
    let nodes = ReplicaSet::start();
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
        let outcome = world::explore(seed, &nodes.primary.url()).await;
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
    let unreached: Vec<&str> = BRANCHES
        .iter()
        .filter(|(branch, _)| !branches.contains_key(*branch))
        .map(|(branch, _)| *branch)
        .collect();
    let report = json!({
        "engine": engine,
        "firstSeed": first,
        "schedules": schedules,
        "steps": steps,
        "seconds": started.elapsed().as_secs_f64(),
        "faults": faults,
        "branches": branches,
        "unreached": unreached,
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
    for (branch, what) in BRANCHES.iter().filter(|(b, _)| unreached.contains(b)) {
        println!("explore {engine}: never reached: {branch} ({what})");
    }
    assert!(failures.is_empty(), "{} schedule(s) broke the promise", failures.len());
}
