use super::*;
use crate::audit::Actor;
use crate::coupon::Wave;

#[test]
fn actors_are_printable_ascii_of_bounded_length() {
    assert!(Actor::parse("arn:aws:iam::123456789012:user/ops").is_ok());
    assert!(Actor::parse("").is_err());
    assert!(Actor::parse("a\nforged log line").is_err());
    assert!(Actor::parse(&"a".repeat(257)).is_err());
    assert!(Actor::parse("运营").is_err());
}

#[test]
fn a_rate_change_refuses_unknown_fields() {
    assert!(serde_json::from_str::<RateChange>(r#"{"ratePerSec": 5}"#).is_ok());
    assert!(serde_json::from_str::<RateChange>(r#"{"ratePerSec": 5, "x": 1}"#).is_err());
    assert!(serde_json::from_str::<RateChange>(r#"{"ratePerSec": -5}"#).is_err());
}

#[test]
fn added_stock_joins_the_wave_out_or_without_rollover_the_next_one_if_it_is_seconds_away() {
    let mut def = crate::coupon::tests::sample();
    def.total_stock = 10;
    def.waves = vec![
        Wave {
            at_ms: 100_000,
            units: 4,
        },
        Wave {
            at_ms: 200_000,
            units: 6,
        },
    ];
    assert_eq!(wave_for_added_stock(&def, 0), Some(0), "before any wave: the first");
    assert_eq!(wave_for_added_stock(&def, 195_000), Some(0));
    assert_eq!(wave_for_added_stock(&def, 250_000), Some(1), "the last one out");
    def.rollover = false;
    assert_eq!(wave_for_added_stock(&def, 189_999), Some(0));
    assert_eq!(wave_for_added_stock(&def, 195_000), Some(1), "it would expire in 5 s");
    def.waves.clear();
    assert_eq!(wave_for_added_stock(&def, 0), None);
}
