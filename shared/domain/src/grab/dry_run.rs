//! The dry run of a press (`GET /coupons/{couponId}/eligibility`): the
//! answer a press would get now, with the same codes, and nothing changed:
//! no rate-limit token, no reservation, no record under a request id. An
//! app draws its button from it ("grab now", "claimed", "sold out",
//! "starts at 10:00") without spending the user's press.
//!
//! The same steps as a press, read only: the shard count (step 0), the
//! sold-out memory (1), the admission's checks on the home shard (2, one
//! round trip, `lua/peek.lua` deciding with the very function the grab's
//! admission decides with), and only for a press that would get that far,
//! the risk rules (3, one round trip) and, when the home shard is empty,
//! the other shards' stock (5, one read each until one has stock). A dry
//! run refused on the home shard costs what a refused press costs.
//!
//! "Would win" is a statement about now: the unit may be gone by the time
//! the user presses, and a shard whose server restarted since it was last
//! verified answers a press BUSY for a few seconds where the dry run,
//! which does not check the server's history (an INFO per call), says it
//! would win.

use tracing::instrument;

use crate::ids::{ClientIp, CouponId, DeviceId, UserId};
use crate::outcome::Rejection;

use super::ports::{Peek, PeekReply};
use super::{home_shard, GrabError, GrabService};

/// What the caller asks about, as the edge parsed it (the grab's request
/// without its request id).
#[derive(Debug, Clone)]
pub struct DryRun {
    /// From the path.
    pub coupon: CouponId,
    /// From the verified identity.
    pub user: UserId,
    /// From the verified identity; 0 if the claim is absent.
    pub level: u32,
    /// From the request context, for the per-IP risk rule.
    pub ip: Option<ClientIp>,
    /// From the verified identity, for the device rules.
    pub device: Option<DeviceId>,
}

/// The answer a press would get now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Eligibility {
    /// A press now would win a unit.
    WouldWin,
    /// A press now would be refused with this.
    Refused(Rejection),
}

impl GrabService {
    /// The dry run of a press: what [`Self::grab`] would answer now, with
    /// nothing changed. A coupon whose Redis state is gone is BUSY (and
    /// its repair asked for), as for a press.
    #[instrument(skip_all, fields(coupon = %ask.coupon, user = %ask.user))]
    pub async fn eligibility(&self, ask: &DryRun) -> Result<Eligibility, GrabError> {
        let now_ms = self.clock.now_ms();
        let Some(shards) = self.shard_count(&ask.coupon, now_ms).await? else {
            return Ok(Eligibility::Refused(Rejection::NotFound));
        };
        if self.sold_out.contains(&ask.coupon, now_ms) {
            return Ok(Eligibility::Refused(Rejection::SoldOut));
        }
        let home = home_shard(&ask.user, shards);
        let peek = Peek {
            coupon: &ask.coupon,
            home_shard: home,
            user: &ask.user,
            level: ask.level,
            device: ask.device.is_some(),
            now_ms,
        };
        let mut next_wave = None;
        let open = match self.ledger.peek(&peek).await? {
            PeekReply::Open => true,
            PeekReply::Empty { next_wave_at_ms } => {
                next_wave = next_wave_at_ms;
                false
            }
            PeekReply::Rejected(Rejection::NotFound) => {
                // The shard count is known, so the shard's state is gone.
                self.state_lost(&ask.coupon, now_ms).await;
                return Err(GrabError::Unavailable(crate::error::StoreError::Unavailable(
                    "the coupon's home shard has no Redis state".into(),
                )));
            }
            PeekReply::Rejected(reason) => return Ok(Eligibility::Refused(reason)),
        };
        // A press gets to the risk rules before it borrows: so does its
        // dry run.
        if let Some(reason) = self.risk.check(&ask.user, ask.ip, ask.device.as_ref(), now_ms).await? {
            return Ok(Eligibility::Refused(Rejection::Risk(reason)));
        }
        if open {
            return Ok(Eligibility::WouldWin);
        }
        for offset in 1..shards {
            let donor = (home + offset) % shards;
            if self.ledger.shard_stock(&ask.coupon, donor, now_ms).await? > 0 {
                return Ok(Eligibility::WouldWin);
            }
        }
        Ok(Eligibility::Refused(match next_wave {
            Some(next_wave_at_ms) => Rejection::BetweenWaves { next_wave_at_ms },
            None => Rejection::SoldOut,
        }))
    }
}
