//! Per-coupon knowledge of the grants on their way to the issuer: lanes,
//! and the durable record of a wait.
//!
//! The grant queue is FIFO, and each coupon's grants travel in [`LANES`]
//! message groups (`<coupon>#<lane>`, the lane a hash of the grant id, so
//! one coupon can send `LANES` times a group's throughput, and a re-drive
//! travels in the same group as the first send). Each grant's claim (the
//! record a rebuild reads of what is on its way,
//! [`crate::grab::ports::GrantClaims`]) is kept in the partition of its
//! lane, so a sale writes them at the rate it sends.
//!
//! After Redis loses a shard (or a restarted shard must be checked against
//! the grants DynamoDB knows), the reconciler repairs it only once no send
//! decided before the fault can still land: the grab's send budget is over
//! for every such send, and so is its claim. A [`BarrierRecord`] is the
//! durable state of one such wait (an *episode*): opened when a pass first
//! finds shards lost or restarted, passed once the send window has gone by
//! since then, and closed by the pass that then repairs the shards it
//! covers. Any pass of any reconciler carries it on.

use crate::grant::Grant;
use crate::hash::fnv1a64;
use crate::ids::CouponId;

/// Message groups per coupon, and partitions of its claims. Part of the
/// stored protocol: a rebuild reads the claims of lanes `0..LANES`, so a
/// release that changed it while grants were on their way would miss the
/// claims of lanes it no longer reads (drain the grant queue before
/// deploying such a change). SQS FIFO accepts about 300 sends per second per message group without
/// batching, so one coupon can be sold at about `300 * LANES` grants per
/// second (the issuer's concurrency, `IssuerMaxConcurrency`, bounds how fast
/// they are consumed).
pub const LANES: u32 = 32;

/// The lane of a grant: stable for a grant id, so a re-drive travels in the
/// same group as the original send.
pub fn lane_of(grant_id: &str) -> u32 {
    (fnv1a64(grant_id.as_bytes()) % u64::from(LANES)) as u32
}

/// The SQS message group of one lane of a coupon.
pub fn group(coupon: &CouponId, lane: u32) -> String {
    format!("{coupon}#{lane}")
}

/// The message group a grant is sent in.
pub fn group_of(grant: &Grant) -> String {
    group(&grant.coupon_id, lane_of(grant.grant_id.as_str()))
}

/// The durable state of one wait for a coupon's grants on their way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BarrierRecord {
    /// Unique per coupon (the time it was opened, in ms): a pass closes
    /// only the episode it read.
    pub id: String,
    /// When a pass first found the shards it covers lost or restarted.
    pub opened_ms: i64,
    /// When it passes: `opened_ms` plus the send window of the reconciler
    /// that opened it, recorded so that any other pass (an operator's
    /// on-demand reconcile with other settings) keeps to it.
    pub send_after_ms: i64,
    /// The shards it covers: a shard lost later needs an episode of its own
    /// (sends decided before that loss may still land after this one
    /// passed).
    pub shards: Vec<u32>,
}

impl BarrierRecord {
    /// A new episode over `shards`, opened now, which passes after
    /// `send_window_ms`.
    pub fn open(now_ms: i64, send_window_ms: i64, shards: Vec<u32>) -> Self {
        Self {
            id: now_ms.to_string(),
            opened_ms: now_ms,
            send_after_ms: now_ms.saturating_add(send_window_ms),
            shards,
        }
    }

    /// True if it covers every one of `shards`.
    pub fn covers(&self, shards: &[u32]) -> bool {
        shards.iter().all(|s| self.shards.contains(s))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{RequestId, UserId};

    fn grant(id: &str) -> Grant {
        Grant {
            grant_id: crate::ids::GrantId::parse(id).unwrap(),
            coupon_id: CouponId::parse("spring").unwrap(),
            user_id: UserId::parse("u1").unwrap(),
            ordinal: 1,
            request_id: RequestId::parse("r1").unwrap(),
            shard: 0,
            granted_at_ms: 5,
        }
    }

    #[test]
    fn a_grant_keeps_its_lane_and_the_lanes_are_all_used() {
        assert_eq!(lane_of("spring-0-7"), lane_of("spring-0-7"));
        let mut used = std::collections::HashSet::new();
        for seq in 0..2_000 {
            let g = grant(&format!("spring-1-{seq}"));
            let lane = lane_of(g.grant_id.as_str());
            assert!(lane < LANES);
            assert_eq!(group_of(&g), format!("spring#{lane}"));
            used.insert(lane);
        }
        assert_eq!(used.len() as u32, LANES);
    }

    #[test]
    fn an_episode_passes_a_send_window_after_it_was_opened_and_covers_its_shards() {
        let rec = BarrierRecord::open(1_000, 3_000, vec![0, 2]);
        assert_eq!(rec.send_after_ms, 4_000);
        assert!(rec.covers(&[2]) && rec.covers(&[0, 2]) && !rec.covers(&[1]));
    }
}
