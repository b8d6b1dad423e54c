//! The risk guard on Redis: blacklist, daily claims per user and distinct
//! users per IP, reserved in the user's and the IP's own slots before the
//! grab and released when it does not win.

use async_trait::async_trait;
use coupon_domain::config::RiskLimits;
use coupon_domain::error::StoreError;
use coupon_domain::grab::ports::{Claim, RiskDecision, RiskGuard, RiskHold};
use coupon_domain::ids::{ClientIp, CouponId, RequestId, UserId};
use coupon_domain::outcome::RiskReason;

use super::conn::{unavailable, Redis};
use super::scripts::{RISK_CHECK, RISK_IP, RISK_RELEASE, RISK_USER};

/// Risk counters outlive their day by a day, then expire on their own.
const RISK_TTL_MS: u64 = 2 * 86_400_000;

/// [`RiskGuard`] on Redis, with the configured limits.
#[derive(Clone)]
pub struct RedisRisk {
    redis: Redis,
    limits: RiskLimits,
}

impl RedisRisk {
    /// The guard over a shared connection.
    pub fn new(redis: Redis, limits: RiskLimits) -> Self {
        Self { redis, limits }
    }
}

#[async_trait]
impl RiskGuard for RedisRisk {
    async fn reserve(&self, claim: &Claim<'_>, ip: Option<ClientIp>) -> Result<RiskDecision, StoreError> {
        let user = claim.user;
        let day = self.limits.day(claim.now_ms);
        let press = press_key(claim.coupon, claim.request);
        let mut user_conn = self.redis.conn.clone();
        let mut ip_conn = self.redis.conn.clone();
        // Two slots, so two scripts; sent together, they cost one round trip
        // of latency on the multiplexed connection.
        let user_call = async {
            RISK_USER
                .key(self.redis.keys.user_blacklist(user))
                .key(self.redis.keys.user_claims(user, day))
                .arg(self.limits.daily_claims_per_user)
                .arg(RISK_TTL_MS)
                .arg(&press)
                .invoke_async::<String>(&mut user_conn)
                .await
        };
        let ip_call = async {
            match ip {
                Some(ip) if self.limits.users_per_ip > 0 => RISK_IP
                    .key(self.redis.keys.ip_users(ip, day))
                    .key(self.redis.keys.ip_holds(ip, day))
                    .arg(user.as_str())
                    .arg(self.limits.users_per_ip)
                    .arg(RISK_TTL_MS)
                    .arg(&press)
                    .invoke_async::<String>(&mut ip_conn)
                    .await
                    .map(Some),
                _ => Ok(None),
            }
        };
        let (user_reply, ip_reply) = tokio::join!(user_call, ip_call);
        let mut hold = RiskHold {
            user: user.clone(),
            coupon: claim.coupon.clone(),
            request: claim.request.clone(),
            ip,
            day,
            user_reserved: false,
            ip_reserved: false,
        };
        let outcome = match verdict(&mut hold, user_reply, ip_reply) {
            Ok(None) => return Ok(RiskDecision::Allowed(hold)),
            Ok(Some(reason)) => Ok(RiskDecision::Refused(reason)),
            Err(e) => Err(unavailable(e)),
        };
        if !hold.is_empty() {
            // Best effort; if this fails too, the hold expires with its day.
            let _ = self.release(&hold).await;
        }
        outcome
    }

    async fn check(&self, user: &UserId, ip: Option<ClientIp>, now_ms: i64) -> Result<Option<RiskReason>, StoreError> {
        let day = self.limits.day(now_ms);
        let mut user_conn = self.redis.conn.clone();
        let mut ip_conn = self.redis.conn.clone();
        // The same two slots as a reservation, read only, sent together.
        let user_call = async {
            RISK_CHECK
                .key(self.redis.keys.user_blacklist(user))
                .key(self.redis.keys.user_claims(user, day))
                .arg("user")
                .arg(self.limits.daily_claims_per_user)
                .invoke_async::<String>(&mut user_conn)
                .await
        };
        let ip_call = async {
            match ip {
                Some(ip) if self.limits.users_per_ip > 0 => RISK_CHECK
                    .key(self.redis.keys.ip_users(ip, day))
                    .arg("ip")
                    .arg(self.limits.users_per_ip)
                    .arg(user.as_str())
                    .invoke_async::<String>(&mut ip_conn)
                    .await
                    .map(Some),
                _ => Ok(None),
            }
        };
        let (user_reply, ip_reply) = tokio::join!(user_call, ip_call);
        let user_reply = user_reply.map_err(unavailable)?;
        let ip_reply = ip_reply.map_err(unavailable)?;
        Ok(match (user_reply.as_str(), ip_reply.as_deref()) {
            ("BLACKLISTED", _) => Some(RiskReason::Blacklisted),
            ("DAILY_LIMIT", _) => Some(RiskReason::DailyLimit),
            (_, Some("IP_LIMIT")) => Some(RiskReason::IpLimit),
            _ => None,
        })
    }

    async fn release(&self, hold: &RiskHold) -> Result<(), StoreError> {
        let press = press_key(&hold.coupon, &hold.request);
        let mut user_conn = self.redis.conn.clone();
        let mut ip_conn = self.redis.conn.clone();
        let user_call = async {
            if !hold.user_reserved {
                return Ok(());
            }
            RISK_RELEASE
                .key(self.redis.keys.user_claims(&hold.user, hold.day))
                .arg("")
                .arg(&press)
                .invoke_async::<()>(&mut user_conn)
                .await
        };
        let ip_call = async {
            match hold.ip {
                Some(ip) if hold.ip_reserved => {
                    RISK_RELEASE
                        .key(self.redis.keys.ip_users(ip, hold.day))
                        .key(self.redis.keys.ip_holds(ip, hold.day))
                        .arg(hold.user.as_str())
                        .arg(&press)
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

/// The key a press's reservations are made under: coupon and request id
/// (the same request id on another coupon is another press).
/// The two scripts' replies as one verdict: a refusal (the user's own
/// rules first), a failure, or none (allowed). What each script reserved
/// is recorded in `hold` before any error is looked at, so that a
/// half-failed reservation is given back.
fn verdict(
    hold: &mut RiskHold,
    user_reply: Result<String, redis::RedisError>,
    ip_reply: Result<Option<String>, redis::RedisError>,
) -> Result<Option<RiskReason>, redis::RedisError> {
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
    match (refusal, user_reply.err().or(ip_reply.err())) {
        (Some(reason), _) => Ok(Some(reason)),
        (None, Some(e)) => Err(e),
        (None, None) => Ok(None),
    }
}

fn press_key(coupon: &CouponId, request: &RequestId) -> String {
    format!("{coupon}:{request}")
}
