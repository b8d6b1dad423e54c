//! Steps 4 and 5 of a press (the module documentation's numbering): the
//! home shard's reply turned into a decision, a unit, a refusal, or a
//! borrow from the other shards (resumed when a retry finds one under way).

use tracing::warn;

use crate::error::StoreError;
use crate::grant::GrantRecord;
use crate::outcome::Rejection;

use super::borrow::finish_borrow;
use super::ports::{Claim, ClaimReply, Recorded};
use super::{Decided, GrabService};

impl GrabService {
    pub(super) async fn decide(
        &self,
        claim: &Claim<'_>,
        shards: u32,
        reply: ClaimReply,
    ) -> Result<Decided, StoreError> {
        let fresh = |outcome| Decided {
            outcome,
            replayed: false,
        };
        Ok(match reply {
            ClaimReply::Admitted => {
                return Err(StoreError::Protocol {
                    what: "grab",
                    detail: "an admission where a decision was expected".into(),
                })
            }
            ClaimReply::Won(rec) => fresh(Ok(rec)),
            // The coupon is known (its shard count was read) but the home
            // shard has no usable state: Redis lost it, or restarted and the
            // shard may have rolled back. Not "no such coupon": a retryable
            // BUSY until the reconciler rebuilds or verifies the shard.
            ClaimReply::Rejected(Rejection::NotFound) => return Err(self.unusable(claim).await),
            ClaimReply::Rejected(reason) => fresh(Err(reason)),
            ClaimReply::Borrow { ordinal, at_ms } => {
                let outcome = self.borrow(claim, shards, ordinal, at_ms).await?;
                fresh(outcome)
            }
            ClaimReply::Replay(Recorded::Won(rec)) => Decided {
                outcome: Ok(rec),
                replayed: true,
            },
            // A win remembered by state a restart may have rolled back:
            // its claim decides. Claimed and not rejected, the grant is on
            // its way whatever the reconciler's check makes of the shard (a
            // rebuild counts such a claim and records the request's win
            // again), so the
            // retry hears it now rather than BUSY until the check; not
            // claimed, the win may be a snapshot's memory of a unit sold
            // again since, and only the check can tell.
            ClaimReply::ReplayUnverified(rec) => {
                let grant = rec
                    .clone()
                    .into_grant(claim.coupon.clone(), claim.user.clone(), claim.request.clone());
                if !self.claims.holds(&grant).await? {
                    return Err(self.unusable(claim).await);
                }
                Decided {
                    outcome: Ok(rec),
                    replayed: true,
                }
            }
            ClaimReply::Replay(Recorded::SoldOut) => Decided {
                outcome: Err(Rejection::SoldOut),
                replayed: true,
            },
            ClaimReply::Replay(Recorded::Closed(reason)) => Decided {
                outcome: Err(reason),
                replayed: true,
            },
            ClaimReply::Replay(Recorded::Borrowing { ordinal, at_ms }) => {
                // The first attempt died mid-borrow (or is still running):
                // resume it. Donor takes are idempotent per (user, ordinal)
                // and judged at the reservation's instant, not this copy's.
                let outcome = self.borrow(claim, shards, ordinal, at_ms).await?;
                Decided {
                    outcome,
                    replayed: true,
                }
            }
        })
    }

    /// The home shard has no usable state: BUSY, and the reconciler is
    /// asked to rebuild or verify it.
    async fn unusable(&self, claim: &Claim<'_>) -> StoreError {
        warn!(
            shard = claim.home_shard,
            "home shard has no usable state; BUSY until it is rebuilt or verified"
        );
        self.state_lost(claim.coupon, claim.now_ms).await;
        StoreError::Unavailable(format!("shard {} of a known coupon has no usable state", claim.home_shard).into())
    }

    async fn borrow(
        &self,
        claim: &Claim<'_>,
        shards: u32,
        ordinal: u32,
        reserved_at_ms: i64,
    ) -> Result<Result<GrantRecord, Rejection>, StoreError> {
        finish_borrow(
            self.ledger.as_ref(),
            self.metrics.as_ref(),
            claim,
            shards,
            ordinal,
            reserved_at_ms,
        )
        .await
    }
}
