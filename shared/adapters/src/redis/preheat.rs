//! Preheating a coupon's shards: each shard's meta hash written once
//! (`lua/preheat.lua`), refused if a different definition is there. The
//! reconciler's rebuild writes a lost shard through the same script.

use async_trait::async_trait;
use coupon_domain::catalog::StockPreheater;
use coupon_domain::coupon::CouponDefinition;
use coupon_domain::error::StoreError;

use super::conn::{protocol, unavailable, Redis};
use super::scripts::PREHEAT;

/// [`StockPreheater`] on Redis.
#[derive(Clone)]
pub struct RedisPreheater {
    redis: Redis,
}

impl RedisPreheater {
    /// The preheater over a shared connection.
    pub fn new(redis: Redis) -> Self {
        Self { redis }
    }
}

/// A value longer than Redis's `hash-max-listpack-value` (64 bytes by
/// default, also on ElastiCache), so the meta hash is kept as a hash table
/// from its first write: every press reads 13 of its fields, and a listpack
/// finds each by scanning the whole hash (measured: the admission's HMGET
/// 2.3 µs as a listpack, 0.85 µs as a table, docs/performance.md).
pub(super) const LAYOUT: &str =
    "one stock shard: kept a hash table on purpose (a value over 64 bytes), so reads are direct";

/// The meta hash of one shard as preheat and restore write it.
pub(super) fn meta_fields(
    def: &CouponDefinition,
    version: u64,
    shard: u32,
    stock: u64,
    seq: u64,
    now_ms: i64,
) -> Vec<(&'static str, String)> {
    vec![
        ("coupon_id", def.coupon_id.to_string()),
        ("shard", shard.to_string()),
        ("shards", def.shards.to_string()),
        ("status", def.status.as_str().to_owned()),
        ("start_ms", def.grab_start_ms.to_string()),
        ("end_ms", def.grab_end_ms.to_string()),
        ("min_level", def.min_member_level.to_string()),
        ("per_user_limit", def.per_user_limit.to_string()),
        ("rate", def.shard_rate().to_string()),
        ("burst", def.shard_burst().to_string()),
        ("stock", stock.to_string()),
        ("initial_stock", stock.to_string()),
        // The shard's share of the total and the total itself: what an
        // operator's stock addition is applied against (apply_settings.lua).
        ("alloc", def.shard_stock(shard).to_string()),
        // The shard's release schedule (lua/lib.lua, schedule()):
        // "<atMs>:<released by then>,...", cumulative; empty without waves.
        ("waves", schedule_of(def, shard)),
        // '0': a wave's unclaimed units expire when the next is out.
        ("rollover", if def.rollover { "1" } else { "0" }.to_owned()),
        // '1': a press without a verified device id is refused
        // (lua/lib.lua, refusal()).
        ("device", if def.device_required { "1" } else { "0" }.to_owned()),
        // FIRST_COME or LOTTERY (a press on a lottery is refused; its
        // draw claims for the winners), and until when units may be
        // claimed: the window's end, or the lottery's draw window's.
        ("mode", def.mode.as_str().to_owned()),
        ("sells_until_ms", def.sells_until_ms().to_string()),
        ("total", def.total_stock.to_string()),
        // The definition version applied; changes carry higher ones.
        ("version", version.to_string()),
        ("seq", seq.to_string()),
        // The state's incarnation, stamped on every request record it
        // writes (lua/lib.lua, own_record()).
        ("base", seq.to_string()),
        ("epoch", "1".to_owned()),
        ("preheated_at_ms", now_ms.to_string()),
        ("layout", LAYOUT.to_owned()),
    ]
}

/// Shard `shard`'s release schedule as its meta holds it (lua/lib.lua,
/// schedule()): `<atMs>:<units released by then>,...`, cumulative; empty
/// without waves.
pub(super) fn schedule_of(def: &CouponDefinition, shard: u32) -> String {
    def.shard_waves(shard)
        .iter()
        .map(|(at, released)| format!("{at}:{released}"))
        .collect::<Vec<_>>()
        .join(",")
}

impl Redis {
    /// Writes one shard's meta unless it exists (preheat.lua).
    pub(super) async fn write_meta(
        &self,
        def: &CouponDefinition,
        shard: u32,
        fields: &[(&str, String)],
    ) -> Result<String, StoreError> {
        let k = self.keys.shard(&def.coupon_id, shard);
        let mut invocation = PREHEAT.key(k.meta());
        invocation.key(k.base()).arg(def.fingerprint());
        for (k, v) in fields {
            invocation.arg(*k).arg(v);
        }
        let mut conn = self.conn.clone();
        invocation.invoke_async(&mut conn).await.map_err(unavailable)
    }
}

#[async_trait]
impl StockPreheater for RedisPreheater {
    async fn preheat(&self, def: &CouponDefinition, now_ms: i64) -> Result<bool, StoreError> {
        let mut created = false;
        for shard in 0..def.shards {
            let fields = meta_fields(def, 0, shard, def.shard_stock(shard), 0, now_ms);
            match self.redis.write_meta(def, shard, &fields).await?.as_str() {
                "CREATED" => created = true,
                "EXISTS" => {}
                "CONFLICT" => {
                    return Err(StoreError::Conflict(format!(
                        "shard {shard} of {} holds a different definition",
                        def.coupon_id
                    )))
                }
                other => return Err(protocol("preheat.lua", format!("unknown reply {other:?}"))),
            }
        }
        Ok(created)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_layout_marker_is_long_enough_to_keep_meta_a_hash_table() {
        // hash-max-listpack-value defaults to 64 (Redis 7, ElastiCache).
        assert!(super::LAYOUT.len() > 64, "{}", super::LAYOUT.len());
    }
}
