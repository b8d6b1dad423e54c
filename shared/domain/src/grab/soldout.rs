//! The per-instance memory of sold-out coupons.
//!
//! After a coupon sells out, nearly every press is a loser. Remembering
//! "sold out" for a short, bounded time lets an instance answer those without
//! the full Redis path. The trade-off: stock added by an operator during that
//! window is seen up to `ttl` late by this instance (never an oversell, and
//! bounded by configuration).

use std::collections::HashMap;
use std::sync::RwLock;

use crate::ids::CouponId;

/// Coupon -> until when (ms) this instance treats it as sold out.
#[derive(Debug, Default)]
pub struct SoldOutMemory {
    ttl_ms: i64,
    until: RwLock<HashMap<CouponId, i64>>,
}

impl SoldOutMemory {
    /// A memory that forgets after `ttl_ms`; 0 turns it off.
    pub fn new(ttl_ms: u64) -> Self {
        Self {
            ttl_ms: i64::try_from(ttl_ms).unwrap_or(i64::MAX),
            until: RwLock::default(),
        }
    }

    /// True if `coupon` was seen sold out less than `ttl` ago.
    pub fn is_sold_out(&self, coupon: &CouponId, now_ms: i64) -> bool {
        self.until
            .read()
            .map(|m| m.get(coupon).is_some_and(|&until| now_ms < until))
            .unwrap_or(false)
    }

    /// Records that `coupon` was just seen sold out.
    pub fn remember(&self, coupon: &CouponId, now_ms: i64) {
        if self.ttl_ms <= 0 {
            return;
        }
        if let Ok(mut m) = self.until.write() {
            // Expired entries are dropped here, so the map stays as small as
            // the set of coupons that sold out recently.
            m.retain(|_, until| *until > now_ms);
            m.insert(coupon.clone(), now_ms.saturating_add(self.ttl_ms));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sold_out_is_forgotten_after_the_ttl() {
        let memory = SoldOutMemory::new(1_000);
        let c = CouponId::parse("c").unwrap();
        assert!(!memory.is_sold_out(&c, 0));
        memory.remember(&c, 0);
        assert!(memory.is_sold_out(&c, 999));
        assert!(!memory.is_sold_out(&c, 1_000));
    }

    #[test]
    fn a_zero_ttl_remembers_nothing() {
        let memory = SoldOutMemory::new(0);
        let c = CouponId::parse("c").unwrap();
        memory.remember(&c, 0);
        assert!(!memory.is_sold_out(&c, 0));
    }
}
