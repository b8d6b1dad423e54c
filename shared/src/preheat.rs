//! Creating a coupon: the definition made durable in DynamoDB, then its
//! Redis state preheated.
//!
//! DynamoDB is written first, so Redis never holds a coupon that the durable
//! store does not know (the reconciler rebuilds Redis from DynamoDB, never
//! the reverse). Both steps are idempotent: if the preheat fails, running the
//! create again finishes it; running it with a different definition under the
//! same id is a conflict and changes nothing.

use crate::clock::Clock;
use crate::coupon::{CouponDefinition, DefinitionError};
use crate::error::StoreError;
use crate::ports::{CouponRepository, StockPreheater};

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
    def.validate(max_total_stock)?;
    let stored = repo.put_definition(def).await.map_err(classify)?;
    let preheated = preheater.preheat(def, clock.now_ms()).await.map_err(classify)?;
    Ok(if stored || preheated {
        Created::New
    } else {
        Created::Unchanged
    })
}
