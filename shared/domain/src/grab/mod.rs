//! The grab use case: one press of the "grab" button, from a verified caller
//! to a decided outcome, with the winners handed to the issuer.
//!
//! The order of steps is the design:
//!
//! 0. The coupon's shard count: from the instance's memory, else Redis. If
//!    Redis knows nothing of the coupon, the durable catalogue decides (one
//!    read per unknown id per [`LOOKUP_MEMORY_MS`]): a coupon that exists
//!    but whose Redis state is gone answers BUSY and asks for its repair
//!    (once per window); one never created is NOT_FOUND.
//! 1. Sold-out memory: after a sell-out, answer from memory (plus one read of
//!    the request id, so that a replay still gets its original win).
//! 2. Admission ([`ClaimStep::Admit`]): one Lua script on the user's home
//!    shard decides every refusal the shard can decide (window, level, a
//!    certain sell-out, the per-user limit, the rate limit) and replays;
//!    it reserves nothing. Most presses of a flash sale end here, in one
//!    round trip.
//! 3. Risk reservation (blacklist, daily claims, distinct users per IP,
//!    distinct users and claims per device), in the user's, the IP's and
//!    the device's own Redis slots, sent together, only for an admitted
//!    press and before any stock moves.
//! 4. The claim ([`ClaimStep::Commit`]): the same script checks again
//!    (the state may have moved) and, for a winner, deducts stock and
//!    writes the outbox entry. Nothing was held between 2 and 4, so a press
//!    the risk rules refuse never made anyone hear SOLD_OUT.
//! 5. Only if the home shard is empty while others may not be: borrow from
//!    the other shards in a fixed order (at most `shards - 1` calls), then
//!    settle on the home shard. SOLD_OUT only when every shard was empty.
//! 6. Winners: a replica acknowledges the decision (Redis `WAIT`, when
//!    replicas are required), then the grant's claim is written to
//!    DynamoDB ([`GrantClaims`]), then one SQS send, and only then
//!    SUCCESS. A failed claim or send answers
//!    [`GrabError::NotQueued`] (BUSY, retry): the grant stays in the outbox
//!    and the risk hold stays held, and the client's retry with the same
//!    request id replays the win and sends it again (the issuer absorbs
//!    duplicates). The reconciler's re-drive is the backstop for a client
//!    that never retries. Losers: release the risk hold, once a replica
//!    holds the loss (until then BUSY, and the retry releases it).
//!
//! Why not SUCCESS with the grant only in the outbox: Redis may lose it
//! (a flush, a failover to a lagging replica) before the reconciler
//! re-drives it, and a rebuild would then sell that unit again: the user
//! told SUCCESS would end with nothing. A SUCCESS is a coupon.
//!
//! Layout: this file holds the service and steps 1 to 4; `lookup.rs` step
//! 0, `decide.rs` the reply's decision and `borrow.rs` step 5, `send.rs`
//! step 6, `memory.rs` the instance's memories, `ports.rs` the ports (`ports/claims.rs` the claims' port and its conflicts);
//! `dry_run.rs` the dry run (what a press would get now, changing
//! nothing).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tracing::{instrument, warn};

use crate::clock::Clock;
use crate::error::{PublishError, StoreError};
use crate::grant::GrantRecord;
use crate::ids::{ClientIp, CouponId, DeviceId, RequestId, UserId};
use crate::lottery::ports::Entries;
use crate::metrics::{Metric, Metrics};
use crate::outcome::{GrabOutcome, Rejection};

mod borrow;
mod decide;
mod dry_run;
mod entry;
mod lookup;
mod memory;
pub mod ports;
mod send;
#[cfg(test)]
mod tests;

pub use borrow::{finish_borrow, home_shard};
pub use dry_run::{DryRun, Eligibility};
pub use entry::{EntryOutcome, EntryRequest, EntryStanding, EntryView, ENTRY_REQUEST};
pub use memory::CouponMemory;
use ports::{
    Claim, ClaimReply, ClaimStep, CouponCatalog, Decision, GrantClaims, GrantPublisher, Recorded, RepairRequests,
    RiskDecision, RiskGuard, RiskHold, StockLedger,
};

/// How long an instance remembers that a coupon id is unknown to the
/// catalogue, and that it asked for a coupon's repair: one lookup per
/// unknown id and one repair request per lost coupon per window.
pub const LOOKUP_MEMORY_MS: u64 = 5_000;

/// The longest a win's send may take by default (`GRANT_SEND_BUDGET_MS`),
/// counted from the instant every step of
/// the press decided with (`Claim::now_ms`): replica acknowledgements,
/// settles and retries included, the SQS call must be over by then, or it is
/// not made (BUSY; the retry sends the replayed win, the outbox keeps it).
/// The reconciler waits its send window (`RECONCILE_SEND_WINDOW_MS`, 3 s)
/// after a shard is lost before it trusts that every send decided before the
/// loss has landed; this budget plus clock skew and a request already on the
/// wire must stay inside it, whatever the SDK's timeouts are set to.
pub const SEND_BUDGET_MS: i64 = 2_000;

/// One grab, as the edge parsed it.
#[derive(Debug, Clone)]
pub struct GrabRequest {
    /// From the path.
    pub coupon: CouponId,
    /// From the verified identity, never from the body.
    pub user: UserId,
    /// From the verified identity; 0 if the claim is absent.
    pub level: u32,
    /// From the body: the idempotency key.
    pub request: RequestId,
    /// From the request context, for the per-IP risk rule.
    pub ip: Option<ClientIp>,
    /// From the verified identity (a configured JWT claim), for the device
    /// rules and the coupons that require a device.
    pub device: Option<DeviceId>,
}

/// A grab could not be decided; the client should retry with the same id.
#[derive(Debug, thiserror::Error)]
pub enum GrabError {
    /// The grab was decided but no replica acknowledged the decision in
    /// time: a failover now could roll it back. A win: the user must not
    /// hear SUCCESS yet, nothing was sent; the retry replays the win and
    /// waits again. A loss whose press holds risk places: they cannot go
    /// back yet (a copy of the press could win on them after a failover),
    /// so the press is not told decided; the retry replays the loss and
    /// gives them back once a replica holds it.
    #[error("decision not yet on a replica")]
    NotReplicated,
    /// The grab won but the queue did not take the grant: the user must not
    /// hear SUCCESS yet. The grant stays in the outbox; a retry with the
    /// same request id replays the win and sends it again.
    #[error("grant won but not queued")]
    NotQueued(#[source] PublishError),
    /// Redis did not answer (or answered nonsense). Safe to retry: every
    /// write is keyed by the request id.
    #[error("grab could not be decided")]
    Unavailable(#[source] StoreError),
}

impl From<StoreError> for GrabError {
    fn from(e: StoreError) -> Self {
        Self::Unavailable(e)
    }
}

/// The ports a grab is built from.
pub struct GrabPorts {
    /// The atomic stock operations (Redis scripts).
    pub ledger: Arc<dyn StockLedger>,
    /// Risk reservations (Redis scripts).
    pub risk: Arc<dyn RiskGuard>,
    /// Where winners go (SQS).
    pub publisher: Arc<dyn GrantPublisher>,
    /// Where each winner's claim is written before it goes (DynamoDB).
    pub claims: Arc<dyn GrantClaims>,
    /// Asked only when Redis knows nothing of a coupon (DynamoDB).
    pub catalog: Arc<dyn CouponCatalog>,
    /// Where a lost coupon's repair is asked for (SQS).
    pub repairs: Arc<dyn RepairRequests>,
    /// A lottery's entries and draw (DynamoDB).
    pub entries: Arc<dyn Entries>,
    /// The clock every decision reads (a test sets it by hand).
    pub clock: Arc<dyn Clock>,
    /// Where the function's metrics go (EMF lines in Lambda, a recorder in
    /// tests).
    pub metrics: Arc<dyn Metrics>,
}

/// Everything a grab needs, built once per Lambda instance.
pub struct GrabService {
    ledger: Arc<dyn StockLedger>,
    risk: Arc<dyn RiskGuard>,
    publisher: Arc<dyn GrantPublisher>,
    claims: Arc<dyn GrantClaims>,
    catalog: Arc<dyn CouponCatalog>,
    repairs: Arc<dyn RepairRequests>,
    entries: Arc<dyn Entries>,
    clock: Arc<dyn Clock>,
    metrics: Arc<dyn Metrics>,
    sold_out: CouponMemory,
    unknown: CouponMemory,
    repair_asked: CouponMemory,
    shard_counts: RwLock<HashMap<CouponId, u32>>,
    send_budget_ms: i64,
}

/// A decided grab before publishing.
struct Decided {
    outcome: Result<GrantRecord, Rejection>,
    replayed: bool,
}

impl GrabService {
    /// Wires the service; `sold_out_ttl_ms` bounds the sold-out memory.
    pub fn new(ports: GrabPorts, sold_out_ttl_ms: u64) -> Self {
        Self {
            ledger: ports.ledger,
            risk: ports.risk,
            publisher: ports.publisher,
            claims: ports.claims,
            catalog: ports.catalog,
            repairs: ports.repairs,
            entries: ports.entries,
            clock: ports.clock,
            metrics: ports.metrics,
            sold_out: CouponMemory::new(sold_out_ttl_ms),
            unknown: CouponMemory::new(LOOKUP_MEMORY_MS),
            repair_asked: CouponMemory::new(LOOKUP_MEMORY_MS),
            shard_counts: RwLock::default(),
            send_budget_ms: SEND_BUDGET_MS,
        }
    }

    /// A send budget other than [`SEND_BUDGET_MS`] (`GRANT_SEND_BUDGET_MS`;
    /// a local emulator under a test suite's load may answer slower).
    pub fn with_send_budget(mut self, ms: i64) -> Self {
        self.send_budget_ms = ms;
        self
    }

    /// The clock this service decides with.
    pub fn clock(&self) -> &dyn Clock {
        self.clock.as_ref()
    }

    /// Decides one grab. Rejections are `Ok`: they are outcomes, not errors.
    #[instrument(skip_all, fields(coupon = %req.coupon, user = %req.user, request = %req.request))]
    pub async fn grab(&self, req: &GrabRequest) -> Result<GrabOutcome, GrabError> {
        let outcome = self.decide_and_publish(req).await;
        let code = match &outcome {
            Ok(GrabOutcome::Won { .. }) => "WON",
            Ok(GrabOutcome::Rejected { reason, .. }) => rejection_metric(reason),
            Err(_) => "UNAVAILABLE",
        };
        self.metrics.count(Metric::GrabOutcome, Some(code), 1);
        outcome
    }

    async fn decide_and_publish(&self, req: &GrabRequest) -> Result<GrabOutcome, GrabError> {
        let now_ms = self.clock.now_ms();
        let Some(shards) = self.shard_count(&req.coupon, now_ms).await? else {
            return Ok(rejected(Rejection::NotFound, false));
        };
        let claim = Claim {
            coupon: &req.coupon,
            home_shard: home_shard(&req.user, shards),
            user: &req.user,
            level: req.level,
            request: &req.request,
            device: req.device.as_ref(),
            now_ms,
        };

        if self.sold_out.contains(&req.coupon, now_ms) {
            // One read keeps replays truthful: a request that won before the
            // sell-out must not hear SOLD_OUT when it retries.
            let reply = match self.ledger.recorded(&claim).await? {
                None => return Ok(rejected(Rejection::SoldOut, false)),
                Some(recorded) => ClaimReply::Replay(recorded),
            };
            return self.conclude(req, &claim, shards, reply, None).await;
        }
        if !self.risk.reserves() {
            let reply = self.ledger.claim(&claim, ClaimStep::Whole).await?;
            return self.conclude(req, &claim, shards, reply, None).await;
        }
        // Admission first: every refusal the home shard can decide costs
        // this one round trip and reserves nothing. Only an admitted press
        // pays for the risk reservation, and nothing is held before it, so
        // a press the risk rules refuse never made anyone hear SOLD_OUT.
        let (reply, hold) = match self.ledger.claim(&claim, ClaimStep::Admit).await? {
            ClaimReply::Admitted => {
                let hold = match self.risk.reserve(&claim, req.ip).await? {
                    RiskDecision::Allowed(h) => h,
                    RiskDecision::Refused(reason) => return Ok(rejected(Rejection::Risk(reason), false)),
                };
                match self.ledger.claim(&claim, ClaimStep::Commit).await {
                    Ok(ClaimReply::Admitted) => {
                        self.release(&hold).await;
                        return Err(GrabError::Unavailable(StoreError::Protocol {
                            what: "grab commit",
                            detail: "answered as an admission".into(),
                        }));
                    }
                    Ok(reply) => (reply, Some(hold)),
                    // The claim may or may not have been applied: keep the
                    // risk hold (over-counting is the safe side of a limit).
                    Err(e) => return Err(e.into()),
                }
            }
            // An earlier attempt died mid-borrow (or is still borrowing):
            // its risk reservation was made before its claim and is found
            // again (reservations are per press), so a borrow that ends
            // without a unit gives it back. Refused now (say the user was
            // blacklisted since), the borrow still finishes: its claim is
            // reserved, and an unfinished borrow would hold it until the
            // reconciler; the hold then stays (the safe side of a limit).
            reply @ ClaimReply::Replay(Recorded::Borrowing { .. }) => match self.risk.reserve(&claim, req.ip).await? {
                RiskDecision::Allowed(h) => (reply, Some(h)),
                RiskDecision::Refused(_) => (reply, None),
            },
            // Decided at admission: a refusal, or a replay of a decided
            // press (whose win keeps the reservation it made).
            reply => (reply, None),
        };
        self.conclude(req, &claim, shards, reply, hold).await
    }

    /// Turns the home shard's reply into the answer: borrows when asked
    /// to, gives the risk hold back unless the press won, remembers a
    /// sell-out, and hands a win to the issuer.
    async fn conclude(
        &self,
        req: &GrabRequest,
        claim: &Claim<'_>,
        shards: u32,
        reply: ClaimReply,
        hold: Option<RiskHold>,
    ) -> Result<GrabOutcome, GrabError> {
        // On an error the claim may or may not have been applied: the hold
        // is kept (over-counting is the safe side of a limit).
        let decided = self.decide(claim, shards, reply).await?;
        // The hold is this press's own reservation (keyed by coupon and
        // request id), so a win keeps it, replayed or not, and a loss gives
        // it back; giving back twice changes nothing. A replayed loss
        // without a hold in hand gives back what the press holds: the
        // attempt that decided it may have died before its release, and a
        // press that never won must not count against a limit.
        if decided.outcome.is_err() {
            let gives_back = match hold.as_ref() {
                Some(h) => !h.is_empty(),
                None => decided.replayed && self.risk.reserves(),
            };
            // A loss is stored under the request id, and another copy of
            // the press may hold these same places: they go back only once
            // a replica holds the loss, so no failover can let that copy
            // win on them. Until then the press is not told it lost: BUSY,
            // the places stay, and its retry (the same request id) gives
            // them back once a replica holds the loss, or decides afresh on
            // the node there is if a failover forgot it. A loss told while
            // its places stayed would hold them for the day (a false
            // DEVICE_CLAIM_LIMIT for the phone's other users).
            if gives_back && !self.loss_is_kept(claim).await {
                return Err(GrabError::NotReplicated);
            }
            match hold.as_ref() {
                Some(h) => self.release(h).await,
                None if gives_back => self.release_press(claim, req.ip).await,
                None => {}
            }
        }
        match decided.outcome {
            Ok(rec) => self.won(req, claim, rec, decided.replayed).await,
            Err(reason) => {
                // Learn a sell-out only from a decision made now: a replayed
                // SOLD_OUT may be hours old and stock added since.
                if reason == Rejection::SoldOut && !decided.replayed {
                    self.sold_out.remember(&req.coupon, claim.now_ms);
                }
                Ok(rejected(reason, decided.replayed))
            }
        }
    }

    /// Whether a replica holds the press's stored loss (with no replica
    /// to wait for, at once). A failover losing it would let a copy of the
    /// press that holds the same places win on them once they are given
    /// back; until a replica vouches, the places stay taken and the press
    /// answers BUSY, so that its retry gives them back.
    async fn loss_is_kept(&self, claim: &Claim<'_>) -> bool {
        let loss = Decision::Lost {
            user: claim.user,
            request: claim.request,
        };
        match self.ledger.replicated(claim.coupon, claim.home_shard, loss).await {
            Ok(true) => true,
            Ok(false) => {
                warn!("no replica holds the press's loss yet; its risk places stay taken, BUSY");
                self.metrics.count(Metric::RiskReleaseFailed, None, 1);
                false
            }
            Err(e) => {
                warn!(error = %e, "the press's loss could not be checked; its risk places stay taken, BUSY");
                self.metrics.count(Metric::RiskReleaseFailed, None, 1);
                false
            }
        }
    }

    /// Best effort, as [`Self::release`]: see
    /// [`RiskGuard::release_press`].
    async fn release_press(&self, claim: &Claim<'_>, ip: Option<ClientIp>) {
        if let Err(e) = self.risk.release_press(claim, ip).await {
            warn!(error = %e, "risk places of a replayed loss not released");
            self.metrics.count(Metric::RiskReleaseFailed, None, 1);
        }
    }

    async fn release(&self, hold: &RiskHold) {
        if hold.is_empty() {
            return;
        }
        if let Err(e) = self.risk.release(hold).await {
            // The hold expires with its day; until then the user or IP is
            // over-counted by one, never under-counted.
            warn!(error = %e, "risk hold not released");
            self.metrics.count(Metric::RiskReleaseFailed, None, 1);
        }
    }
}

fn rejected(reason: Rejection, replayed: bool) -> GrabOutcome {
    GrabOutcome::Rejected { reason, replayed }
}

fn rejection_metric(reason: &Rejection) -> &'static str {
    match reason {
        Rejection::NotFound => "NOT_FOUND",
        Rejection::Offline
        | Rejection::NotStarted { .. }
        | Rejection::Ended
        | Rejection::BetweenWaves { .. }
        | Rejection::Lottery
        | Rejection::FirstCome => "NOT_ACTIVE",
        Rejection::NotEligible { .. } => "NOT_ELIGIBLE",
        Rejection::AlreadyClaimed => "ALREADY_CLAIMED",
        Rejection::SoldOut => "SOLD_OUT",
        Rejection::RateLimited { .. } => "RATE_LIMITED",
        Rejection::Risk(_) => "RISK_REJECTED",
    }
}
