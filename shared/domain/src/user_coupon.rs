//! A coupon in a user's wallet: its states, where a won grant stands as
//! its owner sees it, why a grant was not issued, and who holds which
//! coupons of a coupon (what a rebuild restores). The vocabulary the
//! issuer writes and the wallet, redemptions, notifications and the
//! reconciler read.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::grant::{Grant, GrantRecord};
use crate::ids::{CouponId, GrantId, RequestId, UserId};

/// The life of a coupon in a wallet. UNUSED, USED and REVOKED are stored;
/// EXPIRED is how an unused coupon reads once its validity is over
/// (computed at read, so no sweeper ever races a redemption).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum CouponState {
    /// Issued and not yet used.
    Unused,
    /// Spent on an order (`order_id`, `used_at_ms`).
    Used,
    /// Never used, and its validity ended.
    Expired,
    /// Taken back by an operator (audited); it still counts against the
    /// user's per-coupon limit, and its unit does not return to stock.
    Revoked,
}

impl CouponState {
    /// The lower-case name a query uses (`?status=unused`).
    pub fn parse_query(raw: &str) -> Option<Self> {
        match raw {
            "unused" => Some(Self::Unused),
            "used" => Some(Self::Used),
            "expired" => Some(Self::Expired),
            "revoked" => Some(Self::Revoked),
            _ => None,
        }
    }
}

/// A coupon in a user's wallet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct UserCoupon {
    /// Which coupon.
    pub coupon_id: CouponId,
    /// The user's n-th claim of it.
    pub ordinal: u32,
    /// The grant it was issued from.
    pub grant_id: GrantId,
    /// Its state.
    pub status: CouponState,
    /// The coupon's name, copied at issue time.
    pub name: String,
    /// Face value in minor units.
    pub amount: u64,
    /// When it was issued.
    pub received_at_ms: i64,
    /// Usable from...
    pub valid_from_ms: i64,
    /// ...until (exclusive).
    pub valid_until_ms: i64,
    /// The order it is spent on, while USED.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub order_id: Option<crate::ids::OrderId>,
    /// When it was spent, while USED.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub used_at_ms: Option<i64>,
    /// Orders that used it and gave it back (cancelled, refunded): a repeat
    /// of their return answers the same. Not shown to the user.
    #[serde(skip)]
    pub returned_by: Vec<crate::ids::OrderId>,
    /// When the last order gave it back: a return at or past
    /// `valid_until_ms` is the coupon expiring (the notifier tells which).
    #[serde(skip)]
    pub returned_at_ms: Option<i64>,
    /// When an operator revoked it.
    #[serde(skip)]
    pub revoked_at_ms: Option<i64>,
}

impl UserCoupon {
    /// The coupon as it reads at `now_ms`: an unused coupon whose validity
    /// ended is EXPIRED.
    pub fn as_of(mut self, now_ms: i64) -> Self {
        if self.status == CouponState::Unused && now_ms >= self.valid_until_ms {
            self.status = CouponState::Expired;
        }
        self
    }
}

/// Why a grant was not issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum RejectReason {
    /// Every capped counter was full: Redis granted more than the stock
    /// (only after it lost data).
    CapReached,
    /// The user's claim with this ordinal was issued from another grant.
    OrdinalTaken,
}

impl RejectReason {
    /// Stable spelling for records, responses and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::CapReached => "CAP_REACHED",
            Self::OrdinalTaken => "ORDINAL_TAKEN",
        }
    }

    /// Parses [`Self::as_str`].
    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "CAP_REACHED" => Some(Self::CapReached),
            "ORDINAL_TAKEN" => Some(Self::OrdinalTaken),
            _ => None,
        }
    }
}

/// Where a grant is, as its owner sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GrantStatus {
    /// Won, not yet in the wallet.
    Pending,
    /// In the wallet.
    Issued,
    /// Not issued, for this reason.
    Rejected(RejectReason),
}

/// Who holds which coupons of a coupon, as the rebuild needs them: how many
/// per user (the per-user counts) and, per coupon, the request that won it
/// (so a retry of that request replays its grant after Redis lost it).
pub type Holdings = HashMap<UserId, Vec<Held>>;

/// One coupon a user holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The request that won it and what that request was answered, or
    /// `None` for a coupon issued before items recorded their request.
    pub outcome: Option<(RequestId, GrantRecord)>,
}

impl Held {
    /// What DynamoDB holds of `grant` once it is issued.
    pub fn of(grant: &Grant) -> Self {
        Self {
            outcome: Some((grant.request_id.clone(), GrantRecord::of(grant))),
        }
    }
}
