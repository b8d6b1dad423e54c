//! The one hash function of the system, for everything that must come out
//! the same in every process and every release: a user's home shard, a
//! definition's fingerprint (persisted beside it), the counter a grant
//! starts at, and retry jitter.

/// FNV-1a, 64 bit: tiny, stable across releases and platforms (unlike std's
/// `DefaultHasher`), which matters because its output is persisted and is
/// used to route users to shards on every Lambda instance alike.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn it_is_fnv_1a_64_as_published() {
        // The reference vectors of the FNV specification.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
