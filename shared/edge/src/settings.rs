//! The HTTP edge's settings: where identity comes from and how large a body
//! may be. Read at cold start as part of each HTTP function's `Config`.

use coupon_domain::config::{ConfigError, Env};

/// How the HTTP functions read identity and bodies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeSettings {
    /// `TRUST_IDENTITY_HEADERS`: local development only. Takes the user from
    /// `X-User-Id`/`X-User-Level` when no JWT claims are present. Off by
    /// default and off in the SAM template.
    pub trust_identity_headers: bool,
    /// `USER_ID_CLAIM` (`sub`).
    pub user_id_claim: String,
    /// `MEMBER_LEVEL_CLAIM` (`member_level`).
    pub member_level_claim: String,
    /// `DEVICE_ID_CLAIM` (unset: no device ids): the JWT claim that carries
    /// an attested device id, for apps whose identity provider puts one in
    /// the token. Without it no press has a device, and the device rules
    /// are off. In the local mode `X-Device-Id` stands in for it.
    pub device_id_claim: Option<String>,
    /// `MAX_BODY_BYTES` (4096): larger bodies get 413.
    pub max_body_bytes: usize,
    /// `ORIGIN_VERIFY_SECRET_ARN` (unset: no edge): with the template's
    /// `EdgeProtection`, the Secrets Manager secret CloudFront sends in
    /// `X-Origin-Verify`; read at cold start, and a user route answers a
    /// request without it 403 (`crate::origin`).
    pub origin_secret_arn: Option<String>,
}

impl EdgeSettings {
    /// Reads the six variables above.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        Ok(Self {
            trust_identity_headers: env.flag("TRUST_IDENTITY_HEADERS", false)?,
            user_id_claim: env.optional("USER_ID_CLAIM").unwrap_or_else(|| "sub".into()),
            member_level_claim: env
                .optional("MEMBER_LEVEL_CLAIM")
                .unwrap_or_else(|| "member_level".into()),
            device_id_claim: env.optional("DEVICE_ID_CLAIM"),
            max_body_bytes: max_body_bytes(env)?,
            origin_secret_arn: env.optional("ORIGIN_VERIFY_SECRET_ARN"),
        })
    }
}

/// `MAX_BODY_BYTES` (4096, 64 to 1 MiB): the largest body an HTTP function
/// reads; larger ones get 413. The one reader of it, for the functions that
/// take bodies (grab through [`EdgeSettings`], the admin API directly).
pub fn max_body_bytes(env: &Env) -> Result<usize, ConfigError> {
    env.number("MAX_BODY_BYTES", 4_096, 64..=1_048_576)
}
