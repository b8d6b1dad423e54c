//! The grab use case: one press of the "grab" button, from a verified caller
//! to a decided outcome, with the winners handed to the issuer.
//!
//! The order of steps is the design:
//!
//! 1. Sold-out memory: after a sell-out, answer from memory (plus one read of
//!    the request id, so that a replay still gets its original win).
//! 2. Risk reservation (blacklist, daily claims, distinct users per IP), in
//!    the user's and the IP's own Redis slots, before any stock moves.
//! 3. The claim: one Lua script on the user's home shard decides everything
//!    and, for a winner, deducts stock and writes the outbox entry.
//! 4. Only if the home shard is empty while others may not be: borrow from
//!    the other shards in a fixed order (at most `shards - 1` calls), then
//!    settle on the home shard. SOLD_OUT only when every shard was empty.
//! 5. Winners: one SQS send. A failed send is still a win (the grant waits
//!    in the outbox for the reconciler). Losers: release the risk hold.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use tracing::{instrument, warn};

use crate::clock::Clock;
use crate::coupon::fnv1a64;
use crate::error::StoreError;
use crate::grant::GrantRecord;
use crate::ids::{ClientIp, CouponId, RequestId, UserId};
use crate::metrics::Metrics;
use crate::outcome::{GrabOutcome, Rejection};
use crate::ports::{
    Claim, ClaimReply, GrantPublisher, Recorded, RiskDecision, RiskGuard, RiskHold, StockLedger, TakeReply,
};
use crate::soldout::SoldOutMemory;

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
}

/// A grab could not be decided; the client should retry with the same id.
#[derive(Debug, thiserror::Error)]
pub enum GrabError {
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

/// The user's home shard: a stable hash, so every Lambda instance routes a
/// user to the same shard (where their per-user count lives).
pub fn home_shard(user: &UserId, shards: u32) -> u32 {
    if shards <= 1 {
        return 0;
    }
    (fnv1a64(user.as_str().as_bytes()) % u64::from(shards)) as u32
}

/// Everything a grab needs, built once per Lambda instance.
pub struct GrabService {
    ledger: Arc<dyn StockLedger>,
    risk: Arc<dyn RiskGuard>,
    publisher: Arc<dyn GrantPublisher>,
    clock: Arc<dyn Clock>,
    metrics: Arc<dyn Metrics>,
    sold_out: SoldOutMemory,
    shard_counts: RwLock<HashMap<CouponId, u32>>,
}

/// A decided grab before publishing.
struct Decided {
    outcome: Result<GrantRecord, Rejection>,
    replayed: bool,
    /// A grant that this request may be the first to see, so it is sent
    /// (a resumed borrow may send a duplicate, which the issuer absorbs).
    publish: bool,
    /// The claim was counted by an earlier request with this id (or not at
    /// all): give this request's risk hold back.
    release_hold: bool,
}

impl GrabService {
    /// Wires the service; `sold_out_ttl_ms` bounds the sold-out memory.
    pub fn new(
        ledger: Arc<dyn StockLedger>,
        risk: Arc<dyn RiskGuard>,
        publisher: Arc<dyn GrantPublisher>,
        clock: Arc<dyn Clock>,
        metrics: Arc<dyn Metrics>,
        sold_out_ttl_ms: u64,
    ) -> Self {
        Self {
            ledger,
            risk,
            publisher,
            clock,
            metrics,
            sold_out: SoldOutMemory::new(sold_out_ttl_ms),
            shard_counts: RwLock::default(),
        }
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
        self.metrics.count("GrabOutcome", Some(("Outcome", code)), 1);
        outcome
    }

    async fn decide_and_publish(&self, req: &GrabRequest) -> Result<GrabOutcome, GrabError> {
        let now_ms = self.clock.now_ms();
        let Some(shards) = self.shard_count(&req.coupon).await? else {
            return Ok(rejected(Rejection::NotFound, false));
        };
        let claim = Claim {
            coupon: &req.coupon,
            home_shard: home_shard(&req.user, shards),
            user: &req.user,
            level: req.level,
            request: &req.request,
            now_ms,
        };

        let mut hold = None;
        if self.sold_out.is_sold_out(&req.coupon, now_ms) {
            // One read keeps replays truthful: a request that won before the
            // sell-out must not hear SOLD_OUT when it retries.
            match self.ledger.recorded(&claim).await? {
                None => return Ok(rejected(Rejection::SoldOut, false)),
                Some(Recorded::Won(rec)) => return Ok(self.won(req, rec, false, true).await),
                Some(Recorded::SoldOut) => return Ok(rejected(Rejection::SoldOut, true)),
                // A borrow interrupted before the sell-out: finish it below.
                Some(Recorded::Borrowing { .. }) => {}
            }
        } else {
            match self.risk.reserve(&req.user, req.ip, now_ms).await? {
                RiskDecision::Allowed(h) => hold = Some(h),
                RiskDecision::Refused(reason) => match self.ledger.recorded(&claim).await? {
                    // The win itself may be what filled the daily limit.
                    Some(Recorded::Won(rec)) => return Ok(self.won(req, rec, false, true).await),
                    Some(Recorded::SoldOut) => return Ok(rejected(Rejection::SoldOut, true)),
                    // The interrupted first attempt holds the risk reservation.
                    Some(Recorded::Borrowing { .. }) => {}
                    None => return Ok(rejected(Rejection::Risk(reason), false)),
                },
            }
        }

        let decided = match self.decide(&claim, shards).await {
            Ok(d) => d,
            Err(e) => {
                // The claim may or may not have been applied: keep the risk
                // hold (over-counting is the safe side of a limit).
                return Err(e.into());
            }
        };
        if decided.release_hold || decided.outcome.is_err() {
            if let Some(h) = hold.as_ref() {
                self.release(h).await;
            }
        }
        Ok(match decided.outcome {
            Ok(rec) => self.won(req, rec, decided.publish, decided.replayed).await,
            Err(reason) => {
                if reason == Rejection::SoldOut {
                    self.sold_out.remember(&req.coupon, now_ms);
                }
                rejected(reason, decided.replayed)
            }
        })
    }

    async fn decide(&self, claim: &Claim<'_>, shards: u32) -> Result<Decided, StoreError> {
        let fresh = |outcome| Decided {
            outcome,
            replayed: false,
            publish: true,
            release_hold: false,
        };
        Ok(match self.ledger.claim(claim).await? {
            ClaimReply::Won(rec) => fresh(Ok(rec)),
            ClaimReply::Rejected(reason) => fresh(Err(reason)),
            ClaimReply::Borrow { ordinal } => {
                let outcome = self.borrow(claim, shards, ordinal).await?;
                fresh(outcome)
            }
            ClaimReply::Replay(Recorded::Won(rec)) => Decided {
                outcome: Ok(rec),
                replayed: true,
                publish: false,
                release_hold: true,
            },
            ClaimReply::Replay(Recorded::SoldOut) => Decided {
                outcome: Err(Rejection::SoldOut),
                replayed: true,
                publish: false,
                release_hold: true,
            },
            ClaimReply::Replay(Recorded::Borrowing { ordinal }) => {
                // The first attempt died mid-borrow (or is still running):
                // resume it. Donor takes are idempotent per (user, ordinal).
                let outcome = self.borrow(claim, shards, ordinal).await?;
                Decided {
                    outcome,
                    replayed: true,
                    publish: true,
                    release_hold: true,
                }
            }
        })
    }

    async fn borrow(
        &self,
        claim: &Claim<'_>,
        shards: u32,
        ordinal: u32,
    ) -> Result<Result<GrantRecord, Rejection>, StoreError> {
        finish_borrow(self.ledger.as_ref(), self.metrics.as_ref(), claim, shards, ordinal).await
    }

    async fn won(&self, req: &GrabRequest, rec: GrantRecord, publish: bool, replayed: bool) -> GrabOutcome {
        let grant = rec.into_grant(req.coupon.clone(), req.user.clone(), req.request.clone());
        let mut queued = false;
        if publish {
            match self.publisher.publish(&grant).await {
                Ok(()) => queued = true,
                Err(e) => {
                    warn!(grant = %grant.grant_id, error = %e, source = ?std::error::Error::source(&e),
                        "grant not queued; it stays in the outbox for the reconciler");
                    self.metrics.count("GrantQueueFailed", None, 1);
                }
            }
        }
        GrabOutcome::Won {
            grant,
            queued,
            replayed,
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
            self.metrics.count("RiskReleaseFailed", None, 1);
        }
    }

    async fn shard_count(&self, coupon: &CouponId) -> Result<Option<u32>, StoreError> {
        if let Some(n) = self.shard_counts.read().ok().and_then(|m| m.get(coupon).copied()) {
            return Ok(Some(n));
        }
        // Shards are fixed at creation, so a known count never goes stale.
        let n = self.ledger.shard_count(coupon).await?;
        if let (Some(n), Ok(mut m)) = (n, self.shard_counts.write()) {
            m.insert(coupon.clone(), n);
        }
        Ok(n)
    }
}

/// Finishes a borrow for claim `ordinal` reserved on the home shard: visits
/// the other shards in a fixed order from the home shard (so that concurrent
/// retries of one request meet the same donor first), then settles on the
/// home shard. Used by the grab and, for borrows whose caller died, by the
/// reconciler: donor takes are idempotent per (user, ordinal), so running it
/// again after a crash never takes a second unit.
pub async fn finish_borrow(
    ledger: &dyn StockLedger,
    metrics: &dyn Metrics,
    claim: &Claim<'_>,
    shards: u32,
    ordinal: u32,
) -> Result<Result<GrantRecord, Rejection>, StoreError> {
    let mut donor_grant = None;
    for step in 1..shards {
        let donor = (claim.home_shard + step) % shards;
        match ledger.take(claim, donor, ordinal).await? {
            TakeReply::Won(rec) => {
                donor_grant = Some(rec);
                break;
            }
            TakeReply::Empty => {}
            TakeReply::Missing => {
                warn!(donor, "stock shard has no state; skipped (the reconciler rebuilds it)");
                metrics.count("ShardMissing", None, 1);
            }
        }
    }
    Ok(match ledger.settle(claim, donor_grant.as_ref()).await? {
        Some(Recorded::Won(rec)) => Ok(rec),
        Some(Recorded::SoldOut) => Err(Rejection::SoldOut),
        Some(Recorded::Borrowing { .. }) => {
            return Err(StoreError::Protocol {
                what: "settle",
                detail: "reservation left open".into(),
            })
        }
        // The reservation expired or was lost: the donor's grant (if any) is
        // real and in its outbox, so it is still the caller's.
        None => donor_grant.ok_or(Rejection::SoldOut),
    })
}

fn rejected(reason: Rejection, replayed: bool) -> GrabOutcome {
    GrabOutcome::Rejected { reason, replayed }
}

fn rejection_metric(reason: &Rejection) -> &'static str {
    match reason {
        Rejection::NotFound => "NOT_FOUND",
        Rejection::Offline | Rejection::NotStarted { .. } | Rejection::Ended => "NOT_ACTIVE",
        Rejection::NotEligible { .. } => "NOT_ELIGIBLE",
        Rejection::AlreadyClaimed => "ALREADY_CLAIMED",
        Rejection::SoldOut => "SOLD_OUT",
        Rejection::RateLimited { .. } => "RATE_LIMITED",
        Rejection::Risk(_) => "RISK_REJECTED",
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Mutex;

    use async_trait::async_trait;

    use super::*;
    use crate::clock::ManualClock;
    use crate::error::PublishError;
    use crate::grant::Grant;
    use crate::metrics::RecordingMetrics;
    use crate::outcome::RiskReason;

    /// Answers with fixed replies and records which calls were made.
    #[derive(Default)]
    struct ScriptedLedger {
        shards: u32,
        claim: Option<ClaimReply>,
        takes: HashMap<u32, TakeReply>,
        recorded: Option<Recorded>,
        fail_claim: bool,
        calls: Mutex<Vec<String>>,
    }

    impl ScriptedLedger {
        fn calls(&self) -> Vec<String> {
            self.calls.lock().unwrap().clone()
        }
        fn log(&self, call: String) {
            self.calls.lock().unwrap().push(call);
        }
    }

    #[async_trait]
    impl StockLedger for ScriptedLedger {
        async fn shard_count(&self, _: &CouponId) -> Result<Option<u32>, StoreError> {
            Ok(Some(self.shards))
        }
        async fn claim(&self, _: &Claim<'_>) -> Result<ClaimReply, StoreError> {
            self.log("claim".into());
            if self.fail_claim {
                return Err(StoreError::Unavailable("timed out".into()));
            }
            Ok(self.claim.clone().expect("a scripted claim reply"))
        }
        async fn take(&self, _: &Claim<'_>, donor: u32, _: u32) -> Result<TakeReply, StoreError> {
            self.log(format!("take:{donor}"));
            Ok(self.takes.get(&donor).cloned().unwrap_or(TakeReply::Empty))
        }
        async fn settle(&self, _: &Claim<'_>, donor: Option<&GrantRecord>) -> Result<Option<Recorded>, StoreError> {
            self.log("settle".into());
            Ok(Some(
                donor.map(|r| Recorded::Won(r.clone())).unwrap_or(Recorded::SoldOut),
            ))
        }
        async fn recorded(&self, _: &Claim<'_>) -> Result<Option<Recorded>, StoreError> {
            self.log("recorded".into());
            Ok(self.recorded.clone())
        }
    }

    struct FakeRisk {
        refuse: Option<RiskReason>,
        reserved: Mutex<u32>,
        released: Mutex<u32>,
    }

    impl FakeRisk {
        fn allowing() -> Self {
            Self {
                refuse: None,
                reserved: Mutex::new(0),
                released: Mutex::new(0),
            }
        }
    }

    #[async_trait]
    impl RiskGuard for FakeRisk {
        async fn reserve(&self, user: &UserId, ip: Option<ClientIp>, _: i64) -> Result<RiskDecision, StoreError> {
            if let Some(reason) = self.refuse {
                return Ok(RiskDecision::Refused(reason));
            }
            *self.reserved.lock().unwrap() += 1;
            Ok(RiskDecision::Allowed(RiskHold {
                user: user.clone(),
                ip,
                day: 0,
                user_reserved: true,
                ip_reserved: false,
            }))
        }
        async fn release(&self, _: &RiskHold) -> Result<(), StoreError> {
            *self.released.lock().unwrap() += 1;
            Ok(())
        }
    }

    #[derive(Default)]
    struct FakeQueue {
        fail: bool,
        sent: Mutex<Vec<Grant>>,
    }

    #[async_trait]
    impl GrantPublisher for FakeQueue {
        async fn publish(&self, grant: &Grant) -> Result<(), PublishError> {
            if self.fail {
                return Err(PublishError("connection refused".into()));
            }
            self.sent.lock().unwrap().push(grant.clone());
            Ok(())
        }
    }

    struct World {
        ledger: Arc<ScriptedLedger>,
        risk: Arc<FakeRisk>,
        queue: Arc<FakeQueue>,
        metrics: Arc<RecordingMetrics>,
        clock: ManualClock,
        service: GrabService,
    }

    fn world(ledger: ScriptedLedger, risk: FakeRisk, queue: FakeQueue) -> World {
        let (ledger, risk, queue) = (Arc::new(ledger), Arc::new(risk), Arc::new(queue));
        let metrics = Arc::new(RecordingMetrics::default());
        let clock = ManualClock::new(1_000);
        let service = GrabService::new(
            ledger.clone(),
            risk.clone(),
            queue.clone(),
            Arc::new(clock.clone()),
            metrics.clone(),
            500,
        );
        World {
            ledger,
            risk,
            queue,
            metrics,
            clock,
            service,
        }
    }

    fn request(user: &str) -> GrabRequest {
        GrabRequest {
            coupon: CouponId::parse("c").unwrap(),
            user: UserId::parse(user).unwrap(),
            level: 0,
            request: RequestId::parse("r").unwrap(),
            ip: None,
        }
    }

    fn record(grant: &str, shard: u32) -> GrantRecord {
        GrantRecord {
            grant_id: grant.into(),
            ordinal: 1,
            shard,
            granted_at_ms: 1_000,
        }
    }

    #[tokio::test]
    async fn a_winner_whose_send_fails_still_wins_and_the_failure_is_counted() {
        let w = world(
            ScriptedLedger {
                shards: 1,
                claim: Some(ClaimReply::Won(record("c-0-1", 0))),
                ..Default::default()
            },
            FakeRisk::allowing(),
            FakeQueue {
                fail: true,
                ..Default::default()
            },
        );
        let outcome = w.service.grab(&request("u")).await.unwrap();
        assert!(matches!(
            outcome,
            GrabOutcome::Won {
                queued: false,
                replayed: false,
                ..
            }
        ));
        assert_eq!(w.metrics.total("GrantQueueFailed"), 1);
        assert_eq!(*w.risk.released.lock().unwrap(), 0, "a win keeps its risk hold");
    }

    #[tokio::test]
    async fn a_loser_gives_its_risk_hold_back_and_sends_nothing() {
        let w = world(
            ScriptedLedger {
                shards: 1,
                claim: Some(ClaimReply::Rejected(Rejection::AlreadyClaimed)),
                ..Default::default()
            },
            FakeRisk::allowing(),
            FakeQueue::default(),
        );
        let outcome = w.service.grab(&request("u")).await.unwrap();
        assert_eq!(
            outcome,
            GrabOutcome::Rejected {
                reason: Rejection::AlreadyClaimed,
                replayed: false
            }
        );
        assert_eq!(*w.risk.released.lock().unwrap(), 1);
        assert!(w.queue.sent.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn a_replayed_win_is_not_sent_again_and_its_new_hold_is_released() {
        let w = world(
            ScriptedLedger {
                shards: 1,
                claim: Some(ClaimReply::Replay(Recorded::Won(record("c-0-1", 0)))),
                ..Default::default()
            },
            FakeRisk::allowing(),
            FakeQueue::default(),
        );
        let outcome = w.service.grab(&request("u")).await.unwrap();
        assert!(matches!(
            outcome,
            GrabOutcome::Won {
                queued: false,
                replayed: true,
                ..
            }
        ));
        assert!(w.queue.sent.lock().unwrap().is_empty());
        assert_eq!(*w.risk.released.lock().unwrap(), 1);
    }

    #[tokio::test]
    async fn a_borrow_visits_donors_in_order_from_home_and_stops_at_the_first_win() {
        let user = "borrower";
        let home = home_shard(&UserId::parse(user).unwrap(), 4);
        let first_donor = (home + 1) % 4;
        let second_donor = (home + 2) % 4;
        let w = world(
            ScriptedLedger {
                shards: 4,
                claim: Some(ClaimReply::Borrow { ordinal: 1 }),
                takes: HashMap::from([(second_donor, TakeReply::Won(record("c-x-1", second_donor)))]),
                ..Default::default()
            },
            FakeRisk::allowing(),
            FakeQueue::default(),
        );
        let outcome = w.service.grab(&request(user)).await.unwrap();
        assert!(matches!(outcome, GrabOutcome::Won { queued: true, .. }));
        assert_eq!(
            w.ledger.calls(),
            vec![
                "claim".to_string(),
                format!("take:{first_donor}"),
                format!("take:{second_donor}"),
                "settle".into()
            ]
        );
        assert_eq!(w.queue.sent.lock().unwrap()[0].shard, second_donor);
    }

    #[tokio::test]
    async fn a_sell_out_is_remembered_for_the_ttl_and_then_forgotten() {
        let w = world(
            ScriptedLedger {
                shards: 1,
                claim: Some(ClaimReply::Rejected(Rejection::SoldOut)),
                ..Default::default()
            },
            FakeRisk::allowing(),
            FakeQueue::default(),
        );
        w.service.grab(&request("a")).await.unwrap();
        let second = w.service.grab(&request("b")).await.unwrap();
        assert!(matches!(
            second,
            GrabOutcome::Rejected {
                reason: Rejection::SoldOut,
                ..
            }
        ));
        // From memory: one read of the request record, no risk, no claim.
        assert_eq!(w.ledger.calls(), vec!["claim", "recorded"]);
        assert_eq!(*w.risk.reserved.lock().unwrap(), 1);
        w.clock.advance(500);
        w.service.grab(&request("c")).await.unwrap();
        assert_eq!(w.ledger.calls().last().map(String::as_str), Some("claim"));
    }

    #[tokio::test]
    async fn an_undecided_claim_is_an_error_and_keeps_the_hold() {
        let w = world(
            ScriptedLedger {
                shards: 1,
                fail_claim: true,
                ..Default::default()
            },
            FakeRisk::allowing(),
            FakeQueue::default(),
        );
        assert!(matches!(
            w.service.grab(&request("u")).await,
            Err(GrabError::Unavailable(_))
        ));
        assert_eq!(
            *w.risk.released.lock().unwrap(),
            0,
            "over-count rather than under-count"
        );
        assert_eq!(w.metrics.total_for("GrabOutcome", "UNAVAILABLE"), 1);
    }

    #[tokio::test]
    async fn a_risk_refusal_is_final_unless_the_request_already_won() {
        let refusing = |recorded| {
            world(
                ScriptedLedger {
                    shards: 1,
                    recorded,
                    ..Default::default()
                },
                FakeRisk {
                    refuse: Some(RiskReason::DailyLimit),
                    ..FakeRisk::allowing()
                },
                FakeQueue::default(),
            )
        };
        let w = refusing(None);
        let outcome = w.service.grab(&request("u")).await.unwrap();
        assert!(matches!(
            outcome,
            GrabOutcome::Rejected {
                reason: Rejection::Risk(RiskReason::DailyLimit),
                ..
            }
        ));
        let w = refusing(Some(Recorded::Won(record("c-0-1", 0))));
        let outcome = w.service.grab(&request("u")).await.unwrap();
        assert!(matches!(outcome, GrabOutcome::Won { replayed: true, .. }));
        assert!(!w.ledger.calls().contains(&"claim".to_string()));
    }

    #[test]
    fn home_shards_are_stable_and_in_range() {
        let u = UserId::parse("alice").unwrap();
        assert_eq!(home_shard(&u, 1), 0);
        for shards in 2..10 {
            let s = home_shard(&u, shards);
            assert!(s < shards);
            assert_eq!(s, home_shard(&u, shards));
        }
    }

    #[test]
    fn users_spread_over_shards() {
        let mut seen = [0u32; 4];
        for i in 0..400 {
            seen[home_shard(&UserId::parse(&format!("u{i}")).unwrap(), 4) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
    }
}
