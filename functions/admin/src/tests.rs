//! The admin edge without stores: routing, who is calling, bodies, and a
//! property test that no request shape makes the edge panic.

use super::*;
use coupon_domain::audit::Actor;
use coupon_edge::Matched;
use lambda_http::http::Method;
use proptest::prelude::*;

fn edge(local_mode: bool) -> AdminEdge {
    AdminEdge {
        local_mode,
        max_body_bytes: 4096,
    }
}

fn fixture(name: &str) -> Request {
    let json = match name {
        "iam" => include_str!("../../../tests/fixtures/admin_iam.json"),
        "jwt" => include_str!("../../../tests/fixtures/grab_jwt.json"),
        _ => include_str!("../../../tests/fixtures/grab_function_url.json"),
    };
    lambda_http::request::from_str(json).expect("fixture is a valid event")
}

#[test]
fn the_operator_is_the_signed_iam_principal() {
    let actor = actor(&fixture("iam"), &edge(false)).unwrap();
    assert_eq!(actor.as_str(), "arn:aws:iam::123456789012:user/campaign-ops");
}

#[test]
fn a_user_token_is_refused_on_admin_routes_in_every_mode() {
    assert_eq!(actor(&fixture("jwt"), &edge(false)), Err(ErrorCode::Forbidden));
    let mut req = fixture("jwt");
    req.headers_mut().insert("x-admin-actor", "sneaky".parse().unwrap());
    assert_eq!(actor(&req, &edge(true)), Err(ErrorCode::Forbidden));
}

#[test]
fn the_local_mode_is_explicit() {
    let mut req = fixture("url");
    req.headers_mut().remove("x-user-id");
    req.headers_mut().insert("x-admin-actor", "alice@ops".parse().unwrap());
    assert_eq!(actor(&req, &edge(true)).unwrap().as_str(), "alice@ops");
    assert_eq!(actor(&req, &edge(false)), Err(ErrorCode::Unauthorized));
}

#[test]
fn a_user_identity_header_without_an_admin_actor_is_forbidden() {
    // The function-URL fixture carries X-User-Id, as the app would send.
    assert_eq!(actor(&fixture("url"), &edge(true)), Err(ErrorCode::Forbidden));
}

#[test]
fn the_idempotency_key_becomes_the_operation_id() {
    let a = Actor::parse("ops").unwrap();
    let ctx = context(&fixture("iam"), a.clone()).unwrap();
    assert_eq!(ctx.operation_id, "ops-2026-11-30-001");
    assert!(ctx.idempotent);
    let mut req = fixture("iam");
    req.headers_mut().insert("idempotency-key", "a:b{c}".parse().unwrap());
    assert_eq!(context(&req, a).unwrap_err().code(), ErrorCode::InvalidRequest);
}

#[test]
fn without_a_key_every_call_gets_its_own_operation_id() {
    let mut req = fixture("iam");
    req.headers_mut().remove("idempotency-key");
    let a = context(&req, Actor::parse("ops").unwrap()).unwrap();
    let b = context(&req, Actor::parse("ops").unwrap()).unwrap();
    assert_ne!(a.operation_id, b.operation_id);
    assert!(!a.idempotent);
}

#[test]
fn routes_match_methods_and_paths() {
    assert_eq!(
        route(&Method::POST, "/admin/coupons"),
        Matched::Route(Route::Coupon(CouponRoute::Create))
    );
    assert_eq!(
        route(&Method::GET, "/admin/coupons/c1"),
        Matched::Route(Route::Coupon(CouponRoute::View("c1".into())))
    );
    assert_eq!(
        route(&Method::PUT, "/admin/coupons/c1/status/"),
        Matched::Route(Route::Coupon(CouponRoute::Status("c1".into())))
    );
    assert_eq!(
        route(&Method::POST, "/admin/coupons/c1/stock"),
        Matched::Route(Route::Coupon(CouponRoute::Stock("c1".into())))
    );
    assert_eq!(
        route(&Method::PUT, "/admin/coupons/c1/rate"),
        Matched::Route(Route::Coupon(CouponRoute::Rate("c1".into())))
    );
    assert_eq!(
        route(&Method::GET, "/admin/coupons/c1/reconcile"),
        Matched::Route(Route::Coupon(CouponRoute::Report("c1".into())))
    );
    assert_eq!(
        route(&Method::POST, "/admin/coupons/c1/reconcile"),
        Matched::Route(Route::Coupon(CouponRoute::Reconcile("c1".into())))
    );
    assert_eq!(
        route(&Method::DELETE, "/admin/blacklist/u%201"),
        Matched::Route(Route::User(UserRoute::Blacklist("u 1".into(), false)))
    );
    assert_eq!(route(&Method::GET, "/admin/coupons"), Matched::MethodNotAllowed("POST"));
    assert_eq!(route(&Method::POST, "/admin/users"), Matched::NotFound);
    assert_eq!(route(&Method::GET, "/admin/blacklist/%ff"), Matched::BadPath);
    assert_eq!(route(&Method::GET, "/admin/blacklist/%4"), Matched::BadPath);
    assert_eq!(route(&Method::GET, "/admin/blacklist/%+1"), Matched::BadPath);
}

#[test]
fn bodies_name_unknown_fields_and_refuse_other_media_types() {
    let mut req = fixture("iam");
    *req.body_mut() = Body::Text(r#"{"status":"OFFLINE","extra":1}"#.into());
    let reply = body::<StatusBody>(&req, 4096).err().unwrap();
    assert_eq!(reply.code(), ErrorCode::InvalidRequest);
    req.headers_mut().insert("content-type", "text/plain".parse().unwrap());
    let reply = body::<StatusBody>(&req, 4096).err().unwrap();
    assert_eq!(reply.code(), ErrorCode::UnsupportedMediaType);
}

fn hostile_text() -> impl Strategy<Value = String> {
    prop_oneof![
        Just(String::new()),
        Just("{cpn:x:0}".to_owned()),
        Just("a:b".to_owned()),
        Just("' OR 1=1 --".to_owned()),
        Just("redis.call('FLUSHALL')".to_owned()),
        Just("%00".to_owned()),
        Just("%ff%fe".to_owned()),
        Just("-1".to_owned()),
        Just("0".to_owned()),
        Just("99999999999999999999999".to_owned()),
        "[ -~]{0,80}",
        any::<String>(),
    ]
}

fn hostile_body() -> impl Strategy<Value = Body> {
    prop_oneof![
        Just(Body::Empty),
        hostile_text().prop_map(Body::Text),
        proptest::collection::vec(any::<u8>(), 0..300).prop_map(Body::Binary),
        (1usize..3000).prop_map(|d| Body::Text(format!("{}{}", "[".repeat(d), "]".repeat(d)))),
        Just(Body::Text(r#"{"add": 1e400}"#.into())),
        Just(Body::Text(r#"{"add": -5}"#.into())),
        Just(Body::Text(r#"{"status": "online"}"#.into())),
        Just(Body::Text("x".repeat(5000))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Whatever arrives, routing, identity, the operation id and body
    /// parsing answer with a value (never a panic), and every refusal is a
    /// 4xx code from the table.
    #[test]
    fn no_request_shape_panics_the_edge(
        method in prop_oneof![Just(Method::GET), Just(Method::POST), Just(Method::PUT), Just(Method::DELETE), Just(Method::PATCH)],
        segments in proptest::collection::vec(prop_oneof![Just("admin".to_owned()), Just("coupons".to_owned()), Just("blacklist".to_owned()), Just("status".to_owned()), hostile_text()], 0..6),
        actor_header in proptest::option::of(hostile_text()),
        user_header in proptest::option::of(hostile_text()),
        key in proptest::option::of(hostile_text()),
        content_type in proptest::option::of(prop_oneof![Just("application/json".to_owned()), hostile_text()]),
        payload in hostile_body(),
        local in any::<bool>(),
    ) {
        let path = format!("/{}", segments.join("/"));
        let mut builder = lambda_http::http::Request::builder().method(method.clone()).uri("http://localhost/");
        for (name, value) in [("x-admin-actor", &actor_header), ("x-user-id", &user_header), ("idempotency-key", &key), ("content-type", &content_type)] {
            if let Some(v) = value {
                if let Ok(v) = lambda_http::http::HeaderValue::from_str(v) {
                    builder = builder.header(name, v);
                }
            }
        }
        let mut req: Request = builder.body(payload).unwrap();
        if let Ok(uri) = format!("http://localhost{}", path.replace(' ', "%20")).parse() {
            *req.uri_mut() = uri;
        }
        let routed = route(&method, req.uri().path());
        let e = edge(local);
        match actor(&req, &e) {
            Ok(a) => {
                if let Ok(ctx) = context(&req, a) {
                    prop_assert!(!ctx.operation_id.is_empty());
                    prop_assert!(ctx.operation_id.len() <= 64 || !ctx.idempotent);
                }
            }
            Err(code) => prop_assert!(matches!(code, ErrorCode::Unauthorized | ErrorCode::Forbidden)),
        }
        for result in [
            body::<StatusBody>(&req, 4096).err(),
            body::<StockBody>(&req, 4096).err(),
            body::<RateChange>(&req, 4096).err(),
            body::<CouponDefinition>(&req, 4096).err(),
        ].into_iter().flatten() {
            let status = result.code().http_status();
            prop_assert!((400..500).contains(&status), "{:?} for {:?}", result.code(), routed);
        }
    }
}
