//! The issuer's port: the durable ledger it writes.

use async_trait::async_trait;

use crate::coupon::CouponDefinition;
use crate::grant::Grant;

use super::{IssueError, IssueOutcome};

/// The durable ledger the issuer writes (DynamoDB).
#[async_trait]
pub trait IssueLedger: Send + Sync {
    /// Issues one grant: the user coupon and one unit of a capped counter in
    /// one transaction. Idempotent per (user, coupon, ordinal).
    async fn issue(&self, grant: &Grant, def: &CouponDefinition, now_ms: i64) -> Result<IssueOutcome, IssueError>;
}
