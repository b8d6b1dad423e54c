//! Typed configuration, read once at cold start.
//!
//! Every setting is an environment variable (the Lambda way; the SAM template
//! sets them). A missing or malformed one fails the start with a message that
//! names the variable, instead of failing the first request. Values that are
//! secrets (the Redis URL may carry a password) are never logged: the
//! `Debug` impls print them redacted.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

/// A setting that is missing or malformed. The message names the variable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A required variable is not set.
    #[error("{0} is required but not set")]
    Missing(&'static str),
    /// A variable is set to something unusable.
    #[error("{var} is invalid: {problem}")]
    Invalid {
        /// The variable.
        var: &'static str,
        /// What is wrong (never the value itself, which may be secret).
        problem: String,
    },
}

/// Looks a variable up.
type Lookup = Box<dyn Fn(&str) -> Option<String> + Send + Sync>;

/// Where settings come from: the process environment, or a map in tests.
pub struct Env {
    lookup: Lookup,
}

impl Env {
    /// The process environment.
    pub fn process() -> Self {
        Self {
            lookup: Box::new(|k| std::env::var(k).ok()),
        }
    }

    /// A fixed map (tests, benchmarks).
    pub fn from_map(map: HashMap<String, String>) -> Self {
        Self {
            lookup: Box::new(move |k| map.get(k).cloned()),
        }
    }

    /// A fixed list of pairs.
    pub fn from_pairs(pairs: &[(&str, &str)]) -> Self {
        Self::from_map(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())
    }

    fn raw(&self, var: &str) -> Option<String> {
        (self.lookup)(var).filter(|v| !v.trim().is_empty())
    }

    /// A required string.
    pub fn required(&self, var: &'static str) -> Result<String, ConfigError> {
        self.raw(var).ok_or(ConfigError::Missing(var))
    }

    /// An optional string.
    pub fn optional(&self, var: &'static str) -> Option<String> {
        self.raw(var)
    }

    /// A number within `range`, or `default` when unset.
    pub fn number<T>(&self, var: &'static str, default: T, range: std::ops::RangeInclusive<T>) -> Result<T, ConfigError>
    where
        T: FromStr + PartialOrd + fmt::Display + Copy,
    {
        let Some(raw) = self.raw(var) else {
            return Ok(default);
        };
        let value: T = raw.trim().parse().map_err(|_| ConfigError::Invalid {
            var,
            problem: "not a number".into(),
        })?;
        if !range.contains(&value) {
            return Err(ConfigError::Invalid {
                var,
                problem: format!("must be between {} and {}", range.start(), range.end()),
            });
        }
        Ok(value)
    }

    /// `true`/`false` (also `1`/`0`, `yes`/`no`), or `default` when unset.
    pub fn flag(&self, var: &'static str, default: bool) -> Result<bool, ConfigError> {
        match self.raw(var).map(|v| v.trim().to_ascii_lowercase()) {
            None => Ok(default),
            Some(v) if matches!(v.as_str(), "true" | "1" | "yes") => Ok(true),
            Some(v) if matches!(v.as_str(), "false" | "0" | "no") => Ok(false),
            Some(_) => Err(ConfigError::Invalid {
                var,
                problem: "expected true or false".into(),
            }),
        }
    }
}

/// How to reach Redis and how to lay out keys.
#[derive(Clone)]
pub struct RedisSettings {
    /// `redis://` or `rediss://` (TLS) URL; may hold the auth token.
    pub url: String,
    /// Prepended to every key (no braces).
    pub key_prefix: String,
    /// Per-command response timeout.
    pub response_timeout_ms: u64,
    /// Connect timeout.
    pub connect_timeout_ms: u64,
    /// `REDIS_CLUSTER`: the URL is a Redis Cluster node (ElastiCache cluster
    /// mode enabled); commands are routed by slot.
    pub cluster: bool,
    /// `REDIS_AUTH_SECRET_ARN`: a Secrets Manager secret holding the auth
    /// token, read once at cold start (never put in an environment variable).
    pub auth_secret_arn: Option<String>,
}

impl fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSettings")
            .field("url", &"<redacted>")
            .field("key_prefix", &self.key_prefix)
            .field("response_timeout_ms", &self.response_timeout_ms)
            .field("connect_timeout_ms", &self.connect_timeout_ms)
            .field("cluster", &self.cluster)
            .field("auth_secret_arn", &self.auth_secret_arn)
            .finish()
    }
}

impl RedisSettings {
    /// `REDIS_URL`, or `REDIS_HOST` with `REDIS_PORT` (6379) and `REDIS_TLS`
    /// (true) as a deployment sets them from the ElastiCache resource; then
    /// `REDIS_KEY_PREFIX`, `REDIS_TIMEOUT_MS`, `REDIS_CONNECT_TIMEOUT_MS`,
    /// `REDIS_CLUSTER`, `REDIS_AUTH_SECRET_ARN`.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        match Self::url_from_parts(env)? {
            Some(url) => Self::with_url(env, url),
            None => Self::with_url(env, env.required("REDIS_URL")?),
        }
    }

    /// True if the environment names a Redis endpoint at all.
    pub fn is_configured(env: &Env) -> bool {
        env.optional("REDIS_URL").is_some() || env.optional("REDIS_HOST").is_some()
    }

    fn url_from_parts(env: &Env) -> Result<Option<String>, ConfigError> {
        if env.optional("REDIS_URL").is_some() {
            return Ok(None);
        }
        let Some(host) = env.optional("REDIS_HOST") else {
            return Ok(None);
        };
        if host.contains(['/', '@', ' ', '{', '}']) {
            return Err(ConfigError::Invalid {
                var: "REDIS_HOST",
                problem: "must be a host name or address".into(),
            });
        }
        let port: u16 = env.number("REDIS_PORT", 6379, 1..=65_535)?;
        let scheme = if env.flag("REDIS_TLS", true)? {
            "rediss"
        } else {
            "redis"
        };
        Ok(Some(format!("{scheme}://{host}:{port}")))
    }

    /// The same settings with `token` as the password in the URL.
    pub fn with_auth_token(mut self, token: &str) -> Self {
        if let Some((scheme, rest)) = self.url.split_once("://") {
            let host = rest.rsplit_once('@').map(|(_, h)| h).unwrap_or(rest);
            self.url = format!("{scheme}://:{token}@{host}");
        }
        self
    }

    /// The other Redis settings with a URL found elsewhere (ElastiCache
    /// discovery), for a function that has no `REDIS_URL`.
    pub fn with_url(env: &Env, url: String) -> Result<Self, ConfigError> {
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            return Err(ConfigError::Invalid {
                var: "REDIS_URL",
                problem: "must start with redis:// or rediss://".into(),
            });
        }
        let key_prefix = env.optional("REDIS_KEY_PREFIX").unwrap_or_default();
        if key_prefix.len() > 64 || key_prefix.contains(['{', '}']) || key_prefix.chars().any(char::is_whitespace) {
            return Err(ConfigError::Invalid {
                var: "REDIS_KEY_PREFIX",
                problem: "at most 64 characters, no braces or white space".into(),
            });
        }
        Ok(Self {
            url,
            key_prefix,
            response_timeout_ms: env.number("REDIS_TIMEOUT_MS", 500, 10..=30_000)?,
            connect_timeout_ms: env.number("REDIS_CONNECT_TIMEOUT_MS", 1_000, 10..=30_000)?,
            cluster: env.flag("REDIS_CLUSTER", false)?,
            auth_secret_arn: env.optional("REDIS_AUTH_SECRET_ARN"),
        })
    }
}

/// The risk rules' limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RiskLimits {
    /// Claims per user per day across coupons; 0 = off.
    pub daily_claims_per_user: u32,
    /// Distinct users per IP per day; 0 = off.
    pub users_per_ip: u32,
    /// Where the risk day starts: minutes east of UTC (480 for China).
    pub day_offset_minutes: i32,
}

impl Default for RiskLimits {
    fn default() -> Self {
        Self {
            daily_claims_per_user: 5,
            users_per_ip: 10,
            day_offset_minutes: 0,
        }
    }
}

impl RiskLimits {
    /// `RISK_DAILY_CLAIMS_PER_USER` (5), `RISK_USERS_PER_IP` (10),
    /// `RISK_DAY_OFFSET_MINUTES` (0).
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            daily_claims_per_user: env.number("RISK_DAILY_CLAIMS_PER_USER", d.daily_claims_per_user, 0..=10_000)?,
            users_per_ip: env.number("RISK_USERS_PER_IP", d.users_per_ip, 0..=1_000_000)?,
            day_offset_minutes: env.number("RISK_DAY_OFFSET_MINUTES", d.day_offset_minutes, -720..=840)?,
        })
    }

    /// The risk day of an instant: days since the epoch in the configured
    /// time zone, so counters roll over at local midnight.
    pub fn day(&self, now_ms: i64) -> i64 {
        (now_ms + i64::from(self.day_offset_minutes) * 60_000).div_euclid(86_400_000)
    }
}

/// AWS SDK client behaviour for calls on a request path.
#[derive(Debug, Clone, Copy)]
pub struct AwsCallSettings {
    /// Attempts per call, first one included (SDK standard retry).
    pub max_attempts: u32,
    /// Bound on one call, all attempts together.
    pub operation_timeout_ms: u64,
}

/// Everything the grab function reads, at cold start.
#[derive(Debug, Clone)]
pub struct GrabConfig {
    /// Redis.
    pub redis: RedisSettings,
    /// `GRANT_QUEUE_URL`: where winners go.
    pub queue_url: String,
    /// `SQS_MAX_ATTEMPTS` (3) and `SQS_TIMEOUT_MS` (1000).
    pub sqs: AwsCallSettings,
    /// Risk rules.
    pub risk: RiskLimits,
    /// Identity and request limits at the HTTP edge.
    pub http: HttpSettings,
    /// `SOLD_OUT_MEMORY_MS` (1000): how long an instance remembers a sell-out.
    pub sold_out_memory_ms: u64,
    /// `IDEMPOTENCY_TTL_SECS` (86400): how long a request id's outcome is kept.
    pub idempotency_ttl_secs: u64,
    /// `METRICS_NAMESPACE` (`CouponGrab`).
    pub metrics_namespace: String,
}

/// How the HTTP functions read identity and bodies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    /// `TRUST_IDENTITY_HEADERS`: local development only. Takes the user from
    /// `X-User-Id`/`X-User-Level` when no JWT claims are present. Off by
    /// default and off in the SAM template.
    pub trust_identity_headers: bool,
    /// `USER_ID_CLAIM` (`sub`).
    pub user_id_claim: String,
    /// `MEMBER_LEVEL_CLAIM` (`member_level`).
    pub member_level_claim: String,
    /// `MAX_BODY_BYTES` (4096): larger bodies get 413.
    pub max_body_bytes: usize,
}

impl HttpSettings {
    /// Reads the four variables above.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            trust_identity_headers: env.flag("TRUST_IDENTITY_HEADERS", false)?,
            user_id_claim: env.optional("USER_ID_CLAIM").unwrap_or_else(|| "sub".into()),
            member_level_claim: env
                .optional("MEMBER_LEVEL_CLAIM")
                .unwrap_or_else(|| "member_level".into()),
            max_body_bytes: env.number("MAX_BODY_BYTES", 4_096, 64..=1_048_576)?,
        })
    }
}

impl GrabConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from(&Env::process())
    }

    /// Reads any [`Env`].
    pub fn from(env: &Env) -> Result<Self, ConfigError> {
        let queue_url = env.required("GRANT_QUEUE_URL")?;
        if !(queue_url.starts_with("http://") || queue_url.starts_with("https://")) {
            return Err(ConfigError::Invalid {
                var: "GRANT_QUEUE_URL",
                problem: "must be an http(s) queue URL".into(),
            });
        }
        Ok(Self {
            redis: RedisSettings::from_env(env)?,
            queue_url,
            sqs: AwsCallSettings {
                max_attempts: env.number("SQS_MAX_ATTEMPTS", 3, 1..=10)?,
                operation_timeout_ms: env.number("SQS_TIMEOUT_MS", 1_000, 50..=30_000)?,
            },
            risk: RiskLimits::from_env(env)?,
            http: HttpSettings::from_env(env)?,
            sold_out_memory_ms: env.number("SOLD_OUT_MEMORY_MS", 1_000, 0..=60_000)?,
            idempotency_ttl_secs: env.number("IDEMPOTENCY_TTL_SECS", 86_400, 60..=30 * 86_400)?,
            metrics_namespace: metrics_namespace(env),
        })
    }
}

/// Everything the admin API (and `couponctl`) reads.
#[derive(Debug, Clone)]
pub struct AdminConfig {
    /// Redis.
    pub redis: RedisSettings,
    /// `COUPONS_TABLE`: definitions, counters, audit log, blacklist.
    pub coupons_table: String,
    /// `USER_COUPONS_TABLE`: holdings, for reconciliation.
    pub user_coupons_table: String,
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
    /// `METRICS_NAMESPACE` (`CouponGrab`).
    pub metrics_namespace: String,
}

impl AdminConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from(&Env::process())
    }

    /// Reads any [`Env`].
    pub fn from(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            redis: RedisSettings::from_env(env)?,
            coupons_table: env.required("COUPONS_TABLE")?,
            user_coupons_table: env.required("USER_COUPONS_TABLE")?,
            queue_url: env.required("GRANT_QUEUE_URL")?,
            dlq_url: env.optional("GRANT_DLQ_URL"),
            max_total_stock: env.number("MAX_TOTAL_STOCK", 10_000_000, 1..=1_000_000_000)?,
            local_mode: env.flag("ADMIN_LOCAL_MODE", false)?,
            max_body_bytes: env.number("MAX_BODY_BYTES", 4_096, 64..=1_048_576)?,
            aws: dynamodb_calls(env)?,
            grace_ms: env.number("RECONCILE_GRACE_MS", 30_000, 0..=86_400_000)?,
            metrics_namespace: metrics_namespace(env),
        })
    }
}

/// `METRICS_NAMESPACE` (`CouponGrab`): where every function's EMF metrics go.
pub fn metrics_namespace(env: &Env) -> String {
    env.optional("METRICS_NAMESPACE").unwrap_or_else(|| "CouponGrab".into())
}

/// Call settings for DynamoDB off the grab path: `DDB_MAX_ATTEMPTS` (4),
/// `DDB_TIMEOUT_MS` (5000).
pub fn dynamodb_calls(env: &Env) -> Result<AwsCallSettings, ConfigError> {
    Ok(AwsCallSettings {
        max_attempts: env.number("DDB_MAX_ATTEMPTS", 4, 1..=10)?,
        operation_timeout_ms: env.number("DDB_TIMEOUT_MS", 5_000, 100..=60_000)?,
    })
}

/// Everything the issuer reads.
#[derive(Debug, Clone)]
pub struct IssuerConfig {
    /// `COUPONS_TABLE`.
    pub coupons_table: String,
    /// `USER_COUPONS_TABLE`.
    pub user_coupons_table: String,
    /// DynamoDB call settings.
    pub dynamodb: AwsCallSettings,
    /// `ISSUER_CONCURRENCY` (16): messages of one batch issued at once.
    pub concurrency: usize,
    /// `METRICS_NAMESPACE` (`CouponGrab`).
    pub metrics_namespace: String,
}

impl IssuerConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from(&Env::process())
    }

    /// Reads any [`Env`].
    pub fn from(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            coupons_table: env.required("COUPONS_TABLE")?,
            user_coupons_table: env.required("USER_COUPONS_TABLE")?,
            dynamodb: dynamodb_calls(env)?,
            concurrency: env.number("ISSUER_CONCURRENCY", 16, 1..=256)?,
            metrics_namespace: metrics_namespace(env),
        })
    }
}

/// Where the reconciler finds Redis.
#[derive(Debug, Clone)]
pub enum RedisSource {
    /// `REDIS_URL` is set.
    Url(RedisSettings),
    /// `ELASTICACHE_REPLICATION_GROUP_ID` names the group to look up; the
    /// token (if any) is `REDIS_AUTH_TOKEN`.
    ReplicationGroup(String),
}

/// Everything the reconciler reads.
#[derive(Debug, Clone)]
pub struct ReconcilerConfig {
    /// Where Redis is.
    pub redis: RedisSource,
    /// `ELASTICACHE_REPLICATION_GROUP_ID`, reported on when set.
    pub replication_group: Option<String>,
    /// `COUPONS_TABLE`.
    pub coupons_table: String,
    /// `USER_COUPONS_TABLE`.
    pub user_coupons_table: String,
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
    /// `METRICS_NAMESPACE` (`CouponGrab`).
    pub metrics_namespace: String,
}

impl ReconcilerConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from(&Env::process())
    }

    /// Reads any [`Env`].
    pub fn from(env: &Env) -> Result<Self, ConfigError> {
        let replication_group = env.optional("ELASTICACHE_REPLICATION_GROUP_ID");
        let redis = match (RedisSettings::is_configured(env), &replication_group) {
            (true, _) => RedisSource::Url(RedisSettings::from_env(env)?),
            (false, Some(group)) => RedisSource::ReplicationGroup(group.clone()),
            (false, None) => {
                return Err(ConfigError::Missing(
                    "REDIS_URL (or REDIS_HOST, or ELASTICACHE_REPLICATION_GROUP_ID)",
                ))
            }
        };
        Ok(Self {
            redis,
            replication_group,
            coupons_table: env.required("COUPONS_TABLE")?,
            user_coupons_table: env.required("USER_COUPONS_TABLE")?,
            queue_url: env.required("GRANT_QUEUE_URL")?,
            dlq_url: env.optional("GRANT_DLQ_URL"),
            aws: dynamodb_calls(env)?,
            grace_ms: env.number("RECONCILE_GRACE_MS", 30_000, 0..=86_400_000)?,
            retention_hours: env.number("RECONCILE_RETENTION_HOURS", 168, 1..=24 * 90)?,
            metrics_namespace: metrics_namespace(env),
        })
    }
}

/// Everything the wallet (reading coupons) reads.
#[derive(Debug, Clone)]
pub struct WalletConfig {
    /// Redis, for grants still in an outbox.
    pub redis: RedisSettings,
    /// `COUPONS_TABLE`.
    pub coupons_table: String,
    /// `USER_COUPONS_TABLE`.
    pub user_coupons_table: String,
    /// DynamoDB call settings.
    pub dynamodb: AwsCallSettings,
    /// Identity and request limits.
    pub http: HttpSettings,
}

impl WalletConfig {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from(&Env::process())
    }

    /// Reads any [`Env`].
    pub fn from(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            redis: RedisSettings::from_env(env)?,
            coupons_table: env.required("COUPONS_TABLE")?,
            user_coupons_table: env.required("USER_COUPONS_TABLE")?,
            dynamodb: dynamodb_calls(env)?,
            http: HttpSettings::from_env(env)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &[(&str, &str)] = &[
        ("REDIS_URL", "redis://:hunter2-pw@127.0.0.1:6379"),
        ("GRANT_QUEUE_URL", "http://localhost:4566/000000000000/grants"),
    ];

    fn env_with(extra: &[(&str, &str)]) -> Env {
        let mut pairs = BASE.to_vec();
        pairs.extend_from_slice(extra);
        Env::from_pairs(&pairs)
    }

    #[test]
    fn defaults_apply_when_only_the_required_settings_are_given() {
        let cfg = GrabConfig::from(&env_with(&[])).unwrap();
        assert!(!cfg.http.trust_identity_headers);
        assert_eq!(cfg.risk.daily_claims_per_user, 5);
        assert_eq!(cfg.http.max_body_bytes, 4096);
    }

    #[test]
    fn a_missing_queue_url_names_the_variable() {
        let err = GrabConfig::from(&Env::from_pairs(&BASE[..1])).unwrap_err();
        assert_eq!(err.to_string(), "GRANT_QUEUE_URL is required but not set");
    }

    #[test]
    fn a_malformed_number_names_the_variable_and_not_the_value() {
        let err = GrabConfig::from(&env_with(&[("SOLD_OUT_MEMORY_MS", "soon")])).unwrap_err();
        assert!(err.to_string().starts_with("SOLD_OUT_MEMORY_MS is invalid"));
        let err = GrabConfig::from(&env_with(&[("MAX_BODY_BYTES", "1")])).unwrap_err();
        assert!(err.to_string().contains("between 64"));
    }

    #[test]
    fn the_redis_url_is_never_printed() {
        let cfg = GrabConfig::from(&env_with(&[])).unwrap();
        assert!(!format!("{cfg:?}").contains("hunter2-pw"));
    }

    #[test]
    fn the_reconciler_needs_a_redis_url_or_a_replication_group() {
        let tables = [
            ("COUPONS_TABLE", "c"),
            ("USER_COUPONS_TABLE", "u"),
            ("GRANT_QUEUE_URL", "http://q"),
        ];
        let err = ReconcilerConfig::from(&Env::from_pairs(&tables)).unwrap_err();
        assert!(err
            .to_string()
            .starts_with("REDIS_URL (or REDIS_HOST, or ELASTICACHE_REPLICATION_GROUP_ID)"));
        let mut with_group = tables.to_vec();
        with_group.push(("ELASTICACHE_REPLICATION_GROUP_ID", "coupons"));
        let cfg = ReconcilerConfig::from(&Env::from_pairs(&with_group)).unwrap();
        assert!(matches!(cfg.redis, RedisSource::ReplicationGroup(ref g) if g == "coupons"));
        let settings = RedisSettings::with_url(&Env::from_pairs(&with_group), "rediss://h:6379".into()).unwrap();
        assert_eq!(settings.url, "rediss://h:6379");
    }

    #[test]
    fn a_deployment_names_redis_by_host_and_keeps_the_token_in_secrets_manager() {
        let env = Env::from_pairs(&[
            ("REDIS_HOST", "clustercfg.coupons.abc123.use1.cache.amazonaws.com"),
            ("REDIS_CLUSTER", "true"),
            (
                "REDIS_AUTH_SECRET_ARN",
                "arn:aws:secretsmanager:us-east-1:1:secret:redis",
            ),
        ]);
        let settings = RedisSettings::from_env(&env).unwrap();
        assert_eq!(
            settings.url,
            "rediss://clustercfg.coupons.abc123.use1.cache.amazonaws.com:6379"
        );
        assert!(settings.cluster);
        let with_token = settings.with_auth_token("s3cret");
        assert_eq!(
            with_token.url,
            "rediss://:s3cret@clustercfg.coupons.abc123.use1.cache.amazonaws.com:6379"
        );
        assert!(!format!("{with_token:?}").contains("s3cret"));
        let err = RedisSettings::from_env(&Env::from_pairs(&[("REDIS_HOST", "a/b")])).unwrap_err();
        assert!(err.to_string().starts_with("REDIS_HOST is invalid"));
        let missing = RedisSettings::from_env(&Env::from_pairs(&[])).unwrap_err();
        assert_eq!(missing, ConfigError::Missing("REDIS_URL"));
    }

    #[test]
    fn a_key_prefix_with_braces_is_refused() {
        let err = GrabConfig::from(&env_with(&[("REDIS_KEY_PREFIX", "{x}")])).unwrap_err();
        assert!(err.to_string().starts_with("REDIS_KEY_PREFIX"));
    }

    #[test]
    fn the_risk_day_rolls_over_at_local_midnight() {
        let china = RiskLimits {
            day_offset_minutes: 480,
            ..RiskLimits::default()
        };
        let utc_16h = 16 * 3_600_000;
        assert_eq!(RiskLimits::default().day(utc_16h), 0);
        assert_eq!(china.day(utc_16h), 1);
        assert_eq!(china.day(utc_16h - 1), 0);
    }
}
