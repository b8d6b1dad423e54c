//! Ports: the small traits the domain needs from the outside world.
//!
//! The grab service is written against these; `adapters/` implements them for
//! Redis, SQS and DynamoDB, and unit tests implement them in memory. No AWS
//! SDK or `redis` type crosses this boundary.

use async_trait::async_trait;

use crate::coupon::CouponDefinition;
use crate::error::{PublishError, StoreError};
use crate::grant::{Grant, GrantRecord};
use crate::ids::{ClientIp, CouponId, RequestId, UserId};
use crate::outcome::{Rejection, RiskReason};

/// Who is grabbing what, routed to the user's home shard.
#[derive(Debug, Clone)]
pub struct Claim<'a> {
    /// The coupon.
    pub coupon: &'a CouponId,
    /// The user's home shard: where their per-user count and request ids live.
    pub home_shard: u32,
    /// The caller.
    pub user: &'a UserId,
    /// The caller's member level (from the identity).
    pub level: u32,
    /// The idempotency key.
    pub request: &'a RequestId,
    /// One instant for every decision of this grab.
    pub now_ms: i64,
}

/// What is stored under a request id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// The request won this grant.
    Won(GrantRecord),
    /// The request reserved claim `ordinal` on its home shard and is (or was,
    /// before a crash) borrowing stock from other shards.
    Borrowing {
        /// The reserved claim number.
        ordinal: u32,
    },
    /// A borrow found every shard empty.
    SoldOut,
}

/// The home shard's answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimReply {
    /// The request id was seen before: its stored record, nothing changed.
    Replay(Recorded),
    /// A unit of the home shard's stock was granted.
    Won(GrantRecord),
    /// The home shard is empty but others may not be: claim `ordinal` is
    /// reserved; borrow, then settle.
    Borrow {
        /// The reserved claim number.
        ordinal: u32,
    },
    /// Refused; nothing changed.
    Rejected(Rejection),
}

/// A donor shard's answer to a borrow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeReply {
    /// A unit was taken (or had been, for this very claim).
    Won(GrantRecord),
    /// The donor has no stock.
    Empty,
    /// The donor shard has no state (lost, or never preheated).
    Missing,
}

/// The atomic stock operations, one shard at a time (Redis Lua scripts).
#[async_trait]
pub trait StockLedger: Send + Sync {
    /// How many shards a coupon has, or `None` if it does not exist.
    async fn shard_count(&self, coupon: &CouponId) -> Result<Option<u32>, StoreError>;
    /// The whole grab decision on the home shard, atomically.
    async fn claim(&self, claim: &Claim<'_>) -> Result<ClaimReply, StoreError>;
    /// Takes one unit from `donor` for the reserved claim `ordinal`.
    async fn take(&self, claim: &Claim<'_>, donor: u32, ordinal: u32) -> Result<TakeReply, StoreError>;
    /// Finishes a borrow on the home shard with the donor's grant, or with
    /// none (every donor empty). `None` if the reservation is gone.
    async fn settle(
        &self,
        claim: &Claim<'_>,
        donor_grant: Option<&GrantRecord>,
    ) -> Result<Option<Recorded>, StoreError>;
    /// Reads the stored outcome of a request id without changing anything.
    async fn recorded(&self, claim: &Claim<'_>) -> Result<Option<Recorded>, StoreError>;
}

/// What a risk reservation took, so that exactly that can be given back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RiskHold {
    /// Whose reservation.
    pub user: UserId,
    /// From which address, if known.
    pub ip: Option<ClientIp>,
    /// The risk day (days since epoch in the configured time zone).
    pub day: i64,
    /// One of the user's daily claims was reserved.
    pub user_reserved: bool,
    /// A reference in the IP's distinct-users set was reserved.
    pub ip_reserved: bool,
}

impl RiskHold {
    /// True if releasing it would change nothing.
    pub fn is_empty(&self) -> bool {
        !self.user_reserved && !self.ip_reserved
    }
}

/// The risk checks' answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RiskDecision {
    /// Go on; give the hold back if the grab does not win.
    Allowed(RiskHold),
    /// Refused; nothing is held.
    Refused(RiskReason),
}

/// Risk checks keyed by user and IP, reserved before the grab so that the
/// limits hold under concurrency.
#[async_trait]
pub trait RiskGuard: Send + Sync {
    /// Checks the blacklist and reserves a daily claim and an IP place.
    async fn reserve(&self, user: &UserId, ip: Option<ClientIp>, now_ms: i64) -> Result<RiskDecision, StoreError>;
    /// Gives back what `reserve` took.
    async fn release(&self, hold: &RiskHold) -> Result<(), StoreError>;
}

/// Hands a grant to the issuer (SQS).
#[async_trait]
pub trait GrantPublisher: Send + Sync {
    /// Sends one grant. An error means the grant was not queued; it stays in
    /// the outbox, from where the reconciler re-drives it.
    async fn publish(&self, grant: &Grant) -> Result<(), PublishError>;
}

/// Durable coupon definitions (DynamoDB).
#[async_trait]
pub trait CouponRepository: Send + Sync {
    /// Stores a definition once: `Ok(true)` if written, `Ok(false)` if the
    /// same definition was there already, `StoreError::Conflict` if a
    /// different one was.
    async fn put_definition(&self, def: &CouponDefinition) -> Result<bool, StoreError>;
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

/// The durable ledger the issuer writes (DynamoDB).
#[async_trait]
pub trait IssueLedger: Send + Sync {
    /// Issues one grant: the user coupon and one unit of a capped counter in
    /// one transaction. Idempotent per (user, coupon, ordinal).
    async fn issue(
        &self,
        grant: &Grant,
        def: &CouponDefinition,
        now_ms: i64,
    ) -> Result<crate::issuance::IssueOutcome, crate::issuance::IssueError>;
}

/// What a user can read about their coupons (DynamoDB).
#[async_trait]
pub trait WalletStore: Send + Sync {
    /// The user's coupons, newest first.
    async fn coupons(&self, user: &UserId) -> Result<Vec<crate::issuance::UserCoupon>, StoreError>;
    /// Issued or rejected, if the durable store knows the grant for this user.
    async fn grant_status(
        &self,
        user: &UserId,
        grant: &crate::issuance::GrantRef,
    ) -> Result<Option<crate::issuance::GrantStatus>, StoreError>;
}

/// Grants still in a Redis outbox.
#[async_trait]
pub trait OutboxLookup: Send + Sync {
    /// True if the grant is in its shard's outbox and belongs to `user`.
    async fn is_pending(&self, user: &UserId, grant: &crate::issuance::GrantRef) -> Result<bool, StoreError>;
}

/// One outbox entry: a grant and its stream sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxEntry {
    /// The stream id is `<seq>-0`.
    pub seq: u64,
    /// The grant it carries.
    pub grant: Grant,
}

/// A rejection recorded in the durable store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedGrant {
    /// Which grant.
    pub grant_id: String,
    /// Why.
    pub reason: crate::issuance::RejectReason,
}

/// What the reconciler reads from and records in the durable store.
#[async_trait]
pub trait DurableFacts: Send + Sync {
    /// Every coupon definition.
    async fn definitions(&self) -> Result<Vec<CouponDefinition>, StoreError>;
    /// Units issued so far (the capped counters, summed).
    async fn issued(&self, coupon: &CouponId) -> Result<u64, StoreError>;
    /// Every rejected grant of the coupon.
    async fn rejections(&self, coupon: &CouponId) -> Result<Vec<RejectedGrant>, StoreError>;
    /// Which of these grants the durable store has (issued under that grant
    /// id). Rejections are known from [`Self::rejections`].
    async fn issued_grants(&self, grants: &[Grant]) -> Result<std::collections::HashSet<String>, StoreError>;
    /// How many of the coupon each user holds.
    async fn holdings(&self, coupon: &CouponId) -> Result<crate::issuance::Holdings, StoreError>;
    /// Records that the coupon's Redis state was rebuilt (data loss).
    async fn record_rebuild(&self, coupon: &CouponId, now_ms: i64, restored: u64) -> Result<(), StoreError>;
    /// True if the coupon's Redis state was ever rebuilt.
    async fn was_rebuilt(&self, coupon: &CouponId) -> Result<bool, StoreError>;
    /// Every user on the durable blacklist (the record the Redis flags are
    /// restored from after data loss).
    async fn blacklisted_users(&self) -> Result<Vec<UserId>, StoreError>;
    /// True if the durable blacklist has the user now.
    async fn still_blacklisted(&self, user: &UserId) -> Result<bool, StoreError>;
}

/// What the reconciler reads from and repairs in Redis.
#[async_trait]
pub trait StockRepair: Send + Sync {
    /// A shard's remaining stock, or `None` if its state is gone.
    async fn shard_stock(&self, coupon: &CouponId, shard: u32) -> Result<Option<i64>, StoreError>;
    /// Every entry of a shard's outbox, oldest first.
    async fn outbox(&self, coupon: &CouponId, shard: u32) -> Result<Vec<OutboxEntry>, StoreError>;
    /// Deletes confirmed entries.
    async fn trim(&self, coupon: &CouponId, shard: u32, seqs: &[u64]) -> Result<(), StoreError>;
    /// Rebuilds a lost shard: per-user counts first, then its definition and
    /// `stock`, which reopens it. Never touches a shard that has state.
    /// `Ok(false)` if the shard had state (another run rebuilt it).
    async fn restore_shard(
        &self,
        def: &CouponDefinition,
        shard: u32,
        stock: u64,
        seq_base: u64,
        holders: &[(UserId, u32)],
        now_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Invalidates every shard's "sold out" stamp after stock was added.
    async fn bump_epoch(&self, coupon: &CouponId, shard: u32) -> Result<(), StoreError>;
    /// Sets the user's blacklist flag unless it is there; `Ok(true)` if it
    /// had to be set (it was lost).
    async fn restore_blacklist_flag(&self, user: &UserId) -> Result<bool, StoreError>;
    /// Removes the user's blacklist flag.
    async fn clear_blacklist_flag(&self, user: &UserId) -> Result<(), StoreError>;
    /// Borrows reserved before `before_ms` and never settled.
    async fn stale_borrows(
        &self,
        coupon: &CouponId,
        shard: u32,
        before_ms: i64,
    ) -> Result<Vec<(RequestId, UserId)>, StoreError>;
}

/// The queue side of reconciliation.
#[async_trait]
pub trait Redrive: Send + Sync {
    /// Sends grants to the issuer again; returns how many were queued.
    async fn redrive(&self, grants: &[Grant]) -> Result<usize, crate::error::PublishError>;
    /// Messages waiting in the dead-letter queue, if known.
    async fn dlq_depth(&self) -> Result<Option<u64>, crate::error::PublishError>;
}
