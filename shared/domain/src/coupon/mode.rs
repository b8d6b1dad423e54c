//! How a coupon is given out: first come (the default: a press wins while
//! stock lasts) or by lottery (registrations during the window, then a
//! verifiable draw, `crate::lottery`), and the rules a lottery definition
//! keeps.

use serde::{Deserialize, Serialize};

use super::{invalid, CouponDefinition, DefinitionError};
use crate::lottery::{DRAW_SETTLE_MS, DRAW_WINDOW_MS};

/// How a coupon is given out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Mode {
    /// A press wins while stock lasts (the grab).
    #[default]
    FirstCome,
    /// Users register during the window (`POST /coupons/{id}/entries`);
    /// at `drawAtMs` the winners are drawn from the entries, up to the
    /// stock, and issued. A press on the grab route is refused.
    Lottery,
}

impl Mode {
    /// True for the default, left out of the stored JSON so definitions
    /// written before lotteries keep their fingerprint.
    pub fn is_first_come(&self) -> bool {
        *self == Self::FirstCome
    }

    /// The spelling stored in Redis.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FirstCome => "FIRST_COME",
            Self::Lottery => "LOTTERY",
        }
    }
}

impl CouponDefinition {
    /// Until when the coupon's units may be claimed (and its Redis state
    /// is kept and repaired): the grab window's end, or for a lottery the
    /// end of its draw's window.
    pub fn sells_until_ms(&self) -> i64 {
        match (self.mode, self.draw_at_ms) {
            (Mode::Lottery, Some(draw)) => draw.saturating_add(DRAW_WINDOW_MS),
            _ => self.grab_end_ms,
        }
    }

    /// A lottery's rules: a draw instant after the window (by at least
    /// [`DRAW_SETTLE_MS`]) and before the coupons expire, one coupon per
    /// user, no release waves (the draw releases everything at once); a
    /// first-come coupon has no draw.
    pub(super) fn validate_mode(&self) -> Result<(), DefinitionError> {
        match (self.mode, self.draw_at_ms) {
            (Mode::FirstCome, None) => Ok(()),
            (Mode::FirstCome, Some(_)) => Err(invalid("drawAtMs", "applies to mode LOTTERY only")),
            (Mode::Lottery, None) => Err(invalid("drawAtMs", "a lottery needs its draw instant")),
            (Mode::Lottery, Some(draw)) => {
                if draw < self.grab_end_ms.saturating_add(DRAW_SETTLE_MS) {
                    return Err(invalid(
                        "drawAtMs",
                        format!("must be at least {DRAW_SETTLE_MS} ms after grabEndMs (registrations still landing)"),
                    ));
                }
                if draw >= self.valid_until_ms {
                    return Err(invalid("drawAtMs", "must be before validUntilMs"));
                }
                if self.per_user_limit != 1 {
                    return Err(invalid("perUserLimit", "a lottery gives one coupon per winner"));
                }
                if !self.waves.is_empty() {
                    return Err(invalid("waves", "a lottery draws its whole stock at once"));
                }
                Ok(())
            }
        }
    }
}
