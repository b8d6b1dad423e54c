//! An operator's change reaching the live shards: every shard applies the
//! stored definition at its version (`lua/apply_settings.lua`), and a shard
//! that has a newer version ignores an older one.

use async_trait::async_trait;
use coupon_domain::admin::{Applied, LiveSettings};
use coupon_domain::coupon::StoredCoupon;
use coupon_domain::error::StoreError;

use super::conn::{protocol, unavailable, Redis};
use super::scripts::APPLY_SETTINGS;

/// [`LiveSettings`] on Redis.
#[derive(Clone)]
pub struct RedisLive {
    redis: Redis,
}

impl RedisLive {
    /// The applier over a shared connection.
    pub fn new(redis: Redis) -> Self {
        Self { redis }
    }
}

#[async_trait]
impl LiveSettings for RedisLive {
    async fn apply(&self, coupon: &StoredCoupon) -> Result<Applied, StoreError> {
        let def = &coupon.definition;
        let mut applied = Applied::default();
        for shard in 0..def.shards {
            let mut conn = self.redis.conn.clone();
            let reply: String = APPLY_SETTINGS
                .key(self.redis.keys.shard(&def.coupon_id, shard).meta())
                .arg(coupon.version)
                .arg(def.fingerprint())
                .arg(def.status.as_str())
                .arg(def.shard_rate().to_string())
                .arg(def.shard_burst())
                .arg(def.shard_stock(shard))
                .arg(def.total_stock)
                .invoke_async(&mut conn)
                .await
                .map_err(unavailable)?;
            match reply.as_str() {
                "APPLIED" => applied.applied += 1,
                "CURRENT" => applied.current += 1,
                "MISSING" => applied.missing += 1,
                other => return Err(protocol("apply_settings.lua", format!("unknown reply {other:?}"))),
            }
        }
        Ok(applied)
    }
}
