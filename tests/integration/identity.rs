//! Invariant 6: the caller grabs only for themselves. The user comes from the
//! verified JWT claims; headers count only in the explicit local mode.

use crate::support::{Event, Harness, Options};

#[tokio::test]
async fn the_grant_goes_to_the_user_in_the_token_not_the_one_in_a_header() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    let resp = h
        .send(
            Event::grab(coupon.as_str(), "token-user", "r1")
                .header("x-user-id", "victim")
                .build(),
        )
        .await;
    assert_eq!(resp.code(), "SUCCESS");
    let grants = h.stack.drain(&h.queue_url).await;
    assert_eq!(grants.len(), 1);
    assert_eq!(grants[0].user_id.as_str(), "token-user");
}

#[tokio::test]
async fn a_function_url_request_without_a_token_is_unauthorized_by_default() {
    let h = Harness::new().await;
    let coupon = h.create(&h.coupon(5)).await;
    let event = Event::function_url().path(&format!("/coupons/{coupon}/grab")).build();
    assert_eq!(h.send(event).await.code(), "UNAUTHORIZED");
}

#[tokio::test]
async fn the_local_mode_takes_identity_headers_when_there_is_no_token() {
    let h = Harness::with(Options {
        trust_identity_headers: true,
        ..Options::default()
    })
    .await;
    let mut def = h.coupon(5);
    def.min_member_level = 9;
    let coupon = h.create(&def).await;
    // The fixture's body is base64 (function URLs send it so) and names
    // X-User-Id: someone-else, X-User-Level: 9.
    let event = Event::function_url().path(&format!("/coupons/{coupon}/grab")).build();
    let resp = h.send(event).await;
    assert_eq!(resp.code(), "SUCCESS", "{}", resp.body);
    let grants = h.stack.drain(&h.queue_url).await;
    assert_eq!(grants[0].user_id.as_str(), "someone-else");
    assert_eq!(grants[0].request_id.as_str(), "req-0002");
}
