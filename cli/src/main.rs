//! `couponctl`: the local operator's command line.
//!
//! ```text
//! couponctl create FILE|-      create (and preheat) a coupon from JSON
//! couponctl show COUPON_ID     print a coupon's definition and live figures
//! ```
//!
//! Settings come from the environment, as for the admin function
//! (`admin::Config`): `REDIS_URL`, `COUPONS_TABLE`, `USER_COUPONS_TABLE`,
//! `GRANT_QUEUE_URL`, the standard AWS variables (`AWS_ENDPOINT_URL` for a
//! local endpoint). It runs the admin use cases through `admin::wire`, so a
//! create here is validated, preheated and audited exactly as through the
//! admin API; the operator is recorded as `couponctl:<$USER>`.

use std::io::Read;
use std::process::ExitCode;

use admin::{wire, Clients, Config};
use coupon_domain::admin::{AdminContext, AdminError};
use coupon_domain::audit::Actor;
use coupon_domain::catalog::Created;
use coupon_domain::coupon::CouponDefinition;
use coupon_domain::ids::CouponId;

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
    if !matches!(command, "create" | "show") {
        return Err(USAGE.into());
    }
    let config = Config::from_env().map_err(|e| e.to_string())?;
    let clients = Clients::connect(&config).await.map_err(|e| chain(&e))?;
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
