//! Hostile input against the real handlers and stores: generated requests
//! (methods, paths, headers, bodies, claims) never make a handler panic or
//! answer 5xx, every answer carries a code from the table with its status,
//! and no input moves a Redis key out of its hash tag. Then the named cases,
//! each with the code it must get (`named.rs`).

use std::sync::Arc;

use base64::Engine as _;
use coupon_edge::{ErrorCode, Lang};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};

use crate::support::*;

mod named;

/// Strings an attacker would try, plus arbitrary ones.
fn hostile_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("0".to_owned()),
        Just("-1".to_owned()),
        Just("99999999999999999999999999".to_owned()),
        Just("{cpn:victim:0}".to_owned()),
        Just("a}:b{".to_owned()),
        Just("x:req:victim:r1".to_owned()),
        Just("1' OR '1'='1".to_owned()),
        Just("'; DROP TABLE coupons; --".to_owned()),
        Just("redis.call('FLUSHALL')".to_owned()),
        Just("]] .. redis.call('DEL', KEYS[1]) .. [[".to_owned()),
        Just("../../etc/passwd".to_owned()),
        Just("%00%ff".to_owned()),
        "[a-z0-9_-]{1,12}",
        "[ -~]{0,70}",
        any::<String>(),
    ]
}

fn hostile_body() -> impl Strategy<Value = (String, bool)> {
    let b64 = |bytes: Vec<u8>| (base64::engine::general_purpose::STANDARD.encode(bytes), true);
    prop_oneof![
        hostile_text().prop_map(|t| (t, false)),
        hostile_text().prop_map(|t| (json!({ "requestId": t }).to_string(), false)),
        (hostile_text(), any::<i64>())
            .prop_map(|(t, n)| (json!({ "requestId": t, "add": n, "status": t }).to_string(), false)),
        Just((r#"{"add": 1e400}"#.to_owned(), false)),
        Just((r#"{"requestId": "r", "userId": "victim"}"#.to_owned(), false)),
        (1usize..5_000).prop_map(|d| (format!("{}{}", "[".repeat(d), "]".repeat(d)), false)),
        (0usize..10_000).prop_map(|n| ("x".repeat(n), false)),
        proptest::collection::vec(any::<u8>(), 0..200).prop_map(b64),
    ]
}

#[derive(Debug, Clone)]
enum Caller {
    Nobody,
    User { sub: String, level: String },
    Operator(String),
}

fn caller() -> impl Strategy<Value = Caller> {
    prop_oneof![
        Just(Caller::Nobody),
        (hostile_text(), hostile_text()).prop_map(|(sub, level)| Caller::User { sub, level }),
        hostile_text().prop_map(Caller::Operator),
    ]
}

fn encode_segment(s: &str) -> String {
    s.bytes()
        .map(|b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

#[derive(Debug, Clone)]
struct Hostile {
    method: &'static str,
    segments: Vec<String>,
    headers: Vec<(&'static str, String)>,
    body: (String, bool),
    caller: Caller,
}

fn hostile_request() -> impl Strategy<Value = Hostile> {
    let segment = prop_oneof![
        Just("coupons".to_owned()),
        Just("grab".to_owned()),
        Just("admin".to_owned()),
        Just("me".to_owned()),
        Just("grants".to_owned()),
        Just("blacklist".to_owned()),
        Just("stock".to_owned()),
        hostile_text(),
    ];
    let header = (
        prop_oneof![
            Just("content-type"),
            Just("accept-language"),
            Just("idempotency-key"),
            Just("x-user-id"),
            Just("x-admin-actor"),
            Just("x-forwarded-for"),
        ],
        hostile_text(),
    );
    (
        prop_oneof![Just("GET"), Just("POST"), Just("PUT"), Just("DELETE"), Just("PATCH")],
        proptest::collection::vec(segment, 0..6),
        proptest::collection::vec(header, 0..5),
        hostile_body(),
        caller(),
    )
        .prop_map(|(method, segments, headers, body, caller)| Hostile {
            method,
            segments,
            headers,
            body,
            caller,
        })
}

fn event(h: &Hostile) -> Value {
    let path = format!(
        "/{}",
        h.segments
            .iter()
            .map(|s| encode_segment(s))
            .collect::<Vec<_>>()
            .join("/")
    );
    let mut e = match &h.caller {
        Caller::Nobody => Event::grab("c", "u", "r").without_authorizer(),
        Caller::User { sub, level } => Event::grab("c", sub, "r").level(level),
        Caller::Operator(arn) => {
            let mut v = Event::admin("GET", "/", None).build();
            v["requestContext"]["authorizer"]["iam"]["userArn"] = arn.clone().into();
            Event::from_value(v)
        }
    }
    .method(h.method)
    .path(&path);
    e = if h.body.1 {
        e.base64_body(&h.body.0)
    } else {
        e.body(&h.body.0)
    };
    for (name, value) in &h.headers {
        e = e.header(name, value);
    }
    e.build()
}

fn check(name: &str, status: u16, body: &Value) -> Result<(), TestCaseError> {
    prop_assert!(status < 500, "{name}: {status} {body}");
    let code = body["code"].as_str().unwrap_or_default();
    let known = ErrorCode::ALL.iter().find(|c| c.as_str() == code);
    prop_assert!(known.is_some(), "{name}: unknown code {code}");
    let known = known.unwrap();
    prop_assert_eq!(known.http_status(), status, "{}: status of {}", name, code);
    let message = body["message"].as_str().unwrap_or_default();
    prop_assert!(
        message == known.message(Lang::En) || message == known.message(Lang::Zh),
        "{name}: the message is the table's"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_generated_request_makes_a_handler_panic_or_answer_5xx() {
    let h = Arc::new(Harness::new().await);
    let def = h.coupon(1_000);
    h.create(&def).await;
    let admin = h.admin();
    let wallet = h.wallet();
    let handle = tokio::runtime::Handle::current();
    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    let result = tokio::task::block_in_place(|| {
        runner
            .run(&hostile_request(), |req| {
                let raw = event(&req).to_string();
                // What API Gateway itself would never deliver (a path that is not
                // a URI) is the runtime's to refuse, before any handler.
                let Ok(request) = lambda_http::request::from_str(&raw) else {
                    return Ok(());
                };
                let (grab_resp, wallet_resp, admin_resp) = handle.block_on(async {
                    let g = grab::handle(&h.app, request.clone()).await.unwrap();
                    let w = wallet::handle(&wallet, lambda_http::request::from_str(&raw).unwrap())
                        .await
                        .unwrap();
                    let a = admin::handle(&admin, lambda_http::request::from_str(&raw).unwrap())
                        .await
                        .unwrap();
                    (g, w, a)
                });
                for (name, resp) in [("grab", grab_resp), ("wallet", wallet_resp), ("admin", admin_resp)] {
                    let status = resp.status().as_u16();
                    let body: Value = match resp.body() {
                        lambda_http::Body::Text(t) => {
                            serde_json::from_str(t).map_err(|e| TestCaseError::fail(format!("{name}: {e}")))?
                        }
                        other => return Err(TestCaseError::fail(format!("{name}: body {other:?}"))),
                    };
                    check(name, status, &body)?;
                }
                Ok(())
            })
            .map_err(|e| e.to_string())
    });
    if let Err(e) = result {
        panic!("{e}");
    }

    // No input moved a key out of its hash tag: every key under this
    // harness's prefix is `<prefix>{<tag without braces>}<rest without braces>`.
    let mut conn = h.redis.connection();
    let prefix = h.redis.keys().shard(&def.coupon_id, 0).meta();
    let prefix = &prefix[..prefix.find('{').unwrap()];
    let keys = crate::support::keys_matching(&mut conn, &format!("{prefix}*")).await;
    assert!(!keys.is_empty());
    for key in keys {
        let rest = &key[prefix.len()..];
        let tag_end = rest.find('}').unwrap_or(0);
        assert!(rest.starts_with('{') && tag_end > 1, "{key}");
        assert!(!rest[1..tag_end].contains('{'), "{key}");
        assert!(!rest[tag_end + 1..].contains(['{', '}']), "{key}");
    }
}
