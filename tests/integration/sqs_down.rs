//! Invariant 4 at the grab: a winner whose SQS send fails still wins, and the
//! grant is in the outbox for the reconciler to re-drive.

use crate::support::{Harness, Options};

#[tokio::test]
async fn with_sqs_unreachable_the_winner_gets_success_pending_and_the_outbox_keeps_the_grant() {
    let h = Harness::with(Options {
        // Nothing listens on the discard port of loopback.
        queue_url: Some("http://127.0.0.1:9/000000000000/unreachable".into()),
        ..Options::default()
    })
    .await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    let resp = h.grab(&coupon, "u1", "r1").await;
    assert_eq!((resp.status, resp.code()), (200, "SUCCESS"), "{}", resp.body);
    assert_eq!(resp.body["data"]["status"], "PENDING");
    assert_eq!(resp.body["data"]["queued"], false);
    let grant = resp.grant_id().unwrap();
    assert_eq!(h.outbox_grant_ids(&def).await, vec![grant]);
    assert_eq!(h.stock(&def).await, 4);
    assert_eq!(h.metrics.total("GrantQueueFailed"), 1);
}
