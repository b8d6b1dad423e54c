//! The admin side: definitions at a version, a change in one transaction
//! (definition, grown caps, audit entry, operation key), the audit log in
//! time order, and the latest reconciliation report.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{TransactWriteItem, Update};
use coupon_domain::admin::{AdminStore, ChangeResult, CouponChange};
use coupon_domain::audit::{AdminAction, AuditEntry, AuditTarget};
use coupon_domain::coupon::{counter_additions, StoredCoupon};
use coupon_domain::error::StoreError;
use coupon_domain::ids::CouponId;

use super::items::{get_s, malformed, n, put_if_absent, s, unavailable, Item, Tables};
use super::keys::{self, coupon_pk};

/// [`AdminStore`] on DynamoDB.
#[derive(Debug, Clone)]
pub struct DynamoAdminStore {
    tables: Tables,
}

impl DynamoAdminStore {
    /// The admin side of the coupons table.
    pub fn new(tables: Tables) -> Self {
        Self { tables }
    }
}

pub(super) fn audit_pk(target: &AuditTarget) -> String {
    match target {
        AuditTarget::Coupon(c) => coupon_pk(c),
        AuditTarget::User(u) => keys::blacklist_pk(u),
    }
}

/// `AUDIT#<ms, 15 digits>#<operation>`: sorted by time, so the latest
/// entries are one descending, limited query. A coupon's creation is
/// recorded under time 0: it sorts first, and a retried create (same
/// operation id) finds its entry instead of adding a second one.
pub(super) fn audit_sk(entry: &AuditEntry) -> String {
    let ms = if entry.action == AdminAction::CreateCoupon {
        0
    } else {
        entry.at_ms.max(0)
    };
    keys::audit_sk(ms, &entry.operation_id)
}

pub(super) fn audit_item(pk: String, entry: &AuditEntry) -> Result<Item, StoreError> {
    Ok(HashMap::from([
        ("pk".to_owned(), s(pk)),
        ("sk".to_owned(), s(audit_sk(entry))),
        ("actor".to_owned(), s(entry.actor.as_str())),
        (
            "action".to_owned(),
            s(serde_json::to_value(entry.action)
                .map_err(unavailable)?
                .as_str()
                .unwrap_or("?")),
        ),
        ("at_ms".to_owned(), n(entry.at_ms)),
        (
            "entry".to_owned(),
            s(serde_json::to_string(entry).map_err(unavailable)?),
        ),
    ]))
}

/// What a refused change transaction means: the operation's key already
/// there (its last item) is a change done before; the definition's
/// version moved (its first item) is a conflict the caller re-reads for;
/// anything else is the store being unavailable.
fn refused_change(
    err: SdkError<TransactWriteItemsError>,
    change: &CouponChange,
    count: usize,
) -> Result<ChangeResult, StoreError> {
    let SdkError::ServiceError(e) = err else {
        return Err(unavailable(err));
    };
    let TransactWriteItemsError::TransactionCanceledException(ex) = e.err() else {
        return Err(StoreError::Unavailable(Box::new(SdkError::ServiceError(e))));
    };
    let failed = |i: usize| {
        ex.cancellation_reasons()
            .get(i)
            .and_then(|r| r.code())
            .is_some_and(|c| c == "ConditionalCheckFailed")
    };
    if change.operation_key.is_some() && failed(count - 1) {
        return Ok(ChangeResult::AlreadyDone);
    }
    if failed(0) {
        return Ok(ChangeResult::VersionMoved);
    }
    Err(StoreError::Unavailable(Box::new(SdkError::ServiceError(e))))
}

impl DynamoAdminStore {
    /// The definition item written at the next version, on condition that
    /// it is still at the version the change was decided on.
    fn definition_update(&self, pk: &str, change: &CouponChange) -> Result<TransactWriteItem, StoreError> {
        let def = &change.after;
        let update = Update::builder()
            .table_name(&self.tables.coupons)
            .key("pk", s(pk.to_owned()))
            .key("sk", s(keys::DEF))
            .update_expression("SET #def = :d, #fp = :f, #total = :t, #st = :s, #ver = :next")
            .condition_expression("#ver = :read")
            .expression_attribute_names("#def", "definition")
            .expression_attribute_names("#fp", "fingerprint")
            .expression_attribute_names("#total", "total_stock")
            .expression_attribute_names("#st", "status")
            .expression_attribute_names("#ver", "version")
            .expression_attribute_values(":d", s(serde_json::to_string(def).map_err(unavailable)?))
            .expression_attribute_values(":f", s(def.fingerprint()))
            .expression_attribute_values(":t", n(def.total_stock))
            .expression_attribute_values(":s", s(def.status.as_str()))
            .expression_attribute_values(":read", n(change.expected_version))
            .expression_attribute_values(":next", n(change.expected_version + 1))
            .build()
            .map_err(unavailable)?;
        Ok(TransactWriteItem::builder().update(update).build())
    }

    /// The durable caps the added stock grows: a new counter created with
    /// its share, an existing one's cap raised by it.
    fn counter_growth(&self, pk: &str, change: &CouponChange) -> Result<Vec<TransactWriteItem>, StoreError> {
        let before = change.after.total_stock - change.added_stock;
        let mut items = Vec::new();
        for (k, add, new) in counter_additions(before, change.added_stock) {
            let sk = keys::counter_sk(k);
            if new {
                items.push(put_if_absent(
                    &self.tables.coupons,
                    HashMap::from([
                        ("pk".to_owned(), s(pk.to_owned())),
                        ("sk".to_owned(), s(sk)),
                        ("cap".to_owned(), n(add)),
                        ("issued".to_owned(), n(0)),
                    ]),
                )?);
            } else {
                let grow = Update::builder()
                    .table_name(&self.tables.coupons)
                    .key("pk", s(pk.to_owned()))
                    .key("sk", s(sk))
                    .update_expression("SET #cap = #cap + :add")
                    .expression_attribute_names("#cap", "cap")
                    .condition_expression("attribute_exists(pk)")
                    .expression_attribute_values(":add", n(add))
                    .build()
                    .map_err(unavailable)?;
                items.push(TransactWriteItem::builder().update(grow).build());
            }
        }
        Ok(items)
    }
}

#[async_trait]
impl AdminStore for DynamoAdminStore {
    async fn stored(&self, coupon: &CouponId) -> Result<Option<StoredCoupon>, StoreError> {
        self.tables.stored(coupon).await
    }

    async fn change(&self, change: &CouponChange) -> Result<ChangeResult, StoreError> {
        let pk = coupon_pk(&change.after.coupon_id);
        // One transaction: the definition at the version read, the stock
        // counters it grows, the audit entry and the operation's key.
        let mut items = vec![self.definition_update(&pk, change)?];
        items.extend(self.counter_growth(&pk, change)?);
        items.push(put_if_absent(
            &self.tables.coupons,
            audit_item(pk.clone(), &change.audit)?,
        )?);
        if let Some(key) = &change.operation_key {
            items.push(put_if_absent(
                &self.tables.coupons,
                HashMap::from([
                    ("pk".to_owned(), s(pk.clone())),
                    ("sk".to_owned(), s(keys::op_sk(key))),
                    ("at_ms".to_owned(), n(change.audit.at_ms)),
                ]),
            )?);
        }
        let count = items.len();
        match self
            .tables
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
        {
            Ok(_) => Ok(ChangeResult::Applied),
            Err(e) => refused_change(e, change, count),
        }
    }

    async fn record(&self, target: &AuditTarget, entry: &AuditEntry) -> Result<bool, StoreError> {
        let result = self
            .tables
            .client
            .put_item()
            .table_name(&self.tables.coupons)
            .set_item(Some(audit_item(audit_pk(target), entry)?))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                Ok(false)
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn audit(&self, target: &AuditTarget, limit: usize) -> Result<(Vec<AuditEntry>, bool), StoreError> {
        let out = self
            .tables
            .client
            .query()
            .table_name(&self.tables.coupons)
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", s(audit_pk(target)))
            .expression_attribute_values(":prefix", s(keys::AUDIT_PREFIX))
            .scan_index_forward(false)
            .limit(i32::try_from(limit + 1).unwrap_or(i32::MAX))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        let mut entries = out
            .items
            .unwrap_or_default()
            .iter()
            .map(|i| {
                let json = get_s(i, "entry").ok_or_else(|| malformed("audit entry", "no entry attribute"))?;
                serde_json::from_str::<AuditEntry>(json).map_err(|e| malformed("audit entry", e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let more = entries.len() > limit;
        entries.truncate(limit);
        Ok((entries, more))
    }

    async fn save_report(&self, coupon: &CouponId, report: &serde_json::Value) -> Result<(), StoreError> {
        self.tables
            .client
            .put_item()
            .table_name(&self.tables.coupons)
            .item("pk", s(coupon_pk(coupon)))
            .item("sk", s(keys::REPORT))
            .item("report", s(report.to_string()))
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn last_report(&self, coupon: &CouponId) -> Result<Option<serde_json::Value>, StoreError> {
        self.tables
            .get(coupon_pk(coupon), keys::REPORT)
            .await?
            .map(|item| {
                let json = get_s(&item, "report").ok_or_else(|| malformed("report", "no report attribute"))?;
                serde_json::from_str(json).map_err(|e| malformed("report", e.to_string()))
            })
            .transpose()
    }
}
