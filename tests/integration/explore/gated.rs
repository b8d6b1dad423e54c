//! The real adapters behind a gate: each wrapper forwards every call of its
//! port to the adapter it wraps, but first waits at the scheduler's gate
//! (so the scheduler decides when the call runs), and then tells the
//! story line and counts the branch the answer took.
//!
//! A call that waited at its gate longer, in the world's time, than its
//! client would wait for an answer (the deployed timeouts: Redis 500 ms,
//! SQS the send's budget, DynamoDB 5 s) still runs, as a stalled server
//! runs a command it received, but its caller hears a timeout: the
//! protocol must keep the promise when a late step lands after its caller
//! gave up, and it is never credited with an answer no client waits for.

use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use coupon_domain::clock::{Clock, ManualClock};
use coupon_domain::coupon::{CouponDefinition, StoredCoupon};
use coupon_domain::error::{PublishError, StoreError};
use coupon_domain::grab::ports::{
    BorrowEnd, Claim, ClaimError, ClaimReply, ClaimStep, Decision, EntryReply, GrantClaims, GrantPublisher, Peek,
    PeekReply, Recorded, RiskDecision, RiskGuard, RiskHold, StockLedger, TakeReply,
};
use coupon_domain::grant::{Grant, GrantRecord};
use coupon_domain::ids::{ClientIp, CouponId, DeviceId, UserId};
use coupon_domain::issuance::{IssueError, IssueLedger, IssueOutcome};
use coupon_domain::outcome::RiskReason;
use coupon_domain::reconcile::ports::{
    DurableBound, OutboxEntry, Redrive, ShardStock, ShardUnits, StockRepair, Verification,
};
use coupon_domain::user_coupon::Held;

use super::nodes::Nodes;
use super::sched::{ActorId, Scheduler};

/// Who passes a gate: the actor and how the story names it.
#[derive(Clone)]
pub struct Gate {
    pub sched: Arc<Scheduler>,
    pub actor: ActorId,
    pub who: String,
    /// The world's clock, for how long a call waited at its gate.
    pub clock: ManualClock,
    /// The shards' nodes: a `WAIT` that answered updates their replicas.
    pub nodes: Arc<Nodes>,
}

/// A client's timeout for a Redis command (`REDIS_TIMEOUT_MS` as deployed).
pub const REDIS_TIMEOUT_MS: i64 = 500;
/// A client's timeout for a DynamoDB call (`DDB_TIMEOUT_MS` as deployed).
pub const DYNAMODB_TIMEOUT_MS: i64 = 5_000;
/// A client's timeout for an SQS call other than a send with a budget
/// (`SQS_TIMEOUT_MS` as deployed).
pub const SQS_TIMEOUT_MS: i64 = 1_000;

/// An answer that can be replaced by its client's timeout.
pub trait Late {
    fn late(waited_ms: i64) -> Self;
}

fn gave_up(waited_ms: i64) -> coupon_domain::error::BoxError {
    format!("no answer within the client's timeout (the call waited {waited_ms} ms)").into()
}

impl<T> Late for Result<T, StoreError> {
    fn late(waited_ms: i64) -> Self {
        Err(StoreError::Unavailable(gave_up(waited_ms)))
    }
}

impl<T> Late for Result<T, PublishError> {
    fn late(waited_ms: i64) -> Self {
        Err(PublishError(gave_up(waited_ms)))
    }
}

impl<T> Late for Result<T, IssueError> {
    fn late(waited_ms: i64) -> Self {
        Err(IssueError::Unavailable(gave_up(waited_ms)))
    }
}

/// The answer's variant, for the branch counts: `Ok(Won(..))` is `Won`,
/// `Ok(Rejected(SoldOut))` is `Rejected.SoldOut`, an error `Err`.
fn variant(text: &str) -> String {
    let text = text.strip_prefix("Ok(").unwrap_or(text);
    if text.starts_with("Err(") {
        return "Err".into();
    }
    let ident = |s: &str| -> usize { s.find(|c: char| !c.is_alphanumeric() && c != '_').unwrap_or(s.len()) };
    let first_end = ident(text);
    if first_end == 0 {
        return "()".into();
    }
    let first = &text[..first_end];
    // A variant inside it (`Rejected(SoldOut)`, `Replay(Won(..))`), not a
    // struct's name (`Won(GrantRecord { .. })`).
    let rest = &text[first_end..];
    if let Some(inner) = rest.strip_prefix('(') {
        let end = ident(inner);
        let after = inner[end..].chars().next();
        if end > 0 && inner.starts_with(char::is_uppercase) && matches!(after, Some(')') | Some('(')) {
            return format!("{first}.{}", &inner[..end]);
        }
    }
    first.to_owned()
}

impl Gate {
    /// A Redis command at the gate.
    async fn around<T: Debug + Late>(&self, label: String, call: impl Future<Output = T>) -> T {
        self.within(REDIS_TIMEOUT_MS, label, call).await
    }

    /// A call whose client waits `timeout_ms` for its answer.
    async fn within<T: Debug + Late>(&self, timeout_ms: i64, label: String, call: impl Future<Output = T>) -> T {
        let asked = self.clock.now_ms();
        self.sched.step(self.actor, label.clone()).await;
        let out = call.await;
        let waited = self.clock.now_ms() - asked;
        let text = format!("{out:?}");
        let method = label.split('(').next().unwrap_or(&label).to_owned();
        let short: String = text.chars().take(160).collect();
        // The branch the call took is reached whether or not its caller
        // still waits for the answer.
        self.sched.reached(&format!("{method}:{}", variant(&text)));
        if waited > timeout_ms {
            self.sched.reached(&format!("{method}:late"));
            self.sched.tell(format!(
                "{}: {label} -> {short}, {waited} ms after it was asked: the caller gave up at {timeout_ms} ms",
                self.who
            ));
            return T::late(waited);
        }
        self.sched.tell(format!("{}: {label} -> {short}", self.who));
        out
    }
}

pub struct GatedLedger {
    pub inner: Arc<dyn StockLedger>,
    pub gate: Gate,
}

#[async_trait]
impl StockLedger for GatedLedger {
    async fn shard_count(&self, coupon: &CouponId) -> Result<Option<u32>, StoreError> {
        self.gate
            .around("ledger.shard_count()".into(), self.inner.shard_count(coupon))
            .await
    }
    async fn drop_rolled_back(&self, coupon: &CouponId, shard: u32) -> Result<bool, StoreError> {
        let label = format!("ledger.drop_rolled_back(shard {shard})");
        self.gate
            .around(label, self.inner.drop_rolled_back(coupon, shard))
            .await
    }
    async fn claim(&self, claim: &Claim<'_>, step: ClaimStep) -> Result<ClaimReply, StoreError> {
        // A draw's claims are a branch of their own (`ledger.draw_claim`).
        let method = if step == ClaimStep::Draw { "draw_claim" } else { "claim" };
        let label = format!(
            "ledger.{method}({step:?} on shard {} at {})",
            claim.home_shard, claim.now_ms
        );
        self.gate.around(label, self.inner.claim(claim, step)).await
    }
    async fn take(&self, claim: &Claim<'_>, donor: u32, ordinal: u32) -> Result<TakeReply, StoreError> {
        let label = format!("ledger.take(shard {donor} for ordinal {ordinal} at {})", claim.now_ms);
        self.gate.around(label, self.inner.take(claim, donor, ordinal)).await
    }
    async fn settle(&self, claim: &Claim<'_>, ended: BorrowEnd<'_>) -> Result<Option<Recorded>, StoreError> {
        let label = format!("ledger.settle({ended:?} on shard {})", claim.home_shard);
        self.gate.around(label, self.inner.settle(claim, ended)).await
    }
    async fn peek(&self, peek: &Peek<'_>) -> Result<PeekReply, StoreError> {
        let label = format!("ledger.peek(shard {})", peek.home_shard);
        self.gate.around(label, self.inner.peek(peek)).await
    }
    async fn shard_stock(&self, coupon: &CouponId, shard: u32, now_ms: i64) -> Result<u64, StoreError> {
        let label = format!("ledger.shard_stock(shard {shard})");
        self.gate
            .around(label, self.inner.shard_stock(coupon, shard, now_ms))
            .await
    }
    async fn admit_entry(&self, ask: &Peek<'_>) -> Result<EntryReply, StoreError> {
        let label = format!("ledger.admit_entry(shard {})", ask.home_shard);
        self.gate.around(label, self.inner.admit_entry(ask)).await
    }
    async fn remember_entry(&self, ask: &Peek<'_>, at_ms: i64) -> Result<(), StoreError> {
        let label = format!("ledger.remember_entry(shard {})", ask.home_shard);
        self.gate.around(label, self.inner.remember_entry(ask, at_ms)).await
    }
    async fn recorded(&self, claim: &Claim<'_>) -> Result<Option<Recorded>, StoreError> {
        let label = format!("ledger.recorded(shard {})", claim.home_shard);
        self.gate.around(label, self.inner.recorded(claim)).await
    }
    async fn replicated(&self, coupon: &CouponId, shard: u32, decision: Decision<'_>) -> Result<bool, StoreError> {
        let label = format!("ledger.replicated(shard {shard})");
        // The replica holds what the WAIT acknowledged, taken within the
        // step (nothing else runs meanwhile), and even if the answer is
        // late: the replica has it whether or not the caller still waits.
        let nodes = self.gate.nodes.clone();
        let wait = async {
            let out = self.inner.replicated(coupon, shard, decision).await;
            if matches!(out, Ok(true)) {
                nodes.acknowledged(coupon, shard).await;
            }
            out
        };
        self.gate.around(label, wait).await
    }
}

pub struct GatedRisk {
    pub inner: Arc<dyn RiskGuard>,
    pub gate: Gate,
}

#[async_trait]
impl RiskGuard for GatedRisk {
    async fn reserve(&self, claim: &Claim<'_>, ip: Option<ClientIp>) -> Result<RiskDecision, StoreError> {
        self.gate
            .around("risk.reserve()".into(), self.inner.reserve(claim, ip))
            .await
    }
    async fn reserve_entry(&self, claim: &Claim<'_>, ip: Option<ClientIp>) -> Result<RiskDecision, StoreError> {
        self.gate
            .around("risk.reserve_entry()".into(), self.inner.reserve_entry(claim, ip))
            .await
    }
    async fn check(
        &self,
        user: &UserId,
        ip: Option<ClientIp>,
        device: Option<&DeviceId>,
        now_ms: i64,
    ) -> Result<Option<RiskReason>, StoreError> {
        self.gate
            .around("risk.check()".into(), self.inner.check(user, ip, device, now_ms))
            .await
    }
    async fn release(&self, hold: &RiskHold) -> Result<(), StoreError> {
        self.gate
            .around("risk.release()".into(), self.inner.release(hold))
            .await
    }
    async fn release_press(&self, claim: &Claim<'_>, ip: Option<ClientIp>) -> Result<(), StoreError> {
        self.gate
            .around("risk.release_press()".into(), self.inner.release_press(claim, ip))
            .await
    }
    fn reserves(&self) -> bool {
        self.inner.reserves()
    }
}

pub struct GatedPublisher {
    pub inner: Arc<dyn GrantPublisher>,
    pub gate: Gate,
}

#[async_trait]
impl GrantPublisher for GatedPublisher {
    async fn publish(&self, grant: &Grant, within_ms: u64) -> Result<(), PublishError> {
        let label = format!("queue.publish({})", grant.grant_id);
        self.gate
            .within(within_ms as i64, label, self.inner.publish(grant, within_ms))
            .await
    }
}

pub struct GatedClaims {
    pub inner: Arc<dyn GrantClaims>,
    pub gate: Gate,
}

#[async_trait]
impl GrantClaims for GatedClaims {
    async fn claim(&self, grants: &[Grant], within_ms: u64) -> Vec<Result<(), ClaimError>> {
        let ids: Vec<String> = grants.iter().map(|g| g.grant_id.to_string()).collect();
        let label = format!("dynamodb.claim({ids:?})");
        let call = async { Ok::<_, PublishError>(self.inner.claim(grants, within_ms).await) };
        match self.gate.within(within_ms as i64, label, call).await {
            Ok(answers) => answers,
            // The caller gave up: whatever was written, none is sent.
            Err(late) => grants
                .iter()
                .map(|_| Err(ClaimError::Unavailable(PublishError(late.0.to_string().into()))))
                .collect(),
        }
    }

    async fn holds(&self, grant: &Grant) -> Result<bool, StoreError> {
        let label = format!("dynamodb.holds({})", grant.grant_id);
        self.gate.around(label, self.inner.holds(grant)).await
    }
}

pub struct GatedIssue {
    pub inner: Arc<dyn IssueLedger>,
    pub gate: Gate,
}

#[async_trait]
impl IssueLedger for GatedIssue {
    async fn issue(&self, grant: &Grant, def: &CouponDefinition, now_ms: i64) -> Result<IssueOutcome, IssueError> {
        let label = format!(
            "dynamodb.issue({} to {} #{})",
            grant.grant_id, grant.user_id, grant.ordinal
        );
        self.gate
            .within(DYNAMODB_TIMEOUT_MS, label, self.inner.issue(grant, def, now_ms))
            .await
    }
    async fn raise_high_water(&self, coupon: &CouponId, shard: u32, seq: u64) -> Result<(), IssueError> {
        let label = format!("dynamodb.raise_high_water(shard {shard} to {seq})");
        self.gate
            .within(
                DYNAMODB_TIMEOUT_MS,
                label,
                self.inner.raise_high_water(coupon, shard, seq),
            )
            .await
    }
}

pub struct GatedRepair {
    pub inner: Arc<dyn StockRepair>,
    pub gate: Gate,
}

#[async_trait]
impl StockRepair for GatedRepair {
    // Not at the gate: they touch no shard (only the pass's list of
    // settled coupons, none of which a schedule's sale is), so the
    // schedules stay the seeds' they were.
    async fn settled(&self) -> Result<std::collections::HashMap<CouponId, String>, StoreError> {
        self.inner.settled().await
    }
    async fn settle(&self, settled: &[(CouponId, String)], forgotten: &[CouponId]) -> Result<(), StoreError> {
        self.inner.settle(settled, forgotten).await
    }
    async fn shard_stock(&self, coupon: &CouponId, shard: u32) -> Result<Option<ShardStock>, StoreError> {
        let label = format!("repair.shard_stock(shard {shard})");
        self.gate.around(label, self.inner.shard_stock(coupon, shard)).await
    }
    async fn outbox(&self, coupon: &CouponId, shard: u32) -> Result<Vec<OutboxEntry>, StoreError> {
        let label = format!("repair.outbox(shard {shard})");
        self.gate.around(label, self.inner.outbox(coupon, shard)).await
    }
    async fn trim(&self, coupon: &CouponId, shard: u32, seqs: &[u64]) -> Result<(), StoreError> {
        let label = format!("repair.trim(shard {shard}: {seqs:?})");
        self.gate.around(label, self.inner.trim(coupon, shard, seqs)).await
    }
    async fn borrowed(&self, coupon: &CouponId, shard: u32) -> Result<Vec<Grant>, StoreError> {
        let label = format!("repair.borrowed(shard {shard})");
        self.gate.around(label, self.inner.borrowed(coupon, shard)).await
    }
    async fn forget_borrowed(
        &self,
        coupon: &CouponId,
        shard: u32,
        grants: &[coupon_domain::ids::GrantId],
    ) -> Result<(), StoreError> {
        let label = format!("repair.forget_borrowed(shard {shard}: {} grant(s))", grants.len());
        self.gate
            .around(label, self.inner.forget_borrowed(coupon, shard, grants))
            .await
    }
    async fn restore_shard(
        &self,
        stored: &StoredCoupon,
        shard: u32,
        units: ShardUnits,
        seq_base: u64,
        holders: &[(UserId, Vec<Held>)],
        taken: &[(UserId, GrantRecord)],
        outbox: &[Grant],
        now_ms: i64,
    ) -> Result<bool, StoreError> {
        let label = format!(
            "repair.restore_shard(shard {shard}, {units:?}, seq from {seq_base}, {} take(s), {} on their way)",
            taken.len(),
            outbox.len()
        );
        self.gate
            .around(
                label,
                self.inner
                    .restore_shard(stored, shard, units, seq_base, holders, taken, outbox, now_ms),
            )
            .await
    }
    async fn drop_if_behind(&self, coupon: &CouponId, shard: u32, high_water: u64) -> Result<bool, StoreError> {
        let label = format!("repair.drop_if_behind(shard {shard}, mark {high_water})");
        self.gate
            .around(label, self.inner.drop_if_behind(coupon, shard, high_water))
            .await
    }
    async fn verify(
        &self,
        coupon: &CouponId,
        shard: u32,
        now_ms: i64,
        bound: Option<DurableBound>,
    ) -> Result<Verification, StoreError> {
        let label = format!("repair.verify(shard {shard})");
        self.gate
            .around(label, self.inner.verify(coupon, shard, now_ms, bound))
            .await
    }
    async fn bump_epoch(&self, coupon: &CouponId, shard: u32) -> Result<(), StoreError> {
        let label = format!("repair.bump_epoch(shard {shard})");
        self.gate.around(label, self.inner.bump_epoch(coupon, shard)).await
    }
    async fn stale_borrows(
        &self,
        coupon: &CouponId,
        shard: u32,
        before_ms: i64,
    ) -> Result<Vec<(coupon_domain::ids::RequestId, UserId)>, StoreError> {
        let label = format!("repair.stale_borrows(shard {shard})");
        self.gate
            .around(label, self.inner.stale_borrows(coupon, shard, before_ms))
            .await
    }
}

pub struct GatedRedrive {
    pub inner: Arc<dyn Redrive>,
    pub gate: Gate,
}

#[async_trait]
impl Redrive for GatedRedrive {
    async fn redrive(&self, grants: &[Grant], within_ms: u64) -> Result<usize, PublishError> {
        let ids: Vec<String> = grants.iter().map(|g| g.grant_id.to_string()).collect();
        let label = format!("queue.redrive({ids:?})");
        self.gate
            .within(within_ms as i64, label, self.inner.redrive(grants, within_ms))
            .await
    }
    async fn dlq_depth(&self) -> Result<Option<u64>, PublishError> {
        self.inner.dlq_depth().await
    }
    async fn in_flight(&self) -> Result<Option<u64>, PublishError> {
        self.gate
            .within(SQS_TIMEOUT_MS, "queue.in_flight()".into(), self.inner.in_flight())
            .await
    }
}

#[test]
fn a_branch_is_named_by_the_answers_variant() {
    assert_eq!(variant("Ok(Won(GrantRecord { grant_id: 1 }))"), "Won");
    assert_eq!(variant("Ok(Rejected(SoldOut))"), "Rejected.SoldOut");
    assert_eq!(variant("Err(Unavailable(..))"), "Err");
    assert_eq!(variant("Ok(())"), "()");
    assert_eq!(variant("Ok(Borrow { ordinal: 1, at_ms: 5 })"), "Borrow");
    assert_eq!(variant("Ok(Replay(Won(GrantRecord { grant_id: 1 })))"), "Replay.Won");
    assert_eq!(variant("Ok(Some(Won(GrantRecord { ordinal: 1 })))"), "Some.Won");
    assert_eq!(variant("Ok(true)"), "true");
}
