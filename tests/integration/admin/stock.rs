//! Changes to a running sale through the admin API: offline and online,
//! stock added (after a sell-out, retried, racing grabs), a new rate: each
//! takes effect on the next grab and keeps every invariant.

use std::sync::Arc;

use coupon_adapters::dynamodb::coupon_pk;
use coupon_domain::grant::Grant;
use coupon_domain::ids::{GrantId, UserId};
use coupon_domain::issuance::IssueLedger;
use coupon_domain::issuance::IssueOutcome;
use serde_json::json;

use super::*;

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
                .key(
                    "sk",
                    aws_sdk_dynamodb::types::AttributeValue::S(coupon_adapters::dynamodb::counter_sk(0)),
                )
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
        grant_id: GrantId::new(&def.coupon_id, 0, 1001),
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
