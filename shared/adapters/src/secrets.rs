//! The Secrets Manager adapter: the Redis auth token, read once at cold start.
//!
//! ElastiCache in-transit encryption with an auth token: the token lives in
//! Secrets Manager (the template generates it), the function reads it when it
//! starts, and it never appears in an environment variable or a log line.

use aws_sdk_secretsmanager::Client;

use crate::config::RedisSettings;
use crate::redis::Redis;
use coupon_domain::error::StoreError;

/// Puts the token from `settings.auth_secret_arn` (if any) into the URL.
pub async fn resolve_redis_auth(
    settings: RedisSettings,
    sdk: &aws_config::SdkConfig,
) -> Result<RedisSettings, StoreError> {
    let Some(arn) = settings.auth_secret_arn.clone() else {
        return Ok(settings);
    };
    let out = Client::new(sdk)
        .get_secret_value()
        .secret_id(&arn)
        .send()
        .await
        .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
    let token = out.secret_string().ok_or_else(|| StoreError::Protocol {
        what: "Redis auth secret",
        detail: "the secret has no string value".into(),
    })?;
    Ok(settings.with_auth_token(token.trim()))
}

/// Resolves the auth token (if any), then connects: what every function
/// that talks to Redis does at cold start.
pub async fn connect_redis(settings: &RedisSettings, sdk: &aws_config::SdkConfig) -> Result<Redis, StoreError> {
    let settings = resolve_redis_auth(settings.clone(), sdk).await?;
    Redis::connect(&settings).await
}
