//! The Redis adapter: the stock ledger (Lua scripts), the risk guard and the
//! preheat, over one multiplexed connection that reconnects by itself.
//!
//! The connection is either one multiplexed connection to a standalone
//! server (or an ElastiCache primary endpoint), or a cluster connection that
//! routes each command to the node owning its slot (ElastiCache cluster
//! mode); `REDIS_CLUSTER` chooses. Nothing else differs: every script's keys
//! share one hash tag, so every call has exactly one slot.
//!
//! Scripts are compiled in from `lua/` and run through [`redis::Script`]:
//! EVALSHA, with a SCRIPT LOAD and retry when Redis answers NOSCRIPT (after a
//! restart or failover). Every script gets all its keys in KEYS, and all of
//! them share one hash tag ([`crate::keys`]).

use std::sync::LazyLock;
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::{AsyncCommands, Cmd, Pipeline, RedisFuture, Script, Value};

use crate::admin::{Applied, LiveSettings};
use crate::config::{RedisSettings, RiskLimits};
use crate::coupon::{CouponDefinition, StoredCoupon};
use crate::error::StoreError;
use crate::grant::Grant;
use crate::grant::GrantRecord;
use crate::ids::RequestId;
use crate::ids::{ClientIp, CouponId, UserId};
use crate::issuance::GrantRef;
use crate::keys::KeySpace;
use crate::outcome::{Rejection, RiskReason};
use crate::ports::{
    Claim, ClaimReply, OutboxEntry, OutboxLookup, Recorded, RiskDecision, RiskGuard, RiskHold, StockLedger,
    StockPreheater, StockRepair, TakeReply,
};

macro_rules! lua {
    ($name:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../../../lua/lib.lua"),
                include_str!(concat!("../../../lua/", $name))
            ))
        })
    };
}

static GRAB: LazyLock<Script> = lua!("grab.lua");
static TAKE: LazyLock<Script> = lua!("take.lua");
static SETTLE: LazyLock<Script> = lua!("settle.lua");
static PREHEAT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/preheat.lua")));
static RISK_USER: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/risk_reserve_user.lua")));
static RISK_IP: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/risk_reserve_ip.lua")));
static RESTORE_USERS: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/restore_users.lua")));
static BUMP_EPOCH: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/bump_epoch.lua")));
static APPLY_SETTINGS: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../../../lua/apply_settings.lua")));
static RISK_RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../../../lua/risk_release.lua")));

/// Risk counters outlive their day by a day, then expire on their own.
const RISK_TTL_MS: u64 = 2 * 86_400_000;

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

/// Redis behind the ports. Cheap to clone: clones share the connection.
#[derive(Clone)]
pub struct RedisStore {
    conn: RedisConnection,
    keys: KeySpace,
    outcome_ttl_ms: u64,
    risk: RiskLimits,
}

impl RedisStore {
    /// Connects (once per Lambda instance). Fails if Redis is unreachable,
    /// so a misconfigured function fails its cold start, not its requests.
    pub async fn connect(
        settings: &RedisSettings,
        outcome_ttl_secs: u64,
        risk: RiskLimits,
    ) -> Result<Self, StoreError> {
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
            outcome_ttl_ms: outcome_ttl_secs.saturating_mul(1000),
            risk,
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

    /// Puts `user` on the blacklist (operators; tests).
    pub async fn blacklist(&self, user: &UserId) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        conn.set::<_, _, ()>(self.keys.user_blacklist(user), 1)
            .await
            .map_err(unavailable)
    }

    /// Takes `user` off the blacklist.
    pub async fn unblacklist(&self, user: &UserId) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        conn.del::<_, ()>(self.keys.user_blacklist(user))
            .await
            .map_err(unavailable)
    }
}

fn unavailable(e: redis::RedisError) -> StoreError {
    StoreError::Unavailable(Box::new(e))
}

fn protocol(what: &'static str, detail: impl Into<String>) -> StoreError {
    StoreError::Protocol {
        what,
        detail: detail.into(),
    }
}

fn parse_recorded(what: &'static str, record: &str) -> Result<Recorded, StoreError> {
    if let Some(rec) = GrantRecord::parse(record) {
        return Ok(Recorded::Won(rec));
    }
    if record == "L|SOLD_OUT" {
        return Ok(Recorded::SoldOut);
    }
    if let Some(rest) = record.strip_prefix("B|") {
        if let Some(ordinal) = rest.split('|').next().and_then(|o| o.parse().ok()) {
            return Ok(Recorded::Borrowing { ordinal });
        }
    }
    Err(protocol(
        what,
        format!("unknown record kind {:?}", record.get(..2).unwrap_or("")),
    ))
}

fn number<T: std::str::FromStr>(what: &'static str, reply: &[String], at: usize) -> Result<T, StoreError> {
    reply
        .get(at)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| protocol(what, format!("missing number at {at}")))
}

#[async_trait]
impl StockLedger for RedisStore {
    async fn shard_count(&self, coupon: &CouponId) -> Result<Option<u32>, StoreError> {
        let mut conn = self.conn.clone();
        let shards: Option<u32> = conn
            .hget(self.keys.shard(coupon, 0).meta(), "shards")
            .await
            .map_err(unavailable)?;
        Ok(shards)
    }

    async fn claim(&self, claim: &Claim<'_>) -> Result<ClaimReply, StoreError> {
        const WHAT: &str = "grab.lua";
        let k = self.keys.shard(claim.coupon, claim.home_shard);
        let mut conn = self.conn.clone();
        let reply: Vec<String> = GRAB
            .key(k.meta())
            .key(k.users())
            .key(k.request(claim.user, claim.request))
            .key(k.outbox())
            .key(k.borrowing())
            .arg(claim.user.as_str())
            .arg(claim.level)
            .arg(claim.request.as_str())
            .arg(claim.now_ms)
            .arg(self.outcome_ttl_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        let record = || reply.get(1).map(String::as_str).unwrap_or("");
        Ok(match reply.first().map(String::as_str) {
            Some("REPLAY") => ClaimReply::Replay(parse_recorded(WHAT, record())?),
            Some("WIN") => match parse_recorded(WHAT, record())? {
                Recorded::Won(rec) => ClaimReply::Won(rec),
                _ => return Err(protocol(WHAT, "WIN without a grant")),
            },
            Some("BORROW") => match parse_recorded(WHAT, record())? {
                Recorded::Borrowing { ordinal } => ClaimReply::Borrow { ordinal },
                _ => return Err(protocol(WHAT, "BORROW without a reservation")),
            },
            Some("NOT_FOUND") => ClaimReply::Rejected(Rejection::NotFound),
            Some("OFFLINE") => ClaimReply::Rejected(Rejection::Offline),
            Some("NOT_STARTED") => ClaimReply::Rejected(Rejection::NotStarted {
                starts_at_ms: number(WHAT, &reply, 1)?,
            }),
            Some("ENDED") => ClaimReply::Rejected(Rejection::Ended),
            Some("NOT_ELIGIBLE") => ClaimReply::Rejected(Rejection::NotEligible {
                min_level: number(WHAT, &reply, 1)?,
            }),
            Some("ALREADY_CLAIMED") => ClaimReply::Rejected(Rejection::AlreadyClaimed),
            Some("SOLD_OUT") => ClaimReply::Rejected(Rejection::SoldOut),
            Some("RATE_LIMITED") => ClaimReply::Rejected(Rejection::RateLimited {
                retry_after_ms: number(WHAT, &reply, 1)?,
            }),
            other => return Err(protocol(WHAT, format!("unknown reply {other:?}"))),
        })
    }

    async fn take(&self, claim: &Claim<'_>, donor: u32, ordinal: u32) -> Result<TakeReply, StoreError> {
        const WHAT: &str = "take.lua";
        let k = self.keys.shard(claim.coupon, donor);
        let mut conn = self.conn.clone();
        let reply: Vec<String> = TAKE
            .key(k.meta())
            .key(k.outbox())
            .key(k.taken())
            .arg(claim.user.as_str())
            .arg(ordinal)
            .arg(claim.request.as_str())
            .arg(claim.now_ms)
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(match reply.first().map(String::as_str) {
            Some("WIN") => match reply.get(1).and_then(|r| GrantRecord::parse(r)) {
                Some(rec) => TakeReply::Won(rec),
                None => return Err(protocol(WHAT, "WIN without a grant")),
            },
            Some("EMPTY") => TakeReply::Empty,
            Some("NOT_FOUND") => TakeReply::Missing,
            other => return Err(protocol(WHAT, format!("unknown reply {other:?}"))),
        })
    }

    async fn settle(
        &self,
        claim: &Claim<'_>,
        donor_grant: Option<&GrantRecord>,
    ) -> Result<Option<Recorded>, StoreError> {
        const WHAT: &str = "settle.lua";
        let k = self.keys.shard(claim.coupon, claim.home_shard);
        let mut conn = self.conn.clone();
        let reply: Vec<String> = SETTLE
            .key(k.meta())
            .key(k.users())
            .key(k.request(claim.user, claim.request))
            .key(k.outbox())
            .key(k.borrowing())
            .arg(claim.user.as_str())
            .arg(claim.request.as_str())
            .arg(claim.now_ms)
            .arg(self.outcome_ttl_ms)
            .arg(donor_grant.map(GrantRecord::encode).unwrap_or_default())
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        match reply.first().map(String::as_str) {
            Some("DONE") => parse_recorded(WHAT, reply.get(1).map(String::as_str).unwrap_or("")).map(Some),
            Some("GONE") => Ok(None),
            other => Err(protocol(WHAT, format!("unknown reply {other:?}"))),
        }
    }

    async fn recorded(&self, claim: &Claim<'_>) -> Result<Option<Recorded>, StoreError> {
        let key = self
            .keys
            .shard(claim.coupon, claim.home_shard)
            .request(claim.user, claim.request);
        let mut conn = self.conn.clone();
        let record: Option<String> = conn.get(key).await.map_err(unavailable)?;
        record.map(|r| parse_recorded("GET request", &r)).transpose()
    }
}

#[async_trait]
impl RiskGuard for RedisStore {
    async fn reserve(&self, user: &UserId, ip: Option<ClientIp>, now_ms: i64) -> Result<RiskDecision, StoreError> {
        let day = self.risk.day(now_ms);
        let mut user_conn = self.conn.clone();
        let mut ip_conn = self.conn.clone();
        // Two slots, so two scripts; sent together, they cost one round trip
        // of latency on the multiplexed connection.
        let user_call = async {
            RISK_USER
                .key(self.keys.user_blacklist(user))
                .key(self.keys.user_claims(user, day))
                .arg(self.risk.daily_claims_per_user)
                .arg(RISK_TTL_MS)
                .invoke_async::<String>(&mut user_conn)
                .await
        };
        let ip_call = async {
            match ip {
                Some(ip) if self.risk.users_per_ip > 0 => RISK_IP
                    .key(self.keys.ip_users(ip, day))
                    .arg(user.as_str())
                    .arg(self.risk.users_per_ip)
                    .arg(RISK_TTL_MS)
                    .invoke_async::<String>(&mut ip_conn)
                    .await
                    .map(Some),
                _ => Ok(None),
            }
        };
        let (user_reply, ip_reply) = tokio::join!(user_call, ip_call);
        let mut hold = RiskHold {
            user: user.clone(),
            ip,
            day,
            user_reserved: false,
            ip_reserved: false,
        };
        // Record what was taken before looking at errors, so that a
        // half-failed reservation is given back.
        let user_verdict = match &user_reply {
            Ok(v) => {
                hold.user_reserved = v == "RESERVED";
                Some(v.as_str())
            }
            Err(_) => None,
        };
        let ip_verdict = match &ip_reply {
            Ok(v) => {
                hold.ip_reserved = v.as_deref() == Some("RESERVED");
                v.as_deref()
            }
            Err(_) => None,
        };
        let refusal = match (user_verdict, ip_verdict) {
            (Some("BLACKLISTED"), _) => Some(RiskReason::Blacklisted),
            (Some("DAILY_LIMIT"), _) => Some(RiskReason::DailyLimit),
            (_, Some("IP_LIMIT")) => Some(RiskReason::IpLimit),
            _ => None,
        };
        let failure = user_reply.err().or(ip_reply.err());
        let outcome = match (refusal, failure) {
            (None, None) => return Ok(RiskDecision::Allowed(hold)),
            (Some(reason), _) => Ok(RiskDecision::Refused(reason)),
            (None, Some(e)) => Err(unavailable(e)),
        };
        if !hold.is_empty() {
            // Best effort; if this fails too, the hold expires with its day.
            let _ = self.release(&hold).await;
        }
        outcome
    }

    async fn release(&self, hold: &RiskHold) -> Result<(), StoreError> {
        let mut user_conn = self.conn.clone();
        let mut ip_conn = self.conn.clone();
        let user_call = async {
            if !hold.user_reserved {
                return Ok(());
            }
            RISK_RELEASE
                .key(self.keys.user_claims(&hold.user, hold.day))
                .arg("")
                .invoke_async::<()>(&mut user_conn)
                .await
        };
        let ip_call = async {
            match hold.ip {
                Some(ip) if hold.ip_reserved => {
                    RISK_RELEASE
                        .key(self.keys.ip_users(ip, hold.day))
                        .arg(hold.user.as_str())
                        .invoke_async::<()>(&mut ip_conn)
                        .await
                }
                _ => Ok(()),
            }
        };
        let (a, b) = tokio::join!(user_call, ip_call);
        a.and(b).map_err(unavailable)
    }
}

/// The meta hash of one shard as preheat and restore write it.
fn meta_fields(def: &CouponDefinition, shard: u32, stock: u64, seq: u64, now_ms: i64) -> Vec<(&'static str, String)> {
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
        ("total", def.total_stock.to_string()),
        // The definition version applied; changes carry higher ones.
        ("version", "0".to_owned()),
        ("seq", seq.to_string()),
        ("epoch", "1".to_owned()),
        ("preheated_at_ms", now_ms.to_string()),
    ]
}

impl RedisStore {
    /// Writes one shard's meta unless it exists (preheat.lua).
    async fn write_meta(
        &self,
        def: &CouponDefinition,
        shard: u32,
        fields: &[(&str, String)],
    ) -> Result<String, StoreError> {
        let mut invocation = PREHEAT.key(self.keys.shard(&def.coupon_id, shard).meta());
        invocation.arg(def.fingerprint());
        for (k, v) in fields {
            invocation.arg(*k).arg(v);
        }
        let mut conn = self.conn.clone();
        invocation.invoke_async(&mut conn).await.map_err(unavailable)
    }
}

#[async_trait]
impl StockPreheater for RedisStore {
    async fn preheat(&self, def: &CouponDefinition, now_ms: i64) -> Result<bool, StoreError> {
        let mut created = false;
        for shard in 0..def.shards {
            let fields = meta_fields(def, shard, def.shard_stock(shard), 0, now_ms);
            match self.write_meta(def, shard, &fields).await?.as_str() {
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

fn outbox_entry(id: &redis::streams::StreamId) -> Option<OutboxEntry> {
    let seq = id.id.split('-').next()?.parse().ok()?;
    let field = |name: &str| id.get::<String>(name);
    let grant = Grant {
        grant_id: field("grant_id")?,
        coupon_id: crate::ids::CouponId::parse(&field("coupon_id")?).ok()?,
        user_id: UserId::parse(&field("user_id")?).ok()?,
        ordinal: field("ordinal")?.parse().ok()?,
        request_id: RequestId::parse(&field("request_id")?).ok()?,
        shard: field("shard")?.parse().ok()?,
        granted_at_ms: field("granted_at_ms")?.parse().ok()?,
    };
    Some(OutboxEntry { seq, grant })
}

/// Outbox pages are read this many entries at a time.
const OUTBOX_PAGE: usize = 1_000;

#[async_trait]
impl StockRepair for RedisStore {
    async fn shard_stock(&self, coupon: &CouponId, shard: u32) -> Result<Option<i64>, StoreError> {
        let mut conn = self.conn.clone();
        conn.hget(self.keys.shard(coupon, shard).meta(), "stock")
            .await
            .map_err(unavailable)
    }

    async fn outbox(&self, coupon: &CouponId, shard: u32) -> Result<Vec<OutboxEntry>, StoreError> {
        let key = self.keys.shard(coupon, shard).outbox();
        let mut conn = self.conn.clone();
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
        let key = self.keys.shard(coupon, shard).outbox();
        let mut conn = self.conn.clone();
        for chunk in seqs.chunks(500) {
            let ids: Vec<String> = chunk.iter().map(|s| format!("{s}-0")).collect();
            conn.xdel::<_, _, ()>(&key, &ids).await.map_err(unavailable)?;
        }
        Ok(())
    }

    async fn restore_shard(
        &self,
        def: &CouponDefinition,
        shard: u32,
        stock: u64,
        seq_base: u64,
        holders: &[(UserId, u32)],
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let k = self.keys.shard(&def.coupon_id, shard);
        for chunk in holders.chunks(500) {
            let mut invocation = RESTORE_USERS.key(k.meta());
            invocation.key(k.users());
            for (user, count) in chunk {
                invocation.arg(user.as_str()).arg(*count);
            }
            let mut conn = self.conn.clone();
            let reply: String = invocation.invoke_async(&mut conn).await.map_err(unavailable)?;
            if reply == "EXISTS" {
                return Ok(false);
            }
        }
        let mut fields = meta_fields(def, shard, stock, seq_base, now_ms);
        fields.push(("restored_at_ms", now_ms.to_string()));
        match self.write_meta(def, shard, &fields).await?.as_str() {
            "CREATED" => Ok(true),
            "EXISTS" | "CONFLICT" => Ok(false),
            other => Err(protocol("preheat.lua", format!("unknown reply {other:?}"))),
        }
    }

    async fn restore_blacklist_flag(&self, user: &UserId) -> Result<bool, StoreError> {
        let mut conn = self.conn.clone();
        let set: Option<String> = redis::cmd("SET")
            .arg(self.keys.user_blacklist(user))
            .arg(1)
            .arg("NX")
            .query_async(&mut conn)
            .await
            .map_err(unavailable)?;
        Ok(set.is_some())
    }

    async fn clear_blacklist_flag(&self, user: &UserId) -> Result<(), StoreError> {
        self.unblacklist(user).await
    }

    async fn bump_epoch(&self, coupon: &CouponId, shard: u32) -> Result<(), StoreError> {
        let mut conn = self.conn.clone();
        BUMP_EPOCH
            .key(self.keys.shard(coupon, shard).meta())
            .invoke_async::<i64>(&mut conn)
            .await
            .map(|_| ())
            .map_err(unavailable)
    }

    async fn stale_borrows(
        &self,
        coupon: &CouponId,
        shard: u32,
        before_ms: i64,
    ) -> Result<Vec<(RequestId, UserId)>, StoreError> {
        let mut conn = self.conn.clone();
        let members: Vec<String> = conn
            .zrangebyscore_limit(self.keys.shard(coupon, shard).borrowing(), "-inf", before_ms, 0, 1_000)
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

#[async_trait]
impl OutboxLookup for RedisStore {
    async fn is_pending(&self, user: &UserId, grant: &GrantRef) -> Result<bool, StoreError> {
        let key = self.keys.shard(&grant.coupon, grant.shard).outbox();
        let id = format!("{}-0", grant.seq);
        let mut conn = self.conn.clone();
        let page: redis::streams::StreamRangeReply = conn.xrange(&key, &id, &id).await.map_err(unavailable)?;
        Ok(page
            .ids
            .first()
            .and_then(outbox_entry)
            .is_some_and(|e| &e.grant.user_id == user && e.grant.grant_id == grant.grant_id))
    }
}

#[async_trait]
impl LiveSettings for RedisStore {
    async fn apply(&self, coupon: &StoredCoupon) -> Result<Applied, StoreError> {
        let def = &coupon.definition;
        let mut applied = Applied::default();
        for shard in 0..def.shards {
            let mut conn = self.conn.clone();
            let reply: String = APPLY_SETTINGS
                .key(self.keys.shard(&def.coupon_id, shard).meta())
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

    async fn set_blacklisted(&self, user: &UserId, on: bool) -> Result<(), StoreError> {
        if on {
            self.blacklist(user).await
        } else {
            self.unblacklist(user).await
        }
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
