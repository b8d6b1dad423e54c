//! Release waves (整点抢券) against real Redis: a wave's units are released
//! by the clock alone, on every shard in its share, so no unit of a wave can
//! be won before its instant, whatever borrows, refills and rebuilds happen
//! in between; between waves a press hears BETWEEN_WAVES with the next
//! wave's instant, never SOLD_OUT.

use std::collections::BTreeMap;

use coupon_domain::coupon::{CouponDefinition, Wave};
use coupon_domain::ids::CouponId;
use serde_json::json;

use crate::support::{homed_on, Event, Harness, Options, T0};

pub(crate) const MIN: i64 = 60_000;

/// 12 units on 4 shards: 4 released at T0, 8 a minute later.
fn waved(h: &Harness) -> CouponDefinition {
    let mut def = h.coupon(12);
    def.shards = 4;
    def.waves = vec![
        Wave { at_ms: T0, units: 4 },
        Wave {
            at_ms: T0 + MIN,
            units: 8,
        },
    ];
    def
}

/// `n` fresh users press once each; what they heard, counted.
pub(crate) async fn presses(h: &Harness, coupon: &CouponId, label: &str, n: usize) -> BTreeMap<String, usize> {
    let mut heard = BTreeMap::new();
    for i in 0..n {
        let resp = h.grab(coupon, &format!("{label}-{i}"), "r").await;
        let code = match resp.body["data"]["reason"].as_str() {
            Some(reason) => format!("{}:{reason}", resp.code()),
            None => resp.code().to_owned(),
        };
        *heard.entry(code).or_default() += 1;
    }
    heard
}

pub(crate) fn count(heard: &BTreeMap<String, usize>, code: &str) -> usize {
    heard.get(code).copied().unwrap_or(0)
}

#[tokio::test]
async fn no_unit_of_a_wave_is_won_before_its_instant_on_any_shard() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let def = waved(&h);
    let coupon = h.create(&def).await;

    // The window is open, no wave is out yet.
    h.clock.set(T0 - 1);
    let early = h.grab(&coupon, "early", "r").await;
    assert_eq!(early.code(), "COUPON_NOT_ACTIVE", "{}", early.body);
    assert_eq!(
        early.body["data"],
        json!({"reason": "BETWEEN_WAVES", "nextWaveAtMs": T0})
    );

    // The first wave: exactly its 4 units, over every shard (borrows
    // included), then BETWEEN_WAVES, never SOLD_OUT.
    h.clock.set(T0);
    let first = presses(&h, &coupon, "first", 20).await;
    assert_eq!(count(&first, "SUCCESS"), 4, "{first:?}");
    assert_eq!(count(&first, "COUPON_NOT_ACTIVE:BETWEEN_WAVES"), 16, "{first:?}");
    let between = h.grab(&coupon, "between", "r").await;
    assert_eq!(between.body["data"]["nextWaveAtMs"], json!(T0 + MIN));

    // A millisecond before the second wave, still nothing.
    h.clock.set(T0 + MIN - 1);
    assert_eq!(count(&presses(&h, &coupon, "eager", 8).await, "SUCCESS"), 0);

    // The second wave: its 8 units, then sold out for good.
    h.clock.set(T0 + MIN);
    let second = presses(&h, &coupon, "second", 20).await;
    assert_eq!(count(&second, "SUCCESS"), 8, "{second:?}");
    assert_eq!(count(&second, "SOLD_OUT"), 12, "{second:?}");
    assert_eq!(h.stock(&def).await, 0);
    assert_eq!(h.outbox_len(&def).await, 12);
}

#[tokio::test]
async fn stock_added_between_waves_sells_at_once_and_the_next_wave_still_waits_for_its_instant() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let def = waved(&h);
    let coupon = h.create(&def).await;
    h.clock.set(T0);
    assert_eq!(count(&presses(&h, &coupon, "first", 10).await, "SUCCESS"), 4);
    let added = h
        .admin_call_keyed(
            "POST",
            &format!("/admin/coupons/{coupon}/stock"),
            json!({"add": 2}),
            "between-refill",
        )
        .await;
    assert_eq!(added.code(), "SUCCESS", "{}", added.body);
    let refill = presses(&h, &coupon, "refill", 10).await;
    assert_eq!(count(&refill, "SUCCESS"), 2, "{refill:?}");
    assert_eq!(count(&refill, "COUPON_NOT_ACTIVE:BETWEEN_WAVES"), 8, "{refill:?}");
    h.clock.set(T0 + MIN);
    let second = presses(&h, &coupon, "second", 12).await;
    assert_eq!(count(&second, "SUCCESS"), 8, "{second:?}");
    assert_eq!(h.outbox_len(&def).await, 14);
}

#[tokio::test]
async fn a_coupon_rebuilt_after_redis_lost_it_still_holds_back_its_next_wave() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let def = waved(&h);
    let coupon = h.create(&def).await;
    h.clock.set(T0);
    assert_eq!(count(&presses(&h, &coupon, "first", 6).await, "SUCCESS"), 4);
    h.pump().await;
    h.flush_redis().await;
    let rebuild = h.reconcile(&def).await;
    assert_eq!(rebuild.restored, 8, "{rebuild:?}");
    let after = presses(&h, &coupon, "after", 6).await;
    assert_eq!(count(&after, "COUPON_NOT_ACTIVE:BETWEEN_WAVES"), 6, "{after:?}");
    h.clock.set(T0 + MIN);
    assert_eq!(count(&presses(&h, &coupon, "second", 10).await, "SUCCESS"), 8);
}

#[tokio::test]
async fn the_dry_run_and_the_center_say_when_the_next_wave_is() {
    let h = Harness::new().await;
    let def = waved(&h);
    let coupon = h.create(&def).await;
    h.clock.set(T0 - 1);
    let dry = h.send(Event::eligibility(coupon.as_str(), "viewer").build()).await;
    assert_eq!(dry.body["data"], json!({"reason": "BETWEEN_WAVES", "nextWaveAtMs": T0}));
    let listing = h.send(Event::center("viewer").query("limit=50").build()).await;
    assert_eq!(listing.code(), "SUCCESS", "{}", listing.body);
    // The shared table lists every test's coupons: page on to ours.
    let mut cursor: Option<String> = None;
    let offer = loop {
        let q = cursor
            .as_ref()
            .map_or("limit=50".to_owned(), |c| format!("limit=50&cursor={c}"));
        let page = h.send(Event::center("viewer").query(&q).build()).await;
        let found = page.body["data"]["coupons"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["couponId"] == json!(coupon.as_str()))
            .cloned();
        if let Some(offer) = found {
            break offer;
        }
        cursor = Some(
            page.body["data"]["nextCursor"]
                .as_str()
                .expect("ours is listed")
                .to_owned(),
        );
    };
    assert_eq!(offer["state"], json!("BETWEEN_WAVES"), "{offer}");
    assert_eq!(offer["nextWaveAtMs"], json!(T0));
}

#[tokio::test]
async fn a_wave_added_while_the_sale_runs_is_held_back_until_its_instant_and_added_once() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let def = waved(&h);
    let coupon = h.create(&def).await;
    h.clock.set(T0);
    assert_eq!(count(&presses(&h, &coupon, "first", 6).await, "SUCCESS"), 4);
    let path = format!("/admin/coupons/{coupon}/waves");
    let wave = json!({"atMs": T0 + 2 * MIN, "units": 3});
    for _ in 0..2 {
        let added = h.admin_call_keyed("POST", &path, wave.clone(), "third-wave").await;
        assert_eq!(added.code(), "SUCCESS", "{}", added.body);
        assert_eq!(added.body["data"]["coupon"]["totalStock"], json!(15), "{}", added.body);
    }
    let past = h
        .admin_call_keyed("POST", &path, json!({"atMs": T0, "units": 1}), "late")
        .await;
    assert_eq!((past.status, past.code()), (400, "INVALID_REQUEST"), "{}", past.body);

    h.clock.set(T0 + MIN);
    let second = presses(&h, &coupon, "second", 12).await;
    assert_eq!(count(&second, "SUCCESS"), 8, "{second:?}");
    assert_eq!(count(&second, "COUPON_NOT_ACTIVE:BETWEEN_WAVES"), 4, "{second:?}");
    h.clock.set(T0 + 2 * MIN);
    let third = presses(&h, &coupon, "third", 6).await;
    assert_eq!(count(&third, "SUCCESS"), 3, "{third:?}");
    assert_eq!(count(&third, "SOLD_OUT"), 3, "{third:?}");
    let audit = h
        .admin_call("GET", &format!("/admin/coupons/{coupon}/audit"), None)
        .await;
    assert!(audit.body.to_string().contains("ADD_WAVE"), "{}", audit.body);
}

#[tokio::test]
async fn without_rollover_a_wave_s_unclaimed_units_expire_with_it_and_the_books_still_balance() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let mut def = waved(&h);
    def.rollover = false;
    let coupon = h.create(&def).await;
    h.clock.set(T0);
    assert_eq!(count(&presses(&h, &coupon, "first", 2).await, "SUCCESS"), 2);
    // The second wave: its own 8 units, not the 2 the first left.
    h.clock.set(T0 + MIN);
    let second = presses(&h, &coupon, "second", 14).await;
    assert_eq!(count(&second, "SUCCESS"), 8, "{second:?}");
    assert_eq!(count(&second, "SOLD_OUT"), 6, "{second:?}");
    h.pump().await;
    let report = h.reconcile(&def).await;
    assert_eq!((report.issued, report.drift), (10, 0), "{report:?}");
    assert_eq!(report.remaining, 2, "the expired units, counted as no grant's");
}

#[tokio::test]
async fn a_rebuild_of_several_shards_gives_each_what_its_waves_still_hold_back() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let mut def = h.coupon(4);
    def.shards = 4;
    // The first wave lands on shards 0 and 1 only; the second on 2 and 3.
    def.waves = vec![
        Wave { at_ms: T0, units: 2 },
        Wave {
            at_ms: T0 + MIN,
            units: 2,
        },
    ];
    let coupon = h.create(&def).await;
    h.clock.set(T0);
    assert_eq!(count(&presses(&h, &coupon, "first", 4).await, "SUCCESS"), 2);
    h.pump().await;
    h.flush_redis().await;
    let rebuild = h.reconcile(&def).await;
    assert_eq!(rebuild.restored, 2, "{rebuild:?}");
    let early = presses(&h, &coupon, "early", 6).await;
    assert_eq!(
        count(&early, "SUCCESS"),
        0,
        "the second wave sold before its instant: {early:?}"
    );
    h.clock.set(T0 + MIN);
    assert_eq!(count(&presses(&h, &coupon, "second", 6).await, "SUCCESS"), 2);
}

/// Without rollover, what earlier waves left is written off in the shard's
/// state, which a loss takes with it. The rebuild must not give the wave
/// out now more than its share: it counts what the wave sold on each lost
/// shard from the issued grants, and writes the rest off again.
#[tokio::test]
async fn without_rollover_a_rebuild_in_the_middle_of_a_wave_gives_it_only_what_it_has_left() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let mut def = h.coupon(8);
    def.shards = 1;
    def.rollover = false;
    def.waves = vec![
        Wave { at_ms: T0, units: 4 },
        Wave {
            at_ms: T0 + MIN,
            units: 4,
        },
    ];
    let coupon = h.create(&def).await;
    h.clock.set(T0);
    assert_eq!(count(&presses(&h, &coupon, "first", 1).await, "SUCCESS"), 1);
    h.clock.set(T0 + MIN);
    assert_eq!(count(&presses(&h, &coupon, "second", 2).await, "SUCCESS"), 2);
    h.pump().await;
    h.flush_redis().await;
    let rebuild = h.reconcile(&def).await;
    assert_eq!(rebuild.shards_rebuilt, 1, "{rebuild:?}");

    let after = presses(&h, &coupon, "after", 6).await;
    assert_eq!(
        count(&after, "SUCCESS"),
        2,
        "the wave's 4 less the 2 it sold: {after:?}"
    );
    assert_eq!(count(&after, "SOLD_OUT"), 4, "{after:?}");
    h.pump().await;
    let report = h.reconcile(&def).await;
    assert_eq!((report.issued, report.drift), (5, 0), "{report:?}");
    assert_eq!(report.remaining, 3, "the first wave's leftovers, written off again");
}

/// The same across lost shards whose waves sold unevenly: each keeps what
/// its own wave has left, not an even part of what DynamoDB does not
/// account for (which would write off one shard's live units while the
/// other, sold out in this wave, wrote off what it could not sell).
#[tokio::test]
async fn without_rollover_a_rebuild_of_shards_that_sold_unevenly_keeps_every_unit_the_wave_has_left() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let mut def = h.coupon(8);
    def.shards = 2;
    def.rollover = false;
    def.waves = vec![
        Wave { at_ms: T0, units: 4 },
        Wave {
            at_ms: T0 + MIN,
            units: 4,
        },
    ];
    let coupon = h.create(&def).await;
    h.clock.set(T0);
    assert_eq!(count(&presses(&h, &coupon, "first", 4).await, "SUCCESS"), 4);
    // The second wave: shard 0 sells its 2, shard 1 none.
    h.clock.set(T0 + MIN);
    for i in 0..2 {
        let user = homed_on(0, 2, &format!("zero{i}-"));
        assert_eq!(h.grab(&coupon, &user, "r").await.code(), "SUCCESS");
    }
    h.pump().await;
    h.flush_redis().await;
    assert_eq!(h.reconcile(&def).await.shards_rebuilt, 2);
    let after = presses(&h, &coupon, "after", 4).await;
    assert_eq!(
        count(&after, "SUCCESS"),
        2,
        "shard 1's two units of the wave: {after:?}"
    );
    h.pump().await;
    assert_eq!(h.reconcile(&def).await.drift, 0);
}
