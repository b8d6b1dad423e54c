//! Issuance: one transaction per grant puts the user coupon under
//! `(user, coupon, ordinal)` with `attribute_not_exists` and takes one unit
//! of a capped counter; a full cap or a taken ordinal is recorded as a
//! rejection (`GRANT#<grantId>`).

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};
use coupon_domain::coupon::{counter_items_for, CouponDefinition};
use coupon_domain::error::BoxError;
use coupon_domain::grant::Grant;
use coupon_domain::hash::fnv1a64;
use coupon_domain::ids::CouponId;
use coupon_domain::issuance::{IssueError, IssueLedger, IssueOutcome};
use coupon_domain::user_coupon::RejectReason;

use super::items::{get_n, get_s, n, s, Item, Tables};
use super::keys::{self, coupon_pk, user_coupon_sk, user_pk};

/// [`IssueLedger`] on DynamoDB.
#[derive(Debug, Clone)]
pub struct DynamoIssueLedger {
    tables: Tables,
}

impl DynamoIssueLedger {
    /// The issuer's writes to both tables.
    pub fn new(tables: Tables) -> Self {
        Self { tables }
    }
}

impl DynamoIssueLedger {
    /// The number of counter items the coupon has now (its stock may have
    /// grown since the issuer cached the definition).
    async fn live_counter_items(&self, coupon: &CouponId) -> Result<u32, IssueError> {
        let out = self
            .tables
            .client
            .get_item()
            .table_name(&self.tables.coupons)
            .key("pk", s(coupon_pk(coupon)))
            .key("sk", s(keys::DEF))
            .projection_expression("total_stock")
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify(Box::new(e), false))?;
        Ok(counter_items_for(
            out.item.as_ref().and_then(|i| get_n(i, "total_stock")).unwrap_or(0),
        ))
    }

    fn user_coupon_item(grant: &Grant, def: &CouponDefinition, now_ms: i64) -> Item {
        // Kept 90 days past validity, then DynamoDB's TTL removes it.
        let expires_at = def.valid_until_ms / 1000 + 90 * 86_400;
        HashMap::from([
            ("pk".to_owned(), s(user_pk(&grant.user_id))),
            ("sk".to_owned(), s(user_coupon_sk(&grant.coupon_id, grant.ordinal))),
            ("coupon_id".to_owned(), s(grant.coupon_id.as_str())),
            ("user_id".to_owned(), s(grant.user_id.as_str())),
            ("ordinal".to_owned(), n(grant.ordinal)),
            ("grant_id".to_owned(), s(grant.grant_id.clone())),
            // What the request that won it was answered: after Redis lost
            // everything, the rebuild restores it, so a retry of that
            // request replays this grant instead of winning another.
            ("request_id".to_owned(), s(grant.request_id.as_str())),
            ("shard".to_owned(), n(grant.shard)),
            ("granted_at_ms".to_owned(), n(grant.granted_at_ms)),
            ("status".to_owned(), s("UNUSED")),
            ("name".to_owned(), s(def.name.clone())),
            ("amount".to_owned(), n(def.amount)),
            ("received_at_ms".to_owned(), n(now_ms)),
            ("valid_from_ms".to_owned(), n(def.valid_from_ms)),
            ("valid_until_ms".to_owned(), n(def.valid_until_ms)),
            ("expires_at".to_owned(), n(expires_at)),
        ])
    }

    /// The key (user, coupon, ordinal) is taken: by this grant (a repeated
    /// delivery) or by another one.
    async fn existing(&self, grant: &Grant, now_ms: i64) -> Result<IssueOutcome, IssueError> {
        let out = self
            .tables
            .client
            .get_item()
            .table_name(&self.tables.user_coupons)
            .key("pk", s(user_pk(&grant.user_id)))
            .key("sk", s(user_coupon_sk(&grant.coupon_id, grant.ordinal)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify(Box::new(e), false))?;
        match out.item.as_ref().and_then(|i| get_s(i, "grant_id")) {
            Some(id) if id == grant.grant_id.as_str() => Ok(IssueOutcome::Duplicate),
            Some(_) => self.reject(grant, RejectReason::OrdinalTaken, now_ms).await,
            None => Err(IssueError::Unavailable(
                "user coupon vanished after a failed condition".into(),
            )),
        }
    }

    async fn reject(&self, grant: &Grant, reason: RejectReason, now_ms: i64) -> Result<IssueOutcome, IssueError> {
        let result = self
            .tables
            .client
            .put_item()
            .table_name(&self.tables.coupons)
            .item("pk", s(coupon_pk(&grant.coupon_id)))
            .item("sk", s(keys::grant_sk(grant.grant_id.as_str())))
            .item("status", s("REJECTED"))
            .item("reason", s(reason.as_str()))
            .item("user_id", s(grant.user_id.as_str()))
            .item("ordinal", n(grant.ordinal))
            .item("rejected_at_ms", n(now_ms))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(IssueOutcome::Rejected(reason)),
            // Recorded by an earlier delivery.
            Err(SdkError::ServiceError(e)) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                Ok(IssueOutcome::Rejected(reason))
            }
            Err(e) => {
                let throttled = matches!(&e, SdkError::ServiceError(se) if se.err().code().is_some_and(is_throttle));
                Err(classify(Box::new(e), throttled))
            }
        }
    }
}

/// Whether a DynamoDB error code, or a transaction's cancellation reason,
/// says "too much at once": throttling, or another transaction on the same
/// item (a hot counter). The one classifier of the issuer's writes: such a
/// write is retried in process, anything else goes back to SQS.
fn is_throttle(code: &str) -> bool {
    matches!(
        code,
        "ThrottlingException"
            | "ThrottlingError"
            | "ProvisionedThroughputExceededException"
            | "ProvisionedThroughputExceeded"
            | "RequestLimitExceeded"
            | "TransactionInProgressException"
            | "TransactionConflictException"
            | "TransactionConflict"
    )
}

fn classify(e: BoxError, throttled: bool) -> IssueError {
    if throttled {
        IssueError::Throttled(e)
    } else {
        IssueError::Unavailable(e)
    }
}

/// Attempts of one grant's write when DynamoDB throttles it or another
/// transaction on the same counter conflicts with it (a hot coupon).
const THROTTLED_ATTEMPTS: u32 = 4;

/// Runs `write` again while it is throttled, with a growing, jittered pause
/// (25, 50, 100 ms and up to as much again), up to `attempts` in all. Safe
/// because every write here is conditional and idempotent per grant; it
/// saves a message the visibility timeout (minutes) and, under a long
/// burst, a trip to the dead-letter queue.
async fn retry_throttled<F, Fut>(attempts: u32, mut write: F) -> Result<IssueOutcome, IssueError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<IssueOutcome, IssueError>>,
{
    let mut attempt = 1;
    loop {
        match write().await {
            Err(IssueError::Throttled(_)) if attempt < attempts => {
                let base = 25u64 << (attempt - 1);
                let jitter = fnv1a64(
                    &std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map(|d| d.as_nanos())
                        .unwrap_or(0)
                        .to_le_bytes(),
                ) % (base + 1);
                tokio::time::sleep(std::time::Duration::from_millis(base + jitter)).await;
                attempt += 1;
            }
            other => return other,
        }
    }
}

#[async_trait]
impl IssueLedger for DynamoIssueLedger {
    async fn issue(&self, grant: &Grant, def: &CouponDefinition, now_ms: i64) -> Result<IssueOutcome, IssueError> {
        retry_throttled(THROTTLED_ATTEMPTS, || self.issue_once(grant, def, now_ms)).await
    }

    async fn raise_high_water(&self, coupon: &CouponId, shard: u32, seq: u64) -> Result<(), IssueError> {
        condition_met_or_moot(raise_mark(&self.tables, coupon, shard, seq).await)
    }
}

/// An update whose condition only guards against doing it again (a mark
/// already as high): a failed condition is a
/// success, anything else an error classified for the retry.
fn condition_met_or_moot<T>(
    result: Result<T, SdkError<UpdateItemError, aws_sdk_dynamodb::config::http::HttpResponse>>,
) -> Result<(), IssueError> {
    match result {
        Ok(_) => Ok(()),
        Err(SdkError::ServiceError(e)) if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) => {
            Ok(())
        }
        Err(e) => {
            let throttled = e.code().is_some_and(is_throttle);
            Err(classify(Box::new(e), throttled))
        }
    }
}

/// Raises a shard's high-water mark (`SEQ#<shard>` in the coupon's
/// partition) to `seq`: only ever raised, so a failed condition means a
/// mark already at or above `seq`, a success, not a conflict (the callers
/// map it so). The issuer's after each batch, the reconciler's after a
/// rebuild.
pub(super) async fn raise_mark(
    tables: &Tables,
    coupon: &CouponId,
    shard: u32,
    seq: u64,
) -> Result<(), SdkError<UpdateItemError, aws_sdk_dynamodb::config::http::HttpResponse>> {
    tables
        .client
        .update_item()
        .table_name(&tables.coupons)
        .key("pk", s(coupon_pk(coupon)))
        .key("sk", s(high_water_sk(shard)))
        .update_expression("SET #h = :s")
        .condition_expression("attribute_not_exists(#h) OR #h < :s")
        .expression_attribute_names("#h", HIGH_WATER)
        .expression_attribute_values(":s", n(seq))
        .send()
        .await
        .map(|_| ())
}

/// The attribute of a shard's high-water mark item.
pub(super) const HIGH_WATER: &str = "high_water";

/// The sort key of a shard's high-water mark item.
pub(super) fn high_water_sk(shard: u32) -> String {
    keys::seq_sk(shard)
}

impl DynamoIssueLedger {
    /// One attempt: the user coupon and one unit of a counter in one
    /// transaction, walking to the next counter when one is full.
    async fn issue_once(&self, grant: &Grant, def: &CouponDefinition, now_ms: i64) -> Result<IssueOutcome, IssueError> {
        let item = Self::user_coupon_item(grant, def, now_ms);
        let mut items = def.counter_items();
        // Spread grants over the counters; walk on when one is full.
        let start = (fnv1a64(grant.grant_id.as_str().as_bytes()) % u64::from(items)) as u32;
        let mut order: Vec<u32> = (0..items).map(|step| (start + step) % items).collect();
        let mut at = 0;
        loop {
            let Some(&counter) = order.get(at) else {
                // Every counter we know of is full. Stock may have been added
                // since `def` was read (more counters): check once.
                let live = self.live_counter_items(&grant.coupon_id).await?;
                if live > items {
                    order.extend(items..live);
                    items = live;
                    continue;
                }
                break;
            };
            at += 1;
            let put = Put::builder()
                .table_name(&self.tables.user_coupons)
                .set_item(Some(item.clone()))
                .condition_expression("attribute_not_exists(pk)")
                .build()
                .map_err(|e| IssueError::Unavailable(Box::new(e)))?;
            let take = Update::builder()
                .table_name(&self.tables.coupons)
                .key("pk", s(coupon_pk(&grant.coupon_id)))
                .key("sk", s(keys::counter_sk(counter)))
                .update_expression("SET issued = issued + :one")
                .condition_expression("issued < cap")
                .expression_attribute_values(":one", n(1))
                .build()
                .map_err(|e| IssueError::Unavailable(Box::new(e)))?;
            let result = self
                .tables
                .client
                .transact_write_items()
                .transact_items(TransactWriteItem::builder().put(put).build())
                .transact_items(TransactWriteItem::builder().update(take).build())
                .send()
                .await;
            let err = match result {
                Ok(_) => return Ok(IssueOutcome::Issued),
                Err(e) => e,
            };
            if let SdkError::ServiceError(se) = &err {
                if let TransactWriteItemsError::TransactionCanceledException(ex) = se.err() {
                    let reasons = ex.cancellation_reasons();
                    let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
                    if code(0) == "ConditionalCheckFailed" {
                        return self.existing(grant, now_ms).await;
                    }
                    if code(1) == "ConditionalCheckFailed" {
                        continue; // this counter is full
                    }
                    let throttled = reasons.iter().any(|r| r.code().is_some_and(is_throttle));
                    return Err(classify(Box::new(err), throttled));
                }
                let throttled = se.err().code().is_some_and(is_throttle);
                return Err(classify(Box::new(err), throttled));
            }
            return Err(classify(Box::new(err), false));
        }
        self.reject(grant, RejectReason::CapReached, now_ms).await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[tokio::test]
    async fn a_throttled_write_is_retried_in_process_until_it_goes_through() {
        let calls = AtomicU32::new(0);
        let outcome = retry_throttled(4, || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 | 1 => Err(IssueError::Throttled("TransactionConflict".into())),
                _ => Ok(IssueOutcome::Issued),
            }
        })
        .await;
        assert_eq!(outcome.unwrap(), IssueOutcome::Issued);
        assert_eq!(calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn retries_are_bounded_and_other_failures_are_not_retried() {
        let calls = AtomicU32::new(0);
        let outcome = retry_throttled(4, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(IssueError::Throttled("ThrottlingException".into()))
        })
        .await;
        assert!(matches!(outcome, Err(IssueError::Throttled(_))));
        assert_eq!(calls.load(Ordering::SeqCst), 4, "then SQS redelivers");
        let calls = AtomicU32::new(0);
        let outcome = retry_throttled(4, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err(IssueError::Unavailable("connection refused".into()))
        })
        .await;
        assert!(matches!(outcome, Err(IssueError::Unavailable(_))));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
