//! What the lottery needs from the durable store (DynamoDB): the entries,
//! sharded like the stock so no key is hot, and the coupon's draw: its
//! seed, when the entries were frozen, and the result once drawn.

use async_trait::async_trait;

use crate::error::StoreError;
use crate::ids::{CouponId, UserId};

use super::{Rank, Seed};

/// What a registration found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Registered {
    /// The entry was written now.
    New,
    /// The user had registered before, at this instant: nothing written.
    Already {
        /// When the first registration was written.
        at_ms: i64,
    },
    /// The draw has frozen the entries: nothing written.
    Closed,
}

/// A finished draw, as stored and shown.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drawn {
    /// When it finished.
    pub at_ms: i64,
    /// Distinct entries that took part.
    pub entries: u64,
    /// Winners drawn.
    pub winners: u64,
    /// The places the draw was for (the stock then): a verification
    /// recomputes with it, whatever the stock is now.
    pub places: u64,
    /// The largest winning rank (`None`: nobody won).
    pub threshold: Option<Rank>,
}

/// A lottery coupon's draw as the store has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lottery {
    /// The seed committed to at creation; revealed once drawn.
    pub seed: Seed,
    /// When the draw froze the entries (no registration is written after).
    pub frozen_at_ms: Option<i64>,
    /// The result, once every winner's grant is on its way.
    pub drawn: Option<Drawn>,
}

/// The entries and the draw, in DynamoDB.
#[async_trait]
pub trait Entries: Send + Sync {
    /// Writes `user`'s entry on its home `shard`, once: in the same
    /// transaction as a check that the draw has not frozen the entries, so
    /// an entry is either in the draw or refused.
    async fn register(
        &self,
        coupon: &CouponId,
        shard: u32,
        user: &UserId,
        at_ms: i64,
    ) -> Result<Registered, StoreError>;
    /// When `user` registered, if they did.
    async fn registered(&self, coupon: &CouponId, shard: u32, user: &UserId) -> Result<Option<i64>, StoreError>;
    /// Every entry of one shard (a consistent read, complete once frozen).
    async fn entries(&self, coupon: &CouponId, shard: u32) -> Result<Vec<UserId>, StoreError>;
    /// The coupon's draw; `None` for a coupon that is not a lottery.
    async fn lottery(&self, coupon: &CouponId) -> Result<Option<Lottery>, StoreError>;
    /// Freezes the entries of every one of the coupon's `shards` (once: a
    /// second call keeps the first instant) and returns the draw. A
    /// registration is refused once its shard is frozen.
    async fn freeze(&self, coupon: &CouponId, shards: u32, now_ms: i64) -> Result<Lottery, StoreError>;
    /// Records the result (once), which reveals the seed.
    async fn record_draw(&self, coupon: &CouponId, drawn: &Drawn) -> Result<(), StoreError>;
}
