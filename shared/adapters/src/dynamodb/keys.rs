//! Every key of the three tables, spelled once (the table of the module above
//! says what each item holds). Partition keys name a coupon, a user or a
//! blacklisted user; sort keys are constants or a prefix and a value, and
//! the prefixes are what the paged reads of one kind of item ask for.

use coupon_domain::ids::{CouponId, RequestId, UserId};

/// The partition key of everything about one coupon.
pub fn coupon_pk(coupon: &CouponId) -> String {
    format!("COUPON#{coupon}")
}

/// The partition key of a user's wallet.
pub fn user_pk(user: &UserId) -> String {
    format!("USER#{user}")
}

/// The partition key of a user's reminders, as they list them.
pub fn reminders_pk(user: &UserId) -> String {
    format!("REMINDERS#{user}")
}

/// The sort key of a user's reminder in its coupon's partition (what the
/// sender queries with [`REMIND_PREFIX`]).
pub fn remind_sk(user: &UserId) -> String {
    format!("{REMIND_PREFIX}{user}")
}

/// What every reminder's sort key in a coupon's partition starts with.
pub const REMIND_PREFIX: &str = "REMIND#";

/// The partition key of a user's blacklist entry and its log.
pub fn blacklist_pk(user: &UserId) -> String {
    format!("{BLACKLIST_PREFIX}{user}")
}

/// What every blacklist partition key starts with.
pub const BLACKLIST_PREFIX: &str = "BLACKLIST#";

/// The sort key of a user's n-th claim of a coupon: the idempotency key of
/// issuance (invariant 2).
pub fn user_coupon_sk(coupon: &CouponId, ordinal: u32) -> String {
    format!("COUPON#{coupon}#{ordinal:03}")
}

/// What the sort keys of a user's claims of one coupon start with.
pub fn user_coupon_prefix(coupon: &CouponId) -> String {
    format!("COUPON#{coupon}#")
}

/// The coupon's definition.
pub const DEF: &str = "DEF";

/// The partition of a coupon's grants on their way in lane `lane` (their
/// claims, sort key the grant id).
pub fn claims_pk(coupon: &CouponId, lane: u32) -> String {
    format!("CLAIMS#{coupon}#{lane}")
}

/// The partition of the user ordinals of a coupon's grants on their way in
/// lane `lane` (the user's lane; sort key [`ordinal_sk`]), written beside
/// each claim where claims guard ordinals (`CACHE_DURABILITY=none`). A
/// partition of its own, so a rebuild's read of the claims never meets
/// them.
pub fn ordinals_pk(coupon: &CouponId, lane: u32) -> String {
    format!("ORDINALS#{coupon}#{lane}")
}

/// The sort key of a user's n-th claim of a coupon among its ordinals.
pub fn ordinal_sk(user: &UserId, ordinal: u32) -> String {
    format!("{user}#{ordinal:03}")
}

/// The partition of the requests of a coupon's grants on their way in lane
/// `lane` (the user's lane; sort key [`request_sk`]), written beside each
/// claim with its ordinal where claims guard ordinals.
pub fn requests_pk(coupon: &CouponId, lane: u32) -> String {
    format!("REQUESTS#{coupon}#{lane}")
}

/// The sort key of a user's request among a coupon's requests.
pub fn request_sk(user: &UserId, request: &RequestId) -> String {
    format!("{user}#{request}")
}

/// The partition of a lottery's entries homed on `shard`.
pub fn entries_pk(coupon: &CouponId, shard: u32) -> String {
    format!("ENTRIES#{coupon}#{shard}")
}
/// The coupon's latest on-demand reconciliation report.
pub const REPORT: &str = "REPORT";
/// A user's blacklist entry.
pub const ENTRY: &str = "ENTRY";
/// The coupon's current wait for its grants on their way (an episode,
/// `coupon_domain::barrier::BarrierRecord`; the key kept its first name).
pub const BARRIER: &str = "BARRIER";

/// Capped counter `k` of a coupon.
pub fn counter_sk(k: impl std::fmt::Display) -> String {
    format!("{COUNTER_PREFIX}{k}")
}
/// What every counter's sort key starts with.
pub const COUNTER_PREFIX: &str = "COUNTER#";

/// A rejected grant.
pub fn grant_sk(grant_id: &str) -> String {
    format!("{GRANT_PREFIX}{grant_id}")
}
/// What every rejection's sort key starts with.
pub const GRANT_PREFIX: &str = "GRANT#";

/// A shard's durable high-water mark.
pub fn seq_sk(shard: u32) -> String {
    format!("{SEQ_PREFIX}{shard}")
}
/// What every high-water mark's sort key starts with.
pub const SEQ_PREFIX: &str = "SEQ#";

/// A rebuild of the coupon's Redis state, at `ms` (15 digits: sorted by time).
pub fn rebuild_sk(ms: i64) -> String {
    format!("{REBUILD_PREFIX}{ms:015}")
}
/// What every rebuild record's sort key starts with.
pub const REBUILD_PREFIX: &str = "REBUILD#";

/// An audit entry at `ms` (15 digits: sorted by time) under its operation id.
pub fn audit_sk(ms: i64, operation_id: &str) -> String {
    format!("{AUDIT_PREFIX}{ms:015}#{operation_id}")
}
/// What every audit entry's sort key starts with.
pub const AUDIT_PREFIX: &str = "AUDIT#";

/// An idempotency key an admin change claimed.
pub fn op_sk(key: &str) -> String {
    format!("OP#{key}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_keys_are_spelled_as_the_stored_items_are() {
        let coupon = CouponId::parse("spring-20").unwrap();
        let user = UserId::parse("u1").unwrap();
        assert_eq!(coupon_pk(&coupon), "COUPON#spring-20");
        assert_eq!(user_coupon_sk(&coupon, 2), "COUPON#spring-20#002");
        assert!(user_coupon_sk(&coupon, 2).starts_with(&user_coupon_prefix(&coupon)));
        assert_eq!(blacklist_pk(&user), "BLACKLIST#u1");
        assert_eq!(counter_sk(3), "COUNTER#3");
        assert_eq!(grant_sk("spring-20-0-7"), "GRANT#spring-20-0-7");
        assert_eq!(seq_sk(1), "SEQ#1");
        assert_eq!(rebuild_sk(42), "REBUILD#000000000000042");
        assert_eq!(audit_sk(0, "op-1"), "AUDIT#000000000000000#op-1");
        assert_eq!(op_sk("refill-1"), "OP#refill-1");
    }
}
