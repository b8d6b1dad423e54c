//! JSON bodies on every route that takes one: an object and nothing else
//! (serde's positional array form of a struct is refused), integers may be
//! written as integral numbers (`460.0`), and a definition that cannot work
//! is refused with the field named. Nothing changes on a refusal.

use serde_json::{json, Value};

use crate::support::{Event, Harness, HOUR, T0};

fn path(def: &coupon_domain::coupon::CouponDefinition, tail: &str) -> String {
    format!("/admin/coupons/{}{tail}", def.coupon_id)
}

#[tokio::test]
async fn a_positional_array_is_refused_on_every_route_that_takes_a_body() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    assert_eq!(h.admin_create(&def).await.code(), "SUCCESS");

    let grab = h
        .send(
            Event::grab(def.coupon_id.as_str(), "u1", "r")
                .body(r#"["press-1"]"#)
                .build(),
        )
        .await;
    assert_eq!((grab.status, grab.code()), (400, "INVALID_REQUEST"), "grab");

    let mut positional = h.coupon(10);
    positional.coupon_id = coupon_domain::ids::CouponId::parse(&format!("{}-p", def.coupon_id)).unwrap();
    // serde's positional form: the fields in declaration order.
    let p = &positional;
    let fields = json!([
        p.coupon_id,
        p.name,
        p.amount,
        p.total_stock,
        p.per_user_limit,
        p.min_member_level,
        p.grab_start_ms,
        p.grab_end_ms,
        p.valid_from_ms,
        p.valid_until_ms,
        p.shards,
        p.rate_per_sec,
        p.burst,
        p.status
    ]);
    assert!(
        serde_json::from_value::<coupon_domain::coupon::CouponDefinition>(fields.clone()).is_ok(),
        "serde alone takes the positional form: the reader must refuse it"
    );
    let calls: Vec<(&str, String, Value)> = vec![
        ("POST", "/admin/coupons".into(), fields),
        ("POST", path(&def, "/stock"), json!([1])),
        ("PUT", path(&def, "/status"), json!(["OFFLINE"])),
        ("PUT", path(&def, "/rate"), json!([5, 0])),
    ];
    for (method, route, body) in calls {
        let r = h.admin_call(method, &route, Some(body)).await;
        assert_eq!((r.status, r.code()), (400, "INVALID_REQUEST"), "{method} {route}");
        assert_eq!(
            r.body["data"]["detail"], "the body must be a JSON object",
            "{method} {route}"
        );
    }

    assert_eq!(h.stock(&def).await, 10, "no stock moved or added");
    let view = h.admin_call("GET", &path(&def, ""), None).await;
    assert_eq!(view.body["data"]["coupon"]["status"], "ONLINE");
    assert_eq!(view.body["data"]["version"], 0, "no change was applied");
    let absent = h
        .admin_call("GET", &format!("/admin/coupons/{}", positional.coupon_id), None)
        .await;
    assert_eq!(absent.code(), "COUPON_NOT_FOUND", "the positional create wrote nothing");
}

#[tokio::test]
async fn integers_written_with_a_zero_fraction_are_integers_and_fractions_are_not() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    h.admin_create(&def).await;

    let added = h
        .admin_call_keyed("POST", &path(&def, "/stock"), json!({"add": 460.0}), "k-460")
        .await;
    assert_eq!(added.code(), "SUCCESS", "{}", added.body);
    assert_eq!(added.body["data"]["coupon"]["totalStock"], 470);
    let rate = h
        .admin_call("PUT", &path(&def, "/rate"), Some(json!({"ratePerSec": 6730.0})))
        .await;
    assert_eq!(rate.code(), "SUCCESS", "{}", rate.body);
    assert_eq!(rate.body["data"]["coupon"]["ratePerSec"], 6730);

    for (route, body) in [("/stock", json!({"add": 460.5})), ("/rate", json!({"ratePerSec": 0.5}))] {
        let method = if route == "/stock" { "POST" } else { "PUT" };
        let r = h.admin_call(method, &path(&def, route), Some(body.clone())).await;
        assert_eq!((r.status, r.code()), (400, "INVALID_REQUEST"), "{body}");
    }
    assert_eq!(h.stock(&def).await, 470);
}

#[tokio::test]
async fn a_definition_that_cannot_work_is_refused_with_the_field_named() {
    let h = Harness::new().await;
    type Edit = fn(&mut Value);
    let cases: [(&str, &str, Edit); 4] = [
        ("negative time", "grabStartMs", |v| {
            v["grabStartMs"] = json!(-8_589_934_591i64)
        }),
        ("window already over", "grabEndMs", |v| {
            v["grabStartMs"] = json!(T0 - 3 * HOUR);
            v["grabEndMs"] = json!(T0 - HOUR);
        }),
        ("validity ends before the window", "validUntilMs", |v| {
            v["validUntilMs"] = json!(T0 + HOUR - 1);
        }),
        ("rate above the ceiling", "ratePerSec", |v| {
            v["ratePerSec"] = json!(10_000_001)
        }),
    ];
    for (what, field, edit) in cases {
        let def = h.coupon(10);
        let mut v = serde_json::to_value(&def).unwrap();
        edit(&mut v);
        let r = h.admin_call("POST", "/admin/coupons", Some(v)).await;
        assert_eq!((r.status, r.code()), (400, "INVALID_REQUEST"), "{what}: {}", r.body);
        assert_eq!(r.body["data"]["field"], field, "{what}");
        let absent = h.admin_call("GET", &path(&def, ""), None).await;
        assert_eq!(absent.code(), "COUPON_NOT_FOUND", "{what}: nothing was written");
    }
}

/// A body naming one key twice means two things to two readers (a gateway
/// or a log reader may take the first value, serde the last): every route
/// that takes a body refuses it, names the key, and changes nothing.
#[tokio::test]
async fn a_body_that_names_a_key_twice_is_refused_on_every_route_and_changes_nothing() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    assert_eq!(h.admin_create(&def).await.code(), "SUCCESS");
    let user = crate::support::unique("twice");
    let grant = h.grab(&def.coupon_id, &user, "r1").await.grant_id().unwrap();
    h.pump().await;

    let grab = h
        .send(
            Event::grab(def.coupon_id.as_str(), "u2", "r")
                .body(r#"{"requestId": "a", "requestId": "b"}"#)
                .build(),
        )
        .await;
    assert_eq!((grab.status, grab.code()), (400, "INVALID_REQUEST"), "grab");
    assert_eq!(grab.body["data"]["detail"], "the body names `requestId` more than once");

    let mut twice = h.coupon(10);
    twice.coupon_id = coupon_domain::ids::CouponId::parse(&format!("{}-t", def.coupon_id)).unwrap();
    let create = serde_json::to_string(&twice).unwrap();
    let create = format!(r#"{{"totalStock": 999999, {}"#, &create[1..]);
    let spend = format!(r#"{{"userId": "{user}", "grantId": "{grant}", "grantId": "{grant}"}}"#);
    let calls: Vec<(&str, String, String, &str)> = vec![
        ("POST", "/admin/coupons".into(), create, "totalStock"),
        ("POST", path(&def, "/stock"), r#"{"add": 1, "add": 1000}"#.into(), "add"),
        (
            "PUT",
            path(&def, "/status"),
            r#"{"status": "ONLINE", "status": "OFFLINE"}"#.into(),
            "status",
        ),
        (
            "PUT",
            path(&def, "/rate"),
            r#"{"ratePerSec": 5, "burst": 5, "burst": 9}"#.into(),
            "burst",
        ),
        (
            "PUT",
            format!("/admin/users/{user}/coupons/{grant}/revoked"),
            r#"{"reason": "a", "reason": "b"}"#.into(),
            "reason",
        ),
        ("PUT", "/redemptions/o-twice".into(), spend.clone(), "grantId"),
        ("POST", "/redemptions/o-twice/return".into(), spend, "grantId"),
    ];
    for (method, route, body, key) in calls {
        let r = h
            .admin_send(Event::admin(method, &route, None).body(&body).build())
            .await;
        assert_eq!(
            (r.status, r.code()),
            (400, "INVALID_REQUEST"),
            "{method} {route}: {}",
            r.body
        );
        assert_eq!(
            r.body["data"]["detail"],
            format!("the body names `{key}` more than once"),
            "{method} {route}"
        );
    }

    assert_eq!(h.stock(&def).await, 9, "one unit sold, none added");
    let view = h.admin_call("GET", &path(&def, ""), None).await;
    assert_eq!(view.body["data"]["coupon"]["status"], "ONLINE");
    assert_eq!(view.body["data"]["version"], 0, "no change was applied");
    let absent = h
        .admin_call("GET", &format!("/admin/coupons/{}", twice.coupon_id), None)
        .await;
    assert_eq!(absent.code(), "COUPON_NOT_FOUND", "the create wrote nothing");
    let wallet = h.wallet_get("/me/coupons", &user).await;
    assert_eq!(
        wallet.body["data"]["coupons"][0]["status"], "UNUSED",
        "neither revoked nor spent: {}",
        wallet.body
    );
}

/// A number no field's type holds (valid by JSON, and by a schema without a
/// maximum) is refused with the field and its range, never serde's words
/// alone, and changes nothing.
#[tokio::test]
async fn a_number_beyond_what_its_field_holds_is_refused_with_the_field_and_the_range() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    assert_eq!(h.admin_create(&def).await.code(), "SUCCESS");

    let r = h
        .admin_send(
            Event::admin("PUT", &path(&def, "/rate"), None)
                .body(r#"{"ratePerSec": 5, "burst": 6869465605437298966505390918491701248}"#)
                .build(),
        )
        .await;
    assert_eq!((r.status, r.code()), (400, "INVALID_REQUEST"), "{}", r.body);
    assert_eq!(
        r.body["data"]["detail"],
        "`burst` must be an integer from 0 to 4294967295"
    );
    let view = h.admin_call("GET", &path(&def, ""), None).await;
    assert_eq!(view.body["data"]["version"], 0, "no change was applied");
}
