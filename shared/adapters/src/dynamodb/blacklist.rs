//! The durable blacklist: `BLACKLIST#<user>` / `ENTRY`, written in one
//! transaction with its audit entry.

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::types::{Delete, Put, TransactWriteItem};
use coupon_domain::audit::AuditEntry;
use coupon_domain::blacklist::BlacklistRecord;
use coupon_domain::error::StoreError;
use coupon_domain::ids::UserId;

use super::admin::audit_item;
use super::items::{get_s, n, s, unavailable, Tables};
use super::keys;

/// [`BlacklistRecord`] on DynamoDB.
#[derive(Debug, Clone)]
pub struct DynamoBlacklist {
    tables: Tables,
}

impl DynamoBlacklist {
    /// The blacklist entries of the coupons table.
    pub fn new(tables: Tables) -> Self {
        Self { tables }
    }
}

#[async_trait]
impl BlacklistRecord for DynamoBlacklist {
    async fn set(&self, user: &UserId, on: bool, entry: &AuditEntry) -> Result<(), StoreError> {
        let pk = keys::blacklist_pk(user);
        let flag = if on {
            let put = Put::builder()
                .table_name(&self.tables.coupons)
                .item("pk", s(pk.clone()))
                .item("sk", s(keys::ENTRY))
                .item("user_id", s(user.as_str()))
                .item("actor", s(entry.actor.as_str()))
                .item("at_ms", n(entry.at_ms))
                .build()
                .map_err(unavailable)?;
            TransactWriteItem::builder().put(put).build()
        } else {
            let delete = Delete::builder()
                .table_name(&self.tables.coupons)
                .key("pk", s(pk.clone()))
                .key("sk", s(keys::ENTRY))
                .build()
                .map_err(unavailable)?;
            TransactWriteItem::builder().delete(delete).build()
        };
        // No condition on the audit entry: its id is unique per operation,
        // and a retried operation overwriting its own entry is harmless.
        let audit = Put::builder()
            .table_name(&self.tables.coupons)
            .set_item(Some(audit_item(pk, entry)?))
            .build()
            .map_err(unavailable)?;
        self.tables
            .client
            .transact_write_items()
            .transact_items(flag)
            .transact_items(TransactWriteItem::builder().put(audit).build())
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn contains(&self, user: &UserId) -> Result<bool, StoreError> {
        Ok(self.tables.get(keys::blacklist_pk(user), keys::ENTRY).await?.is_some())
    }

    async fn users(&self) -> Result<Vec<UserId>, StoreError> {
        let items = self
            .tables
            .scan_coupons(
                "sk = :entry AND begins_with(pk, :black)",
                HashMap::from([
                    (":entry".to_owned(), s(keys::ENTRY)),
                    (":black".to_owned(), s(keys::BLACKLIST_PREFIX)),
                ]),
            )
            .await?;
        Ok(items
            .iter()
            .filter_map(|i| get_s(i, "user_id").and_then(|u| UserId::parse(u).ok()))
            .collect())
    }
}
