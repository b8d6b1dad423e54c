//! The coupon center's listing: the definitions whose window is not over
//! and whose status is ONLINE, from the coupons table's sparse `live`
//! index, one query (paged by DynamoDB past 1 MB).

use std::collections::HashMap;

use async_trait::async_trait;
use coupon_domain::center::LiveCoupons;
use coupon_domain::coupon::{CouponDefinition, CouponStatus};
use coupon_domain::error::StoreError;

use super::items::{n, paginate, parse_definition, s, unavailable, LIVE_INDEX};
use super::keys;

/// [`LiveCoupons`] on the coupons table's `live` index. Needs
/// `dynamodb:Query` on that index and nothing else.
#[derive(Debug, Clone)]
pub struct DynamoLiveCoupons {
    client: aws_sdk_dynamodb::Client,
    coupons_table: String,
}

impl DynamoLiveCoupons {
    /// The listing of `coupons_table`.
    pub fn new(client: aws_sdk_dynamodb::Client, coupons_table: impl Into<String>) -> Self {
        Self {
            client,
            coupons_table: coupons_table.into(),
        }
    }
}

#[async_trait]
impl LiveCoupons for DynamoLiveCoupons {
    async fn live(&self, now_ms: i64) -> Result<Vec<CouponDefinition>, StoreError> {
        let values = HashMap::from([
            (":def".to_owned(), s(keys::DEF)),
            (":now".to_owned(), n(now_ms)),
            (":online".to_owned(), s(CouponStatus::Online.as_str())),
        ]);
        let items = paginate(|start| async {
            let out = self
                .client
                .query()
                .table_name(&self.coupons_table)
                .index_name(LIVE_INDEX)
                .key_condition_expression("sk = :def AND grab_end_ms > :now")
                // The status attribute is written with the definition, in
                // the same item, by every change.
                .filter_expression("#st = :online")
                .expression_attribute_names("#st", "status")
                .set_expression_attribute_values(Some(values.clone()))
                .set_exclusive_start_key(start)
                .send()
                .await
                .map_err(unavailable)?;
            Ok((out.items.unwrap_or_default(), out.last_evaluated_key))
        })
        .await?;
        items.iter().map(parse_definition).collect()
    }
}
