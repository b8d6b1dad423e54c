//! The state rules of the coupon center: what a listed coupon's button
//! says to one caller, from its definition alone (no shard read) or with
//! the caller's standing on their home shard, and the stock level brought
//! in line with it.

use crate::coupon::{CouponDefinition, Mode};
use crate::grab::ports::PeekReply;
use crate::outcome::{Rejection, RiskReason};

use super::{Listed, Offer, OfferState, Standing, StockLevel};

/// What the definition alone needs to know of the caller.
#[derive(Debug, Clone, Copy)]
pub(super) struct Asker {
    pub(super) level: u32,
    pub(super) device: bool,
}

/// The state the definition alone gives: the window, the level (and the
/// device a coupon may require) and the first wave, in the order a press
/// hears them.
pub(super) fn from_definition(def: &CouponDefinition, asker: Asker, now_ms: i64) -> OfferState {
    if now_ms < def.grab_start_ms {
        OfferState::NotStarted
    } else if now_ms >= def.grab_end_ms {
        OfferState::Ended
    } else if asker.level < def.min_member_level || (def.device_required && !asker.device) {
        // A press from no attested device is refused by a coupon that
        // requires one (RISK_REJECTED DEVICE_REQUIRED): not for this caller.
        OfferState::NotEligible
    } else if def.mode == Mode::Lottery {
        // Registered or not, the caller's part is the entry's (GET
        // /coupons/{couponId}/entries/me): no shard read here.
        OfferState::Lottery
    } else if def.released_by(now_ms) == 0 {
        OfferState::BetweenWaves
    } else {
        OfferState::CanGrab
    }
}

/// One listed coupon as the caller finds it, from its definition, its
/// cached stock and (if read) the caller's standing on their home shard;
/// `None` for a coupon the shard says is offline.
pub(super) fn offer(
    listed: &Listed,
    standing: Option<Standing>,
    asker: Asker,
    now_ms: i64,
    few_percent: u32,
) -> Option<Offer> {
    let def = &listed.def;
    // A wave released since the copy was read: the cached count says
    // nothing of what it added.
    let crossed = def
        .waves
        .iter()
        .any(|w| w.at_ms > listed.read_at_ms && w.at_ms <= now_ms);
    let remaining = if crossed { None } else { listed.remaining };
    let mut stock = match remaining {
        // Against what the waves have released so far: a first wave of a
        // few units is not FEW because later ones are big.
        Some(units) => StockLevel::of(units, def.released_by(now_ms), few_percent),
        None => StockLevel::Unknown,
    };
    let mut held = None;
    let mut open = false;
    // The next wave's instant as the caller's shard has it (a wave added
    // since the cached copy was read); the definition's otherwise.
    let shard_next = match &standing {
        Some(Standing {
            shard: PeekReply::Rejected(Rejection::BetweenWaves { next_wave_at_ms }),
            ..
        }) => Some(*next_wave_at_ms),
        Some(Standing {
            shard: PeekReply::Empty { next_wave_at_ms },
            ..
        }) => *next_wave_at_ms,
        _ => None,
    };
    let next_wave = shard_next.or_else(|| def.next_wave_after(now_ms));
    let state = match standing {
        None => from_definition(def, asker, now_ms),
        Some(Standing { shard, held: count }) => {
            held = Some(count);
            open = shard == PeekReply::Open;
            match shard {
                PeekReply::Rejected(Rejection::Offline) => return None,
                // The shard's state is gone (its repair is under way): what
                // the definition says, as for an unread shard.
                PeekReply::Rejected(Rejection::NotFound) => {
                    held = None;
                    stock = StockLevel::Unknown;
                    from_definition(def, asker, now_ms)
                }
                PeekReply::Rejected(Rejection::NotStarted { .. }) => OfferState::NotStarted,
                PeekReply::Rejected(Rejection::Ended) => OfferState::Ended,
                PeekReply::Rejected(Rejection::BetweenWaves { .. }) if count < def.per_user_limit => {
                    OfferState::BetweenWaves
                }
                PeekReply::Rejected(Rejection::NotEligible { .. } | Rejection::Risk(RiskReason::DeviceRequired)) => {
                    OfferState::NotEligible
                }
                _ if count >= def.per_user_limit => OfferState::Claimed,
                PeekReply::Rejected(Rejection::AlreadyClaimed) => OfferState::Claimed,
                PeekReply::Rejected(Rejection::SoldOut) => OfferState::SoldOut,
                // Open; Empty (a press would borrow from the other shards,
                // which the cached level says have stock or not); never
                // rate-limited (the read passes the bucket), never a risk
                // refusal (not read here).
                _ => OfferState::CanGrab,
            }
        }
    };
    // The level and the state brought in line: a shard with stock is not
    // NONE, and a coupon whose shards held nothing at the last read is
    // SOLD_OUT unless the caller's own shard has a unit now.
    let state = match (state, stock) {
        (OfferState::CanGrab, StockLevel::None) if !open => match next_wave {
            Some(_) => OfferState::BetweenWaves,
            None => OfferState::SoldOut,
        },
        (state, _) => state,
    };
    stock = match (state, stock) {
        (OfferState::SoldOut, _) => StockLevel::None,
        (OfferState::CanGrab, StockLevel::None) => StockLevel::Few,
        (_, level) => level,
    };
    Some(Offer {
        coupon_id: def.coupon_id.clone(),
        name: def.name.clone(),
        amount: def.amount,
        grab_start_ms: def.grab_start_ms,
        grab_end_ms: def.grab_end_ms,
        valid_from_ms: def.valid_from_ms,
        valid_until_ms: def.valid_until_ms,
        min_member_level: def.min_member_level,
        state,
        starts_at_ms: (state == OfferState::NotStarted).then_some(def.grab_start_ms),
        next_wave_at_ms: next_wave.filter(|_| state == OfferState::BetweenWaves),
        draw_at_ms: def.draw_at_ms.filter(|_| state == OfferState::Lottery),
        held,
        limit: def.per_user_limit,
        stock,
    })
}
