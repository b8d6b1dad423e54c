//! The outcomes of a grab as the domain sees them, before any HTTP mapping.

use crate::grant::Grant;

/// Why a grab did not win. Business outcomes, not errors: they are the
/// expected answer for the vast majority of presses in a flash sale.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rejection {
    /// No coupon with this id (or its Redis state is gone).
    NotFound,
    /// The operator switched the coupon off.
    Offline,
    /// Before the grab window; carries its start.
    NotStarted {
        /// Window start, ms since epoch.
        starts_at_ms: i64,
    },
    /// After the grab window.
    Ended,
    /// Nothing is released now, and a wave is still to come.
    BetweenWaves {
        /// The next wave's instant, ms since epoch.
        next_wave_at_ms: i64,
    },
    /// The caller's member level is below the coupon's minimum.
    NotEligible {
        /// The minimum level.
        min_level: u32,
    },
    /// The caller holds the per-user limit already.
    AlreadyClaimed,
    /// No stock left in any shard.
    SoldOut,
    /// The coupon's token bucket is empty.
    RateLimited {
        /// When a token will be there again.
        retry_after_ms: u64,
    },
    /// A risk rule refused the caller.
    Risk(RiskReason),
    /// A press on a lottery coupon: its units go to the draw's winners;
    /// the user registers instead.
    Lottery,
    /// A registration for a first-come coupon: there is no draw; the user
    /// presses instead.
    FirstCome,
}

/// Which risk rule refused the grab.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RiskReason {
    /// The user is on the blacklist.
    Blacklisted,
    /// The user reached the claims-per-day limit across coupons.
    DailyLimit,
    /// Too many distinct users grabbed from this IP today.
    IpLimit,
    /// The coupon admits only presses from an attested device, and this
    /// one carries no device id.
    DeviceRequired,
    /// Too many distinct users grabbed from this device today.
    DeviceUserLimit,
    /// This device reached its claims for the day.
    DeviceClaimLimit,
}

impl RiskReason {
    /// Stable spelling for responses and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Blacklisted => "BLACKLISTED",
            Self::DailyLimit => "DAILY_LIMIT",
            Self::IpLimit => "IP_LIMIT",
            Self::DeviceRequired => "DEVICE_REQUIRED",
            Self::DeviceUserLimit => "DEVICE_USER_LIMIT",
            Self::DeviceClaimLimit => "DEVICE_CLAIM_LIMIT",
        }
    }
}

/// How a grab ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GrabOutcome {
    /// A unit of stock is the caller's, and its grant is on the queue to
    /// the issuer (a win whose send failed is not an outcome but
    /// `GrabError::NotQueued` of the grab use case).
    Won {
        /// The grant, as the queue took it.
        grant: Grant,
        /// True if this answer is the stored outcome of an earlier request
        /// with the same request id.
        replayed: bool,
    },
    /// No unit for the caller.
    Rejected {
        /// Why.
        reason: Rejection,
        /// True if this answer is a stored outcome (a replay).
        replayed: bool,
    },
}
