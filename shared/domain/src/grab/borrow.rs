//! The borrow protocol of a sharded coupon: which shard is a user's home,
//! and how a claim reserved on an empty home shard takes a unit from the
//! other shards. Shared by the grab and by the reconciler, which finishes
//! borrows whose caller died.

use tracing::warn;

use super::ports::{BorrowEnd, Claim, Decision, Recorded, StockLedger, TakeReply};
use crate::error::StoreError;
use crate::grant::GrantRecord;
use crate::hash::fnv1a64;
use crate::ids::UserId;
use crate::metrics::Metrics;
use crate::outcome::Rejection;

/// The user's home shard: a stable hash, so every Lambda instance routes a
/// user to the same shard (where their per-user count lives).
pub fn home_shard(user: &UserId, shards: u32) -> u32 {
    if shards <= 1 {
        return 0;
    }
    (fnv1a64(user.as_str().as_bytes()) % u64::from(shards)) as u32
}

/// A step of a borrow no replica acknowledged in time: the reservation
/// stays open, and the caller's retry (or the reconciler) resumes it.
fn not_replicated(metrics: &dyn Metrics, shard: u32, what: &str) -> StoreError {
    warn!(
        shard,
        "{what} not acknowledged by a replica in time; the borrow resumes on the retry"
    );
    metrics.count(crate::metrics::Metric::GrantNotReplicated, None, 1);
    StoreError::Unavailable(format!("{what} is not yet on a replica of shard {shard}").into())
}

/// Finishes a borrow for claim `ordinal` reserved on the home shard: visits
/// the other shards in a fixed order from the home shard (so that concurrent
/// retries of one request meet the same donor first), then settles on the
/// home shard. Used by the grab and, for borrows whose caller died, by the
/// reconciler: donor takes are idempotent per (user, ordinal), so running it
/// again after a crash never takes a second unit.
///
/// Each step waits for a replica before the next relies on it: the home's
/// reservation before the first take, the donor's take before the settle
/// records it (a failover of either node then loses nothing the other
/// keeps; without replicas required the waits answer at once).
///
/// Every take is judged at `reserved_at_ms`, the instant the claim was
/// reserved, not the caller's: two copies of one press (or a retry, or the
/// reconciler) on clocks either side of a release wave would otherwise see
/// different donors, one settling a loss while the other takes a unit
/// nobody is told of.
pub async fn finish_borrow(
    ledger: &dyn StockLedger,
    metrics: &dyn Metrics,
    claim: &Claim<'_>,
    shards: u32,
    ordinal: u32,
    reserved_at_ms: i64,
) -> Result<Result<GrantRecord, Rejection>, StoreError> {
    let at_reservation = Claim {
        now_ms: reserved_at_ms,
        ..claim.clone()
    };
    // A donor gives a unit only for a reservation that survives whatever
    // the unit survives: the donor's take is acknowledged on its own node,
    // and a home that failed over to a replica without the reservation
    // would forget the claim (the retry claims again, and the unit the
    // donor gave is refused later as a second coupon of that ordinal).
    let reserved = Decision::Reserved {
        user: claim.user,
        request: claim.request,
    };
    if !ledger.replicated(claim.coupon, claim.home_shard, reserved).await? {
        return Err(not_replicated(metrics, claim.home_shard, "the borrow's reservation"));
    }
    let mut donor_grant = None;
    let mut closed = None;
    for step in 1..shards {
        let donor = (claim.home_shard + step) % shards;
        match ledger.take(&at_reservation, donor, ordinal).await? {
            TakeReply::Won(rec) => {
                // And the home records the unit only once it survives what
                // the record survives: a donor that failed over without the
                // take would sell the unit again (under the same grant id)
                // while the home's record replays it to the user.
                let took = Decision::Took {
                    user: claim.user,
                    record: &rec,
                };
                if !ledger.replicated(claim.coupon, donor, took).await? {
                    return Err(not_replicated(metrics, donor, "the donor's take"));
                }
                donor_grant = Some(rec);
                break;
            }
            // Taken offline or over while the borrow ran (or before a retry
            // or the reconciler resumed it): no unit is taken anywhere.
            TakeReply::Closed(reason) => {
                closed = Some(reason);
                break;
            }
            TakeReply::Empty => {}
            // A lost donor ends the walk until it is rebuilt: it may have
            // given this claim its unit before the loss (a grant on its way,
            // or issued), and it may hold stock once rebuilt; a walk that
            // went on to the next donor could take a second unit for the
            // same claim, one of which a user is then told of and refused.
            // Every copy of the borrow passes a donor only on its EMPTY.
            TakeReply::Missing => {
                warn!(donor, "stock shard has no state; the borrow waits for its rebuild");
                metrics.count(crate::metrics::Metric::ShardMissing, None, 1);
                return Err(StoreError::Unavailable(
                    format!("donor shard {donor} has no state; the borrow waits for the rebuild").into(),
                ));
            }
        }
    }
    let ended = match (&donor_grant, &closed) {
        (Some(rec), _) => BorrowEnd::Took(rec),
        (None, Some(reason)) => BorrowEnd::Closed(reason),
        (None, None) => BorrowEnd::AllEmpty,
    };
    Ok(match ledger.settle(claim, ended).await? {
        Some(Recorded::Won(rec)) => Ok(rec),
        Some(Recorded::SoldOut) => Err(Rejection::SoldOut),
        Some(Recorded::Closed(reason)) => Err(reason),
        Some(Recorded::Borrowing { .. }) => {
            return Err(StoreError::Protocol {
                what: "settle",
                detail: "reservation left open".into(),
            })
        }
        // The reservation expired or was lost: the donor's grant (if any) is
        // real and in its outbox, so it is still the caller's.
        None => match (donor_grant, closed) {
            (Some(rec), _) => Ok(rec),
            (None, Some(reason)) => Err(reason),
            // Nothing taken, and no record says what the press came to
            // (another copy settled it and its answer lived out its time,
            // as a BETWEEN_WAVES does once its wave is out): not a SOLD_OUT
            // this copy can vouch for. The retry decides afresh.
            (None, None) => {
                return Err(StoreError::Unavailable(
                    "the borrow's reservation is gone; the press is decided afresh".into(),
                ))
            }
        },
    })
}
