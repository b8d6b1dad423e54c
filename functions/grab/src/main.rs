//! The grab Lambda: configuration, clients built once per instance, then the
//! runtime loop. Everything else is in the library (`grab::handle`).

use std::sync::Arc;

use coupon_shared::adapters::{aws, redis::RedisStore, secrets, sqs::SqsPublisher};
use coupon_shared::clock::SystemClock;
use coupon_shared::config::GrabConfig;
use coupon_shared::metrics::EmfMetrics;
use coupon_shared::service::GrabService;
use grab::{handle, GrabApp};
use lambda_http::{run, service_fn, Error, Request};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_http::tracing::init_default_subscriber();
    let config = GrabConfig::from_env()?;
    tracing::info!(?config, "starting grab");

    let sdk = aws::load(config.sqs).await;
    let redis_settings = secrets::resolve_redis_auth(config.redis.clone(), &sdk).await?;
    let redis = Arc::new(RedisStore::connect(&redis_settings, config.idempotency_ttl_secs, config.risk).await?);
    let sqs = coupon_shared::adapters::sqs::Client::new(&sdk);
    let service = GrabService::new(
        redis.clone(),
        redis,
        Arc::new(SqsPublisher::new(sqs, config.queue_url.clone())),
        Arc::new(SystemClock),
        Arc::new(EmfMetrics::new(config.metrics_namespace.clone(), "grab")),
        config.sold_out_memory_ms,
    );
    let app = GrabApp {
        service,
        edge: config.http.clone(),
    };
    if app.edge.trust_identity_headers {
        tracing::warn!("TRUST_IDENTITY_HEADERS is on: callers choose their identity (local use only)");
    }
    let app = &app;
    run(service_fn(move |req: Request| handle(app, req))).await
}
