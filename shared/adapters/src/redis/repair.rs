//! What the reconciler reads and repairs in Redis: shard stock, outboxes
//! (read in pages, trimmed once DynamoDB confirms), lost shards rebuilt,
//! sold-out epochs bumped, borrows whose caller died.

use std::collections::HashMap;

use async_trait::async_trait;
use coupon_domain::coupon::StoredCoupon;
use coupon_domain::error::StoreError;
use coupon_domain::grant::{Grant, GrantRecord};
use coupon_domain::ids::{CouponId, GrantId, RequestId, UserId};
use coupon_domain::reconcile::ports::{DurableBound, OutboxEntry, ShardStock, ShardUnits, StockRepair, Verification};
use coupon_domain::user_coupon::Held;
use redis::AsyncCommands;

use super::conn::{protocol, unavailable, Redis};
use super::preheat::meta_fields;
use super::records::encode_win;
use super::scripts::{number, BUMP_EPOCH, DROP_IF_BEHIND, RESTORE_HASH, RESTORE_OUTBOX, RESTORE_REQUESTS, VERIFY};

/// [`StockRepair`] on Redis.
#[derive(Clone)]
pub struct RedisRepair {
    redis: Redis,
}

impl RedisRepair {
    /// The repairer over a shared connection.
    pub fn new(redis: Redis) -> Self {
        Self { redis }
    }
}

/// An outbox stream entry as a grant; `None` if malformed.
pub(super) fn outbox_entry(id: &redis::streams::StreamId) -> Option<OutboxEntry> {
    let seq = id.id.split('-').next()?.parse().ok()?;
    let field = |name: &str| id.get::<String>(name);
    let grant = Grant {
        grant_id: GrantId::parse(&field("grant_id")?).ok()?,
        coupon_id: CouponId::parse(&field("coupon_id")?).ok()?,
        user_id: UserId::parse(&field("user_id")?).ok()?,
        ordinal: field("ordinal")?.parse().ok()?,
        request_id: RequestId::parse(&field("request_id")?).ok()?,
        shard: field("shard")?.parse().ok()?,
        granted_at_ms: field("granted_at_ms")?.parse().ok()?,
    };
    Some(OutboxEntry { seq, grant })
}

/// A grant `settle.lua` listed as borrowed (its JSON); `None` if malformed.
fn borrowed_grant(json: &str) -> Option<Grant> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let text = |name: &str| v.get(name)?.as_str().map(str::to_owned);
    let number = |name: &str| v.get(name)?.as_i64();
    Some(Grant {
        grant_id: GrantId::parse(&text("grant_id")?).ok()?,
        coupon_id: CouponId::parse(&text("coupon_id")?).ok()?,
        user_id: UserId::parse(&text("user_id")?).ok()?,
        ordinal: u32::try_from(number("ordinal")?).ok()?,
        request_id: RequestId::parse(&text("request_id")?).ok()?,
        shard: u32::try_from(number("shard")?).ok()?,
        granted_at_ms: number("granted_at_ms")?,
    })
}

/// Outbox pages are read this many entries at a time.
const OUTBOX_PAGE: usize = 1_000;

#[async_trait]
impl StockRepair for RedisRepair {
    async fn settled(&self) -> Result<HashMap<CouponId, String>, StoreError> {
        let mut conn = self.redis.conn.clone();
        let all: HashMap<String, String> = conn.hgetall(self.redis.keys().settled()).await.map_err(unavailable)?;
        // A field this release cannot read is left out: its coupon is
        // visited, and forgotten by that pass.
        Ok(all
            .into_iter()
            .filter_map(|(c, f)| CouponId::parse(&c).ok().map(|c| (c, f)))
            .collect())
    }

    async fn settle(&self, settled: &[(CouponId, String)], forgotten: &[CouponId]) -> Result<(), StoreError> {
        let key = self.redis.keys().settled();
        let mut pipe = redis::pipe();
        pipe.atomic();
        if !forgotten.is_empty() {
            pipe.cmd("HDEL")
                .arg(&key)
                .arg(forgotten.iter().map(CouponId::as_str).collect::<Vec<_>>())
                .ignore();
        }
        for (coupon, fingerprint) in settled {
            pipe.cmd("HSET")
                .arg(&key)
                .arg(coupon.as_str())
                .arg(fingerprint)
                .ignore();
        }
        let mut conn = self.redis.conn.clone();
        pipe.query_async::<()>(&mut conn).await.map_err(unavailable)
    }
    async fn shard_stock(&self, coupon: &CouponId, shard: u32) -> Result<Option<ShardStock>, StoreError> {
        let mut conn = self.redis.conn.clone();
        // One HMGET: the stock and the version it was computed from, as of
        // the same instant.
        let (stock, version, expired): (Option<i64>, Option<u64>, Option<i64>) = redis::cmd("HMGET")
            .arg(self.redis.keys.shard(coupon, shard).meta())
            .arg("stock")
            .arg("version")
            .arg("expired")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        // A wave's leftovers written off (rollover off) are units no grant
        // took: counted with the stock, so the equation adds up and a
        // rebuild of another shard does not offer them again.
        Ok(stock.map(|stock| ShardStock {
            stock: stock + expired.unwrap_or(0),
            version: version.unwrap_or(0),
        }))
    }

    async fn outbox(&self, coupon: &CouponId, shard: u32) -> Result<Vec<OutboxEntry>, StoreError> {
        let key = self.redis.keys.shard(coupon, shard).outbox();
        let mut conn = self.redis.conn.clone();
        let mut entries = Vec::new();
        let mut start = "-".to_owned();
        loop {
            let page: redis::streams::StreamRangeReply = conn
                .xrange_count(&key, &start, "+", OUTBOX_PAGE)
                .await
                .map_err(unavailable)?;
            let n = page.ids.len();
            for id in &page.ids {
                match outbox_entry(id) {
                    Some(entry) => entries.push(entry),
                    None => tracing::error!(key = %key, id = %id.id, "malformed outbox entry left in place"),
                }
            }
            match page.ids.last() {
                Some(last) if n == OUTBOX_PAGE => start = format!("({}", last.id),
                _ => break,
            }
        }
        Ok(entries)
    }

    async fn trim(&self, coupon: &CouponId, shard: u32, seqs: &[u64]) -> Result<(), StoreError> {
        let key = self.redis.keys.shard(coupon, shard).outbox();
        let mut conn = self.redis.conn.clone();
        for chunk in seqs.chunks(500) {
            let ids: Vec<String> = chunk.iter().map(|s| format!("{s}-0")).collect();
            conn.xdel::<_, _, ()>(&key, &ids).await.map_err(unavailable)?;
        }
        Ok(())
    }

    async fn borrowed(&self, coupon: &CouponId, shard: u32) -> Result<Vec<Grant>, StoreError> {
        let key = self.redis.keys.shard(coupon, shard).borrowed();
        let mut conn = self.redis.conn.clone();
        let listed: Vec<(String, String)> = conn.hgetall(&key).await.map_err(unavailable)?;
        let mut grants = Vec::with_capacity(listed.len());
        for (id, json) in listed {
            match borrowed_grant(&json) {
                Some(grant) => grants.push(grant),
                None => tracing::error!(key = %key, grant = %id, "malformed borrowed grant left in place"),
            }
        }
        Ok(grants)
    }

    async fn forget_borrowed(&self, coupon: &CouponId, shard: u32, grants: &[GrantId]) -> Result<(), StoreError> {
        let key = self.redis.keys.shard(coupon, shard).borrowed();
        let mut conn = self.redis.conn.clone();
        for chunk in grants.chunks(500) {
            let ids: Vec<&str> = chunk.iter().map(GrantId::as_str).collect();
            conn.hdel::<_, _, ()>(&key, &ids).await.map_err(unavailable)?;
        }
        Ok(())
    }

    async fn restore_shard(
        &self,
        coupon: &StoredCoupon,
        shard: u32,
        units: ShardUnits,
        seq_base: u64,
        holders: &[(UserId, Vec<Held>)],
        taken: &[(UserId, GrantRecord)],
        outbox: &[Grant],
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let def = &coupon.definition;
        let k = self.redis.keys.shard(&def.coupon_id, shard);
        let mut entries: Vec<&Grant> = outbox.iter().collect();
        entries.sort_by_key(|g| g.grant_id.seq());
        for chunk in entries.chunks(200) {
            let mut invocation = RESTORE_OUTBOX.key(k.meta());
            invocation.key(k.outbox());
            for g in chunk {
                invocation
                    .arg(g.grant_id.seq())
                    .arg(g.grant_id.as_str())
                    .arg(g.coupon_id.as_str())
                    .arg(g.user_id.as_str())
                    .arg(g.ordinal)
                    .arg(g.request_id.as_str())
                    .arg(g.shard)
                    .arg(g.granted_at_ms);
            }
            let mut conn = self.redis.conn.clone();
            let reply: String = invocation.invoke_async(&mut conn).await.map_err(unavailable)?;
            if reply == "EXISTS" {
                return Ok(false);
            }
        }
        for chunk in taken.chunks(500) {
            let mut invocation = RESTORE_HASH.key(k.meta());
            invocation.key(k.taken());
            for (user, record) in chunk {
                invocation
                    .arg(format!("{}:{}", record.ordinal, user.as_str()))
                    .arg(encode_win(record));
            }
            let mut conn = self.redis.conn.clone();
            let reply: String = invocation.invoke_async(&mut conn).await.map_err(unavailable)?;
            if reply == "EXISTS" {
                return Ok(false);
            }
        }
        for chunk in holders.chunks(500) {
            let mut invocation = RESTORE_HASH.key(k.meta());
            invocation.key(k.users());
            for (user, held) in chunk {
                invocation.arg(user.as_str()).arg(held.len());
            }
            let mut conn = self.redis.conn.clone();
            let reply: String = invocation.invoke_async(&mut conn).await.map_err(unavailable)?;
            if reply == "EXISTS" {
                return Ok(false);
            }
        }
        let outcomes: Vec<(&UserId, &RequestId, &GrantRecord)> = holders
            .iter()
            .flat_map(|(user, held)| {
                held.iter()
                    .filter_map(move |h| h.outcome.as_ref().map(|(request, record)| (user, request, record)))
            })
            .collect();
        for chunk in outcomes.chunks(200) {
            let mut invocation = RESTORE_REQUESTS.key(k.meta());
            invocation.key(k.base()).arg(self.redis.outcome_ttl_ms).arg(seq_base);
            for (user, request, record) in chunk {
                invocation.key(k.request(user, request)).arg(encode_win(record));
            }
            let mut conn = self.redis.conn.clone();
            let reply: String = invocation.invoke_async(&mut conn).await.map_err(unavailable)?;
            if reply == "EXISTS" {
                return Ok(false);
            }
        }
        let mut fields = meta_fields(def, coupon.version, shard, units.stock, seq_base, now_ms);
        fields.push(("restored_at_ms", now_ms.to_string()));
        if units.expired > 0 {
            fields.push(("expired", units.expired.to_string()));
        }
        match self.redis.write_meta(def, shard, &fields).await?.as_str() {
            "CREATED" => Ok(true),
            "EXISTS" | "CONFLICT" => Ok(false),
            other => Err(protocol("preheat.lua", format!("unknown reply {other:?}"))),
        }
    }

    async fn drop_if_behind(&self, coupon: &CouponId, shard: u32, high_water: u64) -> Result<bool, StoreError> {
        self.redis.drop_if_behind(coupon, shard, high_water).await
    }

    async fn verify(
        &self,
        coupon: &CouponId,
        shard: u32,
        now_ms: i64,
        bound: Option<DurableBound>,
    ) -> Result<Verification, StoreError> {
        const WHAT: &str = "verify.lua";
        let k = self.redis.keys.shard(coupon, shard);
        let mut conn = self.redis.conn.clone();
        let reply: Vec<String> = VERIFY
            .key(k.meta())
            .key(k.users())
            .key(k.outbox())
            .key(k.taken())
            .key(k.borrowing())
            .arg(now_ms)
            .arg(bound.map(|b| b.high_water.to_string()).unwrap_or_default())
            .arg(bound.map(|b| b.version).unwrap_or(0))
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(match reply.first().map(String::as_str) {
            Some("MISSING") => Verification::Missing,
            Some("CURRENT") => Verification::Current,
            Some("SUSPECT") => Verification::Suspect {
                since_ms: number(WHAT, &reply, 1)?,
            },
            Some("DROPPED") => Verification::Dropped,
            Some("CONFIRMED") => Verification::Confirmed,
            other => return Err(protocol(WHAT, format!("unknown reply {other:?}"))),
        })
    }

    async fn bump_epoch(&self, coupon: &CouponId, shard: u32) -> Result<(), StoreError> {
        bump_epoch(&self.redis, coupon, shard).await
    }

    async fn stale_borrows(
        &self,
        coupon: &CouponId,
        shard: u32,
        before_ms: i64,
    ) -> Result<Vec<(RequestId, UserId)>, StoreError> {
        let mut conn = self.redis.conn.clone();
        let members: Vec<String> = conn
            .zrangebyscore_limit(
                self.redis.keys.shard(coupon, shard).borrowing(),
                "-inf",
                before_ms,
                0,
                1_000,
            )
            .await
            .map_err(unavailable)?;
        Ok(members
            .iter()
            .filter_map(|m| {
                let (request, user) = m.split_once(':')?;
                Some((RequestId::parse(request).ok()?, UserId::parse(user).ok()?))
            })
            .collect())
    }
}

/// Voids a shard's sold-out stamp (`lua/bump_epoch.lua`): after stock was
/// added anywhere in the coupon, by a rebuild or an operator.
pub(super) async fn bump_epoch(redis: &Redis, coupon: &CouponId, shard: u32) -> Result<(), StoreError> {
    let mut conn = redis.conn.clone();
    BUMP_EPOCH
        .key(redis.keys.shard(coupon, shard).meta())
        .invoke_async::<i64>(&mut conn)
        .await
        .map(|_| ())
        .map_err(unavailable)
}

impl Redis {
    /// `drop_if_behind.lua` on one shard (`high_water` u64::MAX: dropped
    /// whatever its sequence, the state being proved rolled back), shared by
    /// the reconciler's repair and the grab's ledger.
    pub(super) async fn drop_if_behind(
        &self,
        coupon: &CouponId,
        shard: u32,
        high_water: u64,
    ) -> Result<bool, StoreError> {
        let k = self.keys.shard(coupon, shard);
        let mut conn = self.conn.clone();
        let dropped: i64 = DROP_IF_BEHIND
            .key(k.meta())
            .key(k.users())
            .key(k.outbox())
            .key(k.taken())
            .key(k.borrowing())
            .arg(high_water)
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(dropped == 1)
    }
}
