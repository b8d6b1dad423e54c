//! An operator's change reaching the live shards: a shard applies the
//! stored definition at its version (`lua/apply_settings.lua`; a shard that
//! has a newer version ignores an older one), and its sold-out epoch is
//! bumped in a second phase (`lua/bump_epoch.lua`), run by the use case.

use async_trait::async_trait;
use coupon_domain::coupon::StoredCoupon;
use coupon_domain::error::StoreError;
use coupon_domain::ids::CouponId;
use coupon_domain::live::{LiveSettings, ShardApply};

use super::conn::{protocol, unavailable, Redis};
use super::preheat::schedule_of;
use super::repair::bump_epoch;
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
    async fn apply_shard(&self, coupon: &StoredCoupon, shard: u32) -> Result<ShardApply, StoreError> {
        let def = &coupon.definition;
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
            .arg(schedule_of(def, shard))
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        match reply.as_str() {
            "APPLIED" => Ok(ShardApply::Applied),
            "CURRENT" => Ok(ShardApply::Current),
            "MISSING" => Ok(ShardApply::Missing),
            "UNVERIFIED" => Ok(ShardApply::Unverified),
            other => Err(protocol("apply_settings.lua", format!("unknown reply {other:?}"))),
        }
    }

    async fn bump_epoch(&self, coupon: &CouponId, shard: u32) -> Result<(), StoreError> {
        bump_epoch(&self.redis, coupon, shard).await
    }
}
