//! The coupon's use by orders: the order service (server to server, never
//! a user token) redeems a user's coupon for an order, and gives it back
//! when the order is cancelled or refunded.
//!
//! One coupon is spent exactly once. A redemption is one conditional write
//! (`UNUSED -> USED`) that checks, in DynamoDB itself, that the coupon is
//! still the grant named, still unused and inside its validity window: of
//! two orders redeeming one coupon at once, exactly one write succeeds, and
//! the other reads the coupon again and hears `COUPON_USED`. Every answer is
//! idempotent per order id:
//!
//! - the order that redeemed it, redeeming again, gets the same redemption;
//! - a return (`USED -> UNUSED`) is accepted only from the order that used
//!   it, and repeating it gets the same answer (the returning orders are
//!   kept on the coupon);
//! - an order that gave a coupon back never spends it again (a late retry
//!   of its redemption is refused);
//! - a coupon returned after its validity is unused and reads `EXPIRED`
//!   (expiry is decided at read, so nothing sweeps the table and no sweeper
//!   races a redemption).
//!
//! A revoked coupon is never redeemed. Redeeming checks the owner: a grant
//! the user does not hold is `GRANT_NOT_FOUND`, exactly as one that does not
//! exist.

pub mod ports;

use std::sync::Arc;

use tracing::instrument;

use crate::clock::Clock;
use crate::error::StoreError;
use crate::ids::GrantId;
use crate::ids::{OrderId, UserId};
use crate::user_coupon::{CouponState, UserCoupon};
pub use ports::{Redemptions, Written};

/// Why a redemption or a return was refused.
#[derive(Debug, thiserror::Error)]
pub enum RedemptionError {
    /// The user holds no coupon under this grant id.
    #[error("the user holds no coupon under this grant")]
    NotFound,
    /// Another order used it.
    #[error("the coupon was used by another order")]
    UsedByAnotherOrder,
    /// Its validity has not begun.
    #[error("the coupon is not valid yet")]
    NotYetValid {
        /// From when it can be used.
        valid_from_ms: i64,
    },
    /// Its validity is over.
    #[error("the coupon has expired")]
    Expired,
    /// An operator revoked it.
    #[error("the coupon was revoked")]
    Revoked,
    /// A return from an order that did not use it (or of a coupon not used).
    #[error("this order did not use the coupon")]
    NotUsedByThisOrder,
    /// This order gave the coupon back: a late retry of its redemption must
    /// not spend it again (a new order redeems it).
    #[error("this order gave the coupon back")]
    ReturnedByThisOrder,
    /// The coupon kept changing under the write; nothing was written.
    #[error("the coupon kept changing")]
    Contended,
    /// A store did not answer: safe to retry with the same order id.
    #[error("store unavailable")]
    Unavailable(#[source] StoreError),
}

impl From<StoreError> for RedemptionError {
    fn from(e: StoreError) -> Self {
        Self::Unavailable(e)
    }
}

/// A redemption or a return, as answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The coupon after it (as it reads now).
    pub coupon: UserCoupon,
    /// True if this order had already done exactly this: nothing written.
    pub replayed: bool,
}

/// Conditional writes race at most this many times before giving up.
const ATTEMPTS: usize = 3;

/// The order side of a coupon's life.
pub struct RedemptionService {
    store: Arc<dyn Redemptions>,
    clock: Arc<dyn Clock>,
}

impl RedemptionService {
    /// Wires the service.
    pub fn new(store: Arc<dyn Redemptions>, clock: Arc<dyn Clock>) -> Self {
        Self { store, clock }
    }

    /// Spends the user's coupon on `order`, exactly once.
    #[instrument(skip_all, fields(grant = %grant, order = %order))]
    pub async fn redeem(&self, user: &UserId, grant: &GrantId, order: &OrderId) -> Result<Settled, RedemptionError> {
        for _ in 0..ATTEMPTS {
            let now = self.clock.now_ms();
            let coupon = self.store.find(user, grant).await?.ok_or(RedemptionError::NotFound)?;
            match coupon.status {
                CouponState::Used if coupon.order_id.as_ref() == Some(order) => {
                    return Ok(Settled {
                        coupon: coupon.as_of(now),
                        replayed: true,
                    })
                }
                CouponState::Used => return Err(RedemptionError::UsedByAnotherOrder),
                _ if coupon.returned_by.contains(order) => return Err(RedemptionError::ReturnedByThisOrder),
                CouponState::Revoked => return Err(RedemptionError::Revoked),
                CouponState::Unused | CouponState::Expired => {}
            }
            if now < coupon.valid_from_ms {
                return Err(RedemptionError::NotYetValid {
                    valid_from_ms: coupon.valid_from_ms,
                });
            }
            if now >= coupon.valid_until_ms {
                return Err(RedemptionError::Expired);
            }
            match self.store.redeem(user, &coupon, order, now).await? {
                Written::Done(coupon) => {
                    return Ok(Settled {
                        coupon: *coupon,
                        replayed: false,
                    })
                }
                // Changed since the read (another order, a revocation):
                // decide again from what it is now.
                Written::Changed => continue,
            }
        }
        Err(RedemptionError::Contended)
    }

    /// Gives the coupon back from `order` (cancelled or refunded): only the
    /// order that used it may, and a repeat answers the same. Past its
    /// validity the coupon comes back unused and reads EXPIRED.
    #[instrument(skip_all, fields(grant = %grant, order = %order))]
    pub async fn give_back(&self, user: &UserId, grant: &GrantId, order: &OrderId) -> Result<Settled, RedemptionError> {
        for _ in 0..ATTEMPTS {
            let now = self.clock.now_ms();
            let coupon = self.store.find(user, grant).await?.ok_or(RedemptionError::NotFound)?;
            if coupon.returned_by.contains(order) && coupon.order_id.as_ref() != Some(order) {
                return Ok(Settled {
                    coupon: coupon.as_of(now),
                    replayed: true,
                });
            }
            if coupon.status != CouponState::Used || coupon.order_id.as_ref() != Some(order) {
                return Err(RedemptionError::NotUsedByThisOrder);
            }
            match self.store.give_back(user, &coupon, order, now).await? {
                Written::Done(coupon) => {
                    return Ok(Settled {
                        coupon: (*coupon).as_of(now),
                        replayed: false,
                    })
                }
                Written::Changed => continue,
            }
        }
        Err(RedemptionError::Contended)
    }
}

#[cfg(test)]
mod tests;
