//! The issuer Lambda: configuration, clients built once per instance, then
//! the runtime loop. Everything else is in the library (`issuer::handle`).

use std::sync::Arc;

use coupon_shared::adapters::aws;
use coupon_shared::adapters::dynamodb::{Client, DynamoCouponRepository, DynamoLedger};
use coupon_shared::clock::SystemClock;
use coupon_shared::config::IssuerConfig;
use coupon_shared::issuance::IssuerService;
use coupon_shared::metrics::EmfMetrics;
use issuer::{handle, Issuer};
use lambda_runtime::{run, service_fn, Error, LambdaEvent};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = IssuerConfig::from_env()?;
    tracing::info!(?config, "starting issuer");
    let ddb = Client::new(&aws::load(config.dynamodb).await);
    let issuer = Issuer {
        service: IssuerService::new(
            Arc::new(DynamoLedger::new(
                ddb.clone(),
                &config.coupons_table,
                &config.user_coupons_table,
            )),
            Arc::new(DynamoCouponRepository::new(ddb, &config.coupons_table)),
            Arc::new(EmfMetrics::new(config.metrics_namespace.clone(), "issuer")),
        ),
        clock: Arc::new(SystemClock),
        concurrency: config.concurrency,
    };
    let issuer = &issuer;
    run(service_fn(move |event: LambdaEvent<_>| handle(issuer, event))).await
}
