//! Reminders on DynamoDB: two items per reminder, written and removed in
//! one transaction. `COUPON#<id>` / `REMIND#<user>` is what the sender
//! queries (every reminder of a coupon, one partition) and carries the
//! conditional sent mark; `REMINDERS#<user>` / `COUPON#<id>` is what the
//! user lists. Neither is in the user-coupons table, whose `by-coupon`
//! index counts holders for a rebuild.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Delete, TransactWriteItem};
use coupon_domain::error::StoreError;
use coupon_domain::ids::{CouponId, UserId};
use coupon_domain::remind::{Reminder, ReminderStore};

use super::items::{conditional, get_n, get_s, malformed, n, put_if_absent, s, unavailable, Item, Tables};
use super::keys::{self, coupon_pk};

/// [`ReminderStore`] on the coupons table.
#[derive(Debug, Clone)]
pub struct DynamoReminders {
    tables: Tables,
}

impl DynamoReminders {
    /// The reminders of the coupons table.
    pub fn new(tables: Tables) -> Self {
        Self { tables }
    }
}

fn parse(item: &Item) -> Result<Reminder, StoreError> {
    let field = |name: &str| get_s(item, name).ok_or_else(|| malformed("reminder", format!("no {name}")));
    Ok(Reminder {
        user: UserId::parse(field("user_id")?).map_err(|e| malformed("reminder", e.to_string()))?,
        coupon: CouponId::parse(field("coupon_id")?).map_err(|e| malformed("reminder", e.to_string()))?,
        created_ms: get_n(item, "created_ms").ok_or_else(|| malformed("reminder", "no created_ms"))?,
        sent_for_ms: get_n(item, "sent_for_ms"),
    })
}

impl DynamoReminders {
    /// Writes both items of a reminder in one transaction: `Ok(false)` if
    /// a condition failed (the reminder was there for a put, or was not
    /// for a delete), so neither is written.
    async fn both(&self, a: TransactWriteItem, b: TransactWriteItem) -> Result<bool, StoreError> {
        let result = self
            .tables
            .client
            .transact_write_items()
            .transact_items(a)
            .transact_items(b)
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e))
                if matches!(
                    e.err(),
                    TransactWriteItemsError::TransactionCanceledException(ex)
                        if ex.cancellation_reasons().iter().any(|r| r.code() == Some("ConditionalCheckFailed"))
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(unavailable(e)),
        }
    }
}

#[async_trait]
impl ReminderStore for DynamoReminders {
    async fn put(&self, reminder: &Reminder) -> Result<bool, StoreError> {
        let common = |pk: String, sk: String| -> Item {
            HashMap::from([
                ("pk".to_owned(), s(pk)),
                ("sk".to_owned(), s(sk)),
                ("user_id".to_owned(), s(reminder.user.as_str())),
                ("coupon_id".to_owned(), s(reminder.coupon.as_str())),
                ("created_ms".to_owned(), n(reminder.created_ms)),
            ])
        };
        let by_coupon = common(coupon_pk(&reminder.coupon), keys::remind_sk(&reminder.user));
        let by_user = common(keys::reminders_pk(&reminder.user), keys::coupon_pk(&reminder.coupon));
        self.both(
            put_if_absent(&self.tables.coupons, by_coupon)?,
            put_if_absent(&self.tables.coupons, by_user)?,
        )
        .await
    }

    async fn delete(&self, user: &UserId, coupon: &CouponId) -> Result<bool, StoreError> {
        let delete = |pk: String, sk: String| -> Result<TransactWriteItem, StoreError> {
            let d = Delete::builder()
                .table_name(&self.tables.coupons)
                .key("pk", s(pk))
                .key("sk", s(sk))
                .condition_expression("attribute_exists(pk)")
                .build()
                .map_err(unavailable)?;
            Ok(TransactWriteItem::builder().delete(d).build())
        };
        self.both(
            delete(coupon_pk(coupon), keys::remind_sk(user))?,
            delete(keys::reminders_pk(user), keys::coupon_pk(coupon))?,
        )
        .await
    }

    async fn of_user(&self, user: &UserId) -> Result<Vec<Reminder>, StoreError> {
        let items = self
            .tables
            .query_all(
                &self.tables.coupons,
                None,
                "pk = :pk",
                HashMap::from([(":pk".to_owned(), s(keys::reminders_pk(user)))]),
            )
            .await?;
        let mut mine = items.iter().map(parse).collect::<Result<Vec<_>, _>>()?;
        mine.sort_by_key(|r| r.created_ms);
        Ok(mine)
    }

    async fn of_coupon(&self, coupon: &CouponId) -> Result<Vec<Reminder>, StoreError> {
        let items = self.tables.coupon_items(coupon, keys::REMIND_PREFIX).await?;
        items.iter().map(parse).collect()
    }

    async fn mark_sent(&self, user: &UserId, coupon: &CouponId, opens_at_ms: i64) -> Result<bool, StoreError> {
        conditional(
            self.tables
                .client
                .update_item()
                .table_name(&self.tables.coupons)
                .key("pk", s(coupon_pk(coupon)))
                .key("sk", s(keys::remind_sk(user)))
                .update_expression("SET sent_for_ms = :at")
                .condition_expression(
                    "attribute_exists(pk) AND (attribute_not_exists(sent_for_ms) OR sent_for_ms < :at)",
                )
                .expression_attribute_values(":at", n(opens_at_ms))
                .send()
                .await,
        )
    }
}
