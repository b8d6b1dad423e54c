use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::*;
use crate::clock::ManualClock;
use crate::coupon::{CouponStatus, Wave};
use crate::grab::ports::PeekReply;
use crate::outcome::{Rejection, RiskReason};
use crate::testing::{MemoryLiveCoupons, ScriptedStandings};

const NOW: i64 = 1_000_000;

fn def(id: &str, start: i64) -> CouponDefinition {
    CouponDefinition {
        coupon_id: CouponId::parse(id).unwrap(),
        name: format!("coupon {id}"),
        amount: 500,
        total_stock: 100,
        per_user_limit: 2,
        min_member_level: 0,
        grab_start_ms: start,
        grab_end_ms: start + 3_600_000,
        valid_from_ms: start,
        valid_until_ms: start + 7_200_000,
        shards: 4,
        rate_per_sec: 0,
        burst: 0,
        status: CouponStatus::Online,
        waves: Vec::new(),
        rollover: true,
        device_required: false,
        mode: Default::default(),
        draw_at_ms: None,
    }
}

struct World {
    live: Arc<MemoryLiveCoupons>,
    shards: Arc<ScriptedStandings>,
    clock: ManualClock,
    center: CouponCenter,
}

fn world(defs: Vec<CouponDefinition>) -> World {
    let live = Arc::new(MemoryLiveCoupons::default());
    let shards = Arc::new(ScriptedStandings::default());
    for d in &defs {
        shards.remaining.lock().unwrap().insert(d.coupon_id.clone(), 50);
        shards.answers.lock().unwrap().insert(
            d.coupon_id.clone(),
            Standing {
                shard: PeekReply::Open,
                held: 0,
            },
        );
    }
    *live.coupons.lock().unwrap() = defs;
    let clock = ManualClock::new(NOW);
    let center = CouponCenter::new(
        live.clone(),
        shards.clone(),
        Arc::new(clock.clone()),
        CenterSettings::default(),
    );
    World {
        live,
        shards,
        clock,
        center,
    }
}

fn query(user: &str) -> CenterQuery {
    CenterQuery {
        user: UserId::parse(user).unwrap(),
        level: 0,
        device: false,
        limit: DEFAULT_PAGE,
        after: None,
    }
}

fn answer(w: &World, id: &str, shard: PeekReply, held: u32) {
    w.shards
        .answers
        .lock()
        .unwrap()
        .insert(CouponId::parse(id).unwrap(), Standing { shard, held });
}

async fn only(w: &World, q: &CenterQuery) -> Offer {
    let page = w.center.page(q).await.unwrap();
    assert_eq!(page.offers.len(), 1, "{page:?}");
    page.offers.into_iter().next().unwrap()
}

#[tokio::test]
async fn coupons_are_listed_soonest_window_first_and_paged_without_repeats_or_gaps() {
    let w = world(vec![
        def("c-late", NOW + 10_000),
        def("c-b", NOW - 10),
        def("c-a", NOW - 10),
        def("c-now", NOW - 500),
    ]);
    let mut q = query("u1");
    q.limit = 3;
    let first = w.center.page(&q).await.unwrap();
    let ids: Vec<&str> = first.offers.iter().map(|o| o.coupon_id.as_str()).collect();
    assert_eq!(ids, ["c-now", "c-a", "c-b"]);
    q.after = Some(CenterCursor::parse(&first.next.expect("a next page").encode()).unwrap());
    let second = w.center.page(&q).await.unwrap();
    let ids: Vec<&str> = second.offers.iter().map(|o| o.coupon_id.as_str()).collect();
    assert_eq!(ids, ["c-late"]);
    assert_eq!(second.next, None);
}

#[tokio::test]
async fn an_ended_or_offline_coupon_is_not_listed() {
    let mut ended = def("c-ended", NOW - 7_200_000);
    ended.grab_end_ms = NOW;
    let mut offline = def("c-off", NOW - 10);
    offline.status = CouponStatus::Offline;
    let w = world(vec![ended, offline, def("c-on", NOW - 10)]);
    let page = w.center.page(&query("u1")).await.unwrap();
    let ids: Vec<&str> = page.offers.iter().map(|o| o.coupon_id.as_str()).collect();
    assert_eq!(ids, ["c-on"]);
}

#[tokio::test]
async fn a_lottery_in_its_window_is_listed_for_registering_with_its_draw_and_no_shard_read() {
    let mut drawn = def("c-draw", NOW - 10);
    drawn.mode = crate::coupon::Mode::Lottery;
    drawn.draw_at_ms = Some(drawn.grab_end_ms + crate::lottery::DRAW_SETTLE_MS);
    let w = world(vec![drawn.clone()]);
    let offer = only(&w, &query("u1")).await;
    assert_eq!((offer.state, offer.draw_at_ms), (OfferState::Lottery, drawn.draw_at_ms));
    assert!(w.shards.asked.lock().unwrap().is_empty(), "decided from the definition");
}

#[tokio::test]
async fn a_coupon_that_requires_a_device_is_not_for_a_caller_without_one() {
    let mut guarded = def("c-device", NOW - 10);
    guarded.device_required = true;
    let w = world(vec![guarded]);
    let offer = only(&w, &query("u1")).await;
    assert_eq!((offer.state, offer.held), (OfferState::NotEligible, None));
    assert!(w.shards.asked.lock().unwrap().is_empty(), "decided from the definition");
    let mut q = query("u1");
    q.device = true;
    answer(&w, "c-device", PeekReply::Open, 0);
    assert_eq!(only(&w, &q).await.state, OfferState::CanGrab);
    // The shard says so too (a coupon whose definition the copy predates).
    answer(
        &w,
        "c-device",
        PeekReply::Rejected(Rejection::Risk(RiskReason::DeviceRequired)),
        0,
    );
    assert_eq!(only(&w, &q).await.state, OfferState::NotEligible);
}

#[tokio::test]
async fn a_coupon_not_started_or_above_the_caller_s_level_is_decided_without_a_shard_read() {
    let mut gold = def("c-gold", NOW - 10);
    gold.min_member_level = 3;
    let w = world(vec![def("c-soon", NOW + 60_000), gold]);
    let page = w.center.page(&query("u1")).await.unwrap();
    let (gold, soon) = (&page.offers[0], &page.offers[1]);
    assert_eq!(
        (soon.state, soon.starts_at_ms, soon.held),
        (OfferState::NotStarted, Some(NOW + 60_000), None)
    );
    assert_eq!(gold.state, OfferState::NotEligible);
    assert!(w.shards.asked.lock().unwrap().is_empty(), "no shard read");
    // A gold member's press would be decided: their shard is asked.
    let mut q = query("u1");
    q.level = 3;
    let page = w.center.page(&q).await.unwrap();
    assert_eq!(page.offers[0].state, OfferState::CanGrab);
    assert_eq!(w.shards.asked.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn the_caller_s_own_home_shard_is_the_one_read() {
    let w = world(vec![def("c1", NOW - 10)]);
    let user = UserId::parse("u-home").unwrap();
    only(&w, &query("u-home")).await;
    assert_eq!(
        w.shards.asked.lock().unwrap().as_slice(),
        [(CouponId::parse("c1").unwrap(), home_shard(&user, 4))]
    );
}

#[tokio::test]
async fn each_answer_of_the_home_shard_draws_its_button() {
    let cases = [
        (PeekReply::Open, 0, OfferState::CanGrab),
        (PeekReply::Open, 1, OfferState::CanGrab),
        (PeekReply::Empty { next_wave_at_ms: None }, 0, OfferState::CanGrab),
        (PeekReply::Rejected(Rejection::AlreadyClaimed), 2, OfferState::Claimed),
        (PeekReply::Rejected(Rejection::SoldOut), 0, OfferState::SoldOut),
        (PeekReply::Rejected(Rejection::Ended), 0, OfferState::Ended),
        (
            PeekReply::Rejected(Rejection::NotStarted { starts_at_ms: NOW + 1 }),
            0,
            OfferState::NotStarted,
        ),
        (
            PeekReply::Rejected(Rejection::NotEligible { min_level: 9 }),
            0,
            OfferState::NotEligible,
        ),
        (
            PeekReply::Rejected(Rejection::Risk(RiskReason::Blacklisted)),
            0,
            OfferState::CanGrab,
        ),
    ];
    for (shard, held, state) in cases {
        let w = world(vec![def("c1", NOW - 10)]);
        answer(&w, "c1", shard.clone(), held);
        let offer = only(&w, &query("u1")).await;
        assert_eq!(
            (offer.state, offer.held, offer.limit),
            (state, Some(held), 2),
            "{shard:?}"
        );
    }
}

#[tokio::test]
async fn a_holder_at_the_limit_sees_claimed_even_once_the_coupon_sold_out() {
    let w = world(vec![def("c1", NOW - 10)]);
    answer(&w, "c1", PeekReply::Rejected(Rejection::SoldOut), 2);
    let offer = only(&w, &query("u1")).await;
    assert_eq!((offer.state, offer.held), (OfferState::Claimed, Some(2)));
}

#[tokio::test]
async fn an_empty_home_shard_reads_sold_out_only_when_no_shard_had_stock() {
    let w = world(vec![def("c1", NOW - 10)]);
    answer(&w, "c1", PeekReply::Empty { next_wave_at_ms: None }, 0);
    w.shards
        .remaining
        .lock()
        .unwrap()
        .insert(CouponId::parse("c1").unwrap(), 0);
    let offer = only(&w, &query("u1")).await;
    assert_eq!((offer.state, offer.stock), (OfferState::SoldOut, StockLevel::None));
}

#[tokio::test]
async fn a_home_shard_with_a_unit_is_never_shown_as_none_left() {
    let w = world(vec![def("c1", NOW - 10)]);
    // The cached level was read before a refill.
    w.shards
        .remaining
        .lock()
        .unwrap()
        .insert(CouponId::parse("c1").unwrap(), 0);
    let offer = only(&w, &query("u1")).await;
    assert_eq!((offer.state, offer.stock), (OfferState::CanGrab, StockLevel::Few));
}

#[test]
fn stock_is_graded_coarsely_at_the_configured_share() {
    assert_eq!(StockLevel::of(0, 100, 10), StockLevel::None);
    assert_eq!(StockLevel::of(1, 100, 10), StockLevel::Few);
    assert_eq!(StockLevel::of(10, 100, 10), StockLevel::Few);
    assert_eq!(StockLevel::of(11, 100, 10), StockLevel::Plenty);
    assert_eq!(StockLevel::of(u64::MAX, u64::MAX, 100), StockLevel::Few);
}

#[tokio::test]
async fn the_catalogue_and_the_stock_are_read_once_per_cache_window_whatever_the_callers() {
    let w = world(vec![def("c1", NOW - 10), def("c2", NOW - 5)]);
    for user in ["u1", "u2", "u3"] {
        w.center.page(&query(user)).await.unwrap();
    }
    assert_eq!(w.live.reads.load(Ordering::Relaxed), 1);
    assert_eq!(w.shards.stock_reads.load(Ordering::Relaxed), 2);
    // Each caller's own part is read every time.
    assert_eq!(w.shards.asked.lock().unwrap().len(), 6);
    w.clock.advance(2_000);
    w.center.page(&query("u1")).await.unwrap();
    assert_eq!(w.live.reads.load(Ordering::Relaxed), 2);
}

#[tokio::test]
async fn a_coupon_whose_window_closes_within_the_cache_window_reads_ended() {
    let mut closing = def("c1", NOW - 10);
    closing.grab_end_ms = NOW + 500;
    let w = world(vec![closing]);
    w.center.page(&query("u1")).await.unwrap();
    w.clock.advance(600);
    let offer = only(&w, &query("u1")).await;
    assert_eq!((offer.state, offer.held), (OfferState::Ended, None));
}

#[tokio::test]
async fn a_coupon_the_shard_says_is_offline_drops_out_at_once() {
    let w = world(vec![def("c1", NOW - 10), def("c2", NOW - 5)]);
    answer(&w, "c1", PeekReply::Rejected(Rejection::Offline), 0);
    let page = w.center.page(&query("u1")).await.unwrap();
    let ids: Vec<&str> = page.offers.iter().map(|o| o.coupon_id.as_str()).collect();
    assert_eq!(ids, ["c2"]);
}

#[tokio::test]
async fn a_shard_that_cannot_answer_lists_its_coupon_from_the_definition_with_stock_unknown() {
    let w = world(vec![def("c1", NOW - 10), def("c2", NOW - 5)]);
    w.shards.answers.lock().unwrap().remove(&CouponId::parse("c1").unwrap());
    w.shards
        .remaining
        .lock()
        .unwrap()
        .remove(&CouponId::parse("c1").unwrap());
    answer(&w, "c2", PeekReply::Rejected(Rejection::NotFound), 0);
    let page = w.center.page(&query("u1")).await.unwrap();
    for offer in &page.offers {
        assert_eq!(
            (offer.state, offer.held, offer.stock),
            (OfferState::CanGrab, None, StockLevel::Unknown),
            "{}",
            offer.coupon_id
        );
    }
    assert_eq!(page.offers.len(), 2);
}

#[tokio::test]
async fn a_catalogue_outage_serves_the_last_copy_for_a_bounded_time_then_is_unavailable() {
    let w = world(vec![def("c1", NOW - 10)]);
    w.center.page(&query("u1")).await.unwrap();
    w.live.fail.store(true, Ordering::Relaxed);
    w.clock.advance(STALE_LIMIT_MS - 1);
    assert_eq!(w.center.page(&query("u1")).await.unwrap().offers.len(), 1);
    w.clock.advance(1);
    assert!(w.center.page(&query("u1")).await.is_err());
    // With no copy at all, an outage is unavailable at once.
    let cold = world(vec![def("c1", NOW - 10)]);
    cold.live.fail.store(true, Ordering::Relaxed);
    assert!(cold.center.page(&query("u1")).await.is_err());
}

#[test]
fn a_cursor_is_only_what_a_page_handed_out() {
    let c = CenterCursor::parse("1796040000123~cpn-1").unwrap();
    assert_eq!(c.encode(), "1796040000123~cpn-1");
    for bad in ["", "~", "12", "x~c1", "12~", "-1~c1", "12345678901234567~c1", "12~c 1"] {
        assert!(CenterCursor::parse(bad).is_none(), "{bad:?}");
    }
}

#[tokio::test]
async fn an_empty_home_shard_with_the_stock_unread_is_never_shown_sold_out() {
    let w = world(vec![def("c1", NOW - 10)]);
    answer(&w, "c1", PeekReply::Empty { next_wave_at_ms: None }, 0);
    w.shards
        .remaining
        .lock()
        .unwrap()
        .remove(&CouponId::parse("c1").unwrap());
    let offer = only(&w, &query("u1")).await;
    assert_eq!((offer.state, offer.stock), (OfferState::CanGrab, StockLevel::Unknown));
}

#[tokio::test]
async fn a_small_first_wave_reads_against_what_is_released_and_the_shard_names_the_next_wave() {
    let mut d = def("c1", NOW - 10);
    d.waves = vec![
        Wave {
            at_ms: NOW - 10,
            units: 8,
        },
        Wave {
            at_ms: NOW + 60_000,
            units: 92,
        },
    ];
    let w = world(vec![d]);
    // 8 of the 8 released are left: PLENTY, though 8 of 100 is under 10 %.
    w.shards
        .remaining
        .lock()
        .unwrap()
        .insert(CouponId::parse("c1").unwrap(), 8);
    assert_eq!(only(&w, &query("u1")).await.stock, StockLevel::Plenty);

    // A wave added since the copy was read: the caller's shard knows it.
    w.clock.advance(3_000);
    answer(
        &w,
        "c1",
        PeekReply::Rejected(Rejection::BetweenWaves {
            next_wave_at_ms: NOW + 30_000,
        }),
        0,
    );
    let offer = only(&w, &query("u2")).await;
    assert_eq!(
        (offer.state, offer.next_wave_at_ms),
        (OfferState::BetweenWaves, Some(NOW + 30_000))
    );
}
