//! The reconciler's ports: durable facts (DynamoDB), the Redis state it
//! repairs, and the queue it re-drives to.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;

use crate::barrier::BarrierRecord;
use crate::coupon::{CouponDefinition, StoredCoupon};
use crate::error::{PublishError, StoreError};
use crate::grant::{Grant, GrantRecord};
use crate::ids::{CouponId, GrantId, RequestId, UserId};
use crate::user_coupon::{Held, Holdings, RejectReason};

/// The units a rebuilt shard gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardUnits {
    /// Stock it may sell (what its waves hold back included).
    pub stock: u64,
    /// Units of waves gone by without rollover, counted as written off so
    /// the stock equation still adds up.
    pub expired: u64,
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
    pub grant_id: GrantId,
    /// Why.
    pub reason: RejectReason,
}

/// What the reconciler reads from and records in the durable store.
#[async_trait]
pub trait DurableFacts: Send + Sync {
    /// Every coupon definition.
    async fn definitions(&self) -> Result<Vec<CouponDefinition>, StoreError>;
    /// The coupon's definition and version now (a consistent read), so a
    /// pass acts on what operators decided last, not when the pass began.
    async fn stored(&self, coupon: &CouponId) -> Result<Option<StoredCoupon>, StoreError>;
    /// Units issued so far (the capped counters, summed).
    async fn issued(&self, coupon: &CouponId) -> Result<u64, StoreError>;
    /// Every rejected grant of the coupon.
    async fn rejections(&self, coupon: &CouponId) -> Result<Vec<RejectedGrant>, StoreError>;
    /// Which of these grants the durable store has issued as themselves
    /// (that grant id, won by that request: a rolled-back shard may mint
    /// an issued id again for another request of the same user).
    /// Rejections are known from [`Self::rejections`].
    async fn issued_grants(&self, grants: &[Grant]) -> Result<HashSet<GrantId>, StoreError>;
    /// How many of the coupon each user holds.
    async fn holdings(&self, coupon: &CouponId) -> Result<Holdings, StoreError>;
    /// Every grant of the coupon whose claim the durable store keeps
    /// ([`crate::grab::ports::GrantClaims`]), read consistently: each one
    /// sent, or about to be, before now, and on its way unless
    /// [`Self::issued_grants`] or [`Self::rejections`] name it.
    async fn claims(&self, coupon: &CouponId) -> Result<Vec<Grant>, StoreError>;
    /// Records that the coupon's Redis state was rebuilt (data loss).
    async fn record_rebuild(&self, coupon: &CouponId, now_ms: i64, restored: u64) -> Result<(), StoreError>;
    /// Raises `shard`'s durable high-water mark to `seq` (never lowers
    /// it). A rebuild marks the sequence its new state starts at: a state
    /// from before the rebuild (a snapshot restored later) is then behind
    /// the mark, and dropped, whatever it holds.
    async fn raise_high_water(&self, coupon: &CouponId, shard: u32, seq: u64) -> Result<(), StoreError>;
    /// True if the coupon's Redis state was ever rebuilt.
    async fn was_rebuilt(&self, coupon: &CouponId) -> Result<bool, StoreError>;
    /// Per shard, the highest grant sequence the durable store has seen
    /// minted (the issuer raises it before acknowledging a grant).
    async fn high_water(&self, coupon: &CouponId) -> Result<HashMap<u32, u64>, StoreError>;
    /// The coupon's current wait for the sends decided before a fault,
    /// read consistently, if one is open.
    async fn barrier(&self, coupon: &CouponId) -> Result<Option<BarrierRecord>, StoreError>;
    /// Opens `record` in place of the episode this pass read (`replacing`,
    /// `None` if it read none). `Ok(false)` if another pass opened or
    /// closed one meanwhile: this pass then leaves the wait to it.
    async fn open_barrier(
        &self,
        coupon: &CouponId,
        record: &BarrierRecord,
        replacing: Option<&str>,
    ) -> Result<bool, StoreError>;
    /// Closes episode `id`, before the shards it covers are repaired (a
    /// pass that dies after this leaves them missing, and the next opens a
    /// new wait). `Ok(false)` if it was not the current one.
    async fn close_barrier(&self, coupon: &CouponId, id: &str) -> Result<bool, StoreError>;
}

/// What [`StockRepair::verify`] found on a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verification {
    /// No state (lost, dropped, never preheated).
    Missing,
    /// Written or verified on the server's current replication history (or
    /// on the primary it was promoted from): it sells.
    Current,
    /// Its server restarted since (from a snapshot or from an AOF, it
    /// cannot tell which): it may lack grants users were told about, and
    /// sells nothing until checked against the durable mark. Suspect on
    /// this history since `since_ms`.
    Suspect {
        /// When a pass first found it so.
        since_ms: i64,
    },
    /// Checked: its sequence was behind the mark (it rolled back); its
    /// state was dropped for the rebuild.
    Dropped,
    /// Checked: it holds every grant the durable store has seen minted; it
    /// sells again.
    Confirmed,
}

/// What a suspect shard is settled against ([`StockRepair::verify`]): the
/// durable facts a state restored from an older snapshot may be behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DurableBound {
    /// The highest grant sequence DynamoDB knows minted on the shard: a
    /// state behind it rolled back.
    pub high_water: u64,
    /// The durable definition's version: a state behind it judges its
    /// borrows on a release schedule an operator has since changed.
    pub version: u64,
}

/// A shard's remaining stock and the definition version it has applied,
/// read in one step. A rebuild gives the lost shards the total less what
/// the others hold: an operator's change applied to a shard between a read
/// of its stock and a read of its version would be counted in the total
/// and not in the stock (units sold twice), or the other way round (units
/// never offered). Read together, such a pass sees the mismatch and waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardStock {
    /// Units the shard holds that no grant took: what it can still sell
    /// (its later waves' included) and what earlier waves left to expire
    /// (rollover off).
    pub stock: i64,
    /// The definition version its stock share was computed from (0 before
    /// any change).
    pub version: u64,
}

/// What the reconciler reads from and repairs in Redis.
#[async_trait]
pub trait StockRepair: Send + Sync {
    /// The coupons a pass found settled (selling over, balanced, nothing
    /// on its way: [`super::settles`]), each with the fingerprint of the
    /// definition it was settled under. A pass skips a coupon listed here
    /// while its definition keeps that fingerprint, so a pass costs what
    /// the coupons that may still need work cost. Kept in Redis: losing it
    /// with the cache costs one full pass, which settles them again.
    async fn settled(&self) -> Result<HashMap<CouponId, String>, StoreError>;
    /// Records the coupons this pass `settled` (with their definitions'
    /// fingerprints) and forgets the `forgotten` (changed since, or past
    /// retention), in one round trip.
    async fn settle(&self, settled: &[(CouponId, String)], forgotten: &[CouponId]) -> Result<(), StoreError>;
    /// A shard's remaining stock with its version, or `None` if its state
    /// is gone.
    async fn shard_stock(&self, coupon: &CouponId, shard: u32) -> Result<Option<ShardStock>, StoreError>;
    /// Every entry of a shard's outbox, oldest first; a dropped shard's
    /// too (a drop keeps it), empty for a lost one.
    async fn outbox(&self, coupon: &CouponId, shard: u32) -> Result<Vec<OutboxEntry>, StoreError>;
    /// Deletes confirmed entries.
    async fn trim(&self, coupon: &CouponId, shard: u32, seqs: &[u64]) -> Result<(), StoreError>;
    /// The donors' grants a shard settled for its users (a borrow's unit
    /// is on the donor, its claim here) and not yet confirmed issued: if
    /// the donor lost its state, these are the units its rebuild must not
    /// restore.
    async fn borrowed(&self, coupon: &CouponId, shard: u32) -> Result<Vec<Grant>, StoreError>;
    /// Forgets borrowed grants DynamoDB confirmed (issued or rejected).
    async fn forget_borrowed(&self, coupon: &CouponId, shard: u32, grants: &[GrantId]) -> Result<(), StoreError>;
    /// Rebuilds a lost shard: per-user counts and the outcome of every
    /// request that won a coupon the holders hold (`holders`, the users
    /// homed on this shard) first, then its definition (at its stored
    /// version, so an older change can never be applied over it) and
    /// its [`ShardUnits`], which reopen it. Never touches a shard that has state.
    /// `taken` are the units this shard gave borrows that DynamoDB holds
    /// (the user and the grant), written back as the shard's takes, so a
    /// borrow still open replays its unit instead of taking a second one.
    /// `outbox` are the grants it minted still on their way (each below
    /// `seq_base`), written back as its outbox entries, so they count as
    /// pending and can be re-driven.
    /// `Ok(false)` if the shard had state (another run rebuilt it).
    #[allow(clippy::too_many_arguments)]
    async fn restore_shard(
        &self,
        coupon: &StoredCoupon,
        shard: u32,
        units: ShardUnits,
        seq_base: u64,
        holders: &[(UserId, Vec<Held>)],
        taken: &[(UserId, GrantRecord)],
        outbox: &[Grant],
        now_ms: i64,
    ) -> Result<bool, StoreError>;
    /// Drops a shard's state (stock, counts, borrows) if its grant
    /// sequence is below `high_water`: Redis rolled back to before grants
    /// that were issued, and would sell their units again. Its outbox
    /// stays: the grants it lists were minted, and their requests' records,
    /// which a drop cannot find, may still be replayed and sent; the pass
    /// counts them on their way and the rebuild keeps them. Atomic, so a
    /// shard rebuilt meanwhile (its sequence restarts far above) is never
    /// dropped; nor is one whose server restarted ([`Self::verify`] judges
    /// it, once the send window is over). True if it was dropped; the rebuild then restores it.
    async fn drop_if_behind(&self, coupon: &CouponId, shard: u32, high_water: u64) -> Result<bool, StoreError>;
    /// Checks a shard against its server's replication history: with
    /// `bound` `None` only looks (recording when it was first found
    /// suspect); with the shard's durable bound, settles a suspect shard,
    /// atomically: dropped if behind the mark or the definition's version
    /// (or dry at some instant since its last stamp, `lua/verify.lua`;
    /// its outbox kept, as [`Self::drop_if_behind`] keeps it), else confirmed. Only call with a mark that every grant sent before
    /// the restart has reached.
    async fn verify(
        &self,
        coupon: &CouponId,
        shard: u32,
        now_ms: i64,
        bound: Option<DurableBound>,
    ) -> Result<Verification, StoreError>;
    /// Invalidates the shard's "sold out" stamp: after stock was added, or
    /// before a repair that may bring stock back (a rebuild, a restart's
    /// check).
    async fn bump_epoch(&self, coupon: &CouponId, shard: u32) -> Result<(), StoreError>;
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
    /// Sends grants to the issuer again (their claims written first);
    /// returns how many were queued. Given up (an error) `within_ms` after
    /// the call, as a grab's send is: their shards were checked just
    /// before, and a send that could land later might land after a rebuild
    /// for a loss since trusted the send window.
    async fn redrive(&self, grants: &[Grant], within_ms: u64) -> Result<usize, PublishError>;
    /// Messages waiting in the dead-letter queue, if known.
    async fn dlq_depth(&self) -> Result<Option<u64>, PublishError>;
    /// Messages on their way to the issuer (waiting, being processed, or
    /// delayed in the grant queue, every coupon's), if known: while there
    /// are any, a pending outbox entry may be one of them, and is re-driven
    /// only past the backlog horizon. (Approximate, and minutes late in
    /// AWS: repairs never wait on it.)
    async fn in_flight(&self) -> Result<Option<u64>, PublishError>;
}
