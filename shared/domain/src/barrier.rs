//! Per-coupon knowledge of the grants on their way to the issuer: lanes and
//! barriers.
//!
//! After Redis loses a shard (or a restarted shard must be checked against
//! its durable mark), the reconciler may only rebuild it once every grant
//! minted on it before the fault has reached DynamoDB: until then a unit on
//! its way is in no store the rebuild can read, and would be sold twice. A
//! standard queue can only answer "is the whole queue empty?", so one busy
//! sale kept every other coupon's lost shard closed until it drained.
//!
//! The grant queue is FIFO instead, and each coupon's grants travel in
//! [`LANES`] message groups (`<coupon>#<lane>`, the lane a hash of the grant
//! id, so one coupon can send `LANES` times a group's throughput). SQS
//! delivers a group in order, one message after the other. To learn that
//! every grant of a coupon sent before an instant has been issued, the
//! reconciler sends one [`Barrier`] into each of the coupon's lanes after
//! that instant; the issuer acknowledges a barrier (in DynamoDB) only once
//! every message before it in its group has been issued or has failed for
//! good. When every lane has acknowledged, nothing sent before the barriers
//! is still on its way, whatever other coupons' sales hold in the queue.
//!
//! A [`BarrierRecord`] is the durable state of one such wait (an
//! *episode*): opened when a pass first finds shards lost or restarted,
//! barriers sent once the grab's send window has passed since then (no send
//! decided before the fault can land after them), acknowledged lane by
//! lane, and closed by the pass that then repairs the shards it covers.

use serde::{Deserialize, Serialize};

use crate::grant::Grant;
use crate::hash::fnv1a64;
use crate::ids::CouponId;

/// Message groups per coupon. Part of the wire protocol between the grab,
/// the reconciler and the issuer: a barrier covers lanes `0..LANES`, so a
/// release that changed it while grants were queued would leave lanes no
/// barrier covers (drain the grant queue before deploying such a change).
/// SQS FIFO accepts about 300 sends per second per message group without
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

/// One barrier message: "everything sent before me in this lane has been
/// issued" once the issuer acknowledges it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Barrier {
    /// The coupon whose lane it closes.
    pub coupon_id: CouponId,
    /// The episode it belongs to ([`BarrierRecord::id`]): an acknowledgement
    /// of another episode's barrier counts for nothing.
    pub barrier_id: String,
    /// Which lane (its message group).
    pub lane: u32,
}

impl Barrier {
    /// The message group it travels in.
    pub fn group(&self) -> String {
        group(&self.coupon_id, self.lane)
    }

    /// Its SQS deduplication id: unique per coupon, episode and lane (a
    /// resend after SQS's five minutes is a new message).
    pub fn dedup_id(&self) -> String {
        format!("barrier-{}-{}-{}", self.coupon_id, self.barrier_id, self.lane)
    }

    /// The message body: `{"barrier": {...}}`, which no grant parses as.
    pub fn to_body(&self) -> String {
        serde_json::json!({ "barrier": self }).to_string()
    }

    /// One barrier per lane of `coupon` for episode `barrier_id`.
    pub fn every_lane(coupon: &CouponId, barrier_id: &str) -> Vec<Self> {
        (0..LANES)
            .map(|lane| Self {
                coupon_id: coupon.clone(),
                barrier_id: barrier_id.to_owned(),
                lane,
            })
            .collect()
    }
}

/// What travels on the grant queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QueueMessage {
    /// A winner's grant, to issue.
    Grant(Grant),
    /// A reconciler's barrier, to acknowledge.
    Barrier(Barrier),
}

#[derive(Deserialize)]
struct Envelope {
    barrier: Barrier,
}

impl QueueMessage {
    /// Parses a message body; the error names what is wrong without echoing
    /// the body (which may be anything).
    pub fn parse(body: &str) -> Result<Self, String> {
        if let Ok(Envelope { barrier }) = serde_json::from_str::<Envelope>(body) {
            return Ok(Self::Barrier(barrier));
        }
        serde_json::from_str::<Grant>(body)
            .map(Self::Grant)
            .map_err(|e| format!("not a grant: {}", e.classify_name()))
    }

    /// The message group it travels in.
    pub fn group(&self) -> String {
        match self {
            Self::Grant(g) => group_of(g),
            Self::Barrier(b) => b.group(),
        }
    }
}

/// serde_json's error category as a word (never the input).
trait ClassifyName {
    fn classify_name(&self) -> &'static str;
}

impl ClassifyName for serde_json::Error {
    fn classify_name(&self) -> &'static str {
        match self.classify() {
            serde_json::error::Category::Io => "io",
            serde_json::error::Category::Syntax => "invalid JSON",
            serde_json::error::Category::Data => "wrong fields",
            serde_json::error::Category::Eof => "truncated JSON",
        }
    }
}

/// The durable state of one wait for a coupon's grants on their way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BarrierRecord {
    /// Unique per coupon (not across coupons: the time it was opened, in
    /// ms), so a barrier's deduplication id names its coupon too.
    pub id: String,
    /// When a pass first found the shards it covers lost or restarted.
    pub opened_ms: i64,
    /// When its barriers may be sent: `opened_ms` plus the send window of
    /// the reconciler that opened it, recorded so that any other pass (an
    /// operator's on-demand reconcile with other settings) keeps to it.
    pub send_after_ms: i64,
    /// The shards it covers: a shard lost later needs an episode of its own
    /// (its grants may have been sent after this one's barriers).
    pub shards: Vec<u32>,
    /// When its barriers were (last) sent, if they were.
    pub sent_ms: Option<i64>,
    /// How many lanes have acknowledged its barrier.
    pub lanes_done: u32,
}

impl BarrierRecord {
    /// A new episode over `shards`, opened now, whose barriers wait
    /// `send_window_ms`.
    pub fn open(now_ms: i64, send_window_ms: i64, shards: Vec<u32>) -> Self {
        Self {
            id: now_ms.to_string(),
            opened_ms: now_ms,
            send_after_ms: now_ms.saturating_add(send_window_ms),
            shards,
            sent_ms: None,
            lanes_done: 0,
        }
    }

    /// True if it covers every one of `shards`.
    pub fn covers(&self, shards: &[u32]) -> bool {
        shards.iter().all(|s| self.shards.contains(s))
    }

    /// True once every lane has acknowledged its barrier.
    pub fn passed(&self) -> bool {
        self.sent_ms.is_some() && self.lanes_done >= LANES
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
    fn a_grant_and_a_barrier_each_parse_as_what_they_are() {
        let g = grant("spring-0-7");
        let body = serde_json::to_string(&g).unwrap();
        assert_eq!(QueueMessage::parse(&body), Ok(QueueMessage::Grant(g.clone())));
        let b = &Barrier::every_lane(&g.coupon_id, "42")[3];
        assert_eq!(QueueMessage::parse(&b.to_body()), Ok(QueueMessage::Barrier(b.clone())));
        assert_eq!(QueueMessage::parse(&b.to_body()).unwrap().group(), "spring#3");
        assert!(QueueMessage::parse("{}").unwrap_err().starts_with("not a grant"));
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
    fn an_episode_passes_only_once_sent_and_acknowledged_by_every_lane() {
        let mut rec = BarrierRecord::open(1_000, 3_000, vec![0, 2]);
        assert_eq!(rec.send_after_ms, 4_000);
        assert!(rec.covers(&[2]) && rec.covers(&[0, 2]) && !rec.covers(&[1]));
        rec.lanes_done = LANES;
        assert!(!rec.passed(), "never sent");
        rec.sent_ms = Some(4_000);
        assert!(rec.passed());
        rec.lanes_done = LANES - 1;
        assert!(!rec.passed());
    }
}
