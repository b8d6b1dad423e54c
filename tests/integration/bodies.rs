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
