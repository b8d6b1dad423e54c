//! The grab's ports: the atomic stock operations on one shard, the risk
//! reservation, and the hand-off of winners to the issuer.

use async_trait::async_trait;

use crate::error::{PublishError, StoreError};
use crate::grant::{Grant, GrantRecord};
use crate::ids::{ClientIp, CouponId, DeviceId, RequestId, UserId};
use crate::outcome::{Rejection, RiskReason};

mod claims;
pub use claims::{ClaimError, GrantClaims};

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
    /// The caller's attested device, if the identity carries one: a
    /// coupon that requires one refuses the press without it, and the
    /// device rules count it.
    pub device: Option<&'a DeviceId>,
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
        /// When the claim was reserved: every take of the borrow is judged
        /// at this instant, whichever copy, retry or reconciler runs it.
        at_ms: i64,
    },
    /// A borrow found every shard empty, or a commit found the coupon
    /// sold out after the press's risk reservation.
    SoldOut,
    /// The press lost after it began, for this reason: a borrow ended
    /// because the coupon stopped selling meanwhile (taken offline, its
    /// window over, between two waves), or a commit refused it after its
    /// risk reservation (any refusal the home shard decides). Nothing was
    /// taken; every copy of the press answers this, so a copy holding the
    /// places this one gives back never wins on them.
    Closed(Rejection),
}

/// How a borrow ended, for [`StockLedger::settle`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BorrowEnd<'a> {
    /// A donor shard gave this unit.
    Took(&'a GrantRecord),
    /// Every donor was empty: the home shard is tried once more, then the
    /// claim is given back and the request answers SOLD_OUT.
    AllEmpty,
    /// A donor found the coupon no longer on sale: nothing is taken, the
    /// claim is given back, the request answers this rejection.
    Closed(&'a Rejection),
}

/// Which part of the grab decision a call to [`StockLedger::claim`] makes.
///
/// A press is decided in two steps around the risk reservation, so that a
/// press the shard refuses costs one round trip and reserves nothing:
/// [`Self::Admit`] first, then (only if admitted and the risk rules allow
/// it) [`Self::Commit`]. Nothing is held between the two, so an admitted
/// press that is then refused has taken no stock from anyone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClaimStep {
    /// Decides every refusal the home shard can decide (the coupon's state
    /// and window, the member level, the per-user limit, a certain
    /// sell-out, the rate limit) and takes the rate limit's token for the
    /// press; changes nothing else. Answers [`ClaimReply::Admitted`],
    /// [`ClaimReply::Replay`] or [`ClaimReply::Rejected`].
    Admit,
    /// After the risk reservation: checks again what may have changed
    /// since the admission (not the rate limit: the admission took the
    /// token) and claims.
    Commit,
    /// Admission and claim in one call, for a guard that reserves nothing
    /// ([`RiskGuard::reserves`] false): nothing has to happen in between.
    Whole,
    /// A lottery winner's claim, made by the draw (`crate::lottery`): none
    /// of a press's checks (the registration made them, the draw chose the
    /// user), the draw's window for the window, under the request id
    /// [`crate::lottery::DRAW_REQUEST`].
    Draw,
}

/// The home shard's answer to a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimReply {
    /// ([`ClaimStep::Admit`] only) Nothing on the shard refuses the press:
    /// reserve the risk rules, then commit.
    Admitted,
    /// The request id was seen before: its stored record, nothing changed.
    Replay(Recorded),
    /// The request id won before, but the shard's server restarted since
    /// the reconciler last checked it: the win may be a snapshot's memory
    /// of a grant never claimed, whose unit a rebuild has sold again. It
    /// is true if its grant's claim is durable ([`GrantClaims::holds`]),
    /// whatever the check decides (a rebuild counts every claim); if not,
    /// BUSY until the check. Nothing changed.
    ReplayUnverified(GrantRecord),
    /// A unit of the home shard's stock was granted.
    Won(GrantRecord),
    /// The home shard is empty but others may not be: claim `ordinal` is
    /// reserved; borrow, then settle.
    Borrow {
        /// The reserved claim number.
        ordinal: u32,
        /// When it was reserved (see [`Recorded::Borrowing`]).
        at_ms: i64,
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
    /// The donor shard has no usable state: lost, never preheated, or its
    /// server restarted and the reconciler has not verified it yet.
    Missing,
    /// The coupon is no longer on sale ([`Rejection::Offline`] or
    /// [`Rejection::Ended`]): nothing was taken.
    Closed(Rejection),
}

/// Who asks what a press would get now, routed to their home shard: a
/// press without its request id, since a dry run records nothing.
#[derive(Debug, Clone)]
pub struct Peek<'a> {
    /// The coupon.
    pub coupon: &'a CouponId,
    /// The user's home shard.
    pub home_shard: u32,
    /// The caller.
    pub user: &'a UserId,
    /// The caller's member level (from the identity).
    pub level: u32,
    /// Whether the caller's identity carries an attested device id (a
    /// coupon may require one).
    pub device: bool,
    /// The instant the answer is for.
    pub now_ms: i64,
}

/// The home shard's answer to a dry run ([`StockLedger::peek`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PeekReply {
    /// Nothing on the shard refuses the press and it has stock.
    Open,
    /// Nothing refuses the press, but the shard has nothing released left
    /// while others may: a press would borrow.
    Empty {
        /// The next release wave's instant, if one is to come: what the
        /// press hears if the others have nothing either.
        next_wave_at_ms: Option<i64>,
    },
    /// What the press's admission would refuse it with.
    Rejected(Rejection),
}

/// The home shard's answer to a lottery registration's admission
/// ([`StockLedger::admit_entry`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EntryReply {
    /// Nothing refuses it: register.
    Open,
    /// The user registered before, at this instant.
    Entered {
        /// When.
        at_ms: i64,
    },
    /// What the shard refuses it with.
    Rejected(Rejection),
}

/// The atomic stock operations, one shard at a time (Redis Lua scripts).
#[async_trait]
pub trait StockLedger: Send + Sync {
    /// How many shards a coupon has, or `None` if it does not exist.
    async fn shard_count(&self, coupon: &CouponId) -> Result<Option<u32>, StoreError>;
    /// Drops a shard whose state a grant's claim proved rolled back (it
    /// minted a grant whose id, user's ordinal or request DynamoDB holds for
    /// another grant: `ClaimError::Reminted`, `OrdinalClaimed`,
    /// `RequestClaimed`), as the reconciler's re-drive drops one, so that
    /// its presses wait for the rebuild (BUSY) instead of replaying what
    /// can never be sent. True if it was dropped now.
    async fn drop_rolled_back(&self, coupon: &CouponId, shard: u32) -> Result<bool, StoreError>;
    /// One step of the grab decision on the home shard, atomically.
    async fn claim(&self, claim: &Claim<'_>, step: ClaimStep) -> Result<ClaimReply, StoreError>;
    /// Takes one unit from `donor` for the reserved claim `ordinal`.
    async fn take(&self, claim: &Claim<'_>, donor: u32, ordinal: u32) -> Result<TakeReply, StoreError>;
    /// Finishes a borrow on the home shard as it `ended`. `None` if the
    /// reservation is gone.
    async fn settle(&self, claim: &Claim<'_>, ended: BorrowEnd<'_>) -> Result<Option<Recorded>, StoreError>;
    /// The dry run of a press's admission on the home shard: the same
    /// checks (lua/lib.lua, `refusal`), with the rate limit only looked
    /// at; changes nothing.
    async fn peek(&self, peek: &Peek<'_>) -> Result<PeekReply, StoreError>;
    /// The units `shard` may sell at `now_ms` (its stock less what later
    /// release waves hold back; 0 for a shard with no state), read only:
    /// whether a dry run's borrow would find one there.
    async fn shard_stock(&self, coupon: &CouponId, shard: u32, now_ms: i64) -> Result<u64, StoreError>;
    /// A lottery registration's admission on the home shard, read only:
    /// the coupon's state, the registration window, the level, a device
    /// the coupon requires, and an entry remembered there.
    async fn admit_entry(&self, ask: &Peek<'_>) -> Result<EntryReply, StoreError>;
    /// Remembers on the home shard that the user registered at `at_ms`, so
    /// that a repeat ends at its admission.
    async fn remember_entry(&self, ask: &Peek<'_>, at_ms: i64) -> Result<(), StoreError>;
    /// Reads the stored outcome of a request id without changing anything.
    async fn recorded(&self, claim: &Claim<'_>) -> Result<Option<Recorded>, StoreError>;
    /// True once the node that owns `shard` holds `decision` and the
    /// configured number of replicas hold every write made so far on it
    /// (the decision's record, stock and outbox entry), whichever
    /// connection or instance made them, so a failover to a replica cannot
    /// roll the decision back. False if a replica did not acknowledge in
    /// time, or if the node no longer holds the decision: a failover
    /// between the decision and this call promoted a replica without it,
    /// and acknowledging that node's writes would vouch for a decision it
    /// never had. Either way the caller acts on nothing, and a retry
    /// decides again on the node there is. Always true when no replica is
    /// required (a failover may then lose any decision).
    async fn replicated(&self, coupon: &CouponId, shard: u32, decision: Decision<'_>) -> Result<bool, StoreError>;
}

/// What a replica's acknowledgement vouches for: the decision the caller
/// acts on next (tells a user, takes a unit for, sends to the issuer),
/// which the node that answers must still hold.
#[derive(Debug, Clone, Copy)]
pub enum Decision<'a> {
    /// The request's record on its home shard is this grant: a win, its
    /// replay, or a donor's grant a settle stored.
    Won {
        /// Who won.
        user: &'a UserId,
        /// The request that won.
        request: &'a RequestId,
        /// The grant its record holds.
        record: &'a GrantRecord,
    },
    /// The request has a record on its home shard: a borrow's reservation,
    /// or whatever settled it since (a take for a claim the home forgot
    /// would be a unit nobody counts).
    Reserved {
        /// Whose press.
        user: &'a UserId,
        /// The press.
        request: &'a RequestId,
    },
    /// The request's record on its home shard is a stored loss (`L|`):
    /// risk places given back for a loss a failover forgets would let
    /// another copy of the press win on them. Not any record: a borrow's
    /// reservation (`B|`) a replica holds is no loss, and the press may
    /// still win from it.
    Lost {
        /// Whose press.
        user: &'a UserId,
        /// The press.
        request: &'a RequestId,
    },
    /// The donor's take for the user's claim `record.ordinal` is this unit.
    Took {
        /// The borrower.
        user: &'a UserId,
        /// The unit the donor gave.
        record: &'a GrantRecord,
    },
    /// The grant is on its way from this node (a re-drive): its shard's
    /// outbox lists it for this user, or, on the home of a borrow whose
    /// donor lost it, the home's list of borrowed grants does.
    Pending {
        /// Whose grant.
        user: &'a UserId,
        /// The grant.
        record: &'a GrantRecord,
    },
    /// Every write the shard took so far, with no decision to check (the
    /// home shard of a re-driven grant, whose claim a borrow counted).
    Writes,
}

/// What a risk reservation took, so that exactly that can be given back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RiskHold {
    /// Whose reservation.
    pub user: UserId,
    /// The press it was made for (coupon and request id): reservations are
    /// keyed by it, so reserving or releasing it again counts once.
    pub coupon: CouponId,
    /// See [`Self::coupon`].
    pub request: RequestId,
    /// From which address, if known.
    pub ip: Option<ClientIp>,
    /// From which device, if the identity carries one.
    pub device: Option<DeviceId>,
    /// The risk day (days since epoch in the configured time zone).
    pub day: i64,
    /// One of the user's daily claims was reserved.
    pub user_reserved: bool,
    /// A reference in the IP's distinct-users set was reserved.
    pub ip_reserved: bool,
    /// A place among the device's users and one of its daily claims were
    /// reserved.
    pub device_reserved: bool,
}

impl RiskHold {
    /// True if releasing it would change nothing.
    pub fn is_empty(&self) -> bool {
        !self.user_reserved && !self.ip_reserved && !self.device_reserved
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

/// Risk checks keyed by user, IP and device, reserved before the grab so
/// that the limits hold under concurrency.
#[async_trait]
pub trait RiskGuard: Send + Sync {
    /// Checks the blacklist and reserves a daily claim, an IP place and,
    /// for a press with a device (`claim.device`), a device place and one
    /// of its daily claims, for one press (`claim.coupon`,
    /// `claim.request`). Idempotent per press: a retry or a replay finds
    /// its reservation and takes nothing more.
    async fn reserve(&self, claim: &Claim<'_>, ip: Option<ClientIp>) -> Result<RiskDecision, StoreError>;
    /// The reservation of a lottery registration (`claim.request` is the
    /// registration's one request id): the blacklist, the IP's and the
    /// device's distinct users, not the daily claims nor the device's (an
    /// entry is not a claim). Idempotent as [`Self::reserve`]; nothing is
    /// given back for an entry that was written.
    async fn reserve_entry(&self, claim: &Claim<'_>, ip: Option<ClientIp>) -> Result<RiskDecision, StoreError> {
        self.reserve(claim, ip).await
    }
    /// The dry run of [`Self::reserve`]: whether a fresh press of `user`
    /// from `ip` and `device` would be refused now, reserving nothing.
    async fn check(
        &self,
        user: &UserId,
        ip: Option<ClientIp>,
        device: Option<&DeviceId>,
        now_ms: i64,
    ) -> Result<Option<RiskReason>, StoreError>;
    /// Gives back what `reserve` took for that press. Idempotent: a repeated
    /// release gives back nothing more.
    async fn release(&self, hold: &RiskHold) -> Result<(), StoreError>;
    /// Gives back whatever the press of `claim` still holds, without the
    /// hold `reserve` returned: for a replayed loss, whose first attempt
    /// may have died between its decision and its release (its answer
    /// lost), so the user's, the IP's and the device's places it took do
    /// not count a press that never won. Idempotent, as `release` is.
    async fn release_press(&self, claim: &Claim<'_>, ip: Option<ClientIp>) -> Result<(), StoreError>;
    /// False if [`Self::reserve`] allows every press and holds nothing (no
    /// rules configured): the grab then decides in one call
    /// ([`ClaimStep::Whole`]) instead of admitting first.
    fn reserves(&self) -> bool {
        true
    }
}

/// Hands a grant to the issuer (SQS).
#[async_trait]
pub trait GrantPublisher: Send + Sync {
    /// Sends one grant, and is done (sent, or given up) within `within_ms`:
    /// a send still running after that could land after the reconciler has
    /// decided that every send from before a loss has landed (see
    /// [`super::SEND_BUDGET_MS`]). An error means the grant was not queued;
    /// it stays in the outbox, from where the reconciler re-drives it.
    async fn publish(&self, grant: &Grant, within_ms: u64) -> Result<(), PublishError>;
}

/// The durable catalogue of coupons (the definitions table), asked only
/// when Redis knows nothing of a coupon. After Redis lost its data a coupon
/// that exists must answer BUSY (retry shortly) and never
/// COUPON_NOT_FOUND: the app would tell the user the campaign is gone.
#[async_trait]
pub trait CouponCatalog: Send + Sync {
    /// The coupon's shard count if it was ever created, `None` if not.
    async fn shard_count(&self, coupon: &CouponId) -> Result<Option<u32>, StoreError>;
}

/// Asks for a coupon's lost Redis state to be rebuilt now (the reconciler,
/// through its repair queue) rather than at its next scheduled pass, so a
/// sale heals in seconds after Redis lost data.
#[async_trait]
pub trait RepairRequests: Send + Sync {
    /// Asks once; the reconciler repairs every coupon it is asked about (and
    /// a request for a coupon that needs nothing changes nothing). Requests
    /// for one coupon close together in time (`now_ms`) may be merged.
    async fn request_repair(&self, coupon: &CouponId, now_ms: i64) -> Result<(), PublishError>;
}
