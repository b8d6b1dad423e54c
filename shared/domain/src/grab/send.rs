//! Step 6 of a winning press (the module documentation's numbering): the
//! grant's claim written, then the grant handed to the issuer's queue, only
//! once a replica holds the win and within the send budget; otherwise
//! BUSY, and the retry (or the reconciler's re-drive) sends it.

use tracing::warn;

use crate::error::PublishError;
use crate::grant::{Grant, GrantRecord};
use crate::metrics::Metric;
use crate::outcome::GrabOutcome;

use super::ports::{Claim, ClaimError, Decision};
use super::{GrabError, GrabRequest, GrabService};

impl GrabService {
    /// A win is answered only once the queue took its grant: every win,
    /// replayed or not, is sent (the first send may have failed, or the
    /// process may have died before it), and the issuer absorbs repeats.
    pub(super) async fn won(
        &self,
        req: &GrabRequest,
        claim: &Claim<'_>,
        rec: GrantRecord,
        replayed: bool,
    ) -> Result<GrabOutcome, GrabError> {
        let home = claim.home_shard;
        // The request's record lives on the home shard, the unit and its
        // outbox entry on the shard it came from: both must be on a replica,
        // and on the node that answers (a failover since the decision may
        // have promoted a replica without it).
        let mut checks = vec![(
            home,
            Decision::Won {
                user: &req.user,
                request: &req.request,
                record: &rec,
            },
        )];
        if rec.shard != home {
            checks.push((
                rec.shard,
                Decision::Took {
                    user: &req.user,
                    record: &rec,
                },
            ));
        }
        for (shard, decision) in checks {
            if !self.ledger.replicated(&req.coupon, shard, decision).await? {
                warn!(
                    shard,
                    "win not acknowledged by a replica in time; the caller hears BUSY and retries"
                );
                self.metrics.count(Metric::GrantNotReplicated, None, 1);
                return Err(GrabError::NotReplicated);
            }
        }
        let grant = rec.into_grant(req.coupon.clone(), req.user.clone(), req.request.clone());
        // The claim first: a grant may reach the queue only once DynamoDB
        // names it, so a rebuild after a cache loss counts it (its unit,
        // its user's claim, its request) without waiting for the queue.
        let left = self.budget_left(claim, &grant)?;
        let written = self
            .claims
            .claim(std::slice::from_ref(&grant), left)
            .await
            .into_iter()
            .next();
        if let Err(e) = written.unwrap_or_else(|| Err(ClaimError::Unavailable(PublishError("no answer".into())))) {
            warn!(grant = %grant.grant_id, error = %e, source = ?std::error::Error::source(&e),
                "grant's claim not written, so not sent; the caller hears BUSY and retries, the outbox keeps it");
            self.metrics.count(Metric::GrantQueueFailed, None, 1);
            if matches!(
                e,
                ClaimError::Reminted(_) | ClaimError::OrdinalClaimed(_) | ClaimError::RequestClaimed(_)
            ) {
                // A shard rolled back past a grant already claimed: no
                // retry can write this one. The shard that minted it and
                // the press's home (whose record would replay it) are
                // dropped now, as the re-drive would drop them (redrive.rs),
                // and their rebuild asked for: every press there is BUSY
                // until it, a pass after the send window, not the re-drive's
                // horizon (minutes while the queue is busy).
                for shard in std::collections::BTreeSet::from([grant.grant_id.shard(), home]) {
                    if let Err(e) = self.ledger.drop_rolled_back(&req.coupon, shard).await {
                        warn!(shard, error = %e, "rolled-back shard not dropped; the reconciler's re-drive drops it");
                    }
                }
                self.ask_repair(&req.coupon, claim.now_ms).await;
            }
            return Err(GrabError::NotQueued(PublishError(Box::new(e))));
        }
        let left = self.budget_left(claim, &grant)?;
        if let Err(e) = self.publisher.publish(&grant, left).await {
            warn!(grant = %grant.grant_id, error = %e, source = ?std::error::Error::source(&e),
                "grant not queued; the caller hears BUSY and retries, the outbox keeps it");
            self.metrics.count(Metric::GrantQueueFailed, None, 1);
            return Err(GrabError::NotQueued(e));
        }
        Ok(GrabOutcome::Won { grant, replayed })
    }

    /// What is left of the send budget (every step of this press decided
    /// at or after `claim.now_ms`; the claim and the send must be over by
    /// the budget after it, or not be made), or BUSY once it is spent.
    fn budget_left(&self, claim: &Claim<'_>, grant: &Grant) -> Result<u64, GrabError> {
        let spent = self.clock.now_ms().saturating_sub(claim.now_ms);
        let left = self.send_budget_ms.saturating_sub(spent);
        if left > 0 {
            return Ok(left as u64);
        }
        warn!(grant = %grant.grant_id, spent_ms = spent,
            "send budget spent before the send; the caller hears BUSY and retries, the outbox keeps it");
        self.metrics.count(Metric::GrantQueueFailed, None, 1);
        Err(GrabError::NotQueued(PublishError(
            format!(
                "{spent} ms after the decision, past the {} ms send budget",
                self.send_budget_ms
            )
            .into(),
        )))
    }
}
