//! The reconciler's settings, read once at cold start. Redis is named by
//! URL (or host), or found through the ElastiCache API by replication group.

use coupon_adapters::config::{dynamodb_calls, AwsCallSettings, RedisSettings, TableNames};
use coupon_domain::config::{
    metrics_namespace, reconcile_grace_ms, reconcile_send_window_ms, reminder_lead_ms, ConfigError, Env,
};

/// The URL a discovered group's settings carry until ElastiCache names the
/// endpoint.
const DISCOVERED: &str = "redis://discovered-at-cold-start";

/// Where the reconciler finds Redis.
#[derive(Debug, Clone)]
pub enum RedisSource {
    /// `REDIS_URL` is set.
    Url(RedisSettings),
    /// `ELASTICACHE_REPLICATION_GROUP_ID` names the group to look up; the
    /// other Redis settings (timeouts, key prefix, the auth secret) are
    /// read at cold start like every setting, and the URL found replaces
    /// the placeholder's.
    ReplicationGroup {
        /// The group's id.
        group: String,
        /// Every Redis setting but the URL.
        settings: RedisSettings,
    },
}

/// Everything the reconciler reads.
#[derive(Debug, Clone)]
pub struct Config {
    /// Where Redis is.
    pub redis: RedisSource,
    /// `ELASTICACHE_REPLICATION_GROUP_ID`, reported on when set.
    pub replication_group: Option<String>,
    /// `COUPONS_TABLE` and `USER_COUPONS_TABLE`.
    pub tables: TableNames,
    /// `GRANT_QUEUE_URL`: where re-driven grants go.
    pub queue_url: String,
    /// `GRANT_DLQ_URL`: whose depth is reported (optional).
    pub dlq_url: Option<String>,
    /// AWS call settings.
    pub aws: AwsCallSettings,
    /// `RECONCILE_GRACE_MS` (30000): younger grants are not re-driven.
    pub grace_ms: i64,
    /// `RECONCILE_RETENTION_HOURS` (168): ended coupons are visited this long.
    pub retention_hours: i64,
    /// `RECONCILE_BACKLOG_MS` (900000): while the grant queue holds
    /// messages, pending grants younger than this are not re-driven (they
    /// may be in the backlog); default visibility 180 s x 5 receives.
    pub backlog_ms: i64,
    /// `RECONCILE_SEND_WINDOW_MS` (3000): how long after a pass first finds
    /// a shard restarted, lost or dropped its check or rebuild waits for
    /// sends decided before: above the grab's send budget
    /// (`GRANT_SEND_BUDGET_MS`, 2000) plus the clock skew between instances.
    pub send_window_ms: i64,
    /// `RECONCILE_REPAIR_FOLLOW_MS` (20000): how long a repair request's
    /// invocation keeps passing over a coupon whose repair waits for its
    /// grants on their way, so the sale reopens as soon as they have
    /// arrived. Below the function's timeout.
    pub repair_follow_ms: u64,
    /// `METRICS_NAMESPACE` (`CouponGrab`).
    pub metrics_namespace: String,
    /// `EVENT_BUS_NAME`: where reminders go (`CouponSaleStarting`); no
    /// reminders are sent without it.
    pub event_bus: Option<String>,
    /// `REMINDER_LEAD_MS` (300000): how long before an opening they go.
    pub reminder_lead_ms: i64,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::read(&Env::process())
    }

    /// Reads any [`Env`].
    pub fn read(env: &Env) -> Result<Self, ConfigError> {
        let replication_group = env.optional("ELASTICACHE_REPLICATION_GROUP_ID");
        let redis = match (RedisSettings::is_configured(env), &replication_group) {
            (true, _) => RedisSource::Url(RedisSettings::from_env(env)?),
            (false, Some(group)) => RedisSource::ReplicationGroup {
                group: group.clone(),
                settings: RedisSettings::with_url(env, DISCOVERED.into())?,
            },
            (false, None) => {
                return Err(ConfigError::Missing(
                    "REDIS_URL (or REDIS_HOST, or ELASTICACHE_REPLICATION_GROUP_ID)",
                ))
            }
        };
        let send_window_ms = reconcile_send_window_ms(env)?;
        Ok(Self {
            redis,
            replication_group,
            tables: TableNames::from_env(env)?,
            queue_url: env.required("GRANT_QUEUE_URL")?,
            dlq_url: env.optional("GRANT_DLQ_URL"),
            aws: dynamodb_calls(env)?,
            grace_ms: reconcile_grace_ms(env)?,
            retention_hours: env.number("RECONCILE_RETENTION_HOURS", 168, 1..=24 * 90)?,
            backlog_ms: env.number("RECONCILE_BACKLOG_MS", 900_000, 0..=86_400_000)?,
            send_window_ms,
            repair_follow_ms: env.number("RECONCILE_REPAIR_FOLLOW_MS", 20_000, 0..=600_000)?,
            metrics_namespace: metrics_namespace(env),
            event_bus: env.optional("EVENT_BUS_NAME"),
            reminder_lead_ms: reminder_lead_ms(env)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every setting the reconciler requires but Redis's.
    const TABLES: [(&str, &str); 4] = [
        ("COUPONS_TABLE", "c"),
        ("USER_COUPONS_TABLE", "u"),
        ("CLAIMS_TABLE", "k"),
        ("GRANT_QUEUE_URL", "http://q"),
    ];

    #[test]
    fn the_reconciler_needs_a_redis_url_or_a_replication_group() {
        let tables = TABLES;
        let err = Config::read(&Env::from_pairs(&tables)).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("REDIS_URL (or REDIS_HOST, or ELASTICACHE_REPLICATION_GROUP_ID)"));
        let mut with_group = tables.to_vec();
        with_group.push(("ELASTICACHE_REPLICATION_GROUP_ID", "coupons"));
        let cfg = Config::read(&Env::from_pairs(&with_group)).unwrap();
        assert!(matches!(cfg.redis, RedisSource::ReplicationGroup { ref group, .. } if group == "coupons"));
    }

    #[test]
    fn the_grace_period_and_retention_have_bounds() {
        let env = Env::from_pairs(&[
            ("REDIS_URL", "redis://h"),
            ("COUPONS_TABLE", "c"),
            ("USER_COUPONS_TABLE", "u"),
            ("CLAIMS_TABLE", "k"),
            ("GRANT_QUEUE_URL", "http://q"),
            ("RECONCILE_RETENTION_HOURS", "0"),
        ]);
        let err = Config::read(&env).unwrap_err();
        assert!(err.to_string().starts_with("RECONCILE_RETENTION_HOURS is invalid"));
    }

    #[test]
    fn a_send_window_not_a_second_above_the_send_budget_fails_the_start() {
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = vec![("REDIS_URL", "redis://h")];
            pairs.extend_from_slice(&TABLES);
            pairs.extend_from_slice(extra);
            Config::read(&Env::from_pairs(&pairs))
        };
        assert_eq!(with(&[]).unwrap().send_window_ms, 3_000);
        let err = with(&[("RECONCILE_SEND_WINDOW_MS", "2500")]).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("RECONCILE_SEND_WINDOW_MS is invalid: must be at least 3000 ms"));
        let err = with(&[("GRANT_SEND_BUDGET_MS", "5000")]).unwrap_err();
        assert!(err.to_string().contains("at least 6000 ms"), "{err}");
        let ok = with(&[("GRANT_SEND_BUDGET_MS", "5000"), ("RECONCILE_SEND_WINDOW_MS", "6000")]);
        assert_eq!(ok.unwrap().send_window_ms, 6_000);
    }
}
