//! The coupon catalogue: durable definitions, and creating a coupon (the
//! definition made durable in DynamoDB, then its Redis state preheated).
//! The issuer reads definitions through the same port.
//!
//! DynamoDB is written first, so Redis never holds a coupon that the durable
//! store does not know (the reconciler rebuilds Redis from DynamoDB, never
//! the reverse). Both steps are idempotent: if the preheat fails, running the
//! create again finishes it; running it with a different definition under the
//! same id is a conflict and changes nothing. Once a preheat has completed
//! (recorded in DynamoDB), a create never preheats that coupon again: its
//! missing shards were lost with Redis, and only the rebuild knows how much
//! of the stock is already granted.

use async_trait::async_trait;

use crate::clock::Clock;
use crate::coupon::{CouponDefinition, DefinitionError};
use crate::error::StoreError;
use crate::ids::CouponId;

/// What storing a definition found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    /// Written now; its Redis state is still to be preheated.
    New,
    /// The same definition was there already. `preheated`: its Redis state
    /// was written once, so shards missing now were lost (the reconciler
    /// rebuilds them from DynamoDB), never to be preheated again.
    Same {
        /// A preheat of this coupon completed once.
        preheated: bool,
    },
}

/// Durable coupon definitions (DynamoDB).
#[async_trait]
pub trait CouponRepository: Send + Sync {
    /// Stores a definition once; `StoreError::Conflict` if a different one
    /// is there.
    async fn put_definition(&self, def: &CouponDefinition) -> Result<Stored, StoreError>;
    /// Records that the coupon's preheat completed. Idempotent.
    async fn mark_preheated(&self, coupon: &CouponId) -> Result<(), StoreError>;
    /// Reads a definition back.
    async fn get_definition(&self, coupon: &CouponId) -> Result<Option<CouponDefinition>, StoreError>;
}

/// Writes a coupon's Redis state (its shards' definitions and stock).
#[async_trait]
pub trait StockPreheater: Send + Sync {
    /// Writes every shard once; `Ok(true)` if anything was created. A shard
    /// with a different definition is a `StoreError::Conflict`.
    async fn preheat(&self, def: &CouponDefinition, now_ms: i64) -> Result<bool, StoreError>;
}

/// What a create did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Created {
    /// Something was written.
    New,
    /// The same definition existed already, completely preheated: nothing
    /// changed.
    Unchanged,
}

/// Why a create failed.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    /// The definition breaks a rule; nothing was written.
    #[error("invalid coupon definition: {0}")]
    Invalid(#[from] DefinitionError),
    /// A different coupon exists under this id; nothing was written.
    #[error("coupon exists with a different definition")]
    Conflict(#[source] StoreError),
    /// A store did not answer; safe to retry.
    #[error("coupon store unavailable")]
    Unavailable(#[source] StoreError),
}

fn classify(e: StoreError) -> CreateError {
    match e {
        StoreError::Conflict(_) => CreateError::Conflict(e),
        other => CreateError::Unavailable(other),
    }
}

/// Validates, stores and preheats a coupon.
pub async fn create_coupon(
    def: &CouponDefinition,
    max_total_stock: u64,
    repo: &dyn CouponRepository,
    preheater: &dyn StockPreheater,
    clock: &dyn Clock,
) -> Result<Created, CreateError> {
    def.validate_new(max_total_stock, clock.now_ms())?;
    let stored = repo.put_definition(def).await.map_err(classify)?;
    if stored == (Stored::Same { preheated: true }) {
        // Shards missing now were lost, not never written: preheating them
        // again would restore the full stock under sequence numbers already
        // handed out. The reconciler's rebuild restores what DynamoDB does
        // not account for.
        return Ok(Created::Unchanged);
    }
    preheater.preheat(def, clock.now_ms()).await.map_err(classify)?;
    repo.mark_preheated(&def.coupon_id).await.map_err(classify)?;
    Ok(Created::New)
}
