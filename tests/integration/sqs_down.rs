//! A SUCCESS is a coupon (invariant 4 at the grab): a winner hears SUCCESS
//! only once SQS took the grant. A failed send answers BUSY with
//! Retry-After; the grant stays in the outbox and the hold stays held; the
//! retry with the same request id replays the win and sends it again.

use coupon_domain::reconcile::ports::DurableFacts;

use crate::support::{Harness, Options};

const UNREACHABLE_QUEUE: &str = "http://127.0.0.1:9/000000000000/unreachable";

fn sqs_down() -> Options {
    Options {
        // Nothing listens on the discard port of loopback.
        queue_url: Some(UNREACHABLE_QUEUE.into()),
        ..Options::without_ip_limit()
    }
}

#[tokio::test]
async fn with_sqs_unreachable_the_winner_hears_busy_and_the_outbox_keeps_the_grant() {
    let h = Harness::with(sqs_down()).await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    let resp = h.grab(&coupon, "u1", "r1").await;
    assert_eq!((resp.status, resp.code()), (503, "BUSY"), "{}", resp.body);
    assert_eq!(resp.headers["retry-after"], "1");
    assert_eq!(h.outbox_len(&def).await, 1, "the decision is kept for the retry");
    assert_eq!(h.stock(&def).await, 4);
    assert_eq!(h.metrics.total("GrantQueueFailed"), 1);
}

#[tokio::test]
async fn the_retry_once_sqs_is_back_is_success_and_makes_exactly_one_coupon() {
    let h = Harness::with(sqs_down()).await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    assert_eq!(h.grab(&coupon, "u1", "r1").await.code(), "BUSY");
    assert_eq!(
        h.grab(&coupon, "u1", "r1").await.code(),
        "BUSY",
        "still down: still BUSY"
    );

    let queue = h.stack.new_queue().await;
    let h = h.with_queue(queue);
    let resp = h.grab(&coupon, "u1", "r1").await;
    assert_eq!((resp.status, resp.code()), (200, "SUCCESS"), "{}", resp.body);
    assert_eq!(resp.body["data"]["replayed"], true);
    assert_eq!(resp.body["data"]["queued"], true);
    // A client that retries once more (a lost answer) sends it again; the
    // FIFO queue keeps one copy (deduplicated by grant id).
    assert_eq!(h.grab(&coupon, "u1", "r1").await.grant_id(), resp.grant_id());
    assert_eq!(h.pump().await, 1);
    assert_eq!(h.coupons_of("u1").await.len(), 1, "duplicates are absorbed");
    assert_eq!(h.stock(&def).await, 4, "one unit, whatever the retries");
}

/// The sequence that used to lose a winner: SUCCESS while the grant was only
/// in Redis, then Redis lost it, and the rebuild sold that unit again.
#[tokio::test]
async fn a_winner_lost_with_redis_before_the_queue_took_it_was_never_told_success() {
    let h = Harness::with(sqs_down()).await;
    let def = h.coupon(1);
    let coupon = h.create(&def).await;
    let first = h.grab(&coupon, "first", "r1").await;
    h.flush_redis().await;

    let queue = h.stack.new_queue().await;
    let h = h.with_queue(queue);
    h.reconcile(&def).await;
    let second = h.grab(&coupon, "second", "r1").await;
    let retry = h.grab(&coupon, "first", "r1").await;
    h.pump().await;

    let mut told_success = 0;
    for (user, resp) in [("first", &first), ("second", &second), ("first", &retry)] {
        if resp.code() == "SUCCESS" {
            told_success += 1;
            assert_eq!(
                h.coupons_of(user).await.len(),
                1,
                "{user} was told SUCCESS: it holds the coupon"
            );
        }
    }
    assert_eq!(first.code(), "BUSY", "never SUCCESS while the grant is only in Redis");
    assert_eq!(told_success, 1, "one unit, one SUCCESS");
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 1);
}
