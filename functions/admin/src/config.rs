//! The admin API's settings (also `couponctl`'s), read once at start.

use coupon_adapters::config::{dynamodb_calls, AwsCallSettings, RedisSettings, TableNames};
use coupon_domain::config::{metrics_namespace, reconcile_grace_ms, reconcile_send_window_ms, ConfigError, Env};

/// Everything the admin API (and `couponctl`) reads.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where Redis is and how calls to it are bounded.
    pub redis: RedisSettings,
    /// `COUPONS_TABLE` and `USER_COUPONS_TABLE`.
    pub tables: TableNames,
    /// `GRANT_QUEUE_URL`: where a reconciliation re-drives grants.
    pub queue_url: String,
    /// `GRANT_DLQ_URL` (optional).
    pub dlq_url: Option<String>,
    /// `MAX_TOTAL_STOCK` (10,000,000): the largest stock one coupon may have.
    pub max_total_stock: u64,
    /// `ADMIN_LOCAL_MODE` (false): read the operator from the
    /// `X-Admin-Actor` header when there is no IAM identity. Only for a
    /// local stack: in AWS the routes use IAM authorization and this stays
    /// off.
    pub local_mode: bool,
    /// `MAX_BODY_BYTES` (4096).
    pub max_body_bytes: usize,
    /// DynamoDB call settings.
    pub aws: AwsCallSettings,
    /// `RECONCILE_GRACE_MS` (30000), as for the scheduled reconciler.
    pub grace_ms: i64,
    /// `RECONCILE_SEND_WINDOW_MS` (3000, checked against
    /// `GRANT_SEND_BUDGET_MS`), as for the scheduled reconciler: an
    /// operator's reconcile is the same pass, and with a shorter window it
    /// could rebuild a lost shard before a grant decided ahead of the loss
    /// is claimed.
    pub send_window_ms: i64,
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
            redis: RedisSettings::from_env(env)?,
            tables: TableNames::from_env(env)?,
            queue_url: env.required("GRANT_QUEUE_URL")?,
            dlq_url: env.optional("GRANT_DLQ_URL"),
            max_total_stock: env.number("MAX_TOTAL_STOCK", 10_000_000, 1..=1_000_000_000)?,
            local_mode: env.flag("ADMIN_LOCAL_MODE", false)?,
            max_body_bytes: coupon_edge::max_body_bytes(env)?,
            aws: dynamodb_calls(env)?,
            grace_ms: reconcile_grace_ms(env)?,
            send_window_ms: reconcile_send_window_ms(env)?,
            metrics_namespace: metrics_namespace(env),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_local_mode_is_off_unless_asked_for() {
        let base = [
            ("REDIS_URL", "redis://h"),
            ("COUPONS_TABLE", "c"),
            ("USER_COUPONS_TABLE", "u"),
            ("CLAIMS_TABLE", "k"),
            ("GRANT_QUEUE_URL", "http://q"),
        ];
        assert!(!Config::read(&Env::from_pairs(&base)).unwrap().local_mode);
        let mut local = base.to_vec();
        local.push(("ADMIN_LOCAL_MODE", "true"));
        assert!(Config::read(&Env::from_pairs(&local)).unwrap().local_mode);
        let err = Config::read(&Env::from_pairs(&base[..4])).unwrap_err();
        assert_eq!(err.to_string(), "GRANT_QUEUE_URL is required but not set");
    }

    #[test]
    fn an_operator_s_reconcile_waits_the_send_window_the_scheduled_pass_waits() {
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = vec![
                ("REDIS_URL", "redis://h"),
                ("COUPONS_TABLE", "c"),
                ("USER_COUPONS_TABLE", "u"),
                ("CLAIMS_TABLE", "k"),
                ("GRANT_QUEUE_URL", "http://q"),
            ];
            pairs.extend_from_slice(extra);
            Config::read(&Env::from_pairs(&pairs))
        };
        assert_eq!(with(&[]).unwrap().send_window_ms, 3_000);
        let raised = with(&[("GRANT_SEND_BUDGET_MS", "5000"), ("RECONCILE_SEND_WINDOW_MS", "6000")]);
        assert_eq!(raised.unwrap().send_window_ms, 6_000);
        let err = with(&[("GRANT_SEND_BUDGET_MS", "5000")]).unwrap_err();
        assert!(
            err.to_string().starts_with("RECONCILE_SEND_WINDOW_MS is invalid"),
            "{err}"
        );
    }
}
