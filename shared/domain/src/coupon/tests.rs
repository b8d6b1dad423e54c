use super::*;

pub(crate) fn sample() -> CouponDefinition {
    CouponDefinition {
        coupon_id: CouponId::parse("c1").unwrap(),
        name: "20 off".into(),
        amount: 2000,
        total_stock: 10,
        per_user_limit: 1,
        min_member_level: 0,
        grab_start_ms: 1_000,
        grab_end_ms: 2_000,
        valid_from_ms: 1_000,
        valid_until_ms: 10_000,
        shards: 3,
        rate_per_sec: 0,
        burst: 0,
        status: CouponStatus::Online,
    }
}

fn field_of(def: &CouponDefinition) -> &'static str {
    def.validate(1_000).expect_err("refused").field
}

#[test]
fn times_must_be_real_instants_and_each_gets_its_field_named() {
    assert!(sample().validate(1_000).is_ok());
    let mut def = sample();
    def.grab_start_ms = -8_589_934_591;
    assert_eq!(field_of(&def), "grabStartMs");
    let mut def = sample();
    def.valid_until_ms = MAX_TIME_MS + 1;
    assert_eq!(field_of(&def), "validUntilMs");
}

#[test]
fn validity_may_not_end_before_the_grab_window_does() {
    let mut def = sample();
    def.valid_until_ms = def.grab_end_ms - 1;
    assert_eq!(field_of(&def), "validUntilMs");
    def.valid_until_ms = def.grab_end_ms;
    assert!(def.validate(1_000).is_ok(), "ending together is fine");
}

#[test]
fn a_new_coupon_whose_window_is_over_is_refused_but_an_old_one_validates() {
    let def = sample();
    assert!(def.validate_new(1_000, def.grab_end_ms - 1).is_ok());
    let err = def.validate_new(1_000, def.grab_end_ms).unwrap_err();
    assert_eq!(
        (err.field, err.problem.as_str()),
        ("grabEndMs", "the grab window is already over")
    );
    assert!(def.validate(1_000).is_ok(), "changes to a past coupon still validate");
}

#[test]
fn the_rate_has_the_same_ceiling_at_create_and_change() {
    let mut def = sample();
    def.rate_per_sec = MAX_RATE_PER_SEC + 1;
    assert_eq!(field_of(&def), "ratePerSec");
}

#[test]
fn shard_stock_sums_to_the_total() {
    let mut def = sample();
    for (total, shards) in [(10, 3), (100, 4), (7, 7), (1, 1), (65, 64)] {
        def.total_stock = total;
        def.shards = shards;
        let sum: u64 = (0..shards).map(|i| def.shard_stock(i)).sum();
        assert_eq!(sum, total, "{total} over {shards}");
    }
}

#[test]
fn counter_caps_sum_to_the_total() {
    let mut def = sample();
    for total in [1, 7, 999, 1_000, 1_001, 16_001, 1_000_000] {
        def.total_stock = total;
        let items = def.counter_items();
        assert!((1..=16).contains(&items));
        let sum: u64 = (0..items).map(|i| def.counter_cap(i)).sum();
        assert_eq!(sum, total);
    }
}

#[test]
fn adding_stock_only_grows_caps_and_keeps_them_summing_to_the_total() {
    for (before, added) in [
        (10, 5),
        (1, 1),
        (999, 2),
        (1_000, 1),
        (1_500, 20_000),
        (16_000, 7),
        (3, 0),
    ] {
        let additions = counter_additions(before, added);
        assert_eq!(additions.iter().map(|a| a.1).sum::<u64>(), added, "{before}+{added}");
        let new_items = counter_items_for(before + added);
        let old_items = counter_items_for(before);
        assert!(new_items >= old_items);
        for k in old_items..new_items {
            assert!(additions.iter().any(|a| a.0 == k && a.2), "item {k} must be created");
        }
        assert!(additions.iter().all(|a| a.2 == (a.0 >= old_items)));
    }
}

#[test]
fn a_window_that_ends_before_it_starts_is_refused() {
    let mut def = sample();
    def.grab_end_ms = def.grab_start_ms;
    assert_eq!(def.validate(1_000).unwrap_err().field, "grabEndMs");
}

#[test]
fn more_shards_than_stock_is_refused() {
    let mut def = sample();
    def.shards = 11;
    assert_eq!(def.validate(1_000).unwrap_err().field, "shards");
}

#[test]
fn stock_above_the_configured_maximum_is_refused() {
    assert_eq!(sample().validate(9).unwrap_err().field, "totalStock");
    assert!(sample().validate(10).is_ok());
}

#[test]
fn unknown_fields_are_refused() {
    let mut json = serde_json::to_value(sample()).unwrap();
    json["surprise"] = 1.into();
    assert!(serde_json::from_value::<CouponDefinition>(json).is_err());
}

#[test]
fn the_fingerprint_changes_with_the_definition() {
    let a = sample();
    let mut b = sample();
    assert_eq!(a.fingerprint(), b.fingerprint());
    b.total_stock += 1;
    assert_ne!(a.fingerprint(), b.fingerprint());
}
