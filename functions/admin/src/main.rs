//! The admin Lambda: configuration, clients built once per instance, then
//! the runtime loop. Everything else is in the library (`admin::handle`).

use std::sync::Arc;

use admin::{handle, wire};
use coupon_shared::adapters::{aws, dynamodb, redis::RedisStore, secrets, sqs};
use coupon_shared::clock::SystemClock;
use coupon_shared::config::{AdminConfig, RiskLimits};
use lambda_http::{run, service_fn, Error, Request};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let config = AdminConfig::from_env()?;
    tracing::info!(?config, "starting admin");
    if config.local_mode {
        tracing::warn!("ADMIN_LOCAL_MODE is on: X-Admin-Actor is trusted (local use only)");
    }
    let sdk = aws::load(config.aws).await;
    let redis_settings = secrets::resolve_redis_auth(config.redis.clone(), &sdk).await?;
    let redis = Arc::new(RedisStore::connect(&redis_settings, 86_400, RiskLimits::default()).await?);
    let app = wire(
        &config,
        redis,
        dynamodb::Client::new(&sdk),
        sqs::Client::new(&sdk),
        Arc::new(SystemClock),
    );
    let app = &app;
    run(service_fn(move |req: Request| handle(app, req))).await
}
