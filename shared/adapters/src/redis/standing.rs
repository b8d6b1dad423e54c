//! The coupon center's reads on Redis: a caller's standing on the home
//! shard of each listed coupon (`lua/standing.lua`, read only), and a
//! coupon's units left over all its shards. The reads of one listing are
//! sent together, so a page costs one round trip of wall time however many
//! coupons it lists.

use async_trait::async_trait;
use coupon_domain::center::{Standing, Standings};
use coupon_domain::error::StoreError;
use coupon_domain::grab::ports::{Peek, PeekReply};
use coupon_domain::ids::CouponId;
use futures::future::join_all;

use super::conn::{protocol, unavailable, Redis};
use super::ledger::{device_flag, rejection};
use super::scripts::{evalsha, number, run, AVAILABLE, STANDING};

impl Redis {
    /// The units `shard` may sell at `now_ms` (lua/available.lua), `None`
    /// for a shard with no state.
    pub(super) async fn available(
        &self,
        coupon: &CouponId,
        shard: u32,
        now_ms: i64,
    ) -> Result<Option<u64>, StoreError> {
        let mut conn = self.conn.clone();
        let mut cmd = evalsha(&AVAILABLE, 1);
        cmd.arg(self.keys.shard(coupon, shard).meta()).arg(now_ms);
        let reply: Vec<String> = run(&mut conn, &AVAILABLE, &cmd).await.map_err(unavailable)?;
        match reply.first() {
            None => Ok(None),
            Some(units) => units
                .parse()
                .map(Some)
                .map_err(|_| protocol("available.lua", "units is not a count")),
        }
    }
}

/// [`Standings`] on Redis.
#[derive(Clone)]
pub struct RedisStandings {
    redis: Redis,
}

impl RedisStandings {
    /// The reads over a shared connection.
    pub fn new(redis: Redis) -> Self {
        Self { redis }
    }

    async fn standing(&self, ask: &Peek<'_>) -> Result<Standing, StoreError> {
        const WHAT: &str = "standing.lua";
        let k = self.redis.keys.shard(ask.coupon, ask.home_shard);
        let mut conn = self.redis.conn.clone();
        let mut cmd = evalsha(&STANDING, 2);
        cmd.arg(k.meta())
            .arg(k.users())
            .arg(ask.user.as_str())
            .arg(ask.level)
            .arg(ask.now_ms)
            .arg(device_flag(ask.device));
        let reply: Vec<String> = run(&mut conn, &STANDING, &cmd).await.map_err(unavailable)?;
        let Some((held, answer)) = reply.split_first() else {
            return Err(protocol(WHAT, "empty reply"));
        };
        let held = held.parse().map_err(|_| protocol(WHAT, "held is not a count"))?;
        let shard = match answer.first().map(String::as_str) {
            Some("OPEN") => PeekReply::Open,
            Some("EMPTY") => PeekReply::Empty {
                next_wave_at_ms: answer.get(1).map(|_| number(WHAT, answer, 1)).transpose()?,
            },
            _ => PeekReply::Rejected(rejection(WHAT, answer)?),
        };
        Ok(Standing { shard, held })
    }
}

#[async_trait]
impl Standings for RedisStandings {
    async fn standings(&self, asks: &[Peek<'_>]) -> Vec<Result<Standing, StoreError>> {
        join_all(asks.iter().map(|ask| self.standing(ask))).await
    }

    async fn remaining(&self, coupon: &CouponId, shards: u32, now_ms: i64) -> Result<u64, StoreError> {
        let reads = (0..shards).map(|shard| async move {
            match self.redis.available(coupon, shard, now_ms).await? {
                Some(units) => Ok(units),
                // Lost (its repair is under way): its units are not known
                // to be gone, so neither is the coupon's stock.
                None => Err(StoreError::Unavailable(
                    format!("stock shard {shard} has no state").into(),
                )),
            }
        });
        join_all(reads).await.into_iter().sum()
    }
}
