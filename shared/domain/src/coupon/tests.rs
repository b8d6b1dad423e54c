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
        waves: Vec::new(),
        rollover: true,
        device_required: false,
        mode: Default::default(),
        draw_at_ms: None,
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

fn waved() -> CouponDefinition {
    let mut def = sample();
    def.total_stock = 10;
    def.waves = vec![
        Wave { at_ms: 1_000, units: 3 },
        Wave { at_ms: 1_300, units: 3 },
        Wave { at_ms: 1_600, units: 4 },
    ];
    def
}

#[test]
fn a_definition_without_waves_is_stored_as_before_waves_existed() {
    let json = serde_json::to_string(&sample()).unwrap();
    assert!(!json.contains("waves") && !json.contains("rollover"), "{json}");
    let back: CouponDefinition = serde_json::from_str(&json).unwrap();
    assert_eq!((back.waves.len(), back.rollover), (0, true));
}

/// A way to break a waved definition, named.
type Breakage = (&'static str, Box<dyn Fn(&mut CouponDefinition)>);

#[test]
fn waves_must_sum_to_the_stock_in_time_order_inside_the_window() {
    assert!(waved().validate(1_000).is_ok());
    let broken: Vec<Breakage> = vec![
        ("units", Box::new(|d| d.waves[2].units = 3)),
        ("zero", Box::new(|d| d.waves[1].units = 0)),
        ("order", Box::new(|d| d.waves[1].at_ms = 1_000)),
        ("before", Box::new(|d| d.waves[0].at_ms = 999)),
        ("after", Box::new(|d| d.waves[2].at_ms = 2_000)),
        (
            "rollover alone",
            Box::new(|d| {
                d.waves.clear();
                d.rollover = false;
            }),
        ),
    ];
    for (what, breaks) in broken {
        let mut def = waved();
        breaks(&mut def);
        let field = field_of(&def);
        assert!(field == "waves" || field == "rollover", "{what}: {field}");
    }
    let mut many = waved();
    many.total_stock = 49;
    many.grab_end_ms = 5_000;
    many.waves = (0..49)
        .map(|i| Wave {
            at_ms: 1_000 + i,
            units: 1,
        })
        .collect();
    assert_eq!(field_of(&many), "waves");
}

#[test]
fn a_new_coupon_cannot_have_a_wave_in_the_past() {
    assert!(waved().validate_new(1_000, 1_000).is_ok());
    assert_eq!(waved().validate_new(1_000, 1_001).unwrap_err().field, "waves");
}

#[test]
fn each_shard_s_schedule_ends_at_its_share_and_the_shards_sum_to_each_release() {
    let def = waved();
    let shards: Vec<Vec<(i64, u64)>> = (0..def.shards).map(|i| def.shard_waves(i)).collect();
    for (i, schedule) in shards.iter().enumerate() {
        assert_eq!(schedule.last().unwrap().1, def.shard_stock(i as u32));
        assert!(schedule.windows(2).all(|w| w[0].1 <= w[1].1), "{schedule:?}");
    }
    for (k, wave) in def.waves.iter().enumerate() {
        let sum: u64 = shards.iter().map(|s| s[k].1).sum();
        assert_eq!(sum, def.released_by(wave.at_ms));
    }
    assert_eq!(def.released_by(999), 0);
    assert_eq!(def.released_by(1_299), 3);
    assert_eq!(def.next_wave_after(1_300), Some(1_600));
    assert_eq!(def.next_wave_after(1_600), None);
    assert_eq!(sample().released_by(0), sample().total_stock);
}

#[test]
fn the_wave_out_on_a_shard_is_its_share_of_the_last_release_and_none_before_the_first() {
    let def = waved();
    assert_eq!(def.shard_wave_out(0, 999), None);
    for at in [1_000, 1_300, 1_600] {
        let sum: u64 = (0..def.shards).map(|i| def.shard_wave_out(i, at + 1).unwrap().1).sum();
        let wave = def.waves.iter().find(|w| w.at_ms == at).unwrap();
        assert_eq!(sum, wave.units, "the shards' shares add up to wave {at}");
        assert!((0..def.shards).all(|i| def.shard_wave_out(i, at + 1).unwrap().0 == at));
    }
    assert_eq!(sample().shard_wave_out(0, 0), None, "no waves");
}

#[test]
fn a_lottery_draws_after_its_window_settles_one_coupon_per_winner_without_waves() {
    let lottery = || {
        let mut def = sample();
        def.mode = Mode::Lottery;
        def.valid_until_ms = 100_000;
        def.draw_at_ms = Some(def.grab_end_ms + crate::lottery::DRAW_SETTLE_MS);
        def
    };
    assert!(lottery().validate(1_000).is_ok());
    assert_eq!(lottery().sells_until_ms(), 12_000 + crate::lottery::DRAW_WINDOW_MS);
    let mut def = lottery();
    def.draw_at_ms = None;
    assert_eq!(field_of(&def), "drawAtMs");
    let mut def = lottery();
    def.draw_at_ms = Some(def.grab_end_ms);
    assert_eq!(field_of(&def), "drawAtMs", "registrations still landing");
    let mut def = lottery();
    def.draw_at_ms = Some(def.valid_until_ms);
    assert_eq!(field_of(&def), "drawAtMs");
    let mut def = lottery();
    def.per_user_limit = 2;
    assert_eq!(field_of(&def), "perUserLimit");
    let mut def = sample();
    def.draw_at_ms = Some(50_000);
    assert_eq!(field_of(&def), "drawAtMs", "a first-come coupon has no draw");
    assert_eq!(sample().sells_until_ms(), sample().grab_end_ms);
    let json = serde_json::to_value(lottery()).unwrap();
    assert_eq!(
        (json["mode"].as_str(), json["drawAtMs"].as_i64()),
        (Some("LOTTERY"), Some(12_000))
    );
    let plain = serde_json::to_value(sample()).unwrap();
    assert!(
        plain.get("mode").is_none() && plain.get("drawAtMs").is_none(),
        "old fingerprints kept"
    );
}
