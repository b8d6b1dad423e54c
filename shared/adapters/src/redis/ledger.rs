//! The grab's stock ledger on Redis: the claim on the home shard, takes
//! from donors and the settle of a borrow, each one Lua script on one shard.

use async_trait::async_trait;
use coupon_domain::error::StoreError;
use coupon_domain::grab::ports::{
    BorrowEnd, Claim, ClaimReply, ClaimStep, Decision, EntryReply, Peek, PeekReply, Recorded, StockLedger, TakeReply,
};
use coupon_domain::ids::CouponId;
use coupon_domain::outcome::{Rejection, RiskReason};
use redis::{AsyncCommands, ErrorKind, ServerErrorKind};
use tracing::warn;

use super::conn::{protocol, unavailable, Redis};
use super::records::{encode_win, parse_recorded, parse_win};
use super::scripts::{evalsha, number, run, ENTER, FENCE, GRAB, PEEK, RECORDED, SETTLE, TAKE};

/// How long a shard's WAIT fence outlives its last win: long enough to
/// never be written and gone in one pipeline, short enough that a sale's
/// fences are gone a minute after it.
const FENCE_TTL_MS: u64 = 60_000;

/// [`StockLedger`] on Redis.
#[derive(Clone)]
pub struct RedisLedger {
    redis: Redis,
}

impl RedisLedger {
    /// The ledger over a shared connection.
    pub fn new(redis: Redis) -> Self {
        Self { redis }
    }
}

#[async_trait]
impl StockLedger for RedisLedger {
    async fn shard_count(&self, coupon: &CouponId) -> Result<Option<u32>, StoreError> {
        let mut conn = self.redis.conn.clone();
        let shards: Option<u32> = conn
            .hget(self.redis.keys.shard(coupon, 0).meta(), "shards")
            .await
            .map_err(unavailable)?;
        Ok(shards)
    }

    async fn drop_rolled_back(&self, coupon: &CouponId, shard: u32) -> Result<bool, StoreError> {
        self.redis.drop_if_behind(coupon, shard, u64::MAX).await
    }

    async fn claim(&self, claim: &Claim<'_>, step: ClaimStep) -> Result<ClaimReply, StoreError> {
        const WHAT: &str = "grab.lua";
        let k = self.redis.keys.shard(claim.coupon, claim.home_shard);
        let mut conn = self.redis.conn.clone();
        // An admission sends only what it reads: most presses of a sale
        // end there, and Redis parses every byte of them.
        let admit = step == ClaimStep::Admit;
        let mut cmd = evalsha(&GRAB, if admit { 3 } else { 5 });
        cmd.arg(k.meta())
            .arg(k.users())
            .arg(k.request(claim.user, claim.request));
        if !admit {
            cmd.arg(k.outbox()).arg(k.borrowing());
        }
        cmd.arg(match step {
            ClaimStep::Admit => "admit",
            ClaimStep::Commit => "commit",
            ClaimStep::Whole => "whole",
            ClaimStep::Draw => "draw",
        })
        .arg(claim.user.as_str())
        .arg(claim.level)
        .arg(claim.now_ms)
        .arg(device_flag(claim.device.is_some()));
        if !admit {
            cmd.arg(claim.request.as_str()).arg(self.redis.outcome_ttl_ms);
        }
        let reply: Vec<String> = run(&mut conn, &GRAB, &cmd).await.map_err(unavailable)?;
        let record = || reply.get(1).map(String::as_str).unwrap_or("");
        Ok(match reply.first().map(String::as_str) {
            Some("REPLAY") => ClaimReply::Replay(parse_recorded(WHAT, record())?),
            Some("WIN") => match parse_recorded(WHAT, record())? {
                Recorded::Won(rec) => ClaimReply::Won(rec),
                _ => return Err(protocol(WHAT, "WIN without a grant")),
            },
            Some("BORROW") => match parse_recorded(WHAT, record())? {
                Recorded::Borrowing { ordinal, at_ms } => ClaimReply::Borrow { ordinal, at_ms },
                _ => return Err(protocol(WHAT, "BORROW without a reservation")),
            },
            Some("ADMITTED") if step == ClaimStep::Admit => ClaimReply::Admitted,
            Some("UNVERIFIED") if reply.len() > 1 => match parse_recorded(WHAT, record())? {
                Recorded::Won(rec) => ClaimReply::ReplayUnverified(rec),
                _ => return Err(protocol(WHAT, "UNVERIFIED with a record that is not a win")),
            },
            _ => ClaimReply::Rejected(rejection(WHAT, &reply)?),
        })
    }

    async fn peek(&self, peek: &Peek<'_>) -> Result<PeekReply, StoreError> {
        const WHAT: &str = "peek.lua";
        let k = self.redis.keys.shard(peek.coupon, peek.home_shard);
        let mut conn = self.redis.conn.clone();
        let mut cmd = evalsha(&PEEK, 2);
        cmd.arg(k.meta())
            .arg(k.users())
            .arg(peek.user.as_str())
            .arg(peek.level)
            .arg(peek.now_ms)
            .arg(device_flag(peek.device));
        let reply: Vec<String> = run(&mut conn, &PEEK, &cmd).await.map_err(unavailable)?;
        Ok(match reply.first().map(String::as_str) {
            Some("OPEN") => PeekReply::Open,
            Some("EMPTY") => PeekReply::Empty {
                next_wave_at_ms: reply.get(1).map(|_| number(WHAT, &reply, 1)).transpose()?,
            },
            _ => PeekReply::Rejected(rejection(WHAT, &reply)?),
        })
    }

    async fn admit_entry(&self, ask: &Peek<'_>) -> Result<EntryReply, StoreError> {
        const WHAT: &str = "enter.lua";
        let k = self.redis.keys.shard(ask.coupon, ask.home_shard);
        let mut conn = self.redis.conn.clone();
        let mut cmd = evalsha(&ENTER, 2);
        cmd.arg(k.meta())
            .arg(k.entries())
            .arg(ask.user.as_str())
            .arg(ask.level)
            .arg(ask.now_ms)
            .arg(device_flag(ask.device));
        let reply: Vec<String> = run(&mut conn, &ENTER, &cmd).await.map_err(unavailable)?;
        Ok(match reply.first().map(String::as_str) {
            Some("OPEN") => EntryReply::Open,
            Some("ENTERED") => EntryReply::Entered {
                at_ms: number(WHAT, &reply, 1)?,
            },
            _ => EntryReply::Rejected(rejection(WHAT, &reply)?),
        })
    }

    async fn remember_entry(&self, ask: &Peek<'_>, at_ms: i64) -> Result<(), StoreError> {
        let k = self.redis.keys.shard(ask.coupon, ask.home_shard);
        let mut conn = self.redis.conn.clone();
        conn.hset::<_, _, _, ()>(k.entries(), ask.user.as_str(), at_ms)
            .await
            .map_err(unavailable)
    }

    async fn shard_stock(&self, coupon: &CouponId, shard: u32, now_ms: i64) -> Result<u64, StoreError> {
        Ok(self.redis.available(coupon, shard, now_ms).await?.unwrap_or(0))
    }

    async fn take(&self, claim: &Claim<'_>, donor: u32, ordinal: u32) -> Result<TakeReply, StoreError> {
        const WHAT: &str = "take.lua";
        let k = self.redis.keys.shard(claim.coupon, donor);
        let mut conn = self.redis.conn.clone();
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
            Some("WIN") => match reply.get(1).and_then(|r| parse_win(r)) {
                Some(rec) => TakeReply::Won(rec),
                None => return Err(protocol(WHAT, "WIN without a grant")),
            },
            Some("EMPTY") => TakeReply::Empty,
            Some("NOT_FOUND") | Some("UNVERIFIED") => TakeReply::Missing,
            Some("CLOSED") => TakeReply::Closed(closed_reason(WHAT, reply.get(1))?),
            other => return Err(protocol(WHAT, format!("unknown reply {other:?}"))),
        })
    }

    async fn settle(&self, claim: &Claim<'_>, ended: BorrowEnd<'_>) -> Result<Option<Recorded>, StoreError> {
        const WHAT: &str = "settle.lua";
        let k = self.redis.keys.shard(claim.coupon, claim.home_shard);
        let mut conn = self.redis.conn.clone();
        let reply: Vec<String> = SETTLE
            .key(k.meta())
            .key(k.users())
            .key(k.request(claim.user, claim.request))
            .key(k.outbox())
            .key(k.borrowing())
            .key(k.borrowed())
            .arg(claim.user.as_str())
            .arg(claim.request.as_str())
            .arg(claim.now_ms)
            .arg(self.redis.outcome_ttl_ms)
            .arg(match ended {
                BorrowEnd::Took(rec) => encode_win(rec),
                _ => String::new(),
            })
            .arg(match ended {
                BorrowEnd::Closed(Rejection::Ended) => "ENDED",
                BorrowEnd::Closed(_) => "OFFLINE",
                _ => "",
            })
            .invoke_async(&mut conn)
            .await
            .map_err(unavailable)?;
        match reply.first().map(String::as_str) {
            Some("DONE") => parse_recorded(WHAT, reply.get(1).map(String::as_str).unwrap_or("")).map(Some),
            Some("GONE") => Ok(None),
            Some("MISSING") => Err(StoreError::Unavailable(
                "the home shard has no state; the borrow waits for its rebuild".into(),
            )),
            other => Err(protocol(WHAT, format!("unknown reply {other:?}"))),
        }
    }

    async fn recorded(&self, claim: &Claim<'_>) -> Result<Option<Recorded>, StoreError> {
        const WHAT: &str = "recorded.lua";
        let k = self.redis.keys.shard(claim.coupon, claim.home_shard);
        let mut conn = self.redis.conn.clone();
        let mut cmd = evalsha(&RECORDED, 2);
        cmd.arg(k.meta()).arg(k.request(claim.user, claim.request));
        let reply: Vec<String> = run(&mut conn, &RECORDED, &cmd).await.map_err(unavailable)?;
        match reply.first().map(String::as_str) {
            None => Ok(None),
            Some("RECORD") => parse_recorded(WHAT, reply.get(1).map(String::as_str).unwrap_or("")).map(Some),
            Some("UNVERIFIED") => Err(StoreError::Unavailable(
                "the request's home shard is not verified since a restart, or not rebuilt since a loss".into(),
            )),
            other => Err(protocol(WHAT, format!("unknown reply {other:?}"))),
        }
    }

    async fn replicated(&self, coupon: &CouponId, shard: u32, decision: Decision<'_>) -> Result<bool, StoreError> {
        let wanted = self.redis.replica_acks;
        if wanted == 0 {
            // No replica vouches for anything: a failover may lose any win
            // (the setting's documented cost), so checking the node for the
            // decision would buy nothing for its round trip.
            return Ok(true);
        }
        // WAIT counts the replicas that acknowledged the connection's own
        // last write. On Redis up to 7.0 any command moved that mark to the
        // end of the replication stream; since Redis 7.2 and in Valkey only
        // a write of this connection does. The decision being vouched for
        // was often written by another connection (a retry that finds the
        // stored win on a fresh instance, a concurrent duplicate, the
        // sold-out memory's replay), so the pipeline writes first: the
        // fence is on this shard after every write the shard has taken,
        // the decision included, and a replica that acknowledges it holds
        // them all. The fence is written only where the decision is
        // (`lua/fence.lua`): after a failover the pipeline reaches the
        // promoted replica, which may never have had it. Being keyed, the
        // fence also routes the pipeline to the node that owns the shard's
        // slot on a cluster.
        let k = self.redis.keys.shard(coupon, shard);
        let (keys, args): (Vec<String>, Vec<String>) = match decision {
            Decision::Won { user, request, record } => (
                vec![k.fence(), k.request(user, request), k.meta()],
                vec!["record".into(), encode_win(record)],
            ),
            Decision::Reserved { user, request } => (
                vec![k.fence(), k.request(user, request), k.meta()],
                vec!["exists".into()],
            ),
            Decision::Lost { user, request } => {
                (vec![k.fence(), k.request(user, request), k.meta()], vec!["lost".into()])
            }
            Decision::Took { user, record } => (
                vec![k.fence(), k.taken()],
                vec![
                    "field".into(),
                    format!("{}:{}", record.ordinal, user.as_str()),
                    encode_win(record),
                ],
            ),
            Decision::Pending { user, record } => (
                vec![k.fence(), k.outbox(), k.borrowed()],
                vec![
                    "pending".into(),
                    format!("{}-0", record.grant_id.seq()),
                    record.grant_id.as_str().to_owned(),
                    user.as_str().to_owned(),
                ],
            ),
            Decision::Writes => (vec![k.fence(), k.fence()], vec!["writes".into()]),
        };
        let mut fence = evalsha(&FENCE, keys.len());
        fence.arg(&keys).arg(FENCE_TTL_MS).arg(&args);
        let mut pipe = redis::pipe();
        pipe.add_command(fence)
            .cmd("WAIT")
            .arg(wanted)
            .arg(self.redis.replica_ack_timeout_ms);
        let mut conn = self.redis.conn.clone();
        let replies: Vec<i64> = match pipe.query_async(&mut conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                FENCE.load_async(&mut conn).await.map_err(unavailable)?;
                pipe.query_async(&mut conn).await
            }
            other => other,
        }
        .map_err(unavailable)?;
        if replies.first() != Some(&1) {
            warn!(
                shard,
                ?decision,
                "the shard's node does not hold the decision (a failover since?); nothing vouched"
            );
            return Ok(false);
        }
        Ok(replies.get(1).is_some_and(|&acked| acked >= i64::from(wanted)))
    }
}

/// How a press tells the scripts it carries a verified device id
/// (`lua/lib.lua`, `refusal()`): one byte, or none.
pub(super) fn device_flag(device: bool) -> &'static str {
    if device {
        "1"
    } else {
        ""
    }
}

/// The reason of a `CLOSED` reply: the coupon taken offline or its window
/// over.
fn closed_reason(what: &'static str, reason: Option<&String>) -> Result<Rejection, StoreError> {
    match reason.map(String::as_str) {
        Some("OFFLINE") => Ok(Rejection::Offline),
        Some("ENDED") => Ok(Rejection::Ended),
        other => Err(protocol(what, format!("unknown closed reason {other:?}"))),
    }
}

/// A refusal as grab.lua and peek.lua answer it (lua/lib.lua, `refusal`).
pub(super) fn rejection(what: &'static str, reply: &[String]) -> Result<Rejection, StoreError> {
    Ok(match reply.first().map(String::as_str) {
        // No usable state: lost, or its server restarted since it was
        // verified (lua/lib.lua, verified()). Either way BUSY and a repair
        // request, as for a lost shard.
        Some("NOT_FOUND") | Some("UNVERIFIED") => Rejection::NotFound,
        Some("OFFLINE") => Rejection::Offline,
        Some("NOT_STARTED") => Rejection::NotStarted {
            starts_at_ms: number(what, reply, 1)?,
        },
        Some("ENDED") => Rejection::Ended,
        Some("LOTTERY") => Rejection::Lottery,
        Some("FIRST_COME") | Some("NOT_LOTTERY") => Rejection::FirstCome,
        Some("BETWEEN_WAVES") => Rejection::BetweenWaves {
            next_wave_at_ms: number(what, reply, 1)?,
        },
        Some("NOT_ELIGIBLE") => Rejection::NotEligible {
            min_level: number(what, reply, 1)?,
        },
        Some("DEVICE_REQUIRED") => Rejection::Risk(RiskReason::DeviceRequired),
        Some("ALREADY_CLAIMED") => Rejection::AlreadyClaimed,
        Some("SOLD_OUT") => Rejection::SoldOut,
        Some("RATE_LIMITED") => Rejection::RateLimited {
            retry_after_ms: number(what, reply, 1)?,
        },
        other => return Err(protocol(what, format!("unknown reply {other:?}"))),
    })
}
