//! The connection every Redis adapter shares: one multiplexed connection
//! to a standalone server (or an ElastiCache primary endpoint) that
//! reconnects by itself, or a cluster connection that routes each command
//! to the node owning its slot (ElastiCache cluster mode); `REDIS_CLUSTER`
//! chooses. Nothing else differs: every script's keys share one hash tag,
//! so every call has exactly one slot.

use std::time::Duration;

use coupon_domain::config::ConfigError;
use coupon_domain::error::StoreError;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisFuture, Value};

use super::keys::KeySpace;
use crate::config::{CacheDurability, RedisSettings};

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

/// Why a function could not start against its Redis.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// A setting this server cannot honour; the message names it.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Redis, or the secret holding its token, did not answer.
    #[error(transparent)]
    Unavailable(#[from] StoreError),
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
    pub(super) durability: CacheDurability,
}

impl Redis {
    /// Connects (once per Lambda instance). Fails if Redis is unreachable,
    /// or refuses what the settings ask of it ([`Self::check_replica_acks`]),
    /// so a misconfigured function fails its cold start, not its requests.
    pub async fn connect(settings: &RedisSettings) -> Result<Self, StartError> {
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
        let redis = Self {
            conn,
            keys: KeySpace::new(settings.key_prefix.clone()),
            outcome_ttl_ms: settings.idempotency_ttl_secs.saturating_mul(1000),
            replica_acks: settings.replica_acks,
            replica_ack_timeout_ms: settings.replica_ack_timeout_ms,
            durability: settings.durability,
        };
        redis.check_replica_acks().await?;
        Ok(redis)
    }

    /// With `REDIS_REPLICA_ACKS` above 0 every win waits for replicas with
    /// `WAIT`; a server that refuses the command (ElastiCache Serverless
    /// has none, MemoryDB needs none) would turn every win into BUSY, found
    /// only under traffic. Asked once at the start, `WAIT 0 0` (which
    /// waits for nothing): a refusal fails the start naming the setting.
    pub async fn check_replica_acks(&self) -> Result<(), StartError> {
        if self.replica_acks == 0 {
            return Ok(());
        }
        let mut conn = self.conn.clone();
        match redis::cmd("WAIT").arg(0).arg(0).query_async::<Value>(&mut conn).await {
            Ok(_) => Ok(()),
            Err(e) if refused(&e) => Err(ConfigError::Invalid {
                var: "REDIS_REPLICA_ACKS",
                problem: format!(
                    "is {}, so every win waits for replicas with WAIT, and this server refuses it ({}); \
                     set it to 0 on a cache without WAIT (ElastiCache Serverless) or whose writes are \
                     durable once acknowledged (MemoryDB)",
                    self.replica_acks,
                    e.code().unwrap_or("refused")
                ),
            }
            .into()),
            Err(e) => Err(unavailable(e).into()),
        }
    }

    /// Whether a failover of this cache may lose a write it acknowledged
    /// with nothing waiting for a replica (`CACHE_DURABILITY=none`:
    /// ElastiCache Serverless, or a server without replicas): then the
    /// grant claims in DynamoDB also guard each user's ordinal
    /// (`DynamoClaims::guarding_ordinals`), the durable step that keeps a
    /// told win where no replica vouches for it.
    pub fn loses_acknowledged_writes(&self) -> bool {
        self.durability == CacheDurability::None
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

/// True if the server answered with a refusal (an unknown, renamed or
/// forbidden command), not a failure to answer.
fn refused(e: &redis::RedisError) -> bool {
    use redis::{ErrorKind, ServerErrorKind};
    matches!(
        e.kind(),
        ErrorKind::Server(ServerErrorKind::ResponseError | ServerErrorKind::NoPerm) | ErrorKind::Extension
    )
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
