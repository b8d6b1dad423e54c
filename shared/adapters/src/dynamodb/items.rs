//! Item plumbing shared by the DynamoDB adapters: keys, attribute values,
//! the three tables and their paged reads, and parsing what the items hold.

use std::collections::HashMap;

use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::types::{AttributeValue, Put, TransactWriteItem};
use aws_sdk_dynamodb::Client;
use coupon_domain::coupon::{CouponDefinition, StoredCoupon};

use super::keys::{self, coupon_pk};
use crate::config::TableNames;
use coupon_domain::error::StoreError;
use coupon_domain::ids::CouponId;

/// One DynamoDB item.
pub(super) type Item = HashMap<String, AttributeValue>;

/// The user-coupons index by coupon.
pub const BY_COUPON_INDEX: &str = "by-coupon";

/// The coupons table's index of definitions by the end of their window
/// (`sk`, `grab_end_ms`): sparse, since only a definition item has a
/// `grab_end_ms`, so the coupon center lists every live coupon with one
/// query and never reads a counter, a grant or an audit entry.
pub const LIVE_INDEX: &str = "live";

pub(super) fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

pub(super) fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

pub(super) fn get_s<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name).and_then(|v| v.as_s().ok()).map(String::as_str)
}

pub(super) fn get_n<T: std::str::FromStr>(item: &Item, name: &str) -> Option<T> {
    item.get(name).and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok())
}

pub(super) fn unavailable<E: std::error::Error + Send + Sync + 'static>(e: E) -> StoreError {
    StoreError::Unavailable(Box::new(e))
}

pub(super) fn malformed(what: &'static str, detail: impl Into<String>) -> StoreError {
    StoreError::Protocol {
        what,
        detail: detail.into(),
    }
}

/// The three tables over one client, shared by every DynamoDB adapter of a
/// function. Cheap to clone (the client is reference-counted).
#[derive(Debug, Clone)]
pub struct Tables {
    pub(super) client: Client,
    pub(super) coupons: String,
    pub(super) user_coupons: String,
    pub(super) claims: String,
}

impl Tables {
    /// The tables `names` over `client` (built once per instance, shared).
    pub fn new(client: Client, names: &TableNames) -> Self {
        Self {
            client,
            coupons: names.coupons.clone(),
            user_coupons: names.user_coupons.clone(),
            claims: names.claims.clone(),
        }
    }

    pub(super) async fn query_all(
        &self,
        table: &str,
        index: Option<&str>,
        key_condition: &str,
        values: Item,
    ) -> Result<Vec<Item>, StoreError> {
        paginate(|start| async {
            let out = self
                .client
                .query()
                .table_name(table)
                .set_index_name(index.map(str::to_owned))
                .key_condition_expression(key_condition)
                .set_expression_attribute_values(Some(values.clone()))
                .set_consistent_read(index.is_none().then_some(true))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(unavailable)?;
            Ok((out.items.unwrap_or_default(), out.last_evaluated_key))
        })
        .await
    }

    /// Every item of the coupons table that matches `filter` (a scan: the
    /// reconciler's once-per-run reads).
    pub(super) async fn scan_coupons(&self, filter: &str, values: Item) -> Result<Vec<Item>, StoreError> {
        paginate(|start| async {
            let out = self
                .client
                .scan()
                .table_name(&self.coupons)
                .filter_expression(filter)
                .set_expression_attribute_values(Some(values.clone()))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(unavailable)?;
            Ok((out.items.unwrap_or_default(), out.last_evaluated_key))
        })
        .await
    }

    pub(super) async fn coupon_items(&self, coupon: &CouponId, prefix: &str) -> Result<Vec<Item>, StoreError> {
        self.query_all(
            &self.coupons,
            None,
            "pk = :pk AND begins_with(sk, :prefix)",
            HashMap::from([
                (":pk".to_owned(), s(coupon_pk(coupon))),
                (":prefix".to_owned(), s(prefix)),
            ]),
        )
        .await
    }

    /// A coupon's definition and version, read consistently.
    pub(super) async fn stored(&self, coupon: &CouponId) -> Result<Option<StoredCoupon>, StoreError> {
        let Some(item) = self.get(coupon_pk(coupon), keys::DEF).await? else {
            return Ok(None);
        };
        Ok(Some(StoredCoupon {
            definition: parse_definition(&item)?,
            version: get_n(&item, "version").unwrap_or(0),
        }))
    }

    /// One item of the coupons table, read consistently.
    pub(super) async fn get(&self, pk: String, sk: &str) -> Result<Option<Item>, StoreError> {
        Ok(self
            .client
            .get_item()
            .table_name(&self.coupons)
            .key("pk", s(pk))
            .key("sk", s(sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?
            .item)
    }
}

/// Reads every page: `page(start)` returns one page's items and the key to
/// go on from (absent or empty on the last page).
pub(super) async fn paginate<F, Fut>(mut page: F) -> Result<Vec<Item>, StoreError>
where
    F: FnMut(Option<Item>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<Item>, Option<Item>), StoreError>>,
{
    let mut items = Vec::new();
    let mut start = None;
    loop {
        let (page_items, next) = page(start.take()).await?;
        items.extend(page_items);
        match next {
            Some(key) if !key.is_empty() => start = Some(key),
            _ => return Ok(items),
        }
    }
}

pub(super) fn parse_definition(item: &Item) -> Result<CouponDefinition, StoreError> {
    let json = get_s(item, "definition").ok_or_else(|| malformed("coupon definition", "no definition attribute"))?;
    serde_json::from_str(json).map_err(|e| malformed("coupon definition", e.to_string()))
}

/// A transaction item that puts `item` only where nothing is (the first
/// write of a key wins, a repeat is a cancelled transaction).
pub(super) fn put_if_absent(table: &str, item: Item) -> Result<TransactWriteItem, StoreError> {
    let put = Put::builder()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression("attribute_not_exists(pk)")
        .build()
        .map_err(unavailable)?;
    Ok(TransactWriteItem::builder().put(put).build())
}

/// A conditional write's result as "written or not": a failed condition is
/// `Ok(false)` (another pass moved the item), anything else an error.
pub(super) fn conditional<T, E>(
    result: Result<T, SdkError<E, aws_sdk_dynamodb::config::http::HttpResponse>>,
) -> Result<bool, StoreError>
where
    E: aws_sdk_dynamodb::error::ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match result {
        Ok(_) => Ok(true),
        Err(SdkError::ServiceError(e)) if e.err().code() == Some("ConditionalCheckFailedException") => Ok(false),
        Err(e) => Err(unavailable(e)),
    }
}
