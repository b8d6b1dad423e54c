//! The wallet's settings, read once at cold start.

use coupon_adapters::config::{dynamodb_calls, AwsCallSettings, RedisSettings, TableNames};
use coupon_domain::config::{reminder_lead_ms, ConfigError, Env};
use coupon_edge::EdgeSettings;

/// Everything the wallet (reading coupons) reads.
#[derive(Debug, Clone)]
pub struct Config {
    /// Redis, for grants still in an outbox.
    pub redis: RedisSettings,
    /// `COUPONS_TABLE` and `USER_COUPONS_TABLE`.
    pub tables: TableNames,
    /// DynamoDB call settings.
    pub dynamodb: AwsCallSettings,
    /// Identity and request limits.
    pub http: EdgeSettings,
    /// `REMINDER_LEAD_MS` (5 minutes): when a reminder goes out, as the
    /// subscriber is told.
    pub reminder_lead_ms: i64,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::read(&Env::process())
    }

    /// Reads any [`Env`].
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            redis: RedisSettings::from_env(env)?,
            tables: TableNames::from_env(env)?,
            dynamodb: dynamodb_calls(env)?,
            http: EdgeSettings::from_env(env)?,
            reminder_lead_ms: reminder_lead_ms(env)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wallet_needs_redis_and_both_tables() {
        let err = Config::read(&Env::from_pairs(&[("COUPONS_TABLE", "c")])).unwrap_err();
        assert_eq!(err.to_string(), "REDIS_URL is required but not set");
        let cfg = Config::read(&Env::from_pairs(&[
            ("REDIS_URL", "redis://h"),
            ("COUPONS_TABLE", "c"),
            ("USER_COUPONS_TABLE", "u"),
            ("CLAIMS_TABLE", "k"),
        ]))
        .unwrap();
        assert!(!cfg.http.trust_identity_headers);
    }
}
