//! Identifiers that parse: a value of these types is known to be safe to put
//! in a Redis key, a DynamoDB key and a log line.
//!
//! Parsing happens once at the edge; everything behind it takes the newtype,
//! so no layer has to re-check (zero2prod's "parse, don't validate").

use std::fmt;

use serde::{Deserialize, Serialize};

/// Why an identifier was refused. The message names the field and the rule,
/// never echoes the (possibly hostile) input back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field} {rule}")]
pub struct IdError {
    /// Which field was malformed (`couponId`, `requestId`, ...).
    pub field: &'static str,
    /// The rule it broke, in words a client developer can act on.
    pub rule: &'static str,
}

/// `[A-Za-z0-9_-]`, the alphabet of ids that the system itself mints or
/// that clients choose: no key separators (`:`), no hash-tag braces, no
/// record separators (`|`), nothing that needs escaping anywhere.
fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fn parse_token(field: &'static str, raw: &str, max: usize) -> Result<String, IdError> {
    if raw.is_empty() {
        return Err(IdError {
            field,
            rule: "must not be empty",
        });
    }
    if raw.len() > max {
        return Err(IdError {
            field,
            rule: "is too long",
        });
    }
    if !raw.chars().all(is_token_char) {
        return Err(IdError {
            field,
            rule: "may contain only letters, digits, '_' and '-'",
        });
    }
    Ok(raw.to_owned())
}

macro_rules! token_id {
    ($(#[$doc:meta])* $name:ident, $field:literal, $max:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// Longest accepted value, in bytes.
            pub const MAX_LEN: usize = $max;

            /// Parses untrusted input; the error says which rule it broke.
            pub fn parse(raw: &str) -> Result<Self, IdError> {
                parse_token($field, raw, $max).map(Self)
            }

            /// The id as it appears in keys, messages and responses.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(raw: String) -> Result<Self, IdError> {
                Self::parse(&raw)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

token_id!(
    /// A coupon (campaign) id, chosen by the operator who creates it.
    CouponId,
    "couponId",
    64
);
token_id!(
    /// The order service's id of an order that spends a coupon: the key of
    /// a redemption's idempotency (the same order redeeming again gets the
    /// same answer; only it may give the coupon back).
    OrderId,
    "orderId",
    64
);
token_id!(
    /// The client's idempotency key for one grab (Stripe's Idempotency-Key):
    /// replaying it returns the first outcome. Scoped per user and coupon,
    /// so one user can neither read nor collide with another's request.
    RequestId,
    "requestId",
    64
);

/// The caller's user id, taken from the verified identity (JWT `sub` by
/// default), never from the request body.
///
/// Identity providers use ids such as UUIDs, `auth0|abc` or e-mail-like
/// strings, so the alphabet is wider than [`CouponId`]'s: printable ASCII
/// without white space or braces. Braces would move a user's risk keys to
/// another Redis Cluster slot than the hash tag says.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct UserId(String);

impl UserId {
    /// Longest accepted value, in bytes.
    pub const MAX_LEN: usize = 128;

    /// Parses the identity claim; an id outside the alphabet is refused
    /// rather than escaped, so that keys stay readable for operators.
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        const FIELD: &str = "userId";
        if raw.is_empty() {
            return Err(IdError {
                field: FIELD,
                rule: "must not be empty",
            });
        }
        if raw.len() > Self::MAX_LEN {
            return Err(IdError {
                field: FIELD,
                rule: "is too long",
            });
        }
        let ok = raw.chars().all(|c| c.is_ascii_graphic() && !matches!(c, '{' | '}'));
        if !ok {
            return Err(IdError {
                field: FIELD,
                rule: "has characters outside printable ASCII, or braces",
            });
        }
        Ok(Self(raw.to_owned()))
    }

    /// The id as it appears in keys and messages.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for UserId {
    type Error = IdError;
    fn try_from(raw: String) -> Result<Self, IdError> {
        Self::parse(&raw)
    }
}

impl From<UserId> for String {
    fn from(id: UserId) -> String {
        id.0
    }
}

impl fmt::Display for UserId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Splits a page cursor as the list routes hand them out,
/// `<ms since the epoch>~<id>`: the instant (1 to 16 digits) and the id,
/// still to be parsed by its own type. `None` for anything else.
pub fn cursor_parts(raw: &str) -> Option<(i64, &str)> {
    let (ms, id) = raw.split_once('~')?;
    if ms.is_empty() || ms.len() > 16 || !ms.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((ms.parse().ok()?, id))
}

/// A device the caller's identity provider has attested, taken from a
/// verified JWT claim (never from a plain header outside the explicit local
/// mode), used only as a risk key: the device rules count the distinct
/// users and the claims of one device per day. The same alphabet as
/// [`UserId`], for the same reason (braces would move its keys to another
/// Redis Cluster slot).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct DeviceId(String);

impl DeviceId {
    /// Longest accepted value, in bytes.
    pub const MAX_LEN: usize = 128;

    /// Parses the claim; `None` for a value that cannot be a key (empty,
    /// too long, outside printable ASCII, braces): the press then carries
    /// no device, which a coupon that requires one refuses.
    pub fn parse(raw: &str) -> Option<Self> {
        let raw = raw.trim();
        let ok = !raw.is_empty()
            && raw.len() <= Self::MAX_LEN
            && raw.chars().all(|c| c.is_ascii_graphic() && !matches!(c, '{' | '}'));
        ok.then(|| Self(raw.to_owned()))
    }

    /// The id as it appears in keys.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DeviceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// The client address as API Gateway saw it, used only as a risk key.
/// Parsed as an IP address so that nothing else can reach a Redis key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ClientIp(pub std::net::IpAddr);

impl ClientIp {
    /// Parses `sourceIp` from the request context.
    pub fn parse(raw: &str) -> Option<Self> {
        raw.trim().parse().ok().map(Self)
    }
}

impl fmt::Display for ClientIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A grant's id, `<couponId>-<shard>-<seq>`: minted by the stock script
/// with the unit it grants (`lua/lib.lua`, `issue()`), unique per coupon,
/// and the id every store and message knows the grant by. Parsed once, so
/// the coupon, shard and sequence it names are at hand without splitting
/// a string again (the outbox entry is `<seq>-0` on that shard's stream).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct GrantId {
    raw: String,
    coupon: CouponId,
    shard: u32,
    seq: u64,
}

impl GrantId {
    /// The id of the `seq`-th grant minted on `coupon`'s `shard`.
    pub fn new(coupon: &CouponId, shard: u32, seq: u64) -> Self {
        Self {
            raw: format!("{coupon}-{shard}-{seq}"),
            coupon: coupon.clone(),
            shard,
            seq,
        }
    }

    /// Parses untrusted input, from the right (coupon ids may contain `-`).
    pub fn parse(raw: &str) -> Result<Self, IdError> {
        let refused = IdError {
            field: "grantId",
            rule: "must be <couponId>-<shard>-<seq>",
        };
        let (rest, seq) = raw.rsplit_once('-').ok_or(refused.clone())?;
        let (coupon, shard) = rest.rsplit_once('-').ok_or(refused.clone())?;
        Ok(Self {
            raw: raw.to_owned(),
            coupon: CouponId::parse(coupon).map_err(|_| refused.clone())?,
            shard: digits(shard).ok_or(refused.clone())?,
            seq: digits(seq).ok_or(refused)?,
        })
    }

    /// The id as it appears in keys, messages and responses.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The coupon granted.
    pub fn coupon(&self) -> &CouponId {
        &self.coupon
    }

    /// The stock shard the unit came from.
    pub fn shard(&self) -> u32 {
        self.shard
    }

    /// The shard's grant sequence number (its outbox stream id `<seq>-0`).
    pub fn seq(&self) -> u64 {
        self.seq
    }
}

/// A number written in decimal digits only (no sign, no blank).
fn digits<T: std::str::FromStr>(s: &str) -> Option<T> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

impl TryFrom<String> for GrantId {
    type Error = IdError;
    fn try_from(raw: String) -> Result<Self, IdError> {
        Self::parse(&raw)
    }
}

impl From<GrantId> for String {
    fn from(id: GrantId) -> String {
        id.raw
    }
}

impl PartialEq<&str> for GrantId {
    fn eq(&self, other: &&str) -> bool {
        self.raw == *other
    }
}

impl fmt::Display for GrantId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grant_ids_parse_from_the_right() {
        let g = GrantId::parse("spring-20-3-117").unwrap();
        assert_eq!((g.coupon().as_str(), g.shard(), g.seq()), ("spring-20", 3, 117));
        assert_eq!(g, GrantId::new(&CouponId::parse("spring-20").unwrap(), 3, 117));
        for bad in ["", "x", "c-1", "c-x-1", "c-1-y", "-1-2", "a:b-1-2", "c-+1-2", "c-1-"] {
            assert!(GrantId::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn coupon_ids_accept_the_token_alphabet() {
        assert_eq!(CouponId::parse("spring_20-off").unwrap().as_str(), "spring_20-off");
    }

    #[test]
    fn ids_that_could_escape_a_redis_key_are_refused() {
        for bad in ["a:b", "{x}", "a|b", "a b", "", "é", "a\nb"] {
            assert!(RequestId::parse(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(RequestId::parse(&"a".repeat(65)).is_err());
        assert!(RequestId::parse(&"a".repeat(64)).is_ok());
    }

    #[test]
    fn user_ids_from_identity_providers_parse_but_braces_do_not() {
        for good in ["auth0|x", "a@b.c", "4f1c-9a:x"] {
            assert!(UserId::parse(good).is_ok(), "{good:?}");
        }
        for bad in ["{u}", "a}b", "a b", ""] {
            assert!(UserId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_device_id_that_could_not_be_a_key_is_no_device() {
        assert_eq!(DeviceId::parse(" dev-42:abc ").unwrap().as_str(), "dev-42:abc");
        for bad in ["", "  ", "a b", "{x}", "é", &"d".repeat(129)] {
            assert!(DeviceId::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn client_ips_must_be_addresses() {
        assert!(ClientIp::parse("203.0.113.9").is_some());
        assert!(ClientIp::parse("::1").is_some());
        assert!(ClientIp::parse("evil}:key").is_none());
    }

    #[test]
    fn ids_deserialize_through_their_parser() {
        let err = serde_json::from_str::<CouponId>("\"a:b\"").unwrap_err();
        assert!(err.to_string().contains("couponId"));
    }
}
