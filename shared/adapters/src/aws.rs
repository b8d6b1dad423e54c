//! Shared AWS SDK configuration: loaded once per cold start.
//!
//! Only the standard settings are read (`AWS_REGION`, credentials chain,
//! `AWS_ENDPOINT_URL` and the per-service `AWS_ENDPOINT_URL_<SERVICE>`), so
//! the same binary talks to AWS, LocalStack or moto without code changes.

use std::time::Duration;

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, SdkConfig};

use crate::config::AwsCallSettings;

/// Loads the SDK configuration with bounded retries and an operation timeout,
/// so that an AWS outage costs a request at most `operation_timeout_ms`.
pub async fn load(settings: AwsCallSettings) -> SdkConfig {
    aws_config::defaults(BehaviorVersion::latest())
        .retry_config(RetryConfig::standard().with_max_attempts(settings.max_attempts))
        .timeout_config(
            TimeoutConfig::builder()
                .operation_timeout(Duration::from_millis(settings.operation_timeout_ms))
                .connect_timeout(Duration::from_millis(settings.operation_timeout_ms.min(1_000)))
                .build(),
        )
        .load()
        .await
}
