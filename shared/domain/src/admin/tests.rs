use super::*;
use crate::audit::Actor;

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
