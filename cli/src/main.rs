//! `couponctl`: the local operator's command line.
//!
//! ```text
//! couponctl create FILE|-      create (and preheat) a coupon from JSON
//! couponctl show COUPON_ID     print a coupon's stored definition
//! ```
//!
//! Settings come from the environment, as for the functions: `REDIS_URL`,
//! `COUPONS_TABLE`, the standard AWS variables (`AWS_ENDPOINT_URL` for a
//! local endpoint). The admin HTTP API serves the same operations in AWS.

use std::io::Read;
use std::process::ExitCode;

use coupon_shared::adapters::dynamodb::{Client, DynamoCouponRepository};
use coupon_shared::adapters::{aws, redis::RedisStore};
use coupon_shared::clock::SystemClock;
use coupon_shared::config::{AdminConfig, AwsCallSettings, RiskLimits};
use coupon_shared::coupon::CouponDefinition;
use coupon_shared::ids::CouponId;
use coupon_shared::ports::CouponRepository;
use coupon_shared::preheat::{create_coupon, CreateError, Created};

const USAGE: &str = "usage: couponctl create FILE|-   |   couponctl show COUPON_ID";

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
    let (command, operand) = match args {
        [c, o] => (c.as_str(), o.as_str()),
        _ => return Err(USAGE.into()),
    };
    let config = AdminConfig::from_env().map_err(|e| e.to_string())?;
    let sdk = aws::load(AwsCallSettings {
        max_attempts: 3,
        operation_timeout_ms: 10_000,
    })
    .await;
    let repo = DynamoCouponRepository::new(Client::new(&sdk), config.coupons_table.clone());
    match command {
        "create" => {
            let json = read_source(operand)?;
            let def: CouponDefinition =
                serde_json::from_str(&json).map_err(|e| format!("not a coupon definition: {e}"))?;
            let redis = RedisStore::connect(&config.redis, 86_400, RiskLimits::default())
                .await
                .map_err(|e| format!("{e}: {}", source_text(&e)))?;
            match create_coupon(&def, config.max_total_stock, &repo, &redis, &SystemClock).await {
                Ok(Created::New) => println!("created {}", def.coupon_id),
                Ok(Created::Unchanged) => {
                    println!("unchanged {} (same definition exists)", def.coupon_id)
                }
                Err(e @ CreateError::Invalid(_)) => return Err(e.to_string()),
                Err(e) => return Err(format!("{e}: {}", source_text(&e))),
            }
        }
        "show" => {
            let id = CouponId::parse(operand).map_err(|e| e.to_string())?;
            match repo.get_definition(&id).await {
                Ok(Some(def)) => {
                    println!("{}", serde_json::to_string_pretty(&def).unwrap_or_default())
                }
                Ok(None) => return Err(format!("no coupon {id}")),
                Err(e) => return Err(format!("{e}: {}", source_text(&e))),
            }
        }
        _ => return Err(USAGE.into()),
    }
    Ok(())
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

/// The whole source chain: the operator's terminal is the place for it.
fn source_text(e: &dyn std::error::Error) -> String {
    let mut parts = Vec::new();
    let mut next = e.source();
    while let Some(s) = next {
        parts.push(s.to_string());
        next = s.source();
    }
    parts.join(": ")
}
