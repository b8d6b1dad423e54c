//! The Redis key layout, in one place.
//!
//! Every key of one stock shard carries the hash tag `{cpn:<coupon>:<shard>}`,
//! so a script that touches them is valid on Redis Cluster (one slot), and a
//! hot coupon's shards land in different slots (and, on a cluster, nodes).
//! Risk keys carry `{usr:<user>}`, `{ip:<address>}` or `{dev:<device>}`:
//! one slot each.
//!
//! Ids are parsed newtypes ([`coupon_domain::ids`]): none can contain a brace before
//! the tag closes, so no input can move a key to another slot.

use coupon_domain::ids::{ClientIp, CouponId, DeviceId, RequestId, UserId};

/// Builds keys under an optional prefix (one Redis shared by environments,
/// or by parallel tests).
#[derive(Debug, Clone, Default)]
pub struct KeySpace {
    prefix: String,
}

/// The keys of one stock shard.
#[derive(Debug, Clone)]
pub struct ShardKeys {
    tag: String,
}

impl KeySpace {
    /// `prefix` must not contain braces (checked by the config).
    pub fn new(prefix: impl Into<String>) -> Self {
        Self { prefix: prefix.into() }
    }

    /// The keys of shard `shard` of `coupon`.
    pub fn shard(&self, coupon: &CouponId, shard: u32) -> ShardKeys {
        ShardKeys {
            tag: format!("{}{{cpn:{}:{}}}", self.prefix, coupon, shard),
        }
    }

    /// coupon -> the fingerprint of the definition the reconciler settled
    /// it under (its pass skips it while the definition keeps it).
    pub fn settled(&self) -> String {
        format!("{}{{reconcile}}:settled", self.prefix)
    }

    /// Exists while `user` is blacklisted.
    pub fn user_blacklist(&self, user: &UserId) -> String {
        format!("{}{{usr:{}}}:black", self.prefix, user)
    }

    /// The user's claims on risk day `day`: one field per press that holds
    /// one (`<coupon>:<requestId>`), so a repeated reserve or release of
    /// the same press counts once.
    pub fn user_claims(&self, user: &UserId, day: i64) -> String {
        format!("{}{{usr:{}}}:holds:{}", self.prefix, user, day)
    }

    /// user -> presses holding a place, for the users seen from `ip` on risk
    /// day `day`.
    pub fn ip_users(&self, ip: ClientIp, day: i64) -> String {
        format!("{}{{ip:{}}}:seen:{}", self.prefix, ip, day)
    }

    /// The presses holding a place among `ip`'s users on risk day `day`
    /// (`<user>|<coupon>:<requestId>`), so a repeated release frees once.
    pub fn ip_holds(&self, ip: ClientIp, day: i64) -> String {
        format!("{}{{ip:{}}}:holds:{}", self.prefix, ip, day)
    }

    /// user -> presses holding a place, for the users seen on `device` on
    /// risk day `day` (its size is the device's distinct users).
    pub fn device_users(&self, device: &DeviceId, day: i64) -> String {
        format!("{}{{dev:{}}}:seen:{}", self.prefix, device, day)
    }

    /// The presses and lottery registrations holding a place on `device`
    /// on risk day `day` (`<user>|<coupon>:<requestId>`), so a repeated
    /// reserve or release counts once.
    pub fn device_holds(&self, device: &DeviceId, day: i64) -> String {
        format!("{}{{dev:{}}}:holds:{}", self.prefix, device, day)
    }

    /// The holds on `device` on risk day `day` that are claims (presses; a
    /// lottery registration is not one): its size is the device's claims.
    pub fn device_claims(&self, device: &DeviceId, day: i64) -> String {
        format!("{}{{dev:{}}}:claims:{}", self.prefix, device, day)
    }
}

impl ShardKeys {
    /// Definition copy, stock, token bucket, sequence, epoch.
    pub fn meta(&self) -> String {
        format!("{}:meta", self.tag)
    }
    /// user -> claims whose home is this shard.
    pub fn users(&self) -> String {
        format!("{}:users", self.tag)
    }
    /// The grants made from this shard's stock, oldest first.
    pub fn outbox(&self) -> String {
        format!("{}:outbox", self.tag)
    }
    /// Borrowed grants by `<ordinal>:<user>`.
    pub fn taken(&self) -> String {
        format!("{}:taken", self.tag)
    }
    /// Grant id -> the grant (JSON), for each donor's grant settled here,
    /// until the reconciler finds it issued or rejected.
    pub fn borrowed(&self) -> String {
        format!("{}:borrowed", self.tag)
    }
    /// `<requestId>:<user>` -> when a borrow was reserved, until settled.
    pub fn borrowing(&self) -> String {
        format!("{}:borrowing", self.tag)
    }
    /// A lottery's registrations homed on this shard: user -> registered at
    /// (ms). A memory of what DynamoDB holds, so a repeat ends at the
    /// registration's admission.
    pub fn entries(&self) -> String {
        format!("{}:entries", self.tag)
    }
    /// Written by a caller just before it waits for replicas (`WAIT`): a
    /// write of the caller's own connection, so the wait covers every
    /// earlier write of the shard on every engine (see
    /// `RedisLedger::replicated`). Expires by itself.
    pub fn fence(&self) -> String {
        format!("{}:fence", self.tag)
    }
    /// The highest incarnation a rebuild staged request records under
    /// (`lua/restore_requests.lua`): a rebuild with a lower one does not
    /// open the shard (`lua/preheat.lua`). Only ever raised.
    pub fn base(&self) -> String {
        format!("{}:base", self.tag)
    }
    /// The stored outcome of one request. The user id is part of the key:
    /// request ids are scoped per user, and a request id cannot contain `:`,
    /// so `<user>:<request>` is unambiguous.
    pub fn request(&self, user: &UserId, request: &RequestId) -> String {
        format!("{}:req:{}:{}", self.tag, user, request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash_tag(key: &str) -> &str {
        let open = key.find('{').unwrap();
        let close = open + key[open..].find('}').unwrap();
        &key[open + 1..close]
    }

    #[test]
    fn every_key_of_a_shard_shares_one_hash_tag() {
        let ks = KeySpace::new("t1:");
        let shard = ks.shard(&CouponId::parse("c").unwrap(), 3);
        let user = UserId::parse("a:b}c").unwrap_or_else(|_| UserId::parse("a:b").unwrap());
        let req = RequestId::parse("r1").unwrap();
        for key in [
            shard.meta(),
            shard.users(),
            shard.outbox(),
            shard.taken(),
            shard.fence(),
            shard.base(),
            shard.request(&user, &req),
        ] {
            assert_eq!(hash_tag(&key), "cpn:c:3", "{key}");
            assert!(key.starts_with("t1:"));
        }
    }

    #[test]
    fn risk_keys_live_in_the_user_or_ip_slot() {
        let ks = KeySpace::default();
        let user = UserId::parse("u1").unwrap();
        assert_eq!(hash_tag(&ks.user_blacklist(&user)), "usr:u1");
        assert_eq!(hash_tag(&ks.user_claims(&user, 5)), "usr:u1");
        let ip = ClientIp::parse("2001:db8::1").unwrap();
        assert_eq!(hash_tag(&ks.ip_users(ip, 5)), "ip:2001:db8::1");
        assert_eq!(hash_tag(&ks.ip_holds(ip, 5)), "ip:2001:db8::1");
        let device = DeviceId::parse("dev:42").unwrap();
        assert_eq!(hash_tag(&ks.device_users(&device, 5)), "dev:dev:42");
        assert_eq!(hash_tag(&ks.device_holds(&device, 5)), "dev:dev:42");
        assert_eq!(hash_tag(&ks.device_claims(&device, 5)), "dev:dev:42");
    }
}
