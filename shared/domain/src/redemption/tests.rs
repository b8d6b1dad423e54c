//! The redemption protocol against the in-memory port: every transition
//! and every refusal, and a race between two orders.

use super::*;
use crate::clock::ManualClock;
use crate::ids::CouponId;
use crate::testing::MemoryRedemptions;

const NOW: i64 = 1_000_000;

struct World {
    store: Arc<MemoryRedemptions>,
    clock: ManualClock,
    service: RedemptionService,
    user: UserId,
    grant: GrantId,
}

fn world(valid_from: i64, valid_until: i64) -> World {
    let store = Arc::new(MemoryRedemptions::default());
    let clock = ManualClock::new(NOW);
    let user = UserId::parse("u1").unwrap();
    let grant = GrantId::parse("c-0-7").unwrap();
    store.hold(
        &user,
        UserCoupon {
            coupon_id: CouponId::parse("c").unwrap(),
            ordinal: 1,
            grant_id: grant.clone(),
            status: CouponState::Unused,
            name: "10 off".into(),
            amount: 1_000,
            received_at_ms: 0,
            valid_from_ms: valid_from,
            valid_until_ms: valid_until,
            order_id: None,
            used_at_ms: None,
            returned_by: Vec::new(),
            returned_at_ms: None,
            revoked_at_ms: None,
        },
    );
    let service = RedemptionService::new(store.clone(), Arc::new(clock.clone()));
    World {
        store,
        clock,
        service,
        user,
        grant,
    }
}

fn order(id: &str) -> OrderId {
    OrderId::parse(id).unwrap()
}

#[tokio::test]
async fn a_coupon_is_spent_once_and_the_same_order_hears_the_same_answer() {
    let w = world(0, NOW + 1_000);
    let first = w.service.redeem(&w.user, &w.grant, &order("o1")).await.unwrap();
    assert_eq!((first.coupon.status, first.replayed), (CouponState::Used, false));
    assert_eq!(first.coupon.order_id, Some(order("o1")));
    assert_eq!(first.coupon.used_at_ms, Some(NOW));
    let again = w.service.redeem(&w.user, &w.grant, &order("o1")).await.unwrap();
    assert_eq!((again.coupon, again.replayed), (first.coupon, true));
    let other = w.service.redeem(&w.user, &w.grant, &order("o2")).await;
    assert!(matches!(other, Err(RedemptionError::UsedByAnotherOrder)), "{other:?}");
}

#[tokio::test]
async fn a_coupon_outside_its_validity_revoked_or_not_the_users_is_refused() {
    let early = world(NOW + 1, NOW + 1_000);
    let r = early.service.redeem(&early.user, &early.grant, &order("o1")).await;
    assert!(
        matches!(r, Err(RedemptionError::NotYetValid { valid_from_ms }) if valid_from_ms == NOW + 1),
        "{r:?}"
    );

    let late = world(0, NOW);
    let r = late.service.redeem(&late.user, &late.grant, &order("o1")).await;
    assert!(matches!(r, Err(RedemptionError::Expired)), "{r:?}");

    let revoked = world(0, NOW + 1_000);
    for c in revoked.store.coupons.lock().unwrap().values_mut() {
        c.status = CouponState::Revoked;
    }
    let r = revoked
        .service
        .redeem(&revoked.user, &revoked.grant, &order("o1"))
        .await;
    assert!(matches!(r, Err(RedemptionError::Revoked)), "{r:?}");

    let w = world(0, NOW + 1_000);
    let stranger = UserId::parse("u2").unwrap();
    let r = w.service.redeem(&stranger, &w.grant, &order("o1")).await;
    assert!(matches!(r, Err(RedemptionError::NotFound)), "{r:?}");
}

#[tokio::test]
async fn only_the_order_that_used_it_gives_it_back_once_and_late_it_reads_expired() {
    let w = world(0, NOW + 1_000);
    let nobody = w.service.give_back(&w.user, &w.grant, &order("o1")).await;
    assert!(matches!(nobody, Err(RedemptionError::NotUsedByThisOrder)), "{nobody:?}");
    w.service.redeem(&w.user, &w.grant, &order("o1")).await.unwrap();
    let wrong = w.service.give_back(&w.user, &w.grant, &order("o2")).await;
    assert!(matches!(wrong, Err(RedemptionError::NotUsedByThisOrder)), "{wrong:?}");

    let back = w.service.give_back(&w.user, &w.grant, &order("o1")).await.unwrap();
    assert_eq!(
        (back.coupon.status, back.replayed, back.coupon.order_id.clone()),
        (CouponState::Unused, false, None)
    );
    let again = w.service.give_back(&w.user, &w.grant, &order("o1")).await.unwrap();
    assert!(again.replayed);
    let stale = w.service.redeem(&w.user, &w.grant, &order("o1")).await;
    assert!(
        matches!(stale, Err(RedemptionError::ReturnedByThisOrder)),
        "a late retry of o1's redemption never spends it again: {stale:?}"
    );

    // Spent again by another order, returned after the validity ended.
    w.service.redeem(&w.user, &w.grant, &order("o3")).await.unwrap();
    w.clock.advance(1_000);
    let late = w.service.give_back(&w.user, &w.grant, &order("o3")).await.unwrap();
    assert_eq!(late.coupon.status, CouponState::Expired);
    let r = w.service.redeem(&w.user, &w.grant, &order("o4")).await;
    assert!(matches!(r, Err(RedemptionError::Expired)), "{r:?}");
}

#[tokio::test]
async fn of_two_orders_racing_for_one_coupon_exactly_one_wins() {
    let w = world(0, NOW + 1_000);
    // o2's write lands between o1's read and o1's write.
    let (user, grant) = (w.user.clone(), w.grant.clone());
    *w.store.before_write.lock().unwrap() = Some(Box::new(move |coupons| {
        let c = coupons.get_mut(&(user, grant)).unwrap();
        c.status = CouponState::Used;
        c.order_id = Some(OrderId::parse("o2").unwrap());
        c.used_at_ms = Some(NOW);
    }));
    let lost = w.service.redeem(&w.user, &w.grant, &order("o1")).await;
    assert!(matches!(lost, Err(RedemptionError::UsedByAnotherOrder)), "{lost:?}");
    let won = w.service.redeem(&w.user, &w.grant, &order("o2")).await.unwrap();
    assert!(won.replayed, "o2's own redemption stands");
}
