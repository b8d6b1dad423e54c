//! `couponctl`: the local operator's command line.
//!
//! ```text
//! couponctl create FILE|-      create (and preheat) a coupon from JSON
//! couponctl show COUPON_ID     print a coupon's definition and live figures
//! couponctl verify-draw COUPON_ID [SEED_HASH]
//!                              recompute a lottery's winners from its revealed
//!                              seed and its entries, and compare them with the
//!                              users who hold the coupon (and the seed with the
//!                              commitment published before registration opened)
//! ```
//!
//! Settings come from the environment, as for the admin function
//! (`admin::Config`): `REDIS_URL`, `COUPONS_TABLE`, `USER_COUPONS_TABLE`,
//! `CLAIMS_TABLE`,
//! `GRANT_QUEUE_URL`, the standard AWS variables (`AWS_ENDPOINT_URL` for a
//! local endpoint). It runs the admin use cases through `admin::wire`, so a
//! create here is validated, preheated and audited exactly as through the
//! admin API; the operator is recorded as `couponctl:<$USER>`.

use std::io::Read;
use std::process::ExitCode;

use admin::{wire, Clients, Config};
use coupon_adapters::dynamodb::{DynamoEntries, DynamoFacts, Tables};
use coupon_domain::admin::{AdminContext, AdminError};
use coupon_domain::audit::Actor;
use coupon_domain::catalog::Created;
use coupon_domain::coupon::CouponDefinition;
use coupon_domain::ids::{CouponId, UserId};
use coupon_domain::lottery::ports::Entries;
use coupon_domain::lottery::{rank, verify};
use coupon_domain::reconcile::ports::DurableFacts;

const USAGE: &str =
    "usage: couponctl create FILE|-   |   couponctl show COUPON_ID   |   couponctl verify-draw COUPON_ID [SEED_HASH]";

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("couponctl: {message}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: &[String]) -> Result<(), String> {
    let (command, operand, expected_hash) = match args {
        [c, o] => (c.as_str(), o.as_str(), None),
        [c, o, h] if c == "verify-draw" => (c.as_str(), o.as_str(), Some(h.as_str())),
        _ => return Err(USAGE.into()),
    };
    if !matches!(command, "create" | "show" | "verify-draw") {
        return Err(USAGE.into());
    }
    let config = Config::from_env().map_err(|e| e.to_string())?;
    let clients = Clients::connect(&config).await.map_err(|e| chain(&e))?;
    if command == "verify-draw" {
        let id = CouponId::parse(operand).map_err(|e| e.to_string())?;
        return verify_draw(&config, &clients, &id, expected_hash).await;
    }
    let service = wire(&config, clients).service;
    if command == "create" {
        let json = read_source(operand)?;
        let def: CouponDefinition = serde_json::from_str(&json).map_err(|e| format!("not a coupon definition: {e}"))?;
        let (created, _) = service.create(&operator()?, &def).await.map_err(|e| admin_error(&e))?;
        match created {
            Created::New => println!("created {}", def.coupon_id),
            Created::Unchanged => println!("unchanged {} (same definition exists)", def.coupon_id),
        }
    } else {
        let id = CouponId::parse(operand).map_err(|e| e.to_string())?;
        let view = service.view(&id).await.map_err(|e| admin_error(&e))?;
        println!("{}", serde_json::to_string_pretty(&view).unwrap_or_default());
    }
    Ok(())
}

/// Recomputes a lottery's draw from DynamoDB (its revealed seed, its
/// entries, the coupon's holders) and says whether they agree.
async fn verify_draw(
    config: &Config,
    clients: &Clients,
    coupon: &CouponId,
    expected_hash: Option<&str>,
) -> Result<(), String> {
    let tables = Tables::new(clients.dynamodb.clone(), &config.tables);
    let entries = DynamoEntries::new(tables.clone());
    let facts = DynamoFacts::new(tables);
    let stored = facts
        .stored(coupon)
        .await
        .map_err(|e| chain(&e))?
        .ok_or_else(|| format!("no coupon {coupon}"))?;
    let lottery = entries
        .lottery(coupon)
        .await
        .map_err(|e| chain(&e))?
        .ok_or_else(|| format!("{coupon} is not a lottery"))?;
    let Some(drawn) = lottery.drawn else {
        return Err(format!("{coupon} is not drawn yet: its seed is still secret"));
    };
    let def = &stored.definition;
    println!("places      {} (the stock at the draw)", drawn.places);
    let mut all = Vec::new();
    for shard in 0..def.shards {
        all.extend(entries.entries(coupon, shard).await.map_err(|e| chain(&e))?);
    }
    let holders = facts.holdings(coupon).await.map_err(|e| chain(&e))?;
    let verdict = verify(&lottery.seed, all, drawn.places, holders.into_keys());
    println!("coupon      {coupon}");
    println!("seed        {}", lottery.seed.to_hex());
    println!("commitment  {} (SHA-256 of the seed)", verdict.commitment);
    println!("entries     {}", verdict.drawing.entries);
    println!(
        "winners     {} (recorded at the draw: {})",
        verdict.drawing.winners.len(),
        drawn.winners
    );
    for (i, user) in verdict.drawing.winners.iter().enumerate() {
        println!("  {:>4}. {user}  {}", i + 1, rank(&lottery.seed, user).to_hex());
    }
    let mut problems = Vec::new();
    let recorded = (drawn.entries, drawn.winners, drawn.threshold.map(|t| t.to_hex()));
    let recomputed = (
        verdict.drawing.entries,
        verdict.drawing.winners.len() as u64,
        verdict.drawing.threshold.map(|t| t.to_hex()),
    );
    if recorded != recomputed {
        problems.push(format!(
            "the draw recorded (entries, winners, threshold) {recorded:?}, the recomputation gives {recomputed:?}"
        ));
    }
    if expected_hash.is_some_and(|h| !h.trim().eq_ignore_ascii_case(&verdict.commitment)) {
        problems.push("the seed does not match the commitment published before the draw".to_owned());
    }
    if !verdict.missing.is_empty() {
        problems.push(format!(
            "drawn but holding no coupon (yet): {:?}",
            names(&verdict.missing)
        ));
    }
    if !verdict.extra.is_empty() {
        problems.push(format!("holding the coupon but not drawn: {:?}", names(&verdict.extra)));
    }
    if problems.is_empty() {
        println!("verified: the holders are exactly the winners the revealed seed draws");
        Ok(())
    } else {
        Err(problems.join("; "))
    }
}

fn names(users: &[UserId]) -> Vec<&str> {
    users.iter().map(UserId::as_str).collect()
}

/// The operator as the audit log records it.
fn operator() -> Result<AdminContext, String> {
    let who = std::env::var("USER").unwrap_or_else(|_| "unknown".into());
    let actor = Actor::parse(&format!("couponctl:{who}")).map_err(|e| e.to_string())?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    Ok(AdminContext {
        actor,
        operation_id: format!("cli-{nanos:x}-{}", std::process::id()),
        idempotent: false,
    })
}

fn admin_error(e: &AdminError) -> String {
    match e {
        AdminError::Unavailable(_) => chain(e),
        other => other.to_string(),
    }
}

fn read_source(operand: &str) -> Result<String, String> {
    let mut json = String::new();
    if operand == "-" {
        std::io::stdin()
            .read_to_string(&mut json)
            .map_err(|e| format!("reading stdin: {e}"))?;
    } else {
        json = std::fs::read_to_string(operand).map_err(|e| format!("reading {operand}: {e}"))?;
    }
    Ok(json)
}

/// The error and its whole source chain: the operator's terminal is the
/// place for it.
fn chain(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut next = e.source();
    while let Some(s) = next {
        parts.push(s.to_string());
        next = s.source();
    }
    parts.join(": ")
}
