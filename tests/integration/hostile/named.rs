//! The named hostile cases, each with the code it must get: admin input
//! that must change nothing, injection-looking text stored as text, and
//! forged or odd token claims that never raise privilege.

use serde_json::{json, Value};

use super::*;

#[tokio::test]
async fn hostile_admin_input_gets_its_code_and_changes_nothing() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    h.admin_create(&def).await;
    let stock = format!("/admin/coupons/{}/stock", def.coupon_id);
    let nested = format!("{}{}", "{\"a\":".repeat(200), "}".repeat(200));
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        (
            "huge number",
            Event::admin("POST", &stock, None).body(r#"{"add": 1e400}"#).build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "u64 overflow",
            Event::admin("POST", &stock, None)
                .body(r#"{"add": 99999999999999999999999}"#)
                .build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "negative",
            Event::admin("POST", &stock, Some(json!({"add": -3}))).build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "zero",
            Event::admin("POST", &stock, Some(json!({"add": 0}))).build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "deeply nested",
            Event::admin("POST", &stock, None).body(&nested).build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "oversized",
            Event::admin("POST", &stock, None)
                .body(&format!(r#"{{"add":1,"x":"{}"}}"#, "x".repeat(5_000)))
                .build(),
            413,
            "PAYLOAD_TOO_LARGE",
        ),
        (
            "invalid UTF-8",
            Event::admin("POST", &stock, None)
                .base64_body("eyJhZGQiOiL/In0=")
                .build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "text/plain",
            Event::admin("POST", &stock, Some(json!({"add": 1})))
                .header("content-type", "text/plain")
                .build(),
            415,
            "UNSUPPORTED_MEDIA_TYPE",
        ),
        (
            "key with a separator",
            Event::admin("POST", &stock, Some(json!({"add": 1})))
                .header("idempotency-key", "a:b")
                .build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "key with braces",
            Event::admin("POST", &stock, Some(json!({"add": 1})))
                .header("idempotency-key", "{cpn:x:0}")
                .build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "coupon id with braces",
            Event::admin("GET", "/admin/coupons/%7Bcpn:x:0%7D", None).build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "coupon id zero",
            Event::admin("GET", "/admin/coupons/0", None).build(),
            404,
            "COUPON_NOT_FOUND",
        ),
        (
            "coupon id negative",
            Event::admin("GET", "/admin/coupons/-1", None).build(),
            404,
            "COUPON_NOT_FOUND",
        ),
        (
            "user id with braces",
            Event::admin("PUT", "/admin/blacklist/%7Busr:victim%7D", None).build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "user id not UTF-8",
            Event::admin("PUT", "/admin/blacklist/%FF", None).build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "unknown field",
            Event::admin(
                "PUT",
                &format!("/admin/coupons/{}/status", def.coupon_id),
                Some(json!({"status": "OFFLINE", "stock": 0})),
            )
            .build(),
            400,
            "INVALID_REQUEST",
        ),
        (
            "wrong method",
            Event::admin("DELETE", &stock, None).build(),
            405,
            "METHOD_NOT_ALLOWED",
        ),
        (
            "unknown route",
            Event::admin("GET", "/admin/users", None).build(),
            404,
            "ROUTE_NOT_FOUND",
        ),
        (
            "operator ARN with a newline",
            {
                let mut v = Event::admin("GET", "/admin/coupons/x", None).build();
                v["requestContext"]["authorizer"]["iam"]["userArn"] = "ops\nforged".into();
                v
            },
            401,
            "UNAUTHORIZED",
        ),
    ];
    for (name, event, status, code) in cases {
        let r = h.admin_send(event).await;
        assert_eq!((r.status, r.code()), (status, code), "{name}: {}", r.body);
    }
    let view = h
        .admin_call("GET", &format!("/admin/coupons/{}", def.coupon_id), None)
        .await;
    assert_eq!(view.body["data"]["version"], 0, "nothing was changed");
    assert_eq!(h.stock(&def).await, 10);
}

#[tokio::test]
async fn injection_looking_text_is_stored_as_text() {
    let h = Harness::new().await;
    let mut def = h.coupon(3);
    def.name = "redis.call('FLUSHALL') '; DROP TABLE coupons; --".into();
    let created = h.admin_create(&def).await;
    assert_eq!(created.code(), "SUCCESS", "{}", created.body);
    assert_eq!(created.body["data"]["coupon"]["name"], def.name.as_str());
    // A printable user id full of SQL and Lua is just an id.
    let user = format!("{}'OR'1'='1--redis.call", unique("u"));
    let path = format!("/admin/blacklist/{}", encode_segment(&user));
    let on = h.admin_call("PUT", &path, None).await;
    assert_eq!(
        (on.code(), on.body["data"]["userId"].as_str()),
        ("SUCCESS", Some(user.as_str()))
    );
    let grab = h.grab(&def.coupon_id, &user, "r1").await;
    assert_eq!(grab.body["data"]["reason"], "BLACKLISTED");
    assert_eq!(h.grab(&def.coupon_id, "someone-else-inj", "r1").await.code(), "SUCCESS");
}

#[tokio::test]
async fn forged_or_odd_claims_never_raise_privilege() {
    let h = Harness::new().await;
    let mut def = h.coupon(5);
    def.min_member_level = 3;
    h.create(&def).await;
    let c = def.coupon_id.as_str();
    for (level, code) in [
        ("99999999999999999999", "NOT_ELIGIBLE"),
        ("-5", "NOT_ELIGIBLE"),
        ("3.5", "NOT_ELIGIBLE"),
        ("", "NOT_ELIGIBLE"),
        ("3", "SUCCESS"),
    ] {
        let r = h.send(Event::grab(c, &unique("lvl"), "r").level(level).build()).await;
        assert_eq!(r.code(), code, "level claim {level:?}");
    }
    for sub in ["", " ", "a\u{7f}b", "用户", &"u".repeat(129)] {
        let r = h.send(Event::grab(c, sub, "r").level("5").build()).await;
        assert_eq!((r.status, r.code()), (401, "UNAUTHORIZED"), "sub {sub:?}");
    }
    // A body or header cannot name another user when a token is present.
    let r = h
        .send(
            Event::grab(c, "claimed-user", "r")
                .level("5")
                .header("x-user-id", "victim")
                .body(r#"{"requestId":"r","userId":"victim"}"#)
                .build(),
        )
        .await;
    assert_eq!(r.code(), "INVALID_REQUEST");
    assert_eq!(h.stock(&def).await, 4, "only the level-3 grab moved stock");
}
