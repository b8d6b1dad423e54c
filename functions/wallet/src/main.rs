//! The wallet Lambda: configuration, clients built once per instance, then
//! the runtime loop. Everything else is in the library (`wallet::handle`).

use std::sync::Arc;

use coupon_shared::adapters::dynamodb::{Client, DynamoLedger};
use coupon_shared::adapters::redis::RedisStore;
use coupon_shared::adapters::{aws, secrets};
use coupon_shared::config::{RiskLimits, WalletConfig};
use lambda_http::{run, service_fn, Error, Request};
use wallet::{handle, Wallet};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let config = WalletConfig::from_env()?;
    tracing::info!(?config, "starting wallet");
    let sdk = aws::load(config.dynamodb).await;
    let redis_settings = secrets::resolve_redis_auth(config.redis.clone(), &sdk).await?;
    let redis = RedisStore::connect(&redis_settings, 86_400, RiskLimits::default()).await?;
    let ddb = Client::new(&sdk);
    let wallet = Wallet {
        store: Arc::new(DynamoLedger::new(
            ddb,
            &config.coupons_table,
            &config.user_coupons_table,
        )),
        outbox: Arc::new(redis),
        edge: config.http.clone(),
    };
    let wallet = &wallet;
    run(service_fn(move |req: Request| handle(wallet, req))).await
}
