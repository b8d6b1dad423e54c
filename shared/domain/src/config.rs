//! Reading typed configuration at cold start: the environment reader and
//! its errors, shared by every function's `Config`, and the domain's own
//! settings (risk limits, metrics namespace).
//!
//! Every setting is an environment variable (the Lambda way; the SAM template
//! sets them). A missing or malformed one fails the start with a message that
//! names the variable, instead of failing the first request. Values that are
//! secrets are never logged: [`ConfigError`] never carries a value.

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

/// The risk rules' limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RiskLimits {
    /// Claims per user per day across coupons; 0 = off.
    pub daily_claims_per_user: u32,
    /// Distinct users per IP per day; 0 = off.
    pub users_per_ip: u32,
    /// Distinct users per device per day; 0 = off. A shared phone in a
    /// family passes; a farm of accounts on one device does not.
    pub users_per_device: u32,
    /// Claims per device per day across coupons and users; 0 = off.
    pub claims_per_device: u32,
    /// Where the risk day starts: minutes east of UTC (480 for China).
    pub day_offset_minutes: i32,
}

impl Default for RiskLimits {
    fn default() -> Self {
        Self {
            daily_claims_per_user: 5,
            users_per_ip: 10,
            users_per_device: 3,
            claims_per_device: 10,
            day_offset_minutes: 0,
        }
    }
}

impl RiskLimits {
    /// `RISK_DAILY_CLAIMS_PER_USER` (5), `RISK_USERS_PER_IP` (10),
    /// `RISK_USERS_PER_DEVICE` (3), `RISK_CLAIMS_PER_DEVICE` (10),
    /// `RISK_DAY_OFFSET_MINUTES` (0). The device rules apply only to presses
    /// that carry a device id, so they are off while no device claim is
    /// configured (`DEVICE_ID_CLAIM`).
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let d = Self::default();
        Ok(Self {
            daily_claims_per_user: env.number("RISK_DAILY_CLAIMS_PER_USER", d.daily_claims_per_user, 0..=10_000)?,
            users_per_ip: env.number("RISK_USERS_PER_IP", d.users_per_ip, 0..=1_000_000)?,
            users_per_device: env.number("RISK_USERS_PER_DEVICE", d.users_per_device, 0..=10_000)?,
            claims_per_device: env.number("RISK_CLAIMS_PER_DEVICE", d.claims_per_device, 0..=100_000)?,
            day_offset_minutes: env.number("RISK_DAY_OFFSET_MINUTES", d.day_offset_minutes, -720..=840)?,
        })
    }

    /// True if a press with a device id has a device rule to reserve.
    pub fn device_rules(&self) -> bool {
        self.users_per_device > 0 || self.claims_per_device > 0
    }

    /// The risk day of an instant: days since the epoch in the configured
    /// time zone, so counters roll over at local midnight.
    pub fn day(&self, now_ms: i64) -> i64 {
        (now_ms + i64::from(self.day_offset_minutes) * 60_000).div_euclid(86_400_000)
    }
}

/// `RECONCILE_GRACE_MS` (30000): pending grants younger than this are not
/// re-driven yet; read by the reconciler and by the admin API's
/// on-demand reconciliation alike.
pub fn reconcile_grace_ms(env: &Env) -> Result<i64, ConfigError> {
    env.number("RECONCILE_GRACE_MS", 30_000, 0..=86_400_000)
}

/// The grab's send budget (`GRANT_SEND_BUDGET_MS`, 2000) and the
/// re-drive's (at least 2000 ms): a rebuild trusts that no send, nor its
/// claim, decided before a loss lands after the send window.
pub const MIN_SEND_BUDGET_MS: i64 = 2_000;

/// `RECONCILE_SEND_WINDOW_MS` (3000), at least a second (the clock skew
/// allowed between instances) above the send budget, read here as the
/// grab reads it when the two are set together; a window that is not
/// fails the start. Read by every function that runs the reconciler's
/// pass (the scheduled reconciler, the admin API's on-demand one): a pass
/// with a shorter window could rebuild before a claim decided ahead of the
/// loss lands.
pub fn reconcile_send_window_ms(env: &Env) -> Result<i64, ConfigError> {
    let budget: i64 = env.number("GRANT_SEND_BUDGET_MS", MIN_SEND_BUDGET_MS, 100..=30_000)?;
    let window: i64 = env.number("RECONCILE_SEND_WINDOW_MS", 3_000, 0..=600_000)?;
    let least = budget.max(MIN_SEND_BUDGET_MS) + 1_000;
    if window < least {
        return Err(ConfigError::Invalid {
            var: "RECONCILE_SEND_WINDOW_MS",
            problem: format!(
                "must be at least {least} ms: the send budget (GRANT_SEND_BUDGET_MS, at least {MIN_SEND_BUDGET_MS} ms for the re-drive) plus 1000 ms of clock skew, or a send decided before a loss could land after the rebuild"
            ),
        });
    }
    Ok(window)
}

/// `METRICS_NAMESPACE` (`CouponGrab`): where every function's EMF metrics go.
pub fn metrics_namespace(env: &Env) -> String {
    env.optional("METRICS_NAMESPACE").unwrap_or_else(|| "CouponGrab".into())
}

/// `REMINDER_LEAD_MS` (300000, 5 minutes; 1 minute to 1 day): how long
/// before a coupon opens its reminders go out. The wallet answers it to
/// the subscriber and the reconciler sends by it, so both read it here.
pub fn reminder_lead_ms(env: &Env) -> Result<i64, ConfigError> {
    env.number("REMINDER_LEAD_MS", crate::remind::DEFAULT_LEAD_MS, 60_000..=86_400_000)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn a_malformed_number_names_the_variable_and_not_the_value() {
        let env = Env::from_pairs(&[("N", "soon"), ("M", "1")]);
        let err = env.number("N", 5u64, 0..=10).unwrap_err();
        assert!(err.to_string().starts_with("N is invalid"));
        assert!(!err.to_string().contains("soon"));
        let err = env.number("M", 64usize, 64..=128).unwrap_err();
        assert!(err.to_string().contains("between 64"));
    }
}
