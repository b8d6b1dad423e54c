//! The grants' claims: the port the durable step before SUCCESS goes
//! through (DynamoDB's claims table), and why a claim is not written.
//! Beside the other ports of the grab (`ports.rs`), in a file of its own
//! for the conflicts a claim can name.

use async_trait::async_trait;

use crate::error::{PublishError, StoreError};
use crate::grant::Grant;
use crate::ids::GrantId;

/// The durable record of the grants on their way (DynamoDB): each grant's
/// claim is written before the grant is handed to the queue, so a grant
/// can reach the issuer only once a store no cache loss touches names it:
/// its unit, its user's claim and the request that won it. When Redis
/// loses a shard, the rebuild reads them there instead of waiting for the
/// queue to deliver them (a backlog on the queue then costs the sale
/// nothing), so nothing on its way is sold or claimed twice.
#[async_trait]
pub trait GrantClaims: Send + Sync {
    /// Writes the claims of `grants` (idempotent per grant id), and is
    /// done (written, or given up) within `within_ms`, for the same reason
    /// a send is ([`GrantPublisher::publish`]). One answer per grant, in
    /// order: a grant may be sent only if its claim was written, and one
    /// claim that fails holds up none of the others.
    async fn claim(&self, grants: &[Grant], within_ms: u64) -> Vec<Result<(), ClaimError>>;

    /// Whether `grant` itself is claimed (its id claimed for this very
    /// grant) and not rejected, read consistently: a win a restarted shard
    /// remembers is replayed before the restart is checked only on this
    /// read, since such a grant is on its way whatever becomes of the
    /// shard (every rebuild counts it and records its request's win again;
    /// a rejected one it neither counts nor answers for).
    async fn holds(&self, grant: &Grant) -> Result<bool, StoreError>;
}

/// Why a grant's claim was not written: either way the grant is not sent.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// Its id is claimed for another grant: the shard that minted it rolled
    /// back past a grant already sent (a failover to a replica that lacked
    /// it) and minted the id again. No retry can write it; the shard must
    /// be dropped and rebuilt, which the reconciler's re-drive does when it
    /// meets this.
    #[error("grant id {0} is claimed for another grant: its shard minted the id again")]
    Reminted(GrantId),
    /// The grant's user and ordinal are claimed for another grant that is
    /// on its way or issued (claims that guard ordinals: a cache whose
    /// acknowledged writes a failover may lose, `CACHE_DURABILITY=none`).
    /// The user's home shard rolled back past a win its user was told and
    /// counted the user one claim short: sent, this grant would be
    /// rejected at the issuer (`ORDINAL_TAKEN`) after its user heard
    /// SUCCESS. Like [`Self::Reminted`], only the shard's drop and rebuild
    /// (which counts the claim) ends it.
    #[error("grant {0}'s user and ordinal are claimed for another grant: its home shard rolled back")]
    OrdinalClaimed(GrantId),
    /// The grant's request is claimed for another grant (claims that guard
    /// ordinals, as [`Self::OrdinalClaimed`]): the request's record on its
    /// home shard was lost (a failover, or evicted at the storage ceiling
    /// of a cache that evicts keys with a TTL) after its win was claimed,
    /// and the press was decided afresh. Sent, this grant would be a
    /// second coupon for one request; the shard's rebuild restores the
    /// request's record from the claim, and the retry replays it.
    #[error("grant {0}'s request is claimed for another grant: its record was lost after its win was claimed")]
    RequestClaimed(GrantId),
    /// Not written in time, or refused (throttled, unavailable): a retry
    /// may write it.
    #[error("the grant's claim was not written")]
    Unavailable(#[source] PublishError),
}
