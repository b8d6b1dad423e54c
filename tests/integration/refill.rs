//! Stock added to a sold-out sharded coupon while grabs run never leaves a
//! shard answering SOLD_OUT for good (invariant 5 under a refill).
//!
//! The sequence: each shard applied the change and bumped its own sold-out
//! epoch in one step, so a borrow homed on an already-applied shard could
//! scan a shard not yet given its new stock, find it empty, and stamp its
//! home shard sold out at the new epoch. Every grab homed there then heard
//! SOLD_OUT while the other shard had the added stock. The change now runs
//! in two phases: every shard's stock, then every shard's epoch.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use coupon_adapters::redis::RedisLive;
use coupon_domain::coupon::StoredCoupon;
use coupon_domain::error::StoreError;
use coupon_domain::grab::home_shard;
use coupon_domain::ids::{CouponId, UserId};
use coupon_domain::live::{LiveSettings, ShardApply};
use grab::GrabApp;
use serde_json::{json, Value};

use crate::support::{admin_send_to, send, Event, Harness};

/// The real live settings, with one grab sent right after shard 0 applied
/// the change (before shard 1 has): the interleaving that used to stamp
/// shard 0 sold out for good.
struct GrabAfterFirstShard {
    inner: Arc<dyn LiveSettings>,
    app: Arc<GrabApp>,
    event: Mutex<Option<Value>>,
    heard: Mutex<Vec<String>>,
}

#[async_trait]
impl LiveSettings for GrabAfterFirstShard {
    async fn apply_shard(&self, coupon: &StoredCoupon, shard: u32) -> Result<ShardApply, StoreError> {
        let applied = self.inner.apply_shard(coupon, shard).await?;
        let event = if shard == 0 {
            self.event.lock().unwrap().take()
        } else {
            None
        };
        if let Some(event) = event {
            let code = send(&self.app, event).await.code().to_owned();
            self.heard.lock().unwrap().push(code);
        }
        Ok(applied)
    }

    async fn bump_epoch(&self, coupon: &CouponId, shard: u32) -> Result<(), StoreError> {
        self.inner.bump_epoch(coupon, shard).await
    }
}

/// Users whose home is `shard` of 2.
fn homed_on(shard: u32, prefix: &str, n: usize) -> Vec<String> {
    (0..)
        .map(|i| format!("{prefix}{i}"))
        .filter(|u| home_shard(&UserId::parse(u).unwrap(), 2) == shard)
        .take(n)
        .collect()
}

#[tokio::test]
async fn a_refill_racing_a_borrow_never_stamps_a_shard_sold_out_for_good() {
    let h = Harness::new().await;
    let mut def = h.coupon(3);
    def.shards = 2; // shard 0 holds 2 units, shard 1 holds 1
    assert_eq!(h.admin_create(&def).await.code(), "SUCCESS");
    let coupon = def.coupon_id.clone();
    for user in homed_on(0, "early", 3) {
        assert_eq!(h.grab(&coupon, &user, "r").await.code(), "SUCCESS", "{user}");
    }
    assert_eq!(
        h.grab(&coupon, &homed_on(0, "late", 1)[0], "r").await.code(),
        "SOLD_OUT"
    );

    // Past this instance's sold-out memory (1 s here), so the racing grab
    // reaches Redis. One more unit: total 4 makes shard 1's share 2 (shard
    // 0's stays 2).
    h.clock.advance(1_001);
    let racer = homed_on(0, "racer", 1).remove(0);
    let live = Arc::new(GrabAfterFirstShard {
        inner: Arc::new(RedisLive::new(h.redis.clone())),
        app: h.app.clone(),
        event: Mutex::new(Some(Event::grab(coupon.as_str(), &racer, "r").build())),
        heard: Mutex::default(),
    });
    let app = h.admin_with(|ports| ports.live = live.clone());
    let added = admin_send_to(
        &app,
        Event::admin(
            "POST",
            &format!("/admin/coupons/{coupon}/stock"),
            Some(json!({"add": 1})),
        )
        .header("idempotency-key", "refill-1")
        .build(),
    )
    .await;
    assert_eq!(added.code(), "SUCCESS", "{}", added.body);
    assert_eq!(
        live.heard.lock().unwrap().len(),
        1,
        "the racing grab ran between the shards"
    );

    // Once the instance's sold-out memory (bounded, 1 s here) has passed,
    // a newcomer homed on shard 0 finds the unit shard 1 got.
    h.clock.advance(1_001);
    let newcomer = homed_on(0, "newcomer", 1).remove(0);
    let resp = h.grab(&coupon, &newcomer, "r").await;
    assert_eq!(
        resp.code(),
        "SUCCESS",
        "shard 0 must not answer SOLD_OUT while shard 1 has stock: {}",
        resp.body
    );
    assert_eq!(h.stock(&def).await, 0);
}
