//! Fakes of the grab's ports: a ledger that answers with scripted replies
//! and logs its calls, risk guards that allow or refuse, queues that keep,
//! count or refuse grants, and metrics that go nowhere.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::clock::ManualClock;
use crate::error::{PublishError, StoreError};
use crate::grab::ports::{
    BorrowEnd, Claim, ClaimError, ClaimReply, ClaimStep, CouponCatalog, Decision, EntryReply, GrantClaims,
    GrantPublisher, Peek, PeekReply, Recorded, RepairRequests, RiskDecision, RiskGuard, RiskHold, StockLedger,
    TakeReply,
};
use crate::grant::Grant;
use crate::ids::{ClientIp, CouponId, DeviceId, UserId};
use crate::metrics::Metrics;
use crate::outcome::RiskReason;

/// A ledger that answers with fixed replies and records its calls.
#[derive(Default)]
pub struct ScriptedLedger {
    /// The shard count it reports; 0 reports no such coupon.
    pub shards: u32,
    /// The answer to every claim (a commit or a whole claim).
    pub claim: Option<ClaimReply>,
    /// The answer to an admission; `None` admits.
    pub admit: Option<ClaimReply>,
    /// The answer of each donor shard (Empty when absent).
    pub takes: HashMap<u32, TakeReply>,
    /// What a read of the request id finds.
    pub recorded: Option<Recorded>,
    /// The answer to a dry run on the home shard; `None` answers `Open`.
    pub peek: Option<PeekReply>,
    /// Each shard's stock as a dry run reads it (0 when absent).
    pub stocks: HashMap<u32, u64>,
    /// Claims fail as if Redis timed out.
    pub fail_claim: bool,
    /// No replica acknowledges a win.
    pub unreplicated: bool,
    /// Each replica acknowledgement takes this long (the clock is moved).
    pub slow_replica: Option<(ManualClock, i64)>,
    /// The answer to a registration's admission; `None` answers `Open`.
    pub entry: Option<EntryReply>,
    /// Every call made, in order.
    pub calls: Mutex<Vec<String>>,
    /// The instant each take was judged at, in order.
    pub take_instants: Mutex<Vec<i64>>,
    /// The settle finds the reservation gone (`GONE`: another copy decided
    /// the press and its record lived out its time, or it expired).
    pub settle_gone: bool,
    /// What each replica acknowledgement was asked to vouch for, in order:
    /// the shard and the decision, as `won`, `reserved`, `took`, `pending`
    /// or `writes` with its grant id.
    pub vouched: Mutex<Vec<(u32, String)>>,
}

impl ScriptedLedger {
    /// The calls made so far, in order.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().unwrap().clone()
    }
    fn log(&self, call: String) {
        self.calls.lock().unwrap().push(call);
    }
}

#[async_trait]
impl StockLedger for ScriptedLedger {
    async fn shard_count(&self, _: &CouponId) -> Result<Option<u32>, StoreError> {
        // 0 shards: Redis knows nothing of the coupon.
        Ok((self.shards > 0).then_some(self.shards))
    }
    async fn drop_rolled_back(&self, _: &CouponId, shard: u32) -> Result<bool, StoreError> {
        self.log(format!("drop {shard}"));
        Ok(true)
    }
    async fn claim(&self, _: &Claim<'_>, step: ClaimStep) -> Result<ClaimReply, StoreError> {
        if step == ClaimStep::Admit {
            self.log("admit".into());
            return Ok(self.admit.clone().unwrap_or(ClaimReply::Admitted));
        }
        self.log("claim".into());
        if self.fail_claim {
            return Err(StoreError::Unavailable("timed out".into()));
        }
        Ok(self.claim.clone().expect("a scripted claim reply"))
    }
    async fn take(&self, claim: &Claim<'_>, donor: u32, _: u32) -> Result<TakeReply, StoreError> {
        self.log(format!("take:{donor}"));
        self.take_instants.lock().unwrap().push(claim.now_ms);
        Ok(self.takes.get(&donor).cloned().unwrap_or(TakeReply::Empty))
    }
    async fn settle(&self, _: &Claim<'_>, ended: BorrowEnd<'_>) -> Result<Option<Recorded>, StoreError> {
        self.log("settle".into());
        if self.settle_gone {
            return Ok(None);
        }
        Ok(Some(match ended {
            BorrowEnd::Took(rec) => Recorded::Won(rec.clone()),
            BorrowEnd::AllEmpty => Recorded::SoldOut,
            BorrowEnd::Closed(reason) => Recorded::Closed(reason.clone()),
        }))
    }
    async fn admit_entry(&self, ask: &Peek<'_>) -> Result<EntryReply, StoreError> {
        self.log(format!("admit_entry:{}", ask.home_shard));
        Ok(self.entry.clone().unwrap_or(EntryReply::Open))
    }
    async fn remember_entry(&self, ask: &Peek<'_>, at_ms: i64) -> Result<(), StoreError> {
        self.log(format!("remember_entry:{}:{at_ms}", ask.home_shard));
        Ok(())
    }
    async fn recorded(&self, _: &Claim<'_>) -> Result<Option<Recorded>, StoreError> {
        self.log("recorded".into());
        Ok(self.recorded.clone())
    }
    async fn peek(&self, peek: &Peek<'_>) -> Result<PeekReply, StoreError> {
        self.log(format!("peek:{}", peek.home_shard));
        if self.fail_claim {
            return Err(StoreError::Unavailable("timeout".into()));
        }
        Ok(self.peek.clone().unwrap_or(PeekReply::Open))
    }
    async fn shard_stock(&self, _: &CouponId, shard: u32, _now_ms: i64) -> Result<u64, StoreError> {
        self.log(format!("stock:{shard}"));
        Ok(self.stocks.get(&shard).copied().unwrap_or(0))
    }
    async fn replicated(&self, _: &CouponId, shard: u32, decision: Decision<'_>) -> Result<bool, StoreError> {
        self.log(format!("replicated:{shard}"));
        let what = match decision {
            Decision::Won { record, .. } => format!("won {}", record.grant_id),
            Decision::Reserved { .. } => "reserved".into(),
            Decision::Lost { .. } => "lost".into(),
            Decision::Took { record, .. } => format!("took {}", record.grant_id),
            Decision::Pending { record, .. } => format!("pending {}", record.grant_id),
            Decision::Writes => "writes".into(),
        };
        self.vouched.lock().unwrap().push((shard, what));
        if let Some((clock, ms)) = &self.slow_replica {
            clock.advance(*ms);
        }
        Ok(!self.unreplicated)
    }
}

/// Allows or refuses every reservation; counts reservations and releases.
pub struct FakeRisk {
    /// Refuse every reservation for this reason.
    pub refuse: Option<RiskReason>,
    /// Reservations made.
    pub reserved: Mutex<u32>,
    /// Holds given back.
    pub released: Mutex<u32>,
}

impl FakeRisk {
    /// Allows every reservation.
    pub fn allowing() -> Self {
        Self {
            refuse: None,
            reserved: Mutex::new(0),
            released: Mutex::new(0),
        }
    }
}

#[async_trait]
impl RiskGuard for FakeRisk {
    async fn reserve(&self, claim: &Claim<'_>, ip: Option<ClientIp>) -> Result<RiskDecision, StoreError> {
        if let Some(reason) = self.refuse {
            return Ok(RiskDecision::Refused(reason));
        }
        *self.reserved.lock().unwrap() += 1;
        Ok(RiskDecision::Allowed(RiskHold {
            user: claim.user.clone(),
            coupon: claim.coupon.clone(),
            request: claim.request.clone(),
            ip,
            device: claim.device.cloned(),
            day: 0,
            user_reserved: true,
            ip_reserved: false,
            device_reserved: false,
        }))
    }
    async fn release(&self, _: &RiskHold) -> Result<(), StoreError> {
        *self.released.lock().unwrap() += 1;
        Ok(())
    }
    async fn release_press(&self, _: &Claim<'_>, _: Option<ClientIp>) -> Result<(), StoreError> {
        *self.released.lock().unwrap() += 1;
        Ok(())
    }
    async fn check(
        &self,
        _: &UserId,
        _: Option<ClientIp>,
        _: Option<&DeviceId>,
        _: i64,
    ) -> Result<Option<RiskReason>, StoreError> {
        Ok(self.refuse)
    }
}

/// Accepts (and keeps) or refuses every grant.
#[derive(Default)]
pub struct FakeQueue {
    /// Refuse every send.
    pub fail: bool,
    /// Every grant accepted, in order.
    pub sent: Mutex<Vec<Grant>>,
    /// The time each send was given, in ms.
    pub budgets: Mutex<Vec<u64>>,
}

#[async_trait]
impl GrantPublisher for FakeQueue {
    async fn publish(&self, grant: &Grant, within_ms: u64) -> Result<(), PublishError> {
        self.budgets.lock().unwrap().push(within_ms);
        if self.fail {
            return Err(PublishError("connection refused".into()));
        }
        self.sent.lock().unwrap().push(grant.clone());
        Ok(())
    }
}

/// Writes (and keeps) or refuses every claim.
#[derive(Default)]
pub struct FakeClaims {
    /// Refuse every claim.
    pub fail: bool,
    /// Answer every claim: its user's ordinal is claimed for another grant
    /// (a home shard rolled back past a told win).
    pub ordinal_held: bool,
    /// Every grant claimed, in order.
    pub claimed: Mutex<Vec<Grant>>,
}

#[async_trait]
impl GrantClaims for FakeClaims {
    async fn claim(&self, grants: &[Grant], _within_ms: u64) -> Vec<Result<(), ClaimError>> {
        if self.fail {
            return grants
                .iter()
                .map(|_| Err(ClaimError::Unavailable(PublishError("throttled".into()))))
                .collect();
        }
        if self.ordinal_held {
            return grants
                .iter()
                .map(|g| Err(ClaimError::OrdinalClaimed(g.grant_id.clone())))
                .collect();
        }
        self.claimed.lock().unwrap().extend_from_slice(grants);
        grants.iter().map(|_| Ok(())).collect()
    }

    async fn holds(&self, grant: &Grant) -> Result<bool, StoreError> {
        if self.fail {
            return Err(StoreError::Unavailable("throttled".into()));
        }
        Ok(self.claimed.lock().unwrap().iter().any(|c| c.same_as(grant)))
    }
}

/// Allows every press without holding anything: isolates the grab script
/// (the benchmark compares it with redis-benchmark running that one script).
pub struct AllowAll;

#[async_trait]
impl RiskGuard for AllowAll {
    async fn reserve(&self, claim: &Claim<'_>, ip: Option<ClientIp>) -> Result<RiskDecision, StoreError> {
        Ok(RiskDecision::Allowed(RiskHold {
            user: claim.user.clone(),
            coupon: claim.coupon.clone(),
            request: claim.request.clone(),
            ip,
            device: claim.device.cloned(),
            day: 0,
            user_reserved: false,
            ip_reserved: false,
            device_reserved: false,
        }))
    }

    async fn release(&self, _hold: &RiskHold) -> Result<(), StoreError> {
        Ok(())
    }
    async fn release_press(&self, _: &Claim<'_>, _: Option<ClientIp>) -> Result<(), StoreError> {
        Ok(())
    }
    async fn check(
        &self,
        _: &UserId,
        _: Option<ClientIp>,
        _: Option<&DeviceId>,
        _: i64,
    ) -> Result<Option<RiskReason>, StoreError> {
        Ok(None)
    }
    fn reserves(&self) -> bool {
        false
    }
}

/// Takes grants without a network call and only counts them: cheap enough
/// for a throughput benchmark (SQS is measured in its own scenario).
#[derive(Default)]
pub struct CountingQueue {
    /// Grants published.
    pub published: AtomicU64,
}

#[async_trait]
impl GrantPublisher for CountingQueue {
    async fn publish(&self, _grant: &Grant, _within_ms: u64) -> Result<(), PublishError> {
        self.published.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}

/// Metrics that go nowhere (EMF lines on stdout would measure the terminal).
pub struct Silent;

impl Metrics for Silent {
    fn count(&self, _: crate::metrics::Metric, _: Option<&str>, _: u64) {}
}

/// The durable catalogue: the coupons created, with their shard counts,
/// and how often it was asked.
#[derive(Default)]
pub struct MemoryCatalog {
    /// Coupon -> shard count.
    pub coupons: Mutex<HashMap<CouponId, u32>>,
    /// Lookups made.
    pub lookups: AtomicU64,
}

impl MemoryCatalog {
    /// A catalogue holding `coupon` with `shards` shards.
    pub fn with(coupon: &str, shards: u32) -> Self {
        let catalog = Self::default();
        catalog
            .coupons
            .lock()
            .unwrap()
            .insert(CouponId::parse(coupon).expect("a valid coupon id"), shards);
        catalog
    }
}

#[async_trait]
impl CouponCatalog for MemoryCatalog {
    async fn shard_count(&self, coupon: &CouponId) -> Result<Option<u32>, StoreError> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        Ok(self.coupons.lock().unwrap().get(coupon).copied())
    }
}

/// Repair requests, recorded (or refused while `refusing`).
#[derive(Default)]
pub struct FakeRepairs {
    /// Coupons whose repair was asked for, in order.
    pub asked: Mutex<Vec<CouponId>>,
    /// Refuse every request (the queue is down).
    pub refusing: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl RepairRequests for FakeRepairs {
    async fn request_repair(&self, coupon: &CouponId, _now_ms: i64) -> Result<(), PublishError> {
        if self.refusing.load(Ordering::Relaxed) {
            return Err(PublishError("repair queue refuses".into()));
        }
        self.asked.lock().unwrap().push(coupon.clone());
        Ok(())
    }
}
