//! The issuer's port: the durable ledger it writes.

use async_trait::async_trait;

use crate::coupon::CouponDefinition;
use crate::grant::Grant;
use crate::ids::CouponId;

use super::{IssueError, IssueOutcome};

/// The durable ledger the issuer writes (DynamoDB).
#[async_trait]
pub trait IssueLedger: Send + Sync {
    /// Issues one grant: the user coupon and one unit of a capped counter in
    /// one transaction. Idempotent per (user, coupon, ordinal).
    async fn issue(&self, grant: &Grant, def: &CouponDefinition, now_ms: i64) -> Result<IssueOutcome, IssueError>;
    /// Records durably that `shard` of `coupon` has minted grant `seq` (the
    /// shard's high-water mark only ever grows). The reconciler compares it
    /// with the shard's sequence in Redis: a Redis shard behind it has
    /// rolled back (restarted from an old snapshot, a failover without an
    /// acknowledged replica) and would sell units already issued.
    async fn raise_high_water(&self, coupon: &CouponId, shard: u32, seq: u64) -> Result<(), IssueError>;
}
