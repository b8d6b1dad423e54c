//! The ElastiCache adapter: finds the Redis endpoint of a replication group
//! and reports the group's status, for the reconciler.
//!
//! Local endpoints (moto, LocalStack community) may not implement the
//! ElastiCache API; the error then says so plainly, and the reconciler goes
//! on with `REDIS_URL` if it has one.

use aws_sdk_elasticache::error::{ProvideErrorMetadata, SdkError};
pub use aws_sdk_elasticache::Client;

use coupon_domain::error::BoxError;

/// What was found about a replication group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationGroup {
    /// `available`, `modifying`, `snapshotting`, ...
    pub status: String,
    /// `redis://` or `rediss://` URL of the primary (or configuration)
    /// endpoint, without credentials.
    pub url: Option<String>,
    /// True for cluster mode enabled (a configuration endpoint).
    pub cluster_mode: bool,
}

/// Why the group could not be described.
#[derive(Debug, thiserror::Error)]
pub enum DiscoveryError {
    /// The endpoint does not implement the ElastiCache API (local emulators).
    #[error("the AWS endpoint does not implement ElastiCache DescribeReplicationGroups ({code})")]
    NotImplemented {
        /// The error code the endpoint answered with.
        code: String,
    },
    /// No such group.
    #[error("replication group {0} not found")]
    NotFound(String),
    /// Any other failure.
    #[error("ElastiCache unavailable")]
    Unavailable(#[source] BoxError),
}

/// Describes `group_id`.
pub async fn describe(client: &Client, group_id: &str) -> Result<ReplicationGroup, DiscoveryError> {
    let out = match client
        .describe_replication_groups()
        .replication_group_id(group_id)
        .send()
        .await
    {
        Ok(out) => out,
        Err(SdkError::ServiceError(e)) => {
            let code = e.err().code().unwrap_or("unknown").to_owned();
            let status = e.raw().status().as_u16();
            if code == "ReplicationGroupNotFoundFault" {
                return Err(DiscoveryError::NotFound(group_id.to_owned()));
            }
            if status == 404 || status == 501 || code.contains("NotImplemented") || code == "InvalidAction" {
                return Err(DiscoveryError::NotImplemented { code });
            }
            return Err(DiscoveryError::Unavailable(Box::new(SdkError::ServiceError(e))));
        }
        Err(e) => return Err(DiscoveryError::Unavailable(Box::new(e))),
    };
    let group = out
        .replication_groups()
        .first()
        .ok_or_else(|| DiscoveryError::NotFound(group_id.to_owned()))?;
    let scheme = if group.transit_encryption_enabled().unwrap_or(false) {
        "rediss"
    } else {
        "redis"
    };
    let endpoint = group.configuration_endpoint().map(|e| (e, true)).or_else(|| {
        group
            .node_groups()
            .first()
            .and_then(|ng| ng.primary_endpoint())
            .map(|e| (e, false))
    });
    let (url, cluster_mode) = match endpoint {
        Some((e, cluster)) => (
            e.address()
                .map(|a| format!("{scheme}://{a}:{}", e.port().unwrap_or(6379))),
            cluster,
        ),
        None => (None, false),
    };
    Ok(ReplicationGroup {
        status: group.status().unwrap_or("unknown").to_owned(),
        url,
        cluster_mode,
    })
}
