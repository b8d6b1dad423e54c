//! Release waves across a restart of the Redis server from an older
//! snapshot: a home shard's borrows move none of its sequence, so the
//! check of a restarted shard (lua/verify.lua) must find every instant it
//! may have borrowed at. These sequences each broke that promise once: a
//! borrow while the shard held its stock back, a borrow under a schedule an
//! operator changed after the snapshot, a borrow by a caller whose clock
//! lags the server's.

use coupon_adapters::redis::RedisRepair;
use coupon_domain::clock::Clock;
use coupon_domain::coupon::{CouponDefinition, Wave};
use coupon_domain::reconcile::ports::{DurableBound, DurableFacts, StockRepair, Verification};
use coupon_domain::reconcile::CouponReport;
use serde_json::json;

use crate::support::{homed_on, Harness, Options, Server, T0};

use super::waves::{count, presses, MIN};

/// A harness over a Redis server of the test's own, to `SAVE` and to
/// restart from that snapshot.
async fn own_server() -> (Server, Harness) {
    let server = Server::standalone();
    let h = Harness::with(Options {
        redis_url: Some(server.url()),
        ..Options::without_ip_limit()
    })
    .await;
    (server, h)
}

/// Restarts the server from its snapshot and lets the reconciler settle
/// its shards: a pass that finds them suspect, then passes past the send
/// window until none of them waits.
async fn restart_and_check(server: &mut Server, h: &Harness, def: &CouponDefinition) -> CouponReport {
    server.restart_from_snapshot();
    h.wait_for_redis().await;
    h.reconcile_windowed(def, 3_000).await;
    h.clock.advance(3_000);
    let mut report = h.reconcile_windowed(def, 3_000).await;
    for _ in 0..20 {
        if report.shards_waiting == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        report = h.reconcile_windowed(def, 3_000).await;
    }
    assert_eq!(
        report.shards_waiting, 0,
        "the restarted shards were never checked: {report:?}"
    );
    report
}

/// A shard whose stock is all held back for the next wave sells nothing,
/// so its users borrow from the other shards, which moves none of its
/// sequence: only its users hash and the request's record. Redis then
/// restarts from a snapshot taken before such a borrow. The shard's
/// sequence is at its durable mark and it still holds stock, which without
/// waves meant nothing was lost; here it would forget the borrower's claim
/// (a second coupon at the next wave, a retry answered as a new press).
/// The check drops a shard that had nothing to sell at any instant since
/// its state's last stamp, and the rebuild restores the claim.
#[tokio::test]
async fn a_claim_borrowed_while_the_home_shard_held_its_stock_back_survives_a_restart_from_an_older_snapshot() {
    let (mut server, h) = own_server().await;
    let mut def = h.coupon(4);
    def.shards = 2;
    def.waves = vec![
        Wave { at_ms: T0, units: 2 },
        Wave {
            at_ms: T0 + MIN,
            units: 2,
        },
    ];
    let coupon = h.create(&def).await;
    h.clock.set(T0);
    // Shard 0 sells its unit of the first wave; it still holds one back.
    let first = homed_on(0, 2, "first");
    assert_eq!(h.grab(&coupon, &first, "r").await.code(), "SUCCESS");
    h.pump().await;
    assert!(server.cmd(&["SAVE"]).contains("OK"));
    // Homed on shard 0, which has nothing to sell now: borrowed from shard 1.
    let borrower = homed_on(0, 2, "borrower");
    let won = h.grab(&coupon, &borrower, "r").await;
    assert_eq!(won.code(), "SUCCESS", "{}", won.body);
    let grant = won.body["data"]["grantId"].as_str().unwrap().to_owned();
    assert!(grant.contains("-1-"), "minted on shard 1: {grant}");
    h.pump().await;

    server.restart_from_snapshot();
    h.wait_for_redis().await;
    assert_eq!(h.reconcile_windowed(&def, 3_000).await.shards_waiting, 2);
    h.clock.advance(3_000);
    let report = h.reconcile_windowed(&def, 3_000).await;
    assert_eq!(
        (report.shards_rolled_back, report.shards_rebuilt),
        (2, 2),
        "both shards dropped and rebuilt: {report:?}"
    );

    let retry = h.grab(&coupon, &borrower, "r").await;
    assert_eq!(
        (retry.code(), retry.body["data"]["grantId"].as_str()),
        ("SUCCESS", Some(grant.as_str())),
        "the retry is answered as the press was: {}",
        retry.body
    );
    h.clock.set(T0 + MIN);
    assert_eq!(h.grab(&coupon, &borrower, "again").await.code(), "ALREADY_CLAIMED");
    let second = presses(&h, &coupon, "second", 4).await;
    assert_eq!(count(&second, "SUCCESS"), 2, "{second:?}");
    h.pump().await;
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 4);
    assert!(h.facts().rejections(&coupon).await.unwrap().is_empty());
}

/// The check judges a restarted shard on the release schedule its state
/// holds. Here an operator adds a wave after the snapshot, and without
/// rollover the new wave gives shard 1 no unit: at its instant shard 1 is
/// dry and its user borrows from shard 0. On the snapshot's schedule shard
/// 1 still had its second wave's unit then, so it passed the check and
/// forgot the claim (the user's next press was decided afresh). A state
/// behind the durable definition's version is now dropped and rebuilt.
#[tokio::test]
async fn a_claim_borrowed_under_a_wave_added_after_the_snapshot_survives_a_restart_from_it() {
    let (mut server, h) = own_server().await;
    let mut def = h.coupon(4);
    def.shards = 2;
    def.rollover = false;
    // Open from the first wave on: at no instant before the third wave
    // was shard 1 dry on the snapshot's schedule.
    def.grab_start_ms = T0;
    def.waves = vec![
        Wave { at_ms: T0, units: 2 },
        Wave {
            at_ms: T0 + MIN,
            units: 2,
        },
    ];
    let coupon = h.create(&def).await;
    h.clock.set(T0 + MIN);
    assert!(server.cmd(&["SAVE"]).contains("OK"));
    // One unit more, on shard 0 alone (5 units over 2 shards: 3 and 2).
    let path = format!("/admin/coupons/{coupon}/waves");
    let added = h
        .admin_call_keyed("POST", &path, json!({"atMs": T0 + 2 * MIN, "units": 1}), "third")
        .await;
    assert_eq!(added.code(), "SUCCESS", "{}", added.body);
    h.clock.set(T0 + 2 * MIN);
    let borrower = homed_on(1, 2, "borrower");
    let won = h.grab(&coupon, &borrower, "r").await;
    assert_eq!(won.code(), "SUCCESS", "{}", won.body);
    let grant = won.body["data"]["grantId"].as_str().unwrap().to_owned();
    assert!(grant.contains("-0-"), "borrowed from shard 0: {grant}");
    h.pump().await;

    server.restart_from_snapshot();
    h.wait_for_redis().await;
    // The check itself, on the state as restored. (A reconciler pass also
    // heals the shard's settings before it settles it, in a later pass;
    // the check does not count on that order.)
    let repair = RedisRepair::new(h.redis.clone());
    let now = h.clock.now_ms();
    let look = repair.verify(&coupon, 1, now, None).await.unwrap();
    assert!(matches!(look, Verification::Suspect { .. }), "{look:?}");
    let bound = DurableBound {
        high_water: 0,
        version: 1,
    };
    let settled = repair.verify(&coupon, 1, now, Some(bound)).await.unwrap();
    assert_eq!(
        settled,
        Verification::Dropped,
        "shard 1's state predates the added wave"
    );

    h.reconcile_windowed(&def, 3_000).await;
    h.clock.advance(3_000);
    let report = h.reconcile_windowed(&def, 3_000).await;
    assert_eq!(report.shards_rebuilt, 2, "both shards rebuilt: {report:?}");

    let again = h.grab(&coupon, &borrower, "again").await;
    assert_eq!(again.code(), "ALREADY_CLAIMED", "{}", again.body);
    h.pump().await;
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 1);
}

/// Borrows are looked for from the state's last stamp (`w`) less two
/// seconds. A press judged on a clock further behind the stamp, homed on
/// a shard that is dry on its clock (the first wave sold) but not at the
/// stamp (the second wave out), used to borrow at an instant the check
/// never looks at: after a restart from a snapshot taken before, the shard
/// was confirmed and forgot the claim, and the user won a second coupon.
/// Such a press is now judged at the stamp less two seconds, where the
/// shard has the second wave's unit for it: it wins on its home shard,
/// whose sequence the check then finds behind DynamoDB's.
#[tokio::test]
async fn a_press_on_a_clock_behind_the_shard_s_stamp_is_judged_where_the_restart_check_looks() {
    let (mut server, h) = own_server().await;
    let time: Vec<i64> = server
        .cmd(&["TIME"])
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    let server_now = time[0] * 1_000 + time[1] / 1_000;
    let mut def = h.coupon(4);
    def.shards = 2;
    def.grab_start_ms = server_now - 2 * MIN;
    def.grab_end_ms = server_now + 60 * MIN;
    def.valid_from_ms = def.grab_start_ms;
    def.waves = vec![
        Wave {
            at_ms: server_now - 2 * MIN,
            units: 2,
        },
        Wave {
            at_ms: server_now - 10_000,
            units: 2,
        },
    ];
    h.clock.set(server_now - 3 * MIN);
    let coupon = h.create(&def).await;
    h.clock.set(server_now - MIN);
    // The stamp (w) is the preheat's, about server_now: the second wave is
    // out there, not on the clock the presses below are judged on.
    let first = homed_on(0, 2, "first");
    assert_eq!(h.grab(&coupon, &first, "r").await.code(), "SUCCESS");
    h.pump().await;
    assert!(server.cmd(&["SAVE"]).contains("OK"));
    let late = homed_on(0, 2, "late");
    let won = h.grab(&coupon, &late, "r").await;
    assert_eq!(won.code(), "SUCCESS", "{}", won.body);
    let grant = won.body["data"]["grantId"].as_str().unwrap().to_owned();
    assert!(grant.contains("-0-"), "won on its home shard, not borrowed: {grant}");
    h.pump().await;

    let report = restart_and_check(&mut server, &h, &def).await;
    assert!(report.shards_rebuilt >= 1, "{report:?}");
    // Once the second wave is out on the user's clock too, a shard that
    // forgot the claim would sell them a second coupon.
    h.clock.set(server_now + 1_000);
    let again = h.grab(&coupon, &late, "again").await;
    assert_eq!(again.code(), "ALREADY_CLAIMED", "{}", again.body);
    h.pump().await;
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 2);
}

/// Without waves too: a shard out of stock at the snapshot lends its
/// users' claims to borrows the snapshot never saw, and the check drops it
/// because it is dry. Stock an operator adds before the check used to
/// reach the restarted shard (the admin's apply, or the pass's heal), so
/// the check found stock, confirmed the shard, and the borrower won a
/// second coupon. A shard not yet checked now takes no change: the check
/// sees the state as restored (and behind the definition), and drops it.
#[tokio::test]
async fn stock_added_before_a_restarted_shard_is_checked_does_not_hide_a_borrow_it_forgot() {
    let (mut server, h) = own_server().await;
    let mut def = h.coupon(2);
    def.shards = 2;
    let coupon = h.create(&def).await;
    h.clock.set(T0);
    assert_eq!(h.grab(&coupon, &homed_on(1, 2, "first"), "r").await.code(), "SUCCESS");
    h.pump().await;
    assert!(server.cmd(&["SAVE"]).contains("OK"));
    let borrower = homed_on(1, 2, "borrower");
    let won = h.grab(&coupon, &borrower, "r").await;
    assert_eq!(won.code(), "SUCCESS", "{}", won.body);
    assert!(
        won.body["data"]["grantId"].as_str().unwrap().contains("-0-"),
        "{}",
        won.body
    );
    h.pump().await;

    server.restart_from_snapshot();
    h.wait_for_redis().await;
    let path = format!("/admin/coupons/{coupon}/stock");
    let added = h.admin_call_keyed("POST", &path, json!({"add": 4}), "refill").await;
    assert_eq!(added.code(), "SUCCESS", "{}", added.body);
    h.reconcile_windowed(&def, 3_000).await;
    h.clock.advance(3_000);
    h.reconcile_windowed(&def, 3_000).await;

    let again = h.grab(&coupon, &borrower, "again").await;
    assert_eq!(again.code(), "ALREADY_CLAIMED", "{}", again.body);
    let others = presses(&h, &coupon, "after", 6).await;
    assert_eq!(count(&others, "SUCCESS"), 4, "the added units: {others:?}");
    h.pump().await;
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 6);
}

/// And until the sale's end, not the reconciler's now: a caller whose clock
/// runs ahead of the reconciler's borrows at an instant the check's `now`
/// has not reached. Here shard 1 has no share of the second wave (3 units
/// over 2 shards: 2 and 1, both in the first), so without rollover it is
/// dry from that wave on; its user borrows then on a clock ten seconds
/// ahead of the one the shard is checked on.
#[tokio::test]
async fn a_claim_borrowed_on_a_clock_ahead_of_the_reconciler_s_survives_a_restart() {
    let (mut server, h) = own_server().await;
    let mut def = h.coupon(3);
    def.shards = 2;
    def.rollover = false;
    def.grab_start_ms = T0;
    def.waves = vec![
        Wave { at_ms: T0, units: 2 },
        Wave {
            at_ms: T0 + MIN,
            units: 1,
        },
    ];
    let coupon = h.create(&def).await;
    h.clock.set(T0);
    assert!(server.cmd(&["SAVE"]).contains("OK"));
    h.clock.set(T0 + MIN);
    let borrower = homed_on(1, 2, "ahead");
    let won = h.grab(&coupon, &borrower, "r").await;
    assert_eq!(won.code(), "SUCCESS", "{}", won.body);
    assert!(
        won.body["data"]["grantId"].as_str().unwrap().contains("-0-"),
        "{}",
        won.body
    );
    h.pump().await;

    server.restart_from_snapshot();
    h.wait_for_redis().await;
    let repair = RedisRepair::new(h.redis.clone());
    let behind = T0 + MIN - 10_000;
    let look = repair.verify(&coupon, 1, behind, None).await.unwrap();
    assert!(matches!(look, Verification::Suspect { .. }), "{look:?}");
    let bound = DurableBound {
        high_water: 0,
        version: 0,
    };
    let settled = repair.verify(&coupon, 1, behind, Some(bound)).await.unwrap();
    assert_eq!(
        settled,
        Verification::Dropped,
        "shard 1 was dry from the second wave on"
    );
}

/// A snapshot older than a loss and its rebuild: restoring it brings back
/// the state from before the rebuild. Shard 2 had units then; the rebuild
/// gave it none (the two units DynamoDB does not account for went to shards
/// 0 and 1), so its user borrowed, which moved no sequence of shard 2's.
/// Judged on its own, the old state was confirmed with stock and without
/// the claim, and the user won a coupon the stock did not have. A rebuild
/// now raises each rebuilt shard's durable mark to the sequence it starts
/// at, so any state from before it is behind the mark, and dropped.
#[tokio::test]
async fn a_snapshot_from_before_a_rebuild_is_never_taken_for_the_rebuilt_state() {
    let (mut server, h) = own_server().await;
    let mut def = h.coupon(6);
    def.shards = 3;
    let coupon = h.create(&def).await;
    h.clock.set(T0);
    assert!(server.cmd(&["SAVE"]).contains("OK"));
    for shard in 0..2 {
        for i in 0..2 {
            let user = homed_on(shard, 3, &format!("s{shard}-{i}-"));
            assert_eq!(h.grab(&coupon, &user, "r").await.code(), "SUCCESS");
        }
    }
    h.pump().await;

    h.flush_redis().await;
    assert_eq!(h.reconcile(&def).await.shards_rebuilt, 3);
    // Time goes on before the restart: the restart's wait is an episode of
    // its own (opened at the instant the restart is found).
    h.clock.advance(1_000);
    let borrower = homed_on(2, 3, "u");
    let won = h.grab(&coupon, &borrower, "r").await;
    assert_eq!(won.code(), "SUCCESS", "{}", won.body);
    let grant = won.body["data"]["grantId"].as_str().unwrap().to_owned();
    assert!(
        !grant.contains("-2-"),
        "borrowed: the rebuild gave shard 2 nothing ({grant})"
    );
    h.pump().await;

    restart_and_check(&mut server, &h, &def).await;
    let again = h.grab(&coupon, &borrower, "again").await;
    assert_eq!(again.code(), "ALREADY_CLAIMED", "{}", again.body);
    let last = presses(&h, &coupon, "last", 3).await;
    assert_eq!(count(&last, "SUCCESS"), 1, "one unit left: {last:?}");
    h.pump().await;
    assert_eq!(h.facts().issued(&coupon).await.unwrap(), 6);
    assert!(h.facts().rejections(&coupon).await.unwrap().is_empty());
}
