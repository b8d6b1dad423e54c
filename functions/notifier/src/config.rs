//! The notifier's settings, read once at cold start.

use coupon_adapters::config::AwsCallSettings;
use coupon_domain::config::{metrics_namespace, ConfigError, Env};

/// Everything the notifier reads.
#[derive(Debug, Clone)]
pub struct Config {
    /// `EVENT_BUS_NAME`: the custom bus coupon events go to.
    pub bus: String,
    /// `EVENTS_MAX_ATTEMPTS` (3), `EVENTS_TIMEOUT_MS` (5000): one
    /// `PutEvents` call; the stream retries the batch beyond that.
    pub events: AwsCallSettings,
    /// `METRICS_NAMESPACE` (`CouponGrab`).
    pub metrics_namespace: String,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::read(&Env::process())
    }

    /// Reads any [`Env`].
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            bus: env.required("EVENT_BUS_NAME")?,
            events: AwsCallSettings {
                max_attempts: env.number("EVENTS_MAX_ATTEMPTS", 3, 1..=10)?,
                operation_timeout_ms: env.number("EVENTS_TIMEOUT_MS", 5_000, 100..=60_000)?,
            },
            metrics_namespace: metrics_namespace(env),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bus_is_required_and_named_when_missing() {
        let err = Config::read(&Env::from_pairs(&[])).unwrap_err();
        assert_eq!(err.to_string(), "EVENT_BUS_NAME is required but not set");
        let cfg = Config::read(&Env::from_pairs(&[("EVENT_BUS_NAME", "coupons")])).unwrap();
        assert_eq!((cfg.bus.as_str(), cfg.events.max_attempts), ("coupons", 3));
    }
}
