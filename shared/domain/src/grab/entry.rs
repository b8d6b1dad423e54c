//! A lottery registration (`POST /coupons/{couponId}/entries`) and a
//! user's result (`GET /coupons/{couponId}/entries/me`), on the grab's
//! ports: the same home shard, the same eligibility (the window, the
//! level, a device the coupon requires) and the same risk rules (the
//! blacklist, the IP's and the device's distinct users; an entry is not a
//! claim, so the daily claims and the device's claims do not count it).
//!
//! One entry per user and coupon, written to DynamoDB in the same
//! transaction as a check that the draw has not frozen the entries, so an
//! entry is either drawn from or refused; a repeat is answered from the
//! home shard's memory of it, in one round trip, as a refused press is.
//! The draw itself is the reconciler's (`reconcile/draw.rs`).

use tracing::{instrument, warn};

use crate::ids::{ClientIp, CouponId, DeviceId, GrantId, RequestId, UserId};
use crate::lottery::ports::Registered;
use crate::lottery::{won, DRAW_REQUEST};
use crate::outcome::Rejection;

use super::ports::{Claim, EntryReply, Peek, Recorded, RiskDecision};
use super::{home_shard, GrabError, GrabService};

/// The request id a registration's risk reservation is made under: one per
/// user and coupon, so a repeated registration counts once everywhere.
pub const ENTRY_REQUEST: &str = "lottery-entry";

/// Who registers for what, as the edge parsed it.
#[derive(Debug, Clone)]
pub struct EntryRequest {
    /// From the path.
    pub coupon: CouponId,
    /// From the verified identity.
    pub user: UserId,
    /// From the verified identity.
    pub level: u32,
    /// From the request context, for the per-IP rule.
    pub ip: Option<ClientIp>,
    /// From the verified identity, for the device rules.
    pub device: Option<DeviceId>,
}

/// How a registration ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryOutcome {
    /// The user is in the draw.
    Registered {
        /// When they registered (the first time).
        at_ms: i64,
        /// True if they had registered before: nothing was written.
        replayed: bool,
    },
    /// Refused, as a press would be (or the draw has frozen the entries:
    /// [`Rejection::Ended`]).
    Rejected(Rejection),
}

/// A user's standing in a lottery, with what anyone may know of its draw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryView {
    /// The user's standing.
    pub standing: EntryStanding,
    /// The seed's commitment, published from the coupon's creation.
    pub seed_hash: String,
    /// The seed, once drawn (before, it would let anyone predict the draw).
    pub seed: Option<String>,
    /// When the draw was recorded.
    pub drawn_at_ms: Option<i64>,
}

/// A user's standing in a lottery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryStanding {
    /// Not registered.
    NotRegistered,
    /// Registered; the draw has not happened.
    Registered {
        /// When.
        at_ms: i64,
    },
    /// Drawn: the coupon is on its way to the wallet.
    Won {
        /// When they registered.
        at_ms: i64,
        /// The grant, when its record is at hand.
        grant_id: Option<GrantId>,
    },
    /// The draw did not pick them.
    NotDrawn {
        /// When they registered.
        at_ms: i64,
    },
}

impl GrabService {
    /// Registers the caller for a lottery. Idempotent per user: a repeat
    /// answers the first registration.
    #[instrument(skip_all, fields(coupon = %req.coupon, user = %req.user))]
    pub async fn enter(&self, req: &EntryRequest) -> Result<EntryOutcome, GrabError> {
        let now_ms = self.clock.now_ms();
        let Some(shards) = self.shard_count(&req.coupon, now_ms).await? else {
            return Ok(EntryOutcome::Rejected(Rejection::NotFound));
        };
        let home = home_shard(&req.user, shards);
        let ask = Peek {
            coupon: &req.coupon,
            home_shard: home,
            user: &req.user,
            level: req.level,
            device: req.device.is_some(),
            now_ms,
        };
        match self.ledger.admit_entry(&ask).await? {
            EntryReply::Open => {}
            EntryReply::Entered { at_ms } => return Ok(EntryOutcome::Registered { at_ms, replayed: true }),
            EntryReply::Rejected(Rejection::NotFound) => {
                self.state_lost(&req.coupon, now_ms).await;
                return Err(GrabError::Unavailable(crate::error::StoreError::Unavailable(
                    "the coupon's home shard has no Redis state".into(),
                )));
            }
            EntryReply::Rejected(Rejection::Ended) => {
                // The window has closed; the home shard may still not know
                // an entry DynamoDB holds (its `remember_entry` failed, or
                // the shard was rebuilt): a retry of a registration that
                // landed answers it, as the draw will count it.
                return Ok(match self.entries.registered(&req.coupon, home, &req.user).await? {
                    Some(at_ms) => EntryOutcome::Registered { at_ms, replayed: true },
                    None => EntryOutcome::Rejected(Rejection::Ended),
                });
            }
            EntryReply::Rejected(reason) => return Ok(EntryOutcome::Rejected(reason)),
        }
        let request = entry_request();
        let claim = Claim {
            coupon: &req.coupon,
            home_shard: home,
            user: &req.user,
            level: req.level,
            request: &request,
            device: req.device.as_ref(),
            now_ms,
        };
        let hold = match self.risk.reserve_entry(&claim, req.ip).await? {
            RiskDecision::Allowed(hold) => hold,
            RiskDecision::Refused(reason) => return Ok(EntryOutcome::Rejected(Rejection::Risk(reason))),
        };
        // On an error the entry may or may not be written: the hold stays
        // (the safe side of a limit), and the retry finds the entry.
        let (at_ms, replayed) = match self.entries.register(&req.coupon, home, &req.user, now_ms).await? {
            Registered::New => (now_ms, false),
            Registered::Already { at_ms } => (at_ms, true),
            Registered::Closed => {
                self.release(&hold).await;
                return Ok(EntryOutcome::Rejected(Rejection::Ended));
            }
        };
        if let Err(e) = self.ledger.remember_entry(&ask, at_ms).await {
            // Only a repeat's shortcut: DynamoDB answers it instead.
            warn!(error = %e, "entry not remembered on the home shard");
        }
        Ok(EntryOutcome::Registered { at_ms, replayed })
    }

    /// The caller's standing in a lottery: registered or not, and once
    /// drawn, won or not (one hash of the revealed seed against the stored
    /// threshold, not the entry list).
    pub async fn entry_standing(
        &self,
        coupon: &CouponId,
        user: &UserId,
    ) -> Result<Result<EntryView, Rejection>, GrabError> {
        let now_ms = self.clock.now_ms();
        // The durable shard count: a read-only answer that must not wait on
        // (nor ask for) a Redis rebuild, long after the sale maybe.
        let Some(shards) = self.catalog.shard_count(coupon).await? else {
            return Ok(Err(Rejection::NotFound));
        };
        let Some(lottery) = self.entries.lottery(coupon).await? else {
            return Ok(Err(Rejection::FirstCome));
        };
        let home = home_shard(user, shards);
        let view = |standing| EntryView {
            standing,
            seed_hash: lottery.seed.commitment(),
            seed: lottery.drawn.as_ref().map(|_| lottery.seed.to_hex()),
            drawn_at_ms: lottery.drawn.as_ref().map(|d| d.at_ms),
        };
        let Some(at_ms) = self.entries.registered(coupon, home, user).await? else {
            return Ok(Ok(view(EntryStanding::NotRegistered)));
        };
        let Some(drawn) = &lottery.drawn else {
            return Ok(Ok(view(EntryStanding::Registered { at_ms })));
        };
        if !won(&lottery.seed, user, drawn.threshold.as_ref()) {
            return Ok(Ok(view(EntryStanding::NotDrawn { at_ms })));
        }
        let request = draw_request();
        let claim = Claim {
            coupon,
            home_shard: home,
            user,
            level: 0,
            request: &request,
            device: None,
            now_ms,
        };
        let grant_id = match self.ledger.recorded(&claim).await {
            Ok(Some(Recorded::Won(rec))) => Some(rec.grant_id),
            _ => None,
        };
        Ok(Ok(view(EntryStanding::Won { at_ms, grant_id })))
    }
}

fn entry_request() -> RequestId {
    RequestId::parse(ENTRY_REQUEST).expect("a valid request id")
}

fn draw_request() -> RequestId {
    RequestId::parse(DRAW_REQUEST).expect("a valid request id")
}
