//! The connection every Redis adapter shares: one multiplexed connection
//! to a standalone server (or an ElastiCache primary endpoint) that
//! reconnects by itself, or a cluster connection that routes each command
//! to the node owning its slot (ElastiCache cluster mode); `REDIS_CLUSTER`
//! chooses. Nothing else differs: every script's keys share one hash tag,
//! so every call has exactly one slot.

use std::time::Duration;

use coupon_domain::error::StoreError;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::keys::KeySpace;
use crate::config::RedisSettings;

/// A connection to a standalone server or to a cluster. Cheap to clone:
/// clones share the underlying multiplexed connections.
#[derive(Clone)]
pub enum RedisConnection {
    /// One server (reconnects by itself).
    Single(ConnectionManager),
    /// A Redis Cluster (follows MOVED/ASK and topology changes).
    Cluster(ClusterConnection),
}

impl ConnectionLike for RedisConnection {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// One Redis (connection, key layout, how long request outcomes live),
/// shared by every Redis adapter of a function. Cheap to clone: clones
/// share the connection.
#[derive(Clone)]
pub struct Redis {
    pub(super) conn: RedisConnection,
    pub(super) keys: KeySpace,
    pub(super) outcome_ttl_ms: u64,
    pub(super) replica_acks: u32,
    pub(super) replica_ack_timeout_ms: u64,
}

impl Redis {
    /// Connects (once per Lambda instance). Fails if Redis is unreachable,
    /// so a misconfigured function fails its cold start, not its requests.
    pub async fn connect(settings: &RedisSettings) -> Result<Self, StoreError> {
        let response = Duration::from_millis(settings.response_timeout_ms);
        let connect = Duration::from_millis(settings.connect_timeout_ms);
        let conn = if settings.cluster {
            let client = redis::cluster::ClusterClient::builder(vec![settings.url.as_str()])
                .response_timeout(response)
                .connection_timeout(connect)
                .retries(2)
                .build()
                .map_err(unavailable)?;
            RedisConnection::Cluster(client.get_async_connection().await.map_err(unavailable)?)
        } else {
            let client = redis::Client::open(settings.url.as_str()).map_err(unavailable)?;
            let config = ConnectionManagerConfig::new()
                .set_response_timeout(Some(response))
                .set_connection_timeout(Some(connect))
                .set_number_of_retries(2);
            RedisConnection::Single(
                ConnectionManager::new_with_config(client, config)
                    .await
                    .map_err(unavailable)?,
            )
        };
        Ok(Self {
            conn,
            keys: KeySpace::new(settings.key_prefix.clone()),
            outcome_ttl_ms: settings.idempotency_ttl_secs.saturating_mul(1000),
            replica_acks: settings.replica_acks,
            replica_ack_timeout_ms: settings.replica_ack_timeout_ms,
        })
    }

    /// The key layout this store uses (tests and the reconciler read keys).
    pub fn keys(&self) -> &KeySpace {
        &self.keys
    }

    /// A clone of the connection, for callers that inspect Redis directly.
    pub fn connection(&self) -> RedisConnection {
        self.conn.clone()
    }
}

pub(super) fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(Box::new(e))
}

pub(super) fn protocol(what: &'static str, detail: impl Into<String>) -> StoreError {
    StoreError::Protocol {
        what,
        detail: detail.into(),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn tls_urls_are_accepted_for_elasticache_in_transit_encryption() {
        // Parsing fails with "TLS feature not enabled" unless rustls is in.
        assert!(redis::Client::open("rediss://:token@master.example.cache.amazonaws.com:6379").is_ok());
        assert!(redis::Client::open("redis://127.0.0.1:6379").is_ok());
    }
}
