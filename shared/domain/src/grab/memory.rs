//! Short, bounded per-instance memories of coupons: "sold out", "does not
//! exist", "repair already asked for".
//!
//! After a coupon sells out, nearly every press is a loser. Remembering
//! "sold out" for a short time lets an instance answer those without the
//! full Redis path. The trade-off: stock added by an operator during that
//! window is seen up to `ttl` late by this instance (never an oversell, and
//! bounded by configuration).
//!
//! The same memory bounds the two calls a grab makes only when Redis knows
//! nothing of a coupon: the durable catalogue lookup (a flood of presses on
//! ids that do not exist costs one lookup per id per `ttl`, not one per
//! press) and the repair request (one per coupon per `ttl` per instance).

use std::collections::HashMap;
use std::sync::RwLock;

use crate::ids::CouponId;

/// Entries kept at most; past it the memory starts over (forgetting early
/// only costs a lookup or a request more, never a wrong answer).
const MAX_ENTRIES: usize = 10_000;

/// Coupon -> until when (ms) this instance remembers it.
#[derive(Debug, Default)]
pub struct CouponMemory {
    ttl_ms: i64,
    until: RwLock<HashMap<CouponId, i64>>,
}

impl CouponMemory {
    /// A memory that forgets after `ttl_ms`; 0 turns it off.
    pub fn new(ttl_ms: u64) -> Self {
        Self {
            ttl_ms: i64::try_from(ttl_ms).unwrap_or(i64::MAX),
            until: RwLock::default(),
        }
    }

    /// True if `coupon` was remembered less than `ttl` ago.
    pub fn contains(&self, coupon: &CouponId, now_ms: i64) -> bool {
        self.until
            .read()
            .map(|m| m.get(coupon).is_some_and(|&until| now_ms < until))
            .unwrap_or(false)
    }

    /// Remembers `coupon` from `now_ms` on.
    pub fn remember(&self, coupon: &CouponId, now_ms: i64) {
        if self.ttl_ms <= 0 {
            return;
        }
        if let Ok(mut m) = self.until.write() {
            // Expired entries are dropped here, so the map stays as small as
            // the set of coupons remembered recently.
            m.retain(|_, until| *until > now_ms);
            if m.len() >= MAX_ENTRIES {
                m.clear();
            }
            m.insert(coupon.clone(), now_ms.saturating_add(self.ttl_ms));
        }
    }

    /// Remembers `coupon` and says whether it was new: true for the first
    /// caller in each `ttl` window (who then does the remembered thing).
    pub fn first_in_window(&self, coupon: &CouponId, now_ms: i64) -> bool {
        if self.contains(coupon, now_ms) {
            return false;
        }
        self.remember(coupon, now_ms);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_coupon_is_forgotten_after_the_ttl() {
        let memory = CouponMemory::new(1_000);
        let c = CouponId::parse("c").unwrap();
        assert!(!memory.contains(&c, 0));
        memory.remember(&c, 0);
        assert!(memory.contains(&c, 999));
        assert!(!memory.contains(&c, 1_000));
    }

    #[test]
    fn a_zero_ttl_remembers_nothing() {
        let memory = CouponMemory::new(0);
        let c = CouponId::parse("c").unwrap();
        memory.remember(&c, 0);
        assert!(!memory.contains(&c, 0));
    }

    #[test]
    fn only_the_first_caller_in_a_window_is_first() {
        let memory = CouponMemory::new(1_000);
        let c = CouponId::parse("c").unwrap();
        assert!(memory.first_in_window(&c, 0));
        assert!(!memory.first_in_window(&c, 500));
        assert!(memory.first_in_window(&c, 1_000));
    }

    #[test]
    fn the_memory_stays_bounded_under_a_flood_of_ids() {
        let memory = CouponMemory::new(60_000);
        for i in 0..(MAX_ENTRIES + 10) {
            memory.remember(&CouponId::parse(&format!("c{i}")).unwrap(), 0);
        }
        assert!(memory.until.read().unwrap().len() <= MAX_ENTRIES);
    }
}
