//! A coupon campaign's definition, its validation, and how its stock and rate
//! are split across stock shards.
//!
//! The definition is what an operator writes (JSON, camelCase); it is stored
//! in DynamoDB as the durable source of truth and copied into every Redis
//! stock shard at preheat, so the grab script never needs a second slot.

use serde::{Deserialize, Serialize};

use crate::ids::CouponId;

/// Most shards one coupon may have. Borrowing visits every other shard in the
/// worst case, so this bounds a grab's round trips (`shards + 1`).
pub const MAX_SHARDS: u32 = 64;

/// The latest instant a definition may name (2286-11-20): 13 digits, which
/// the Lua scripts' number formatting (`%.14g`) keeps exact.
pub const MAX_TIME_MS: i64 = 9_999_999_999_999;

/// The highest rate limit, grabs per second for the whole coupon.
pub const MAX_RATE_PER_SEC: u32 = 10_000_000;

/// Whether grabs are accepted at all (independent of the time window).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "UPPERCASE")]
pub enum CouponStatus {
    /// Grabs are decided normally inside the window.
    #[default]
    Online,
    /// Every grab is refused with COUPON_NOT_ACTIVE.
    Offline,
}

impl CouponStatus {
    /// The spelling stored in Redis and DynamoDB.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Online => "ONLINE",
            Self::Offline => "OFFLINE",
        }
    }
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

fn is_true(b: &bool) -> bool {
    *b
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Most release waves one coupon may have.
pub const MAX_WAVES: usize = 48;

/// One release of stock (整点抢券): `units` become grabbable at `at_ms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Wave {
    /// The instant the wave's units are released (ms since the epoch).
    pub at_ms: i64,
    /// How many units it releases.
    pub units: u64,
}

/// A coupon campaign as an operator defines it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CouponDefinition {
    /// Chosen by the operator; creating the same id twice with the same
    /// definition is a no-op.
    pub coupon_id: CouponId,
    /// Shown to the user.
    pub name: String,
    /// Face value in minor currency units (cents, fen).
    pub amount: u64,
    /// Units that can ever be issued: the hard cap of invariant 1.
    pub total_stock: u64,
    /// How many of this coupon one user may hold (N of invariant 2).
    #[serde(default = "one")]
    pub per_user_limit: u32,
    /// Lowest member level that may grab; 0 lets everyone in.
    #[serde(default)]
    pub min_member_level: u32,
    /// Grabs are accepted from this instant (ms since epoch, inclusive)...
    pub grab_start_ms: i64,
    /// ...until this one (exclusive).
    pub grab_end_ms: i64,
    /// The issued coupon can be used from...
    pub valid_from_ms: i64,
    /// ...until (exclusive).
    pub valid_until_ms: i64,
    /// Stock shards in Redis: more shards spread a hot coupon over more
    /// Redis Cluster slots (and nodes). Fixed at creation.
    #[serde(default = "one")]
    pub shards: u32,
    /// Token-bucket rate for the whole coupon, grabs per second; 0 = off.
    #[serde(default)]
    pub rate_per_sec: u32,
    /// Token-bucket burst for the whole coupon; defaults to the rate.
    #[serde(default)]
    pub burst: u32,
    /// Online or offline at creation.
    #[serde(default)]
    pub status: CouponStatus,
    /// Release waves, in time order, their units summing to `total_stock`;
    /// empty: every unit is grabbable from `grab_start_ms`. Left out of the
    /// stored JSON when empty, so definitions written before waves existed
    /// keep their fingerprint.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub waves: Vec<Wave>,
    /// With waves: a wave's unclaimed units join the next (true, the
    /// default) or expire when the next is released (false).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub rollover: bool,
    /// Only presses whose verified identity carries an attested device id
    /// (the `DEVICE_ID_CLAIM` of the grab function) may grab: one without
    /// hears `RISK_REJECTED` with `DEVICE_REQUIRED`, decided by the
    /// admission, before anything is reserved. For the campaigns bots go
    /// for; an app whose tokens carry no device claim must leave it off.
    /// Left out of the stored JSON when off, so older definitions keep
    /// their fingerprint. Fixed at creation.
    #[serde(default, skip_serializing_if = "is_false")]
    pub device_required: bool,
    /// First come (the default) or a lottery (`crate::lottery`).
    #[serde(default, skip_serializing_if = "Mode::is_first_come")]
    pub mode: Mode,
    /// A lottery's draw instant, at least `DRAW_SETTLE_MS` after the
    /// registration window (`grabStartMs`..`grabEndMs`) closes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub draw_at_ms: Option<i64>,
}

/// Why a definition was refused; names the field so the operator can fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {problem}")]
pub struct DefinitionError {
    /// The offending field, as spelled in JSON.
    pub field: &'static str,
    /// What is wrong with it.
    pub problem: String,
}

fn invalid(field: &'static str, problem: impl Into<String>) -> DefinitionError {
    DefinitionError {
        field,
        problem: problem.into(),
    }
}

impl CouponDefinition {
    /// Checks every rule a definition must satisfy before anything is
    /// written. `max_stock` is the operator-configured ceiling.
    pub fn validate(&self, max_stock: u64) -> Result<(), DefinitionError> {
        let name_len = self.name.chars().count();
        if name_len == 0 || name_len > 100 || self.name.chars().any(char::is_control) {
            return Err(invalid("name", "must be 1 to 100 characters, no control characters"));
        }
        if self.amount == 0 {
            return Err(invalid("amount", "must be positive"));
        }
        if self.total_stock == 0 || self.total_stock > max_stock {
            return Err(invalid("totalStock", format!("must be between 1 and {max_stock}")));
        }
        if self.per_user_limit == 0 || self.per_user_limit > 100 {
            return Err(invalid("perUserLimit", "must be between 1 and 100"));
        }
        for (field, ms) in [
            ("grabStartMs", self.grab_start_ms),
            ("grabEndMs", self.grab_end_ms),
            ("validFromMs", self.valid_from_ms),
            ("validUntilMs", self.valid_until_ms),
        ] {
            if !(0..=MAX_TIME_MS).contains(&ms) {
                return Err(invalid(
                    field,
                    format!("must be ms since the epoch, 0 to {MAX_TIME_MS}"),
                ));
            }
        }
        if self.grab_end_ms <= self.grab_start_ms {
            return Err(invalid("grabEndMs", "must be after grabStartMs"));
        }
        if self.valid_until_ms <= self.valid_from_ms {
            return Err(invalid("validUntilMs", "must be after validFromMs"));
        }
        if self.valid_until_ms < self.grab_end_ms {
            return Err(invalid(
                "validUntilMs",
                "must not be before grabEndMs (a coupon grabbed at the end of the window must be usable)",
            ));
        }
        if self.shards == 0 || self.shards > MAX_SHARDS {
            return Err(invalid("shards", format!("must be between 1 and {MAX_SHARDS}")));
        }
        if u64::from(self.shards) > self.total_stock {
            return Err(invalid("shards", "must not exceed totalStock"));
        }
        if self.rate_per_sec > MAX_RATE_PER_SEC {
            return Err(invalid("ratePerSec", format!("must be at most {MAX_RATE_PER_SEC}")));
        }
        if self.rate_per_sec > 0 && self.burst > 0 && self.burst < self.shards {
            return Err(invalid("burst", "must be at least the number of shards"));
        }
        self.validate_waves()?;
        self.validate_mode()
    }

    fn validate_waves(&self) -> Result<(), DefinitionError> {
        if self.waves.is_empty() {
            return if self.rollover {
                Ok(())
            } else {
                Err(invalid("rollover", "applies to waves only"))
            };
        }
        if self.waves.len() > MAX_WAVES {
            return Err(invalid("waves", format!("at most {MAX_WAVES} waves")));
        }
        let mut sum: u64 = 0;
        let mut last = None;
        for wave in &self.waves {
            if wave.units == 0 {
                return Err(invalid("waves", "every wave releases at least one unit"));
            }
            if !(self.grab_start_ms..self.grab_end_ms).contains(&wave.at_ms) {
                return Err(invalid("waves", "every wave is inside the grab window"));
            }
            if last.is_some_and(|at| wave.at_ms <= at) {
                return Err(invalid("waves", "waves must be in strictly increasing time order"));
            }
            last = Some(wave.at_ms);
            sum = sum.saturating_add(wave.units);
        }
        if sum != self.total_stock {
            return Err(invalid(
                "waves",
                format!("units must sum to totalStock ({})", self.total_stock),
            ));
        }
        Ok(())
    }

    /// [`Self::validate`], and the rules only a new coupon must meet: its
    /// grab window is not over at `now_ms` (nobody could ever grab it).
    pub fn validate_new(&self, max_stock: u64, now_ms: i64) -> Result<(), DefinitionError> {
        self.validate(max_stock)?;
        if self.grab_end_ms <= now_ms {
            return Err(invalid("grabEndMs", "the grab window is already over"));
        }
        if self.waves.iter().any(|w| w.at_ms < now_ms) {
            return Err(invalid("waves", "a wave of a new coupon cannot be in the past"));
        }
        Ok(())
    }

    /// The stock shard `index` starts with: an even split, the remainder going
    /// to the lowest shards, so the shares sum to `total_stock` exactly.
    pub fn shard_stock(&self, index: u32) -> u64 {
        even_share(self.total_stock, u64::from(self.shards), u64::from(index))
    }

    /// Shard `index`'s release schedule: for each wave, its instant and the
    /// units the shard holds released by then, cumulative. The split is of
    /// the cumulative totals, with [`even_share`], so every shard's last
    /// figure is its [`Self::shard_stock`] and the shards' figures at any
    /// wave sum to the coupon's units released by then. Empty without
    /// waves.
    pub fn shard_waves(&self, index: u32) -> Vec<(i64, u64)> {
        let mut released = 0u64;
        self.waves
            .iter()
            .map(|w| {
                released += w.units;
                (w.at_ms, even_share(released, u64::from(self.shards), u64::from(index)))
            })
            .collect()
    }

    /// The units shard `index` holds back at `now_ms` for waves still to
    /// come (0 without waves): what a rebuild of that shard must give it
    /// before anything else, or a later wave would sell early.
    pub fn shard_held_back(&self, index: u32, now_ms: i64) -> u64 {
        let schedule = self.shard_waves(index);
        let last = schedule.last().map_or(0, |&(_, released)| released);
        let out = schedule
            .iter()
            .rev()
            .find(|&&(at, _)| at <= now_ms)
            .map_or(0, |&(_, released)| released);
        last - out
    }

    /// The last wave out on shard `index` at `now_ms`: its instant and the
    /// shard's share of it (`None` before the first, or without waves).
    /// Without rollover, all the shard may sell until the next wave, less
    /// what it sold since that instant.
    pub fn shard_wave_out(&self, index: u32, now_ms: i64) -> Option<(i64, u64)> {
        let schedule = self.shard_waves(index);
        let out = schedule.iter().rposition(|&(at, _)| at <= now_ms)?;
        let before = if out == 0 { 0 } else { schedule[out - 1].1 };
        Some((schedule[out].0, schedule[out].1 - before))
    }

    /// The units of the whole coupon released by `now_ms` (all of them
    /// without waves).
    pub fn released_by(&self, now_ms: i64) -> u64 {
        if self.waves.is_empty() {
            return self.total_stock;
        }
        self.waves.iter().filter(|w| w.at_ms <= now_ms).map(|w| w.units).sum()
    }

    /// The first wave after `now_ms`, if any.
    pub fn next_wave_after(&self, now_ms: i64) -> Option<i64> {
        self.waves.iter().map(|w| w.at_ms).find(|&at| at > now_ms)
    }

    /// Each shard's token-bucket rate (grabs per second, fractional).
    pub fn shard_rate(&self) -> f64 {
        f64::from(self.rate_per_sec) / f64::from(self.shards)
    }

    /// Each shard's burst: the coupon's burst (or rate) split evenly, at
    /// least one token.
    pub fn shard_burst(&self) -> u64 {
        let burst = if self.burst == 0 { self.rate_per_sec } else { self.burst };
        u64::from(burst.div_ceil(self.shards).max(1))
    }

    /// How many capped counter items DynamoDB splits the stock over: one item
    /// takes about 1,000 writes a second, so big coupons get more items (one
    /// per 1,000 units, up to 16), never more items than units.
    pub fn counter_items(&self) -> u32 {
        counter_items_for(self.total_stock)
    }

    /// The cap of counter item `index`: an even split that sums to the total.
    pub fn counter_cap(&self, index: u32) -> u64 {
        even_share(self.total_stock, u64::from(self.counter_items()), u64::from(index))
    }

    /// A stable digest of the definition, stored beside it so that a repeated
    /// create can tell "same definition" (no-op) from "different" (conflict).
    pub fn fingerprint(&self) -> String {
        let canonical = serde_json::to_string(self).unwrap_or_default();
        format!("{:016x}", crate::hash::fnv1a64(canonical.as_bytes()))
    }
}

/// Part `index` of `units` split over `parts` as evenly as possible, the
/// remainder going to the first parts: the parts always add up to `units`.
/// The one split of stock there is (shards, counter caps, stock added,
/// lost shards rebuilt), so every place that divides units divides them
/// alike. `parts` of 0 counts as 1.
pub fn even_share(units: u64, parts: u64, index: u64) -> u64 {
    let parts = parts.max(1);
    units / parts + u64::from(index < units % parts)
}

/// [`CouponDefinition::counter_items`] for a total: monotone in `total`, so
/// adding stock only ever adds counter items.
pub fn counter_items_for(total: u64) -> u32 {
    let wanted = total.div_ceil(1_000).clamp(1, 16);
    wanted.min(total.max(1)) as u32
}

/// How the capped counters change when `added` units join a coupon of
/// `before` units: `(item, units added to its cap, whether the item is new)`.
///
/// Caps only grow (an item may already have issued up to its old cap, so a
/// recomputed, smaller cap could let the items together exceed the total),
/// and the additions sum to `added` exactly, so the caps keep summing to the
/// total. New items appear when the total crosses a 1,000 boundary, keeping
/// the number of items equal to [`counter_items_for`] of the new total.
pub fn counter_additions(before: u64, added: u64) -> Vec<(u32, u64, bool)> {
    let old_items = counter_items_for(before);
    let new_items = counter_items_for(before.saturating_add(added));
    let n = u64::from(new_items);
    (0..new_items)
        .map(|k| {
            let share = even_share(added, n, u64::from(k));
            (k, share, k >= old_items)
        })
        .filter(|&(_, share, new)| share > 0 || new)
        .collect()
}

/// A definition as the durable store holds it, with the version every
/// operator change increments. Redis shards remember the version they last
/// applied, so changes applied out of order never roll a shard back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredCoupon {
    /// The current definition (status, stock and rate as last changed).
    pub definition: CouponDefinition,
    /// 0 at creation, +1 per change.
    pub version: u64,
}

mod mode;
pub use mode::Mode;

#[cfg(test)]
pub(crate) mod tests;
