//! Bad input through the real handler: every case a clear 4xx with its code
//! and a message, never a 5xx, never a panic, and no stock moved.

use crate::support::{Event, Harness};

#[tokio::test]
async fn bad_input_gets_a_4xx_with_a_stable_code() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    let coupon = h.create(&def).await;
    let c = coupon.as_str();
    let ok = |req: &str| Event::grab(c, "u1", req);
    let nested = format!("{}{}", "[".repeat(1_000), "]".repeat(1_000));
    let cases: Vec<(&str, serde_json::Value, u16, &str)> = vec![
        ("not JSON", ok("r").body("grab please").build(), 400, "INVALID_REQUEST"),
        ("empty body", ok("r").body("").build(), 400, "INVALID_REQUEST"),
        ("JSON null", ok("r").body("null").build(), 400, "INVALID_REQUEST"),
        ("JSON array", ok("r").body("[]").build(), 400, "INVALID_REQUEST"),
        (
            "number for requestId",
            ok("r").body(r#"{"requestId":5}"#).build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "huge number for requestId",
            ok("r").body(r#"{"requestId":1e999}"#).build(),
            400,
            "INVALID_REQUEST",
        ),
        ("missing requestId", ok("r").body("{}").build(), 400, "INVALID_REQUEST"),
        ("empty requestId", ok("").build(), 400, "INVALID_REQUEST"),
        (
            "requestId too long",
            ok(&"x".repeat(65)).build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "requestId with key separator",
            ok("a:b").build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "requestId with hash-tag braces",
            ok("{cpn:x:0}").build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "requestId that looks like SQL",
            ok("1' OR '1'='1").build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "requestId that looks like Lua",
            ok("redis.call('FLUSHALL')").build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "userId in the body",
            ok("r").body(r#"{"requestId":"r","userId":"victim"}"#).build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "deeply nested JSON",
            ok("r").body(&nested).build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "invalid UTF-8",
            ok("r").base64_body("eyJyZXF1ZXN0SWQiOiL/In0=").build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "oversized body",
            ok("r")
                .body(&format!(r#"{{"requestId":"{}"}}"#, "x".repeat(5_000)))
                .build(),
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        (
            "text/plain body",
            ok("r").header("content-type", "text/plain").build(),
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            "coupon id with separator",
            Event::grab("a:b", "u1", "r").build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "coupon id too long",
            Event::grab(&"c".repeat(65), "u1", "r").build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "unknown coupon",
            Event::grab("no-such-coupon-0", "u1", "r").build(),
            404,
            "COUPON_NOT_FOUND",
        ),
        (
            "negative-looking coupon id",
            Event::grab("-1", "u1", "r").build(),
            404,
            "COUPON_NOT_FOUND",
        ),
        (
            "GET on the grab route",
            ok("r").method("GET").build(),
            405,
            "METHOD_NOT_ALLOWED",
        ),
        ("unknown route", ok("r").path("/offers").build(), 404, "ROUTE_NOT_FOUND"),
        (
            "POST on the coupon center",
            ok("r").path("/coupons").build(),
            405,
            "METHOD_NOT_ALLOWED",
        ),
        (
            "dry run of a coupon id with separator",
            Event::eligibility("a:b", "u1").build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "dry run of a coupon id too long",
            Event::eligibility(&"c".repeat(65), "u1").build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "dry run of an unknown coupon",
            Event::eligibility("no-such-coupon-0", "u1").build(),
            404,
            "COUPON_NOT_FOUND",
        ),
        (
            "dry run without identity",
            Event::eligibility(c, "u1").without_authorizer().build(),
            401,
            "UNAUTHORIZED",
        ),
        ("no identity", ok("r").without_authorizer().build(), 401, "UNAUTHORIZED"),
        (
            "forged identity header",
            ok("r").without_authorizer().header("x-user-id", "victim").build(),
            401,
            "UNAUTHORIZED",
        ),
        (
            "user claim with braces",
            Event::grab(c, "{usr:victim}", "r").build(),
            401,
            "UNAUTHORIZED",
        ),
    ];
    assert!(cases.len() >= 15);
    for (name, event, status, code) in cases {
        let resp = h.send(event).await;
        assert_eq!((resp.status, resp.code()), (status, code), "{name}: {}", resp.body);
        assert!(
            resp.body["message"].as_str().is_some_and(|m| !m.is_empty()),
            "{name}: a human message"
        );
    }
    assert_eq!(h.stock(&def).await, 5, "bad input moved no stock");
    assert_eq!(h.outbox_len(&def).await, 0);
}

#[tokio::test]
async fn the_detail_of_a_bad_body_never_echoes_the_input() {
    let h = Harness::new().await;
    let coupon = h.create(&h.coupon(1)).await;
    let resp = h
        .send(
            Event::grab(coupon.as_str(), "u1", "r")
                .body(r#"{"requestId":"r","<script>":1}"#)
                .build(),
        )
        .await;
    assert_eq!(resp.code(), "INVALID_REQUEST");
    assert!(!resp.body.to_string().contains("<script>"));
}
