//! The grab function's settings, read once at cold start from the
//! environment (the SAM template sets them). A missing or malformed one
//! fails the start with a message that names the variable.

use coupon_adapters::config::{AwsCallSettings, RedisSettings};
use coupon_domain::center::CenterSettings;
use coupon_domain::config::{metrics_namespace, ConfigError, Env, RiskLimits};
use coupon_domain::grab::SEND_BUDGET_MS;
use coupon_edge::EdgeSettings;

/// Everything the grab function reads.
#[derive(Debug, Clone)]
pub struct Config {
    /// Redis (including `IDEMPOTENCY_TTL_SECS`, how long a request id's
    /// outcome is kept).
    pub redis: RedisSettings,
    /// `GRANT_QUEUE_URL`: where winners go.
    pub queue_url: String,
    /// `REPAIR_QUEUE_URL`: where a coupon whose Redis state is gone is
    /// reported, so the reconciler rebuilds it at once.
    pub repair_queue_url: String,
    /// `COUPONS_TABLE`: read (one item) only when Redis knows nothing of a
    /// coupon, to tell "lost" (BUSY) from "never created" (404), and its
    /// `live` index queried for the coupon center.
    pub coupons_table: String,
    /// `CLAIMS_TABLE`: each win's claim is put there before its grant is
    /// sent (what a rebuild after a cache loss reads of the grants on
    /// their way).
    pub claims_table: String,
    /// `SQS_MAX_ATTEMPTS` (3) and `SQS_TIMEOUT_MS` (1000).
    pub sqs: AwsCallSettings,
    /// Risk rules.
    pub risk: RiskLimits,
    /// Identity and request limits at the HTTP edge.
    pub http: EdgeSettings,
    /// `SOLD_OUT_MEMORY_MS` (1000): how long an instance remembers a sell-out.
    pub sold_out_memory_ms: u64,
    /// `GRANT_SEND_BUDGET_MS` (2000): a win's send is over within this long
    /// of its decision, or not made (BUSY). Keep it below the reconciler's
    /// `RECONCILE_SEND_WINDOW_MS` (3000) by the clock skew between them.
    pub send_budget_ms: i64,
    /// `CENTER_CACHE_MS` (2000, at most 30000) and `CENTER_FEW_PERCENT`
    /// (10): the coupon center's copy of the live coupons and its stock
    /// levels.
    pub center: CenterSettings,
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
            queue_url: queue_url(env, "GRANT_QUEUE_URL")?,
            repair_queue_url: queue_url(env, "REPAIR_QUEUE_URL")?,
            coupons_table: env.required("COUPONS_TABLE")?,
            claims_table: env.required("CLAIMS_TABLE")?,
            sqs: AwsCallSettings {
                max_attempts: env.number("SQS_MAX_ATTEMPTS", 3, 1..=10)?,
                operation_timeout_ms: env.number("SQS_TIMEOUT_MS", 1_000, 50..=30_000)?,
            },
            risk: RiskLimits::from_env(env)?,
            http: EdgeSettings::from_env(env)?,
            sold_out_memory_ms: env.number("SOLD_OUT_MEMORY_MS", 1_000, 0..=60_000)?,
            send_budget_ms: env.number("GRANT_SEND_BUDGET_MS", SEND_BUDGET_MS, 100..=30_000)?,
            center: CenterSettings {
                cache_ms: env.number("CENTER_CACHE_MS", 2_000, 0..=30_000)?,
                few_percent: env.number("CENTER_FEW_PERCENT", 10, 1..=100)?,
            },
            metrics_namespace: metrics_namespace(env),
        })
    }
}

fn queue_url(env: &Env, var: &'static str) -> Result<String, ConfigError> {
    let url = env.required(var)?;
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(ConfigError::Invalid {
            var,
            problem: "must be an http(s) queue URL".into(),
        });
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &[(&str, &str)] = &[
        ("REDIS_URL", "redis://:hunter2-pw@127.0.0.1:6379"),
        ("GRANT_QUEUE_URL", "http://localhost:4566/000000000000/grants"),
        ("REPAIR_QUEUE_URL", "http://localhost:4566/000000000000/repairs"),
        ("COUPONS_TABLE", "coupons"),
        ("CLAIMS_TABLE", "claims"),
    ];

    fn env_with(extra: &[(&str, &str)]) -> Env {
        let mut pairs = BASE.to_vec();
        pairs.extend_from_slice(extra);
        Env::from_pairs(&pairs)
    }

    #[test]
    fn defaults_apply_when_only_the_required_settings_are_given() {
        let cfg = Config::read(&env_with(&[])).unwrap();
        assert!(!cfg.http.trust_identity_headers);
        assert_eq!(cfg.risk.daily_claims_per_user, 5);
        assert_eq!(cfg.http.max_body_bytes, 4096);
        assert_eq!(cfg.redis.idempotency_ttl_secs, 86_400);
        assert_eq!(cfg.center, CenterSettings::default());
    }

    #[test]
    fn a_center_cache_beyond_its_bound_names_the_variable() {
        let err = Config::read(&env_with(&[("CENTER_CACHE_MS", "600000")])).unwrap_err();
        assert!(err.to_string().starts_with("CENTER_CACHE_MS is invalid"), "{err}");
        let err = Config::read(&env_with(&[("CENTER_FEW_PERCENT", "0")])).unwrap_err();
        assert!(err.to_string().starts_with("CENTER_FEW_PERCENT is invalid"), "{err}");
    }

    #[test]
    fn a_missing_queue_url_names_the_variable() {
        let err = Config::read(&Env::from_pairs(&BASE[..1])).unwrap_err();
        assert_eq!(err.to_string(), "GRANT_QUEUE_URL is required but not set");
    }

    #[test]
    fn a_repair_queue_that_is_not_a_url_names_the_variable() {
        let err = Config::read(&env_with(&[("REPAIR_QUEUE_URL", "repairs")])).unwrap_err();
        assert!(err.to_string().starts_with("REPAIR_QUEUE_URL is invalid"), "{err}");
    }

    #[test]
    fn a_malformed_number_names_the_variable_and_not_the_value() {
        let err = Config::read(&env_with(&[("SOLD_OUT_MEMORY_MS", "soon")])).unwrap_err();
        assert!(err.to_string().starts_with("SOLD_OUT_MEMORY_MS is invalid"));
        let err = Config::read(&env_with(&[("MAX_BODY_BYTES", "1")])).unwrap_err();
        assert!(err.to_string().contains("between 64"));
    }

    #[test]
    fn the_redis_url_is_never_printed() {
        let cfg = Config::read(&env_with(&[])).unwrap();
        assert!(!format!("{cfg:?}").contains("hunter2-pw"));
    }
}
