//! The admin API through its real handler, against redis-server and the
//! local AWS endpoint: creating, reading, changing and auditing a campaign,
//! and that changes made while grabs run keep every invariant. Here the
//! catalogue, the audit trail and the refusals; `stock.rs`: changes to a
//! running sale; `users.rs`: the blacklist and revocations.

use coupon_domain::coupon::CouponDefinition;
use coupon_domain::ids::CouponId;
use serde_json::{json, Value};

use crate::support::*;

mod stock;
mod users;

fn path(def: &CouponDefinition, tail: &str) -> String {
    format!("/admin/coupons/{}{tail}", def.coupon_id)
}

#[tokio::test]
async fn creating_the_same_coupon_twice_is_a_no_op_and_a_different_one_a_conflict() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    let first = h.admin_create(&def).await;
    assert_eq!(first.code(), "SUCCESS", "{}", first.body);
    assert_eq!(first.body["data"]["created"], true);
    assert_eq!(first.body["data"]["figures"]["remaining"], 10);

    let again = h.admin_create(&def).await;
    assert_eq!(again.code(), "SUCCESS");
    assert_eq!(again.body["data"]["created"], false);

    let mut other = def.clone();
    other.total_stock = 11;
    let conflict = h.admin_create(&other).await;
    assert_eq!((conflict.status, conflict.code()), (409, "COUPON_CONFLICT"));
    assert_eq!(h.stock(&def).await, 10, "a conflicting create changes nothing");
}

#[tokio::test]
async fn a_coupon_reads_back_with_live_figures() {
    let h = Harness::new().await;
    let mut def = h.coupon(6);
    def.shards = 2;
    h.admin_create(&def).await;
    for user in ["fig-a", "fig-b", "fig-c"] {
        assert_eq!(h.grab(&def.coupon_id, user, "r1").await.code(), "SUCCESS");
    }
    let before = h.admin_call("GET", &path(&def, ""), None).await;
    let f = &before.body["data"]["figures"];
    assert_eq!(
        (
            f["totalStock"].as_u64(),
            f["remaining"].as_i64(),
            f["issued"].as_u64(),
            f["pending"].as_i64()
        ),
        (Some(6), Some(3), Some(0), Some(3)),
        "{before:?}"
    );
    h.pump().await;
    let after = h.admin_call("GET", &path(&def, ""), None).await;
    let f = &after.body["data"]["figures"];
    assert_eq!((f["issued"].as_u64(), f["pending"].as_i64()), (Some(3), Some(0)));
    assert_eq!(after.body["data"]["version"], 0);
    assert_eq!(after.body["data"]["coupon"]["couponId"], def.coupon_id.as_str());
}

#[tokio::test]
async fn a_reconciliation_runs_on_demand_and_its_report_is_kept() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    h.admin_create(&def).await;
    let none = h.admin_call("GET", &path(&def, "/reconcile"), None).await;
    assert_eq!((none.status, none.code()), (404, "REPORT_NOT_FOUND"));
    h.grab(&def.coupon_id, "rec-a", "r").await;
    h.pump().await;
    let ran = h.admin_call("POST", &path(&def, "/reconcile"), None).await;
    assert_eq!(ran.code(), "SUCCESS", "{}", ran.body);
    let report = &ran.body["data"]["report"];
    assert_eq!(
        (report["issued"].as_u64(), report["drift"].as_i64()),
        (Some(1), Some(0))
    );
    let read = h.admin_call("GET", &path(&def, "/reconcile"), None).await;
    assert_eq!(read.body["data"], ran.body["data"]);
}

#[tokio::test]
async fn every_change_is_audited_with_who_what_and_when() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    h.admin_create(&def).await;
    h.clock.advance(1_000);
    h.admin_call("PUT", &path(&def, "/status"), Some(json!({"status": "OFFLINE"})))
        .await;
    h.clock.advance(1_000);
    h.admin_call_keyed("POST", &path(&def, "/stock"), json!({"add": 2}), "audit-add")
        .await;
    h.clock.advance(1_000);
    h.admin_call("PUT", &path(&def, "/rate"), Some(json!({"ratePerSec": 10})))
        .await;
    h.admin_call("POST", &path(&def, "/reconcile"), None).await;
    let audit = h.admin_call("GET", &path(&def, "/audit"), None).await;
    let mut entries = audit.body["data"]["entries"].as_array().unwrap().clone();
    assert_eq!(audit.body["data"]["more"], false);
    entries.reverse(); // newest first on the wire
    let actions: Vec<&str> = entries.iter().map(|e| e["action"].as_str().unwrap()).collect();
    assert_eq!(
        actions,
        ["CREATE_COUPON", "SET_STATUS", "ADD_STOCK", "SET_RATE", "RECONCILE"]
    );
    let audit_query = |q: &str| Event::admin("GET", &path(&def, "/audit"), None).query(q).build();
    let latest = h.admin_send(audit_query("limit=2")).await;
    let latest: Vec<&str> = latest.body["data"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(latest, ["RECONCILE", "SET_RATE"]);
    for bad in ["0", "1001", "x", "-1"] {
        let r = h.admin_send(audit_query(&format!("limit={bad}"))).await;
        assert_eq!(r.code(), "INVALID_REQUEST", "limit={bad}");
    }
    assert!(entries
        .iter()
        .all(|e| e["actor"] == "arn:aws:iam::123456789012:user/campaign-ops"));
    assert_eq!(entries[1]["atMs"], T0 + 1_000);
    assert_eq!(entries[1]["detail"], json!({"before": "ONLINE", "after": "OFFLINE"}));
    assert_eq!(entries[2]["operationId"], "audit-add");
    assert_eq!(entries[2]["detail"]["added"], 2);
}

#[tokio::test]
async fn invalid_definitions_and_changes_name_the_field() {
    let h = Harness::new().await;
    let base = h.coupon(10);
    type Edit = fn(&mut Value);
    let cases: [(&str, Edit); 4] = [
        ("grabEndMs", |v| v["grabEndMs"] = v["grabStartMs"].clone()),
        ("totalStock", |v| v["totalStock"] = 0.into()),
        ("totalStock", |v| v["totalStock"] = 1_000_001.into()),
        ("shards", |v| v["shards"] = 11.into()),
    ];
    for (field, edit) in cases {
        let mut v = serde_json::to_value(&base).unwrap();
        edit(&mut v);
        let r = h.admin_call("POST", "/admin/coupons", Some(v)).await;
        assert_eq!((r.status, r.code()), (400, "INVALID_REQUEST"), "{field}");
        assert_eq!(r.body["data"]["field"], field);
    }
    let mut v = serde_json::to_value(&base).unwrap();
    v["surprise"] = 1.into();
    let r = h.admin_call("POST", "/admin/coupons", Some(v)).await;
    assert_eq!(r.code(), "INVALID_REQUEST");
    assert!(r.body["data"]["detail"]
        .as_str()
        .unwrap()
        .contains("unknown field `surprise`"));

    h.admin_create(&base).await;
    let too_much = h
        .admin_call_keyed("POST", &path(&base, "/stock"), json!({"add": 999_991}), "k1")
        .await;
    assert_eq!(too_much.body["data"]["field"], "totalStock");
    for body in [
        json!({"add": 0}),
        json!({"add": -1}),
        json!({"add": "5"}),
        json!({"status": "ONLINE"}),
    ] {
        let r = h.admin_call("POST", &path(&base, "/stock"), Some(body.clone())).await;
        assert_eq!(r.code(), "INVALID_REQUEST", "{body}");
    }
    let r = h
        .admin_call("PUT", &path(&base, "/status"), Some(json!({"status": "PAUSED"})))
        .await;
    assert_eq!(r.code(), "INVALID_REQUEST");
    assert_eq!(h.stock(&base).await, 10, "nothing was changed by refused calls");
}

#[tokio::test]
async fn changes_to_a_coupon_that_does_not_exist_are_not_found() {
    let h = Harness::new().await;
    let missing = CouponId::parse(&unique("nope")).unwrap();
    for (method, tail, body) in [
        ("GET", "", None),
        ("PUT", "/status", Some(json!({"status": "OFFLINE"}))),
        ("POST", "/stock", Some(json!({"add": 1}))),
        ("PUT", "/rate", Some(json!({"ratePerSec": 1}))),
        ("GET", "/audit", None),
        ("POST", "/reconcile", None),
    ] {
        let r = h
            .admin_call(method, &format!("/admin/coupons/{missing}{tail}"), body)
            .await;
        assert_eq!((r.status, r.code()), (404, "COUPON_NOT_FOUND"), "{method} {tail}");
    }
}

#[tokio::test]
async fn admin_routes_refuse_a_user_token_and_an_anonymous_caller() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    h.admin_create(&def).await;
    // A user's verified JWT, on every admin route.
    for (method, p) in [
        ("POST", "/admin/coupons".to_owned()),
        ("GET", path(&def, "")),
        ("PUT", path(&def, "/status")),
        ("POST", path(&def, "/stock")),
        ("PUT", format!("/admin/blacklist/{}", "victim")),
    ] {
        let event = Event::grab(def.coupon_id.as_str(), "mallory", "r")
            .method(method)
            .path(&p)
            .body(r#"{"status":"OFFLINE"}"#)
            .build();
        let r = h.admin_send(event).await;
        assert_eq!((r.status, r.code()), (403, "FORBIDDEN"), "{method} {p}");
    }
    // No identity at all.
    let anonymous = Event::admin("GET", &path(&def, ""), None).without_authorizer().build();
    let mut anonymous = anonymous;
    anonymous["headers"].as_object_mut().unwrap().remove("authorization");
    assert_eq!(h.admin_send(anonymous).await.code(), "UNAUTHORIZED");
    let still = h.admin_call("GET", &path(&def, ""), None).await;
    assert_eq!(still.body["data"]["coupon"]["status"], "ONLINE");
}
