//! Issuance: grants become coupons in the user's wallet, exactly once.
//!
//! The issuer receives grants from SQS (at-least-once, any order, any number
//! of times). For each it runs one DynamoDB transaction: put the user coupon
//! under `(user, coupon, ordinal)` with `attribute_not_exists`, and take one
//! unit from a capped counter. Repeats find the coupon there (duplicate =
//! success); a grant beyond the durable cap, possible only after Redis lost
//! data, is recorded as REJECTED and counted, never issued.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

use tracing::{instrument, warn};

use crate::catalog::CouponRepository;
use crate::coupon::CouponDefinition;
use crate::error::{BoxError, StoreError};
use crate::grant::Grant;
use crate::ids::CouponId;
use crate::metrics::{Metric, Metrics};
use crate::user_coupon::RejectReason;

pub mod ports;
pub use ports::IssueLedger;

/// What issuing one grant did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IssueOutcome {
    /// The coupon is now in the wallet.
    Issued,
    /// It was already there (a repeated delivery): success.
    Duplicate,
    /// Recorded as rejected and acknowledged.
    Rejected(RejectReason),
}

/// A write that did not happen; SQS delivers the grant again.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// DynamoDB throttled the write (or the transaction conflicted): back off.
    #[error("issue throttled")]
    Throttled(#[source] BoxError),
    /// DynamoDB could not be reached or failed.
    #[error("coupon ledger unavailable")]
    Unavailable(#[source] BoxError),
}

/// Why one message was not acknowledged.
#[derive(Debug, thiserror::Error)]
pub enum IssueFailure {
    /// The message can never succeed (not a grant, unknown coupon): it is
    /// reported failed every time and lands in the DLQ after
    /// `maxReceiveCount` deliveries, where an alarm and the reconciler see it.
    #[error("poison message: {0}")]
    Poison(String),
    /// A transient failure: retried by SQS redelivery.
    #[error("issue failed, will be retried")]
    Transient(#[source] IssueError),
    /// The definition could not be read.
    #[error("coupon definition unavailable")]
    Definition(#[source] StoreError),
}

/// Issues grants, caching coupon definitions per Lambda instance.
pub struct IssuerService {
    ledger: Arc<dyn IssueLedger>,
    definitions: Arc<dyn CouponRepository>,
    metrics: Arc<dyn Metrics>,
    cache: RwLock<HashMap<CouponId, Arc<CouponDefinition>>>,
}

impl IssuerService {
    /// Wires the service.
    pub fn new(
        ledger: Arc<dyn IssueLedger>,
        definitions: Arc<dyn CouponRepository>,
        metrics: Arc<dyn Metrics>,
    ) -> Self {
        Self {
            ledger,
            definitions,
            metrics,
            cache: RwLock::default(),
        }
    }

    /// Raises the durable high-water mark of every shard that minted one of
    /// `grants` (each one the ledger has now seen, issued, duplicate or
    /// rejected: each consumed its sequence), one write per shard. Returns
    /// the shards whose mark could not be written: the caller must not
    /// acknowledge their messages, so that a grant is never acknowledged
    /// before the mark that would reveal its shard rolling back.
    pub async fn raise_high_water(&self, grants: &[Grant]) -> Vec<(CouponId, u32)> {
        // In shard order, so the writes come in the same order every time
        // (the explorer replays a schedule by its seed).
        let mut marks: BTreeMap<(CouponId, u32), u64> = BTreeMap::new();
        for minted in grants.iter().map(|g| &g.grant_id) {
            let mark = marks.entry((minted.coupon().clone(), minted.shard())).or_default();
            *mark = (*mark).max(minted.seq());
        }
        let mut failed = Vec::new();
        for ((coupon, shard), seq) in marks {
            if let Err(e) = self.ledger.raise_high_water(&coupon, shard, seq).await {
                warn!(coupon = %coupon, shard, error = %e, "high-water mark not recorded; the batch's grants come back");
                self.metrics.count(Metric::HighWaterFailed, None, 1);
                failed.push((coupon, shard));
            }
        }
        failed
    }

    /// Issues one grant.
    #[instrument(skip_all, fields(grant = %grant.grant_id, user = %grant.user_id))]
    pub async fn issue(&self, grant: &Grant, now_ms: i64) -> Result<IssueOutcome, IssueFailure> {
        let def = self.definition(&grant.coupon_id).await?;
        if grant.ordinal == 0 || grant.ordinal > def.per_user_limit {
            return Err(IssueFailure::Poison(format!(
                "ordinal {} outside 1..={}",
                grant.ordinal, def.per_user_limit
            )));
        }
        let outcome = self
            .ledger
            .issue(grant, &def, now_ms)
            .await
            .map_err(IssueFailure::Transient)?;
        let name = match outcome {
            IssueOutcome::Issued => Metric::CouponIssued,
            IssueOutcome::Duplicate => Metric::DuplicateDelivery,
            IssueOutcome::Rejected(reason) => {
                warn!(reason = reason.as_str(), "grant rejected by the durable ledger");
                Metric::GrantRejected
            }
        };
        self.metrics.count(name, None, 1);
        Ok(outcome)
    }

    async fn definition(&self, coupon: &CouponId) -> Result<Arc<CouponDefinition>, IssueFailure> {
        if let Some(def) = self.cache.read().ok().and_then(|c| c.get(coupon).cloned()) {
            return Ok(def);
        }
        let def = self
            .definitions
            .get_definition(coupon)
            .await
            .map_err(IssueFailure::Definition)?
            .ok_or_else(|| IssueFailure::Poison(format!("unknown coupon {coupon}")))?;
        let def = Arc::new(def);
        if let Ok(mut cache) = self.cache.write() {
            cache.insert(coupon.clone(), def.clone());
        }
        Ok(def)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::ids::{GrantId, UserId};
    use crate::testing::Silent;

    /// Issues everything; records the marks it is asked to raise, refusing
    /// those of one shard.
    #[derive(Default)]
    struct Marks {
        raised: Mutex<Vec<(String, u32, u64)>>,
        refuse_shard: Option<u32>,
    }

    #[async_trait::async_trait]
    impl IssueLedger for Marks {
        async fn issue(&self, _: &Grant, _: &CouponDefinition, _: i64) -> Result<IssueOutcome, IssueError> {
            Ok(IssueOutcome::Issued)
        }
        async fn raise_high_water(&self, coupon: &CouponId, shard: u32, seq: u64) -> Result<(), IssueError> {
            if self.refuse_shard == Some(shard) {
                return Err(IssueError::Unavailable("throttled".into()));
            }
            self.raised.lock().unwrap().push((coupon.to_string(), shard, seq));
            Ok(())
        }
    }

    fn grant(id: &str) -> Grant {
        Grant {
            grant_id: GrantId::parse(id).unwrap(),
            coupon_id: GrantId::parse(id).unwrap().coupon().clone(),
            user_id: UserId::parse("u").unwrap(),
            ordinal: 1,
            request_id: crate::ids::RequestId::parse("r").unwrap(),
            shard: GrantId::parse(id).unwrap().shard(),
            granted_at_ms: 0,
        }
    }

    /// No definitions: raising marks never reads one.
    struct NoDefinitions;

    #[async_trait::async_trait]
    impl CouponRepository for NoDefinitions {
        async fn put_definition(&self, _: &CouponDefinition) -> Result<crate::catalog::Stored, StoreError> {
            unreachable!("not used")
        }
        async fn mark_preheated(&self, _: &CouponId) -> Result<(), StoreError> {
            unreachable!("not used")
        }
        async fn get_definition(&self, _: &CouponId) -> Result<Option<CouponDefinition>, StoreError> {
            Ok(None)
        }
    }

    fn service(ledger: Arc<Marks>) -> IssuerService {
        IssuerService::new(ledger, Arc::new(NoDefinitions), Arc::new(Silent))
    }

    #[tokio::test]
    async fn a_batch_raises_one_mark_per_shard_to_its_highest_sequence() {
        let ledger = Arc::new(Marks::default());
        let grants = ["sale-1-0-3", "sale-1-0-9", "sale-1-0-4", "sale-1-1-2", "other-0-5"].map(grant);
        assert!(service(ledger.clone()).raise_high_water(&grants).await.is_empty());
        let mut raised = ledger.raised.lock().unwrap().clone();
        raised.sort();
        assert_eq!(
            raised,
            vec![("other".into(), 0, 5), ("sale-1".into(), 0, 9), ("sale-1".into(), 1, 2)]
        );
    }

    #[tokio::test]
    async fn a_mark_not_written_names_its_shard_so_its_messages_come_back() {
        let ledger = Arc::new(Marks {
            refuse_shard: Some(1),
            ..Marks::default()
        });
        let grants = ["sale-0-3", "sale-1-2"].map(grant);
        let failed = service(ledger).raise_high_water(&grants).await;
        assert_eq!(failed, vec![(CouponId::parse("sale").unwrap(), 1)]);
    }
}
