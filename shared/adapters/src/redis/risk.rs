//! The risk guard on Redis: blacklist, daily claims per user, distinct
//! users per IP, and distinct users and claims per device, reserved in the
//! user's, the IP's and the device's own slots before the grab and released
//! when it does not win.

use async_trait::async_trait;
use coupon_domain::config::RiskLimits;
use coupon_domain::error::StoreError;
use coupon_domain::grab::ports::{Claim, RiskDecision, RiskGuard, RiskHold};
use coupon_domain::ids::{ClientIp, CouponId, DeviceId, RequestId, UserId};
use coupon_domain::outcome::RiskReason;

use super::conn::{unavailable, Redis};
use super::scripts::{RISK_CHECK, RISK_DEVICE, RISK_IP, RISK_RELEASE, RISK_USER};

/// Risk counters outlive their day by a day, then expire on their own.
const RISK_TTL_MS: u64 = 2 * 86_400_000;

/// One slot's reply: `None` when the slot had no rule to run.
type SlotReply = Result<Option<String>, redis::RedisError>;

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

    fn ip_rule(&self, ip: Option<ClientIp>) -> Option<ClientIp> {
        ip.filter(|_| self.limits.users_per_ip > 0)
    }

    fn device_rule<'d>(&self, device: Option<&'d DeviceId>) -> Option<&'d DeviceId> {
        device.filter(|_| self.limits.device_rules())
    }
}

/// What a reservation counts: a press counts as a claim (the user's daily
/// claims, the device's), a lottery registration does not (it still takes
/// the user's place among the device's and the IP's distinct users).
#[derive(Clone, Copy)]
struct Counted {
    daily_claims: u32,
    claim: bool,
}

#[async_trait]
impl RiskGuard for RedisRisk {
    async fn reserve(&self, claim: &Claim<'_>, ip: Option<ClientIp>) -> Result<RiskDecision, StoreError> {
        let counted = Counted {
            daily_claims: self.limits.daily_claims_per_user,
            claim: true,
        };
        self.reserve_counting(claim, ip, counted).await
    }

    async fn reserve_entry(&self, claim: &Claim<'_>, ip: Option<ClientIp>) -> Result<RiskDecision, StoreError> {
        let counted = Counted {
            daily_claims: 0,
            claim: false,
        };
        self.reserve_counting(claim, ip, counted).await
    }

    async fn check(
        &self,
        user: &UserId,
        ip: Option<ClientIp>,
        device: Option<&DeviceId>,
        now_ms: i64,
    ) -> Result<Option<RiskReason>, StoreError> {
        let day = self.limits.day(now_ms);
        let mut user_conn = self.redis.conn.clone();
        let mut ip_conn = self.redis.conn.clone();
        let mut device_conn = self.redis.conn.clone();
        // The same slots as a reservation, read only, sent together.
        let user_call = async {
            RISK_CHECK
                .key(self.redis.keys.user_blacklist(user))
                .key(self.redis.keys.user_claims(user, day))
                .arg("user")
                .arg(self.limits.daily_claims_per_user)
                .invoke_async::<String>(&mut user_conn)
                .await
                .map(Some)
        };
        let ip_call = async {
            match self.ip_rule(ip) {
                Some(ip) => RISK_CHECK
                    .key(self.redis.keys.ip_users(ip, day))
                    .arg("ip")
                    .arg(self.limits.users_per_ip)
                    .arg(user.as_str())
                    .invoke_async::<String>(&mut ip_conn)
                    .await
                    .map(Some),
                None => Ok(None),
            }
        };
        let device_call = async {
            match self.device_rule(device) {
                Some(device) => RISK_CHECK
                    .key(self.redis.keys.device_users(device, day))
                    .key(self.redis.keys.device_claims(device, day))
                    .arg("device")
                    .arg(self.limits.users_per_device)
                    .arg(user.as_str())
                    .arg(self.limits.claims_per_device)
                    .invoke_async::<String>(&mut device_conn)
                    .await
                    .map(Some),
                None => Ok(None),
            }
        };
        let (user_reply, ip_reply, device_reply) = tokio::join!(user_call, ip_call, device_call);
        let replies = [user_reply, ip_reply, device_reply];
        let mut words = Vec::with_capacity(3);
        for reply in replies {
            words.push(reply.map_err(unavailable)?);
        }
        Ok(refusal([words[0].as_deref(), words[1].as_deref(), words[2].as_deref()]))
    }

    async fn release_press(&self, claim: &Claim<'_>, ip: Option<ClientIp>) -> Result<(), StoreError> {
        // Every place the rules could have taken: releasing one the press
        // never took changes nothing (the scripts check the press's key).
        let hold = RiskHold {
            user: claim.user.clone(),
            coupon: claim.coupon.clone(),
            request: claim.request.clone(),
            ip: self.ip_rule(ip),
            device: self.device_rule(claim.device).cloned(),
            day: self.limits.day(claim.now_ms),
            user_reserved: self.limits.daily_claims_per_user > 0,
            ip_reserved: self.ip_rule(ip).is_some(),
            device_reserved: self.device_rule(claim.device).is_some(),
        };
        if hold.is_empty() {
            return Ok(());
        }
        self.release(&hold).await
    }

    async fn release(&self, hold: &RiskHold) -> Result<(), StoreError> {
        let press = press_key(&hold.coupon, &hold.request);
        let mut user_conn = self.redis.conn.clone();
        let mut ip_conn = self.redis.conn.clone();
        let mut device_conn = self.redis.conn.clone();
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
        let device_call = async {
            match &hold.device {
                Some(device) if hold.device_reserved => {
                    RISK_RELEASE
                        .key(self.redis.keys.device_users(device, hold.day))
                        .key(self.redis.keys.device_holds(device, hold.day))
                        .key(self.redis.keys.device_claims(device, hold.day))
                        .arg(hold.user.as_str())
                        .arg(&press)
                        .invoke_async::<()>(&mut device_conn)
                        .await
                }
                _ => Ok(()),
            }
        };
        let (a, b, c) = tokio::join!(user_call, ip_call, device_call);
        a.and(b).and(c).map_err(unavailable)
    }
}

impl RedisRisk {
    /// The reservation, counting what `counted` says.
    async fn reserve_counting(
        &self,
        claim: &Claim<'_>,
        ip: Option<ClientIp>,
        counted: Counted,
    ) -> Result<RiskDecision, StoreError> {
        let user = claim.user;
        let day = self.limits.day(claim.now_ms);
        let press = press_key(claim.coupon, claim.request);
        let mut user_conn = self.redis.conn.clone();
        let mut ip_conn = self.redis.conn.clone();
        let mut device_conn = self.redis.conn.clone();
        // Three slots, so three scripts; sent together, they cost one round
        // trip of latency on the multiplexed connection.
        let user_call = async {
            RISK_USER
                .key(self.redis.keys.user_blacklist(user))
                .key(self.redis.keys.user_claims(user, day))
                .arg(counted.daily_claims)
                .arg(RISK_TTL_MS)
                .arg(&press)
                .invoke_async::<String>(&mut user_conn)
                .await
        };
        let ip_call = async {
            match self.ip_rule(ip) {
                Some(ip) => RISK_IP
                    .key(self.redis.keys.ip_users(ip, day))
                    .key(self.redis.keys.ip_holds(ip, day))
                    .arg(user.as_str())
                    .arg(self.limits.users_per_ip)
                    .arg(RISK_TTL_MS)
                    .arg(&press)
                    .invoke_async::<String>(&mut ip_conn)
                    .await
                    .map(Some),
                None => Ok(None),
            }
        };
        let device_call = async {
            match self.device_rule(claim.device) {
                Some(device) => RISK_DEVICE
                    .key(self.redis.keys.device_users(device, day))
                    .key(self.redis.keys.device_holds(device, day))
                    .key(self.redis.keys.device_claims(device, day))
                    .arg(user.as_str())
                    .arg(self.limits.users_per_device)
                    .arg(self.limits.claims_per_device)
                    .arg(RISK_TTL_MS)
                    .arg(&press)
                    .arg(if counted.claim { "1" } else { "0" })
                    .invoke_async::<String>(&mut device_conn)
                    .await
                    .map(Some),
                None => Ok(None),
            }
        };
        let (user_reply, ip_reply, device_reply) = tokio::join!(user_call, ip_call, device_call);
        let mut hold = RiskHold {
            user: user.clone(),
            coupon: claim.coupon.clone(),
            request: claim.request.clone(),
            ip,
            device: claim.device.cloned(),
            day,
            user_reserved: false,
            ip_reserved: false,
            device_reserved: false,
        };
        let outcome = match verdict(&mut hold, user_reply.map(Some), ip_reply, device_reply) {
            Ok(None) => return Ok(RiskDecision::Allowed(hold)),
            Ok(Some(reason)) => Ok(RiskDecision::Refused(reason)),
            Err(e) => Err(unavailable(e)),
        };
        if !hold.is_empty() {
            // Only what this call took (`verdict` left out what the press
            // held before: another copy of it may be on its way to a win).
            // Best effort; if this fails too, the hold expires with its day.
            let _ = self.release(&hold).await;
        }
        outcome
    }
}

/// The three slots' replies as one verdict: a refusal (the user's own
/// rules first, then the IP's, then the device's), a failure, or none
/// (allowed). `hold` is what the press holds when it is allowed (what each
/// script reserved now or found reserved by this press before), and only
/// what was reserved now when it is not: a copy of the press refused here
/// (a retry from an IP at its limit) must not give back the places of the
/// copy that got past and may win. Recorded before any error is looked at,
/// so that a half-failed reservation is given back.
fn verdict(
    hold: &mut RiskHold,
    user_reply: SlotReply,
    ip_reply: SlotReply,
    device_reply: SlotReply,
) -> Result<Option<RiskReason>, redis::RedisError> {
    let word = |reply: &SlotReply| reply.as_ref().ok().and_then(|v| v.clone());
    let words = [word(&user_reply), word(&ip_reply), word(&device_reply)];
    let refused = refusal([words[0].as_deref(), words[1].as_deref(), words[2].as_deref()]);
    let failure = [user_reply, ip_reply, device_reply].into_iter().find_map(Result::err);
    let decided = refused.is_none() && failure.is_none();
    let holds = |w: &Option<String>| match w.as_deref() {
        Some("RESERVED") => true,
        Some("HELD") => decided,
        _ => false,
    };
    hold.user_reserved = holds(&words[0]);
    hold.ip_reserved = holds(&words[1]);
    hold.device_reserved = holds(&words[2]);
    match (refused, failure) {
        (Some(reason), _) => Ok(Some(reason)),
        (None, Some(e)) => Err(e),
        (None, None) => Ok(None),
    }
}

/// The first refusal among the user's, the IP's and the device's replies.
fn refusal(words: [Option<&str>; 3]) -> Option<RiskReason> {
    words.into_iter().flatten().find_map(|word| match word {
        "BLACKLISTED" => Some(RiskReason::Blacklisted),
        "DAILY_LIMIT" => Some(RiskReason::DailyLimit),
        "IP_LIMIT" => Some(RiskReason::IpLimit),
        "DEVICE_USER_LIMIT" => Some(RiskReason::DeviceUserLimit),
        "DEVICE_CLAIM_LIMIT" => Some(RiskReason::DeviceClaimLimit),
        _ => None,
    })
}

/// The key a press's reservations are made under: coupon and request id
/// (the same request id on another coupon is another press).
fn press_key(coupon: &CouponId, request: &RequestId) -> String {
    format!("{coupon}:{request}")
}
