//! The reconciler Lambda: configuration, clients built once per instance
//! (finding Redis through ElastiCache when no URL is configured), then the
//! runtime loop. Everything else is in the library (`reconciler::handle`).

use std::sync::Arc;

use coupon_shared::adapters::dynamodb::{self, DynamoLedger};
use coupon_shared::adapters::redis::RedisStore;
use coupon_shared::adapters::sqs::{self, SqsRedrive};
use coupon_shared::adapters::{aws, elasticache, secrets};
use coupon_shared::clock::SystemClock;
use coupon_shared::config::{Env, ReconcilerConfig, RedisSettings, RedisSource, RiskLimits};
use coupon_shared::metrics::EmfMetrics;
use coupon_shared::reconcile::{ReconcileSettings, Reconciler};
use lambda_runtime::{run, service_fn, Error, LambdaEvent};
use reconciler::{handle, App};

#[tokio::main]
async fn main() -> Result<(), Error> {
    lambda_runtime::tracing::init_default_subscriber();
    let config = ReconcilerConfig::from_env()?;
    tracing::info!(?config, "starting reconciler");
    let sdk = aws::load(config.aws).await;
    let cache = elasticache::Client::new(&sdk);
    let redis_settings = match &config.redis {
        RedisSource::Url(settings) => settings.clone(),
        RedisSource::ReplicationGroup(group) => {
            let found = elasticache::describe(&cache, group).await?;
            let url = found
                .url
                .ok_or_else(|| format!("replication group {group} has no endpoint yet ({})", found.status))?;
            let mut settings = RedisSettings::with_url(&Env::process(), url)?;
            settings.cluster = found.cluster_mode;
            settings
        }
    };
    let redis_settings = secrets::resolve_redis_auth(redis_settings, &sdk).await?;
    let redis = Arc::new(RedisStore::connect(&redis_settings, 86_400, RiskLimits::default()).await?);
    let ledger = Arc::new(DynamoLedger::new(
        dynamodb::Client::new(&sdk),
        &config.coupons_table,
        &config.user_coupons_table,
    ));
    let reconciler = Reconciler::new(
        ledger,
        redis.clone(),
        redis,
        Arc::new(SqsRedrive::new(
            sqs::Client::new(&sdk),
            &config.queue_url,
            config.dlq_url.clone(),
        )),
        Arc::new(SystemClock),
        Arc::new(EmfMetrics::new(config.metrics_namespace.clone(), "reconciler")),
        ReconcileSettings {
            grace_ms: config.grace_ms,
            retention_ms: config.retention_hours * 3_600_000,
        },
    );
    let app = App {
        reconciler,
        elasticache: config.replication_group.clone().map(|g| (cache, g)),
    };
    let app = &app;
    run(service_fn(move |event: LambdaEvent<_>| handle(app, event))).await
}
