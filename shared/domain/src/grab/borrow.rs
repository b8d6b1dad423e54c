//! The borrow protocol of a sharded coupon: which shard is a user's home,
//! and how a claim reserved on an empty home shard takes a unit from the
//! other shards. Shared by the grab and by the reconciler, which finishes
//! borrows whose caller died.

use tracing::warn;

use super::ports::{BorrowEnd, Claim, Recorded, StockLedger, TakeReply};
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

/// Finishes a borrow for claim `ordinal` reserved on the home shard: visits
/// the other shards in a fixed order from the home shard (so that concurrent
/// retries of one request meet the same donor first), then settles on the
/// home shard. Used by the grab and, for borrows whose caller died, by the
/// reconciler: donor takes are idempotent per (user, ordinal), so running it
/// again after a crash never takes a second unit.
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
    let mut donor_grant = None;
    let mut closed = None;
    let mut missing = 0;
    for step in 1..shards {
        let donor = (claim.home_shard + step) % shards;
        match ledger.take(&at_reservation, donor, ordinal).await? {
            TakeReply::Won(rec) => {
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
            TakeReply::Missing => {
                warn!(donor, "stock shard has no state; skipped (the reconciler rebuilds it)");
                metrics.count(crate::metrics::Metric::ShardMissing, None, 1);
                missing += 1;
            }
        }
    }
    if donor_grant.is_none() && closed.is_none() && missing > 0 {
        // A lost shard may hold stock once rebuilt: settling now would stamp
        // the home shard sold out. The reservation stays open; the caller's
        // retry (or the reconciler) resumes the borrow once it is back.
        return Err(StoreError::Unavailable(
            format!("{missing} donor shard(s) have no state; the borrow waits for the rebuild").into(),
        ));
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
        None => donor_grant.ok_or(closed.unwrap_or(Rejection::SoldOut)),
    })
}
