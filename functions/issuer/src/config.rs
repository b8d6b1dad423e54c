//! The issuer's settings, read once at cold start.

use coupon_adapters::config::{dynamodb_calls, AwsCallSettings, TableNames};
use coupon_domain::config::{metrics_namespace, ConfigError, Env};

/// Everything the issuer reads.
#[derive(Debug, Clone)]
pub struct Config {
    /// `COUPONS_TABLE` and `USER_COUPONS_TABLE`.
    pub tables: TableNames,
    /// DynamoDB call settings.
    pub dynamodb: AwsCallSettings,
    /// `ISSUER_CONCURRENCY` (16): messages of one batch issued at once.
    pub concurrency: usize,
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
            tables: TableNames::from_env(env)?,
            dynamodb: dynamodb_calls(env)?,
            concurrency: env.number("ISSUER_CONCURRENCY", 16, 1..=256)?,
            metrics_namespace: metrics_namespace(env),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_are_required_and_named_when_missing() {
        let err = Config::read(&Env::from_pairs(&[("COUPONS_TABLE", "c")])).unwrap_err();
        assert_eq!(err.to_string(), "USER_COUPONS_TABLE is required but not set");
        let cfg = Config::read(&Env::from_pairs(&[
            ("COUPONS_TABLE", "c"),
            ("USER_COUPONS_TABLE", "u"),
            ("CLAIMS_TABLE", "k"),
        ]))
        .unwrap();
        assert_eq!(cfg.concurrency, 16);
    }
}
