//! The Secrets Manager adapter: the Redis auth token and the edge's origin
//! secret, read once at cold start.
//!
//! ElastiCache in-transit encryption with an auth token (or MemoryDB's ACL
//! user with a password, `REDIS_USERNAME`): the token lives in Secrets
//! Manager (the template generates it), the function reads it when it
//! starts, and it never appears in an environment variable or a log line.

use aws_sdk_secretsmanager::Client;

use crate::config::RedisSettings;
use crate::redis::{Redis, StartError};
use coupon_domain::error::StoreError;

/// Reads a secret's string value, once at cold start: the Redis auth
/// token, the edge's origin secret.
pub async fn read_secret(arn: &str, sdk: &aws_config::SdkConfig, what: &'static str) -> Result<String, StoreError> {
    let out = Client::new(sdk)
        .get_secret_value()
        .secret_id(arn)
        .send()
        .await
        .map_err(|e| StoreError::Unavailable(Box::new(e)))?;
    let value = out.secret_string().ok_or_else(|| StoreError::Protocol {
        what,
        detail: "the secret has no string value".into(),
    })?;
    Ok(value.trim().to_owned())
}

/// The edge's origin secret (`ORIGIN_VERIFY_SECRET_ARN`), if an edge is
/// configured: what CloudFront sends in `X-Origin-Verify`, its current
/// value and its previous one if it has one (the `AWSPREVIOUS` stage a
/// rotation leaves), so that an instance accepts CloudFront's value on
/// either side of a rotation. An empty current value fails the start, as
/// a secret that matched nothing would refuse every request.
pub async fn origin_secret(
    arn: Option<&str>,
    sdk: &aws_config::SdkConfig,
) -> Result<Option<(String, Option<String>)>, StoreError> {
    const WHAT: &str = "edge origin secret";
    let Some(arn) = arn else {
        return Ok(None);
    };
    let value = read_secret(arn, sdk, WHAT).await?;
    if value.is_empty() {
        return Err(StoreError::Protocol {
            what: WHAT,
            detail: "the secret is empty".into(),
        });
    }
    // None before the first rotation: Secrets Manager answers not found.
    let previous = Client::new(sdk)
        .get_secret_value()
        .secret_id(arn)
        .version_stage("AWSPREVIOUS")
        .send()
        .await
        .ok()
        .and_then(|out| out.secret_string().map(|s| s.trim().to_owned()));
    Ok(Some((value, previous)))
}

/// Puts the token from `settings.auth_secret_arn` (if any) into the URL,
/// as the password of `settings.username` when one is set.
pub async fn resolve_redis_auth(
    settings: RedisSettings,
    sdk: &aws_config::SdkConfig,
) -> Result<RedisSettings, StoreError> {
    let Some(arn) = settings.auth_secret_arn.clone() else {
        return Ok(settings);
    };
    let token = read_secret(&arn, sdk, "Redis auth secret").await?;
    Ok(settings.with_auth_token(&token))
}

/// Resolves the auth token (if any), then connects: what every function
/// that talks to Redis does at cold start.
pub async fn connect_redis(settings: &RedisSettings, sdk: &aws_config::SdkConfig) -> Result<Redis, StartError> {
    let settings = resolve_redis_auth(settings.clone(), sdk).await?;
    Redis::connect(&settings).await
}
