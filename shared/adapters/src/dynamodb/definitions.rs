//! Coupon definitions (`COUPON#<id>` / `DEF`) and, written with them in
//! one transaction, the capped counters (`COUNTER#<k>`).

use std::collections::HashMap;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::AttributeValue;
use coupon_domain::catalog::{CouponRepository, Stored};
use coupon_domain::coupon::{CouponDefinition, Mode};
use coupon_domain::error::StoreError;
use coupon_domain::ids::CouponId;
use coupon_domain::lottery::Seed;

use super::items::{n, parse_definition, put_if_absent, s, unavailable, Item, Tables};
use super::keys::{self, coupon_pk};

/// [`CouponRepository`] on DynamoDB.
#[derive(Debug, Clone)]
pub struct DynamoCouponRepository {
    tables: Tables,
}

impl DynamoCouponRepository {
    /// Definitions in the coupons table.
    pub fn new(tables: Tables) -> Self {
        Self { tables }
    }
}

#[async_trait]
impl CouponRepository for DynamoCouponRepository {
    async fn put_definition(&self, def: &CouponDefinition) -> Result<Stored, StoreError> {
        let json = serde_json::to_string(def).map_err(unavailable)?;
        let pk = coupon_pk(&def.coupon_id);
        let put = |item: Item| put_if_absent(&self.tables.coupons, item);
        let mut item = HashMap::from([
            ("pk".to_owned(), s(pk.clone())),
            ("sk".to_owned(), s(keys::DEF)),
            ("definition".to_owned(), s(json)),
            ("fingerprint".to_owned(), s(def.fingerprint())),
            ("total_stock".to_owned(), n(def.total_stock)),
            ("status".to_owned(), s(def.status.as_str())),
            ("grab_end_ms".to_owned(), n(def.grab_end_ms)),
            ("version".to_owned(), n(0)),
            ("preheated".to_owned(), AttributeValue::Bool(false)),
        ]);
        if def.mode == Mode::Lottery {
            // The draw's seed, drawn from the operating system's generator
            // once, with the definition: a repeated create finds it and
            // keeps it (the put is conditional), so its commitment never
            // changes (coupon_domain::lottery).
            let mut bytes = [0u8; 32];
            getrandom::getrandom(&mut bytes).map_err(unavailable)?;
            item.insert("seed".to_owned(), s(Seed::from_bytes(bytes).to_hex()));
        }
        // The definition and its counters appear together or not at all.
        let mut request = self.tables.client.transact_write_items().transact_items(put(item)?);
        for k in 0..def.counter_items() {
            request = request.transact_items(put(HashMap::from([
                ("pk".to_owned(), s(pk.clone())),
                ("sk".to_owned(), s(keys::counter_sk(k))),
                ("cap".to_owned(), n(def.counter_cap(k))),
                ("issued".to_owned(), n(0)),
            ]))?);
        }
        match request.send().await {
            Ok(_) => Ok(Stored::New),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), TransactWriteItemsError::TransactionCanceledException(_)) =>
            {
                let Some(item) = self.tables.get(pk, keys::DEF).await? else {
                    return Err(StoreError::Unavailable("definition write cancelled".into()));
                };
                if parse_definition(&item)?.fingerprint() != def.fingerprint() {
                    return Err(StoreError::Conflict(format!(
                        "coupon {} exists with a different definition",
                        def.coupon_id
                    )));
                }
                // Items written before the flag existed were preheated by
                // their create: an absent flag counts as preheated.
                let preheated = item.get("preheated").and_then(|v| v.as_bool().ok()).is_none_or(|b| *b);
                Ok(Stored::Same { preheated })
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn mark_preheated(&self, coupon: &CouponId) -> Result<(), StoreError> {
        self.tables
            .client
            .update_item()
            .table_name(&self.tables.coupons)
            .key("pk", s(coupon_pk(coupon)))
            .key("sk", s(keys::DEF))
            .update_expression("SET preheated = :yes")
            .condition_expression("attribute_exists(pk)")
            .expression_attribute_values(":yes", AttributeValue::Bool(true))
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn get_definition(&self, coupon: &CouponId) -> Result<Option<CouponDefinition>, StoreError> {
        let out = self
            .tables
            .client
            .get_item()
            .table_name(&self.tables.coupons)
            .key("pk", s(coupon_pk(coupon)))
            .key("sk", s(keys::DEF))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        out.item.as_ref().map(parse_definition).transpose()
    }
}

/// [`CouponCatalog`](coupon_domain::grab::ports::CouponCatalog) on the
/// coupons table: one GetItem of the definition, asked by a grab only when
/// Redis knows nothing of a coupon. Needs `dynamodb:GetItem` on that table
/// and nothing else, so the grab stays out of every other item.
#[derive(Debug, Clone)]
pub struct DynamoCatalog {
    client: aws_sdk_dynamodb::Client,
    coupons_table: String,
}

impl DynamoCatalog {
    /// The catalogue in `coupons_table`.
    pub fn new(client: aws_sdk_dynamodb::Client, coupons_table: impl Into<String>) -> Self {
        Self {
            client,
            coupons_table: coupons_table.into(),
        }
    }
}

#[async_trait]
impl coupon_domain::grab::ports::CouponCatalog for DynamoCatalog {
    async fn shard_count(&self, coupon: &CouponId) -> Result<Option<u32>, StoreError> {
        let item = self
            .client
            .get_item()
            .table_name(&self.coupons_table)
            .key("pk", s(coupon_pk(coupon)))
            .key("sk", s(keys::DEF))
            .projection_expression("#d")
            .expression_attribute_names("#d", "definition")
            .send()
            .await
            .map_err(unavailable)?
            .item;
        match item {
            None => Ok(None),
            Some(item) => Ok(Some(parse_definition(&item)?.shards)),
        }
    }
}
