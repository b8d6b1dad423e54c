//! The admin API on users: the blacklist (and its restore after Redis lost
//! it) and revoking one user's coupon.

use serde_json::{json, Value};

use super::*;

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
    // The coupon itself comes back once the send window is over.
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
