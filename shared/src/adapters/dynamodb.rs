//! The DynamoDB adapter: durable coupon definitions.
//!
//! Table `COUPONS_TABLE`, keys `pk` (S) and `sk` (S). A definition is the
//! item `pk = COUPON#<id>`, `sk = DEF`; it holds the definition as JSON plus
//! the attributes operators query on. Later items under the same `pk` (the
//! capped counters, the audit log) keep a coupon's data in one partition.

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::types::AttributeValue;
pub use aws_sdk_dynamodb::Client;

use crate::coupon::CouponDefinition;
use crate::error::StoreError;
use crate::ids::CouponId;
use crate::ports::CouponRepository;

/// Coupon definitions in DynamoDB.
#[derive(Debug, Clone)]
pub struct DynamoCouponRepository {
    client: Client,
    table: String,
}

impl DynamoCouponRepository {
    /// `client` is built once and shared.
    pub fn new(client: Client, table: impl Into<String>) -> Self {
        Self {
            client,
            table: table.into(),
        }
    }
}

/// The partition key of everything about one coupon.
pub fn coupon_pk(coupon: &CouponId) -> String {
    format!("COUPON#{coupon}")
}

fn unavailable<E: std::error::Error + Send + Sync + 'static>(e: E) -> StoreError {
    StoreError::Unavailable(Box::new(e))
}

#[async_trait]
impl CouponRepository for DynamoCouponRepository {
    async fn put_definition(&self, def: &CouponDefinition) -> Result<bool, StoreError> {
        let json = serde_json::to_string(def).map_err(unavailable)?;
        let result = self
            .client
            .put_item()
            .table_name(&self.table)
            .item("pk", AttributeValue::S(coupon_pk(&def.coupon_id)))
            .item("sk", AttributeValue::S("DEF".into()))
            .item("definition", AttributeValue::S(json))
            .item("fingerprint", AttributeValue::S(def.fingerprint()))
            .item(
                "total_stock",
                AttributeValue::N(def.total_stock.to_string()),
            )
            .item("status", AttributeValue::S(def.status.as_str().into()))
            .item(
                "grab_end_ms",
                AttributeValue::N(def.grab_end_ms.to_string()),
            )
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) =>
            {
                match self.get_definition(&def.coupon_id).await? {
                    Some(existing) if existing.fingerprint() == def.fingerprint() => Ok(false),
                    _ => Err(StoreError::Conflict(format!(
                        "coupon {} exists with a different definition",
                        def.coupon_id
                    ))),
                }
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn get_definition(
        &self,
        coupon: &CouponId,
    ) -> Result<Option<CouponDefinition>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", AttributeValue::S(coupon_pk(coupon)))
            .key("sk", AttributeValue::S("DEF".into()))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        let Some(item) = out.item else {
            return Ok(None);
        };
        let json = item
            .get("definition")
            .and_then(|v| v.as_s().ok())
            .ok_or_else(|| StoreError::Protocol {
                what: "coupon definition",
                detail: "item has no definition attribute".into(),
            })?;
        serde_json::from_str(json)
            .map(Some)
            .map_err(|e| StoreError::Protocol {
                what: "coupon definition",
                detail: e.to_string(),
            })
    }
}
