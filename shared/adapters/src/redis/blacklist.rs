//! The blacklist flags every grab's risk check reads, one key per user in
//! the user's own slot.

use async_trait::async_trait;
use coupon_domain::blacklist::BlacklistFlags;
use coupon_domain::error::StoreError;
use coupon_domain::ids::UserId;
use redis::AsyncCommands;

use super::conn::{unavailable, Redis};

/// [`BlacklistFlags`] on Redis.
#[derive(Clone)]
pub struct RedisBlacklistFlags {
    redis: Redis,
}

impl RedisBlacklistFlags {
    /// The flags over a shared connection.
    pub fn new(redis: Redis) -> Self {
        Self { redis }
    }
}

#[async_trait]
impl BlacklistFlags for RedisBlacklistFlags {
    async fn set_flag(&self, user: &UserId, on: bool) -> Result<(), StoreError> {
        let mut conn = self.redis.conn.clone();
        let key = self.redis.keys.user_blacklist(user);
        if on {
            conn.set::<_, _, ()>(key, 1).await
        } else {
            conn.del::<_, ()>(key).await
        }
        .map_err(unavailable)
    }

    async fn restore_flag(&self, user: &UserId) -> Result<bool, StoreError> {
        let mut conn = self.redis.conn.clone();
        let set: Option<String> = redis::cmd("SET")
            .arg(self.redis.keys.user_blacklist(user))
            .arg(1)
            .arg("NX")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(set.is_some())
    }
}
