//! Settled coupons: a pass skips a coupon whose selling is long over and
//! which it found balanced, until its definition changes, so a pass costs
//! what the coupons that may still need work cost.

use super::*;

/// A coupon whose window closed two hours before `NOW`, its `total` split
/// evenly over two shards that still hold it all.
fn ended(w: &World, id: &str, total: u64) -> CouponDefinition {
    let mut def = coupon(total, 2);
    def.coupon_id = CouponId::parse(id).unwrap();
    def.grab_end_ms = NOW - 2 * 3_600_000;
    w.shards.put(&def.coupon_id, 0, (total / 2) as i64);
    w.shards.put(&def.coupon_id, 1, (total - total / 2) as i64);
    w.facts.definitions.lock().unwrap().push(def.clone());
    def
}

#[tokio::test]
async fn an_ended_balanced_coupon_is_skipped_until_its_definition_changes() {
    let w = world();
    let def = ended(&w, "done", 4);
    let selling = coupon(2, 1);
    w.shards.put(&selling.coupon_id, 0, 2);
    w.facts.definitions.lock().unwrap().push(selling.clone());

    let first = w.reconciler.run().await.unwrap();
    assert_eq!(
        (first.coupons.len(), first.settled),
        (2, 0),
        "the first pass visits both"
    );
    assert_eq!(
        w.shards.settled.lock().unwrap().get(&def.coupon_id),
        Some(&def.fingerprint()),
        "and settles the ended one"
    );

    let second = w.reconciler.run().await.unwrap();
    assert_eq!(second.settled, 1);
    assert!(find(&second, &def.coupon_id).is_none(), "the settled coupon is skipped");
    assert!(find(&second, &selling.coupon_id).is_some(), "a selling one never is");

    // An operator's change (here: more stock) is another definition.
    let mut changed = def.clone();
    changed.total_stock = 6;
    w.shards.put(&def.coupon_id, 1, 4);
    {
        let mut defs = w.facts.definitions.lock().unwrap();
        defs.retain(|d| d.coupon_id != def.coupon_id);
        defs.push(changed.clone());
    }
    let third = w.reconciler.run().await.unwrap();
    assert!(
        find(&third, &def.coupon_id).is_some(),
        "a changed definition is visited again"
    );
    assert_eq!(
        w.shards.settled.lock().unwrap().get(&def.coupon_id),
        Some(&changed.fingerprint()),
        "and settled under its new fingerprint"
    );
}

#[tokio::test]
async fn a_coupon_ended_within_the_hour_or_off_balance_or_with_a_grant_pending_is_not_settled() {
    let w = world();
    let mut recent = ended(&w, "recent", 2);
    recent.grab_end_ms = NOW - SETTLED_AFTER_MS + 1;
    w.facts
        .definitions
        .lock()
        .unwrap()
        .retain(|d| d.coupon_id != recent.coupon_id);
    w.facts.definitions.lock().unwrap().push(recent.clone());
    let off = ended(&w, "off", 4);
    w.shards.put(&off.coupon_id, 1, 1); // one unit neither in Redis nor issued
    let pending = ended(&w, "pending", 2);
    let mut g = grant(1, 0, "u1", NOW - 60_000);
    g.coupon_id = pending.coupon_id.clone();
    g.grant_id = GrantId::new(&pending.coupon_id, 0, 1);
    w.shards.put(&pending.coupon_id, 0, 0);
    w.shards.push(&g);

    let report = w.reconciler.run().await.unwrap();

    assert_eq!(report.coupons.len(), 3);
    assert!(find(&report, &off.coupon_id).unwrap().drift != 0);
    assert!(
        w.shards.settled.lock().unwrap().is_empty(),
        "{:?}",
        w.shards.settled.lock().unwrap()
    );
}

#[tokio::test]
async fn the_list_of_settled_coupons_lost_with_the_cache_costs_one_full_pass() {
    let w = world();
    let def = ended(&w, "done", 2);
    w.reconciler.run().await.unwrap();
    w.shards.settled.lock().unwrap().clear();

    let again = w.reconciler.run().await.unwrap();
    assert!(find(&again, &def.coupon_id).is_some(), "visited once more");
    let after = w.reconciler.run().await.unwrap();
    assert_eq!((after.coupons.len(), after.settled), (0, 1), "then skipped again");
}
