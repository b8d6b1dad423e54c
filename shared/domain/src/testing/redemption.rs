//! A fake of the redemption port: users' coupons in memory, with the same
//! conditions the DynamoDB writes check, and a hook that lets another
//! order's write land between a read and a write.

use std::collections::HashMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::error::StoreError;
use crate::ids::{GrantId, OrderId, UserId};
use crate::redemption::{Redemptions, Written};
use crate::user_coupon::{CouponState, UserCoupon};

/// A change made right before the next conditional write (a concurrent
/// order's redemption, say).
pub type CouponsHook = Box<dyn FnOnce(&mut HashMap<(UserId, GrantId), UserCoupon>) + Send>;

/// Users' coupons by (user, grant id).
#[derive(Default)]
pub struct MemoryRedemptions {
    /// The coupons.
    pub coupons: Mutex<HashMap<(UserId, GrantId), UserCoupon>>,
    /// Runs once, before the next write.
    pub before_write: Mutex<Option<CouponsHook>>,
}

impl MemoryRedemptions {
    /// Gives `user` the coupon.
    pub fn hold(&self, user: &UserId, coupon: UserCoupon) {
        self.coupons
            .lock()
            .unwrap()
            .insert((user.clone(), coupon.grant_id.clone()), coupon);
    }

    fn hook(&self) {
        if let Some(hook) = self.before_write.lock().unwrap().take() {
            hook(&mut self.coupons.lock().unwrap());
        }
    }
}

#[async_trait]
impl Redemptions for MemoryRedemptions {
    async fn find(&self, user: &UserId, grant: &GrantId) -> Result<Option<UserCoupon>, StoreError> {
        Ok(self
            .coupons
            .lock()
            .unwrap()
            .get(&(user.clone(), grant.clone()))
            .cloned())
    }

    async fn redeem(
        &self,
        user: &UserId,
        coupon: &UserCoupon,
        order: &OrderId,
        now_ms: i64,
    ) -> Result<Written, StoreError> {
        self.hook();
        let mut coupons = self.coupons.lock().unwrap();
        let Some(stored) = coupons.get_mut(&(user.clone(), coupon.grant_id.clone())) else {
            return Ok(Written::Changed);
        };
        if stored.status != CouponState::Unused
            || stored.returned_by.contains(order)
            || now_ms < stored.valid_from_ms
            || now_ms >= stored.valid_until_ms
        {
            return Ok(Written::Changed);
        }
        stored.status = CouponState::Used;
        stored.order_id = Some(order.clone());
        stored.used_at_ms = Some(now_ms);
        Ok(Written::Done(Box::new(stored.clone())))
    }

    async fn give_back(
        &self,
        user: &UserId,
        coupon: &UserCoupon,
        order: &OrderId,
        now_ms: i64,
    ) -> Result<Written, StoreError> {
        self.hook();
        let mut coupons = self.coupons.lock().unwrap();
        let Some(stored) = coupons.get_mut(&(user.clone(), coupon.grant_id.clone())) else {
            return Ok(Written::Changed);
        };
        if stored.status != CouponState::Used || stored.order_id.as_ref() != Some(order) {
            return Ok(Written::Changed);
        }
        stored.status = CouponState::Unused;
        stored.order_id = None;
        stored.used_at_ms = None;
        stored.returned_by.push(order.clone());
        stored.returned_at_ms = Some(now_ms);
        Ok(Written::Done(Box::new(stored.clone())))
    }
}
