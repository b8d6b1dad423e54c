//! The admin API through its real handler, against redis-server and the
//! local AWS endpoint: creating, reading, changing and auditing a campaign,
//! and that changes made while grabs run keep every invariant.

use std::sync::Arc;

use coupon_adapters::dynamodb::coupon_pk;
use coupon_domain::coupon::CouponDefinition;
use coupon_domain::grant::Grant;
use coupon_domain::ids::{CouponId, UserId};
use coupon_domain::issuance::IssueLedger;
use coupon_domain::issuance::IssueOutcome;
use serde_json::{json, Value};

use crate::support::*;

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
async fn offline_takes_effect_on_the_very_next_grab_and_online_reopens() {
    let h = Harness::new().await;
    let mut def = h.coupon(10);
    def.shards = 3;
    h.admin_create(&def).await;
    assert_eq!(h.grab(&def.coupon_id, "off-a", "r1").await.code(), "SUCCESS");

    let off = h
        .admin_call("PUT", &path(&def, "/status"), Some(json!({"status": "OFFLINE"})))
        .await;
    assert_eq!(off.code(), "SUCCESS", "{}", off.body);
    assert_eq!(off.body["data"]["coupon"]["status"], "OFFLINE");
    assert_eq!(off.body["data"]["version"], 1);
    for user in ["off-b", "off-c", "off-d", "off-e"] {
        let r = h.grab(&def.coupon_id, user, "r1").await;
        assert_eq!(
            (r.code(), r.body["data"]["reason"].as_str()),
            ("COUPON_NOT_ACTIVE", Some("OFFLINE"))
        );
    }

    let on = h
        .admin_call("PUT", &path(&def, "/status"), Some(json!({"status": "ONLINE"})))
        .await;
    assert_eq!(on.body["data"]["version"], 2);
    assert_eq!(h.grab(&def.coupon_id, "off-b", "r2").await.code(), "SUCCESS");
}

#[tokio::test]
async fn stock_added_after_a_sell_out_reopens_every_shard() {
    let mut opts = Options::without_ip_limit();
    opts.sold_out_memory_ms = 0;
    let h = Harness::with(opts).await;
    let mut def = h.coupon(4);
    def.shards = 4;
    h.admin_create(&def).await;
    for i in 0..4 {
        assert_eq!(h.grab(&def.coupon_id, &format!("so-{i}"), "r").await.code(), "SUCCESS");
    }
    assert_eq!(h.grab(&def.coupon_id, "so-late", "r").await.code(), "SOLD_OUT");

    let added = h
        .admin_call_keyed("POST", &path(&def, "/stock"), json!({"add": 3}), "refill-1")
        .await;
    assert_eq!(added.code(), "SUCCESS", "{}", added.body);
    assert_eq!(added.body["data"]["figures"]["totalStock"], 7);
    assert_eq!(added.body["data"]["figures"]["remaining"], 3);

    // No false sold-out: every shard's stamp was invalidated, so users homed
    // on any shard find the new units (borrowing where their shard got none).
    let mut won = 0;
    for i in 0..6 {
        if h.grab(&def.coupon_id, &format!("so-new-{i}"), "r").await.code() == "SUCCESS" {
            won += 1;
        }
    }
    assert_eq!(won, 3);
    h.pump().await;
    let report = h.reconcile(&def).await;
    assert_eq!((report.total, report.issued, report.drift), (7, 7, 0), "{report:?}");
}

#[tokio::test]
async fn a_retried_stock_addition_with_the_same_key_adds_once() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    h.admin_create(&def).await;
    for _ in 0..3 {
        let r = h
            .admin_call_keyed("POST", &path(&def, "/stock"), json!({"add": 5}), "once-only")
            .await;
        assert_eq!(r.code(), "SUCCESS", "{}", r.body);
        assert_eq!(r.body["data"]["figures"]["totalStock"], 15);
    }
    assert_eq!(h.stock(&def).await, 15);
    let audit = h.admin_call("GET", &path(&def, "/audit"), None).await;
    let adds = audit.body["data"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "ADD_STOCK")
        .count();
    assert_eq!(adds, 1);
}

#[tokio::test]
async fn stock_added_while_grabs_run_is_never_oversold() {
    let h = Arc::new(Harness::with(Options::without_ip_limit()).await);
    let mut def = h.coupon(20);
    def.shards = 4;
    h.admin_create(&def).await;
    let grabs = {
        let h = h.clone();
        let coupon = def.coupon_id.clone();
        tokio::spawn(async move {
            let mut handles = Vec::new();
            for i in 0..80 {
                let app = h.app.clone();
                let coupon = coupon.clone();
                handles.push(tokio::spawn(async move {
                    send(&app, Event::grab(coupon.as_str(), &format!("live-{i}"), "r").build()).await
                }));
            }
            let mut won = 0;
            for handle in handles {
                if handle.await.unwrap().code() == "SUCCESS" {
                    won += 1;
                }
            }
            won
        })
    };
    let added = h
        .admin_call_keyed("POST", &path(&def, "/stock"), json!({"add": 30}), "live-refill")
        .await;
    assert_eq!(added.code(), "SUCCESS", "{}", added.body);
    let mut won = grabs.await.unwrap();
    // Whoever lost before the refill landed may grab again, once this
    // instance's sold-out memory (1 s) has passed.
    h.clock.advance(1_000);
    for i in 0..80 {
        let r = h.grab(&def.coupon_id, &format!("live-{i}"), "again").await;
        if r.code() == "SUCCESS" && r.body["data"]["replayed"] != true {
            won += 1;
        }
    }
    assert_eq!(won, 50, "every unit, and not one more");
    h.pump().await;
    let report = h.reconcile(&def).await;
    assert_eq!(
        (
            report.total,
            report.issued,
            report.rejected,
            report.remaining,
            report.drift
        ),
        (50, 50, 0, 0, 0),
        "{report:?}"
    );
}

#[tokio::test]
async fn an_issuer_with_a_stale_definition_finds_counters_added_with_stock() {
    let h = Harness::new().await;
    let def = h.coupon(1_000); // one counter item
    h.admin_create(&def).await;
    let fill = |issued: u64| {
        let h = &h;
        let def = &def;
        async move {
            h.stack
                .ddb
                .update_item()
                .table_name(&h.stack.tables.coupons)
                .key(
                    "pk",
                    aws_sdk_dynamodb::types::AttributeValue::S(coupon_pk(&def.coupon_id)),
                )
                .key("sk", aws_sdk_dynamodb::types::AttributeValue::S("COUNTER#0".into()))
                .update_expression("SET issued = :n")
                .expression_attribute_values(":n", aws_sdk_dynamodb::types::AttributeValue::N(issued.to_string()))
                .send()
                .await
                .unwrap();
        }
    };
    // As if 1,000 units were issued, then 500 more added: 2 counters now.
    fill(1_000).await;
    let r = h
        .admin_call_keyed("POST", &path(&def, "/stock"), json!({"add": 500}), "grow")
        .await;
    assert_eq!(r.code(), "SUCCESS", "{}", r.body);
    fill(1_250).await; // counter 0 full at its grown cap
    let grant = Grant {
        grant_id: format!("{}-0-1001", def.coupon_id),
        coupon_id: def.coupon_id.clone(),
        user_id: UserId::parse(&unique("stale")).unwrap(),
        ordinal: 1,
        request_id: coupon_domain::ids::RequestId::parse("r").unwrap(),
        shard: 0,
        granted_at_ms: T0,
    };
    // `def` is the definition as an issuer cached it before the addition.
    let outcome = h.issue_ledger().issue(&grant, &def, T0).await.unwrap();
    assert_eq!(outcome, IssueOutcome::Issued);
}

#[tokio::test]
async fn a_rate_change_applies_to_the_next_grab() {
    let h = Harness::with(Options::without_ip_limit()).await;
    let def = h.coupon(100);
    h.admin_create(&def).await;
    let r = h
        .admin_call("PUT", &path(&def, "/rate"), Some(json!({"ratePerSec": 1, "burst": 1})))
        .await;
    assert_eq!(r.code(), "SUCCESS", "{}", r.body);
    assert_eq!(h.grab(&def.coupon_id, "rate-a", "r").await.code(), "SUCCESS");
    assert_eq!(h.grab(&def.coupon_id, "rate-b", "r").await.code(), "RATE_LIMITED");
    h.clock.advance(1_000);
    assert_eq!(h.grab(&def.coupon_id, "rate-b", "r2").await.code(), "SUCCESS");
    let off = h
        .admin_call("PUT", &path(&def, "/rate"), Some(json!({"ratePerSec": 0})))
        .await;
    assert_eq!(off.body["data"]["coupon"]["ratePerSec"], 0);
    for i in 0..5 {
        assert_eq!(
            h.grab(&def.coupon_id, &format!("rate-{i}x"), "r").await.code(),
            "SUCCESS"
        );
    }
}

#[tokio::test]
async fn a_blacklisted_user_is_refused_until_the_entry_is_lifted() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    h.admin_create(&def).await;
    let user = unique("bl");
    let on = h.admin_call("PUT", &format!("/admin/blacklist/{user}"), None).await;
    assert_eq!(
        (on.code(), on.body["data"]["blacklisted"].as_bool()),
        ("SUCCESS", Some(true))
    );
    let refused = h.grab(&def.coupon_id, &user, "r").await;
    assert_eq!(
        (refused.code(), refused.body["data"]["reason"].as_str()),
        ("RISK_REJECTED", Some("BLACKLISTED"))
    );

    let entry = h.admin_call("GET", &format!("/admin/blacklist/{user}"), None).await;
    assert_eq!(entry.body["data"]["blacklisted"], true);
    assert_eq!(entry.body["data"]["audit"][0]["action"], "BLACKLIST_ADD");
    assert_eq!(
        entry.body["data"]["audit"][0]["actor"],
        "arn:aws:iam::123456789012:user/campaign-ops"
    );

    let off = h.admin_call("DELETE", &format!("/admin/blacklist/{user}"), None).await;
    assert_eq!(off.body["data"]["blacklisted"], false);
    assert_eq!(h.grab(&def.coupon_id, &user, "r2").await.code(), "SUCCESS");
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

#[tokio::test]
async fn the_reconciler_restores_blacklist_flags_redis_lost_but_never_a_lifted_one() {
    let h = Harness::new().await;
    let def = h.coupon(10);
    h.admin_create(&def).await;
    let kept = unique("bl-kept");
    let lifted = unique("bl-lifted");
    for user in [&kept, &lifted] {
        h.admin_call("PUT", &format!("/admin/blacklist/{user}"), None).await;
    }
    h.admin_call("DELETE", &format!("/admin/blacklist/{lifted}"), None)
        .await;
    // The cache loses every flag. A coupon that exists is never "not
    // found", even with its state gone.
    h.flush_redis().await;
    assert_eq!(h.grab(&def.coupon_id, &kept, "before").await.code(), "BUSY");

    let report = h.reconciler_to(&h.queue_url).run().await.expect("reconcile");
    assert!(report.blacklist_restored >= 1, "{report:?}");
    // The coupon itself comes back once its barriers have come through.
    h.reconcile(&def).await;
    let refused = h.grab(&def.coupon_id, &kept, "after").await;
    assert_eq!(refused.body["data"]["reason"], "BLACKLISTED", "{}", refused.body);
    assert_eq!(h.grab(&def.coupon_id, &lifted, "after").await.code(), "SUCCESS");
}

/// An operator revokes one user's coupon: it reads REVOKED in the wallet,
/// still counts against the user's limit, is audited on the coupon once
/// however often the revocation is repeated, and another user's grant or a
/// missing reason is refused.
#[tokio::test]
async fn an_operator_revokes_one_users_coupon_once_and_it_is_audited() {
    let h = Harness::new().await;
    let def = h.coupon(5);
    h.admin_create(&def).await;
    let holder = unique("holder");
    let grant = h.grab(&def.coupon_id, &holder, "r1").await.grant_id().unwrap();
    h.pump().await;
    let revoke_path = format!("/admin/users/{holder}/coupons/{grant}/revoked");
    let reason = json!({"reason": "fraud ring"});

    let revoked = h.admin_call("PUT", &revoke_path, Some(reason.clone())).await;
    assert_eq!(revoked.status, 200, "{}", revoked.body);
    assert_eq!(revoked.body["data"]["coupon"]["status"], "REVOKED");
    let again = h.admin_call("PUT", &revoke_path, Some(reason.clone())).await;
    assert_eq!((again.status, &again.body["data"]), (200, &revoked.body["data"]));

    let wallet = h.wallet_get("/me/coupons", &holder).await;
    assert_eq!(wallet.body["data"]["coupons"][0]["status"], "REVOKED");
    let listed = h.wallet_get("/me/coupons?status=revoked", &holder).await;
    assert_eq!(listed.body["data"]["coupons"].as_array().map(Vec::len), Some(1));
    let unused = h.wallet_get("/me/coupons?status=unused", &holder).await;
    assert_eq!(unused.body["data"]["coupons"].as_array().map(Vec::len), Some(0));
    assert_eq!(
        h.grab(&def.coupon_id, &holder, "r2").await.code(),
        "ALREADY_CLAIMED",
        "a revoked coupon still counts against the limit"
    );

    let audit = h.admin_call("GET", &path(&def, "/audit"), None).await;
    let revocations: Vec<&Value> = audit.body["data"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "REVOKE_COUPON")
        .collect();
    assert_eq!(revocations.len(), 1, "{}", audit.body);
    assert_eq!(revocations[0]["detail"]["reason"], "fraud ring");
    assert_eq!(revocations[0]["detail"]["userId"], holder.as_str());

    let stranger = format!("/admin/users/{}/coupons/{grant}/revoked", unique("stranger"));
    let theirs = h.admin_call("PUT", &stranger, Some(reason)).await;
    assert_eq!((theirs.status, theirs.code()), (404, "GRANT_NOT_FOUND"));
    for body in [json!({}), json!({"reason": "  "}), json!({"reason": "x", "extra": 1})] {
        let refused = h.admin_call("PUT", &revoke_path, Some(body.clone())).await;
        assert_eq!((refused.status, refused.code()), (400, "INVALID_REQUEST"), "{body}");
    }
}
