//! The adapters' settings: how to reach Redis and how AWS SDK calls
//! behave. Each function's `Config` is built from these pieces (and the
//! edge's and the domain's), read once at cold start. The Redis URL may
//! carry a password: the `Debug` impl prints it redacted.

use std::fmt;

use coupon_domain::config::{ConfigError, Env};

/// The longest outcome TTL (`IDEMPOTENCY_TTL_SECS`) allowed. A borrow's
/// reservation record lives at least this long (`RESERVATION_TTL_MS` in
/// `lua/lib.lua`), so it never expires before its borrow is settled.
pub const MAX_IDEMPOTENCY_TTL_SECS: u64 = 30 * 86_400;

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
    /// `REDIS_USERNAME`: the ACL user that secret is the password of
    /// (MemoryDB authenticates users, not a cluster-wide token); unset, the
    /// token authenticates the default user, as ElastiCache's auth token does.
    pub username: Option<String>,
    /// `IDEMPOTENCY_TTL_SECS` (86400): how long a request id's outcome is
    /// kept in Redis. Every function that writes request records (the grab,
    /// and the reconciler finishing a borrow) reads the same setting.
    pub idempotency_ttl_secs: u64,
    /// `REDIS_REPLICA_ACKS` (0): replicas that must hold a winning decision
    /// before the grab answers SUCCESS (Redis `WAIT`), so a failover to a
    /// replica cannot roll it back. 0 for a server without replicas (local).
    pub replica_acks: u32,
    /// `REDIS_REPLICA_ACK_TIMEOUT_MS` (100): how long a win waits for those
    /// acknowledgements before answering BUSY (the retry waits again).
    pub replica_ack_timeout_ms: u64,
    /// `CACHE_DURABILITY`: what an acknowledged write survives on this
    /// deployment's cache, checked against `replica_acks` at the start.
    pub durability: CacheDurability,
}

/// What an acknowledged write survives on the cache a deployment runs on
/// (`CACHE_DURABILITY`, which the template derives from its `Cache`
/// choice). "A SUCCESS is a coupon" rests on it: a decision a user is
/// told must outlive a failover, by the cheapest means the cache allows.
/// Checked at cold start against `REDIS_REPLICA_ACKS`, so a template that
/// pairs a cache with the wrong means fails its start, naming the setting,
/// instead of losing wins (no waits on a cache that needs them) or paying
/// a round trip per win for nothing (waits on one that does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheDurability {
    /// `replicated`: a node-based ElastiCache cluster, whose failover may
    /// promote a replica that lacks the primary's last writes. A decision
    /// is acted on only once `REDIS_REPLICA_ACKS` (at least 1) replicas
    /// hold it (`WAIT`).
    Replicated,
    /// `durable`: ElastiCache for Valkey with durability `sync`, or
    /// MemoryDB: a write is acknowledged only once it is in the multi-AZ
    /// transaction log, and a failover keeps it. Nothing to wait for
    /// (`REDIS_REPLICA_ACKS` 0).
    Durable,
    /// `none`: a server without replicas (the local stack): a failover or
    /// a restart may lose any acknowledged write; `REDIS_REPLICA_ACKS` 0.
    None,
}

impl CacheDurability {
    /// Reads `CACHE_DURABILITY` (unset: `replicated` if `replica_acks` asks
    /// for replicas, else `none`) and checks `replica_acks` against it.
    fn from_env(env: &Env, replica_acks: u32) -> Result<Self, ConfigError> {
        let durability = match env.optional("CACHE_DURABILITY").as_deref().map(str::trim) {
            None if replica_acks > 0 => Self::Replicated,
            None => Self::None,
            Some("replicated") => Self::Replicated,
            Some("durable") => Self::Durable,
            Some("none") => Self::None,
            Some(_) => {
                return Err(ConfigError::Invalid {
                    var: "CACHE_DURABILITY",
                    problem: "expected replicated, durable or none".into(),
                })
            }
        };
        let problem = match (durability, replica_acks) {
            (Self::Replicated, 0) => Some(
                "is 0 with CACHE_DURABILITY=replicated: a failover could roll back a win its user was told; \
                 set it to 1 or more"
                    .to_owned(),
            ),
            (Self::Durable, n) if n > 0 => Some(format!(
                "is {n} with CACHE_DURABILITY=durable: the cache acknowledges a write once its transaction \
                 log holds it, so a WAIT adds a round trip per win and nothing else; set it to 0"
            )),
            (Self::None, n) if n > 0 => Some(format!(
                "is {n} with CACHE_DURABILITY=none: a cache without replicas has none to wait for; set it \
                 to 0, or CACHE_DURABILITY to replicated"
            )),
            _ => None,
        };
        match problem {
            Some(problem) => Err(ConfigError::Invalid {
                var: "REDIS_REPLICA_ACKS",
                problem,
            }),
            None => Ok(durability),
        }
    }
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
            .field("username", &self.username)
            .field("idempotency_ttl_secs", &self.idempotency_ttl_secs)
            .field("replica_acks", &self.replica_acks)
            .field("replica_ack_timeout_ms", &self.replica_ack_timeout_ms)
            .field("durability", &self.durability)
            .finish()
    }
}

impl RedisSettings {
    /// `REDIS_URL`, or `REDIS_HOST` with `REDIS_PORT` (6379) and `REDIS_TLS`
    /// (true) as a deployment sets them from the ElastiCache resource; then
    /// `REDIS_KEY_PREFIX`, `REDIS_TIMEOUT_MS`, `REDIS_CONNECT_TIMEOUT_MS`,
    /// `REDIS_CLUSTER`, `REDIS_AUTH_SECRET_ARN`, `REDIS_USERNAME`, `IDEMPOTENCY_TTL_SECS`,
    /// `REDIS_REPLICA_ACKS`, `REDIS_REPLICA_ACK_TIMEOUT_MS`,
    /// `CACHE_DURABILITY`.
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

    /// The same settings with `token` as the password in the URL (of
    /// `username` when one is set).
    pub fn with_auth_token(mut self, token: &str) -> Self {
        if let Some((scheme, rest)) = self.url.split_once("://") {
            let host = rest.rsplit_once('@').map(|(_, h)| h).unwrap_or(rest);
            let user = self.username.as_deref().unwrap_or("");
            self.url = format!("{scheme}://{user}:{token}@{host}");
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
        let username = env.optional("REDIS_USERNAME").map(|u| u.trim().to_owned());
        if let Some(user) = &username {
            // MemoryDB's user names: a letter, then letters, digits and
            // hyphens; nothing a URL would read as a separator.
            let valid = user.len() <= 40
                && user.starts_with(|c: char| c.is_ascii_alphabetic())
                && user.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
            if !valid {
                return Err(ConfigError::Invalid {
                    var: "REDIS_USERNAME",
                    problem: "a letter, then up to 39 letters, digits or hyphens".into(),
                });
            }
        }
        let replica_acks = env.number("REDIS_REPLICA_ACKS", 0, 0..=5)?;
        Ok(Self {
            url,
            key_prefix,
            response_timeout_ms: env.number("REDIS_TIMEOUT_MS", 500, 10..=30_000)?,
            connect_timeout_ms: env.number("REDIS_CONNECT_TIMEOUT_MS", 1_000, 10..=30_000)?,
            cluster: env.flag("REDIS_CLUSTER", false)?,
            auth_secret_arn: env.optional("REDIS_AUTH_SECRET_ARN"),
            username,
            idempotency_ttl_secs: env.number("IDEMPOTENCY_TTL_SECS", 86_400, 60..=MAX_IDEMPOTENCY_TTL_SECS)?,
            replica_acks,
            replica_ack_timeout_ms: env.number("REDIS_REPLICA_ACK_TIMEOUT_MS", 100, 1..=5_000)?,
            durability: CacheDurability::from_env(env, replica_acks)?,
        })
    }
}

/// The three DynamoDB tables, by name: `COUPONS_TABLE` (definitions,
/// counters, rejections, audit log, blacklist), `USER_COUPONS_TABLE` (the
/// users' coupons) and `CLAIMS_TABLE` (the claim of every grant sent, what
/// a rebuild reads of the grants on their way). Every function that
/// touches DynamoDB reads all three.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableNames {
    /// `COUPONS_TABLE`.
    pub coupons: String,
    /// `USER_COUPONS_TABLE`.
    pub user_coupons: String,
    /// `CLAIMS_TABLE`.
    pub claims: String,
}

impl TableNames {
    /// Reads the three names; each is required.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            coupons: env.required("COUPONS_TABLE")?,
            user_coupons: env.required("USER_COUPONS_TABLE")?,
            claims: env.required("CLAIMS_TABLE")?,
        })
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

/// Call settings for DynamoDB off the grab path: `DDB_MAX_ATTEMPTS` (4),
/// `DDB_TIMEOUT_MS` (5000).
pub fn dynamodb_calls(env: &Env) -> Result<AwsCallSettings, ConfigError> {
    Ok(AwsCallSettings {
        max_attempts: env.number("DDB_MAX_ATTEMPTS", 4, 1..=10)?,
        operation_timeout_ms: env.number("DDB_TIMEOUT_MS", 5_000, 100..=60_000)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_redis_url_is_never_printed() {
        let settings =
            RedisSettings::from_env(&Env::from_pairs(&[("REDIS_URL", "redis://:hunter2-pw@127.0.0.1:6379")])).unwrap();
        assert!(!format!("{settings:?}").contains("hunter2-pw"));
        assert_eq!(settings.idempotency_ttl_secs, 86_400);
    }

    #[test]
    fn a_url_found_by_discovery_keeps_the_other_settings() {
        let env = Env::from_pairs(&[("IDEMPOTENCY_TTL_SECS", "3600")]);
        let settings = RedisSettings::with_url(&env, "rediss://h:6379".into()).unwrap();
        assert_eq!(settings.url, "rediss://h:6379");
        assert_eq!(settings.idempotency_ttl_secs, 3_600);
        assert!(RedisSettings::with_url(&env, "http://h".into()).is_err());
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
    fn a_memorydb_user_signs_in_with_its_name_and_the_password_from_secrets_manager() {
        let env = Env::from_pairs(&[
            (
                "REDIS_HOST",
                "clustercfg.coupons.abc123.memorydb.us-east-1.amazonaws.com",
            ),
            ("REDIS_CLUSTER", "true"),
            ("REDIS_USERNAME", "coupon-grab"),
            ("REDIS_AUTH_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:1:secret:app"),
        ]);
        let settings = RedisSettings::from_env(&env).unwrap().with_auth_token("s3cret");
        assert_eq!(
            settings.url,
            "rediss://coupon-grab:s3cret@clustercfg.coupons.abc123.memorydb.us-east-1.amazonaws.com:6379"
        );
        assert!(!format!("{settings:?}").contains("s3cret"));
        for bad in ["1st", "app@host", "a:b", "with space", &"x".repeat(41)] {
            let err = RedisSettings::from_env(&Env::from_pairs(&[
                ("REDIS_URL", "redis://127.0.0.1:6379"),
                ("REDIS_USERNAME", bad),
            ]))
            .unwrap_err();
            assert!(
                err.to_string().starts_with("REDIS_USERNAME is invalid"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn every_table_name_is_required_and_named_when_missing() {
        let err = TableNames::from_env(&Env::from_pairs(&[("COUPONS_TABLE", "c")])).unwrap_err();
        assert_eq!(err, ConfigError::Missing("USER_COUPONS_TABLE"));
        let err =
            TableNames::from_env(&Env::from_pairs(&[("COUPONS_TABLE", "c"), ("USER_COUPONS_TABLE", "u")])).unwrap_err();
        assert_eq!(err, ConfigError::Missing("CLAIMS_TABLE"));
    }

    #[test]
    fn the_caches_durability_and_the_replica_waits_must_agree_or_the_start_fails_naming_the_setting() {
        let settings = |pairs: &[(&'static str, &'static str)]| {
            let mut all = vec![("REDIS_URL", "redis://h")];
            all.extend_from_slice(pairs);
            RedisSettings::from_env(&Env::from_pairs(&all))
        };
        let durability = |pairs| settings(pairs).map(|s| s.durability);
        assert_eq!(durability(&[]), Ok(CacheDurability::None), "the local default");
        assert_eq!(
            durability(&[("REDIS_REPLICA_ACKS", "1")]),
            Ok(CacheDurability::Replicated)
        );
        assert_eq!(
            durability(&[("CACHE_DURABILITY", "durable")]),
            Ok(CacheDurability::Durable)
        );
        for wrong in [
            &[("CACHE_DURABILITY", "replicated")][..],
            &[("CACHE_DURABILITY", "durable"), ("REDIS_REPLICA_ACKS", "1")],
            &[("CACHE_DURABILITY", "none"), ("REDIS_REPLICA_ACKS", "2")],
        ] {
            let err = settings(wrong).unwrap_err();
            assert!(
                err.to_string().starts_with("REDIS_REPLICA_ACKS is invalid"),
                "{wrong:?}: {err}"
            );
        }
        let err = settings(&[("CACHE_DURABILITY", "eventually")]).unwrap_err();
        assert!(err.to_string().starts_with("CACHE_DURABILITY is invalid"), "{err}");
    }

    #[test]
    fn a_key_prefix_with_braces_is_refused() {
        let env = Env::from_pairs(&[("REDIS_URL", "redis://h"), ("REDIS_KEY_PREFIX", "{x}")]);
        let err = RedisSettings::from_env(&env).unwrap_err();
        assert!(err.to_string().starts_with("REDIS_KEY_PREFIX"));
    }

    #[test]
    fn a_reservation_record_outlives_the_longest_outcome_ttl_allowed() {
        let lib = include_str!("../../../lua/lib.lua");
        let line = lib
            .lines()
            .find(|l| l.starts_with("local RESERVATION_TTL_MS = "))
            .expect("lib.lua defines RESERVATION_TTL_MS");
        let ms: u64 = line
            .trim_start_matches("local RESERVATION_TTL_MS = ")
            .split('*')
            .map(|f| f.trim().parse::<u64>().expect("a product of integers"))
            .product();
        assert_eq!(ms, MAX_IDEMPOTENCY_TTL_SECS * 1000);
    }
}
