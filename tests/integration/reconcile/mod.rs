//! The reconciler: nothing lost (invariant 4), no oversell even after Redis
//! loses its data (invariant 1), safe to run twice at once. Here: winners
//! whose send failed or whose process died, and two passes at once;
//! `borrows.rs`: borrows left open by callers that died; `losses.rs`: Redis
//! losing a coupon's state mid-sale, and its repair.

use coupon_domain::clock::Clock;
use coupon_domain::grab::ports::{ClaimReply, ClaimStep, StockLedger};
use coupon_domain::ids::{RequestId, UserId};
use coupon_domain::reconcile::ports::DurableFacts;

use crate::support::{Harness, Options};

mod borrows;
mod losses;

pub(crate) use losses::flush_mid_sale;

const UNREACHABLE_QUEUE: &str = "http://127.0.0.1:9/000000000000/unreachable";

pub(crate) fn sqs_down() -> Options {
    Options {
        queue_url: Some(UNREACHABLE_QUEUE.into()),
        ..Options::without_ip_limit()
    }
}

#[tokio::test]
async fn winners_whose_sqs_send_failed_each_get_exactly_one_coupon_after_a_reconcile() {
    sqs_down_then_back(sqs_down()).await;
}

/// 15 winners while SQS is down, who hear BUSY and never retry; SQS back;
/// a reconcile re-drives their grants (the backstop behind the retry).
pub(crate) async fn sqs_down_then_back(opts: Options) {
    let h = Harness::with(opts).await;
    let def = h.coupon(20);
    let coupon = h.create(&def).await;
    let mut winners = Vec::new();
    for i in 0..15 {
        let user = format!("w{i}");
        let resp = h.grab(&coupon, &user, "r").await;
        assert_eq!(resp.code(), "BUSY", "won, not queued: not yet a SUCCESS");
        winners.push(user);
    }
    // SQS is back: the reconciler re-drives to the real queue, but only
    // grants older than the grace period.
    let queue = h.stack.new_queue().await;
    let report = h.reconciler_to(&queue).run().await.unwrap();
    assert_eq!(coupon_domain::reconcile::find(&report, &coupon).unwrap().redriven, 0);
    h.clock.advance(30_000);
    let report = h.reconciler_to(&queue).run().await.unwrap();
    let figures = coupon_domain::reconcile::find(&report, &coupon).unwrap();
    assert_eq!((figures.pending, figures.redriven), (15, 15));
    let h2 = Harness {
        queue_url: queue.clone(),
        ..h
    };
    assert_eq!(h2.pump().await, 15);
    for user in &winners {
        assert_eq!(h2.coupons_of(user).await.len(), 1, "{user}");
    }
    // The next pass confirms and trims: nothing pending, the books balance.
    let after = h2.reconcile(&def).await;
    assert_eq!(
        (after.pending, after.trimmed, after.issued, after.drift),
        (0, 15, 15, 0)
    );
    assert_eq!(h2.outbox_len(&def).await, 0);
}

#[tokio::test]
async fn a_grant_whose_lambda_died_after_the_lua_call_is_re_driven() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    // The script ran (stock, outbox, outcome) and then the process died:
    // no SQS send ever happened.
    let user = UserId::parse("crashed").unwrap();
    let request = RequestId::parse("r1").unwrap();
    let claim = crate::support::plain_claim(&coupon, &user, &request, h.clock.now_ms());
    assert!(matches!(
        h.stock_ledger().claim(&claim, ClaimStep::Whole).await.unwrap(),
        ClaimReply::Won(_)
    ));
    assert_eq!(h.receive().await.len(), 0);
    h.clock.advance(31_000);
    let figures = h.reconcile(&def).await;
    assert_eq!(figures.redriven, 1);
    assert_eq!(h.pump().await, 1);
    assert_eq!(h.coupons_of("crashed").await.len(), 1);
    assert_eq!(h.reconcile(&def).await.drift, 0);
}

#[tokio::test]
async fn two_reconcilers_at_once_leave_one_coupon_per_winner() {
    let h = Harness::with(sqs_down()).await;
    let def = h.coupon(10);
    let coupon = h.create(&def).await;
    for i in 0..8 {
        assert_eq!(h.grab(&coupon, &format!("t{i}"), "r").await.code(), "BUSY");
    }
    h.clock.advance(60_000);
    let queue = h.stack.new_queue().await;
    let (a, b) = (h.reconciler_to(&queue), h.reconciler_to(&queue));
    let (ra, rb) = tokio::join!(a.run(), b.run());
    let redriven: u64 = [ra.unwrap(), rb.unwrap()]
        .iter()
        .map(|r| coupon_domain::reconcile::find(r, &coupon).unwrap().redriven)
        .sum();
    assert!(redriven >= 8, "each pending grant re-driven at least once");
    let h2 = Harness { queue_url: queue, ..h };
    h2.pump().await;
    for i in 0..8 {
        assert_eq!(h2.coupons_of(&format!("t{i}")).await.len(), 1);
    }
    assert_eq!(h2.facts().issued(&coupon).await.unwrap(), 8, "duplicates absorbed");
    assert_eq!(h2.reconcile(&def).await.drift, 0);
}

#[tokio::test]
async fn a_pass_skips_a_coupon_it_settled_an_hour_after_its_window() {
    let h = Harness::new().await;
    let def = h.coupon(3);
    let coupon = h.create(&def).await;
    assert_eq!(h.grab(&coupon, "early", "r").await.code(), "SUCCESS");
    h.pump().await;
    h.clock
        .set(def.grab_end_ms + coupon_domain::reconcile::SETTLED_AFTER_MS);
    let reconciler = h.reconciler_over(&h.queue_url, 0, |ports| ports);

    let first = reconciler.run().await.unwrap();
    let found = coupon_domain::reconcile::find(&first, &def.coupon_id).expect("visited");
    assert_eq!((found.issued, found.remaining, found.drift), (1, 2, 0), "{found:?}");
    let second = reconciler.run().await.unwrap();
    assert!(
        coupon_domain::reconcile::find(&second, &def.coupon_id).is_none(),
        "settled: skipped"
    );
    assert_eq!(second.settled, 1);

    // The settled list lives in Redis under the harness's prefix.
    let fingerprints: std::collections::HashMap<String, String> = redis::cmd("HGETALL")
        .arg(h.redis.keys().settled())
        .query_async(&mut h.redis.connection())
        .await
        .unwrap();
    assert_eq!(fingerprints.get(def.coupon_id.as_str()), Some(&def.fingerprint()));
}
