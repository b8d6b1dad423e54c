//! The wallet's view of Redis: is a grant still in its shard's outbox?

use async_trait::async_trait;
use coupon_domain::error::StoreError;
use coupon_domain::ids::GrantId;
use coupon_domain::ids::UserId;
use coupon_domain::wallet::ports::OutboxLookup;
use redis::AsyncCommands;

use super::conn::{unavailable, Redis};
use super::repair::outbox_entry;

/// [`OutboxLookup`] on Redis.
#[derive(Clone)]
pub struct RedisOutbox {
    redis: Redis,
}

impl RedisOutbox {
    /// The lookup over a shared connection.
    pub fn new(redis: Redis) -> Self {
        Self { redis }
    }
}

#[async_trait]
impl OutboxLookup for RedisOutbox {
    async fn is_pending(&self, user: &UserId, grant: &GrantId) -> Result<bool, StoreError> {
        let key = self.redis.keys.shard(grant.coupon(), grant.shard()).outbox();
        let id = format!("{}-0", grant.seq());
        let mut conn = self.redis.conn.clone();
        let page: redis::streams::StreamRangeReply = conn.xrange(&key, &id, &id).await.map_err(unavailable)?;
        Ok(page
            .ids
            .first()
            .and_then(outbox_entry)
            .is_some_and(|e| &e.grant.user_id == user && &e.grant.grant_id == grant))
    }
}
