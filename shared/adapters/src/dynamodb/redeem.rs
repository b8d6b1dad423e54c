//! Orders spending users' coupons: `UNUSED -> USED` and back, each one
//! conditional write on the user-coupon item, so that DynamoDB itself
//! decides which of two racing orders spends a coupon.

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::builders::UpdateItemFluentBuilder;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{AttributeValue, ReturnValue};
use coupon_domain::error::StoreError;
use coupon_domain::ids::GrantId;
use coupon_domain::ids::{OrderId, UserId};
use coupon_domain::redemption::{Redemptions, Written};
use coupon_domain::user_coupon::UserCoupon;

use super::items::{n, s, unavailable, Tables};
use super::keys::{user_coupon_sk, user_pk};
use super::wallet::{held_of_coupon, parse_user_coupon};

/// [`Redemptions`] on DynamoDB.
#[derive(Debug, Clone)]
pub struct DynamoRedemptions {
    tables: Tables,
}

impl DynamoRedemptions {
    /// Writes to the user-coupons table.
    pub fn new(tables: Tables) -> Self {
        Self { tables }
    }

    fn update(&self, user: &UserId, coupon: &UserCoupon) -> UpdateItemFluentBuilder {
        self.tables
            .client
            .update_item()
            .table_name(&self.tables.user_coupons)
            .key("pk", s(user_pk(user)))
            .key("sk", s(user_coupon_sk(&coupon.coupon_id, coupon.ordinal)))
            .expression_attribute_names("#st", "status")
            .expression_attribute_values(":grant", s(coupon.grant_id.clone()))
            .return_values(ReturnValue::AllNew)
    }

    async fn written(&self, call: UpdateItemFluentBuilder) -> Result<Written, StoreError> {
        match call.send().await {
            Ok(out) => out
                .attributes
                .as_ref()
                .and_then(parse_user_coupon)
                .map(|c| Written::Done(Box::new(c)))
                .ok_or_else(|| StoreError::Protocol {
                    what: "user coupon",
                    detail: "the written item cannot be read back".into(),
                }),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(Written::Changed)
            }
            Err(e) => Err(unavailable(e)),
        }
    }
}

#[async_trait]
impl Redemptions for DynamoRedemptions {
    async fn find(&self, user: &UserId, grant: &GrantId) -> Result<Option<UserCoupon>, StoreError> {
        Ok(held_of_coupon(&self.tables, user, grant)
            .await?
            .iter()
            .filter_map(parse_user_coupon)
            .find(|c| &c.grant_id == grant))
    }

    async fn redeem(
        &self,
        user: &UserId,
        coupon: &UserCoupon,
        order: &OrderId,
        now_ms: i64,
    ) -> Result<Written, StoreError> {
        let call = self
            .update(user, coupon)
            .update_expression("SET #st = :used, order_id = :order, used_at_ms = :now")
            .condition_expression(
                "grant_id = :grant AND #st = :unused AND valid_from_ms <= :now AND valid_until_ms > :now \
                 AND NOT contains(returned_by, :order)",
            )
            .expression_attribute_values(":used", s("USED"))
            .expression_attribute_values(":unused", s("UNUSED"))
            .expression_attribute_values(":order", s(order.as_str()))
            .expression_attribute_values(":now", n(now_ms));
        self.written(call).await
    }

    async fn give_back(
        &self,
        user: &UserId,
        coupon: &UserCoupon,
        order: &OrderId,
        now_ms: i64,
    ) -> Result<Written, StoreError> {
        let call = self
            .update(user, coupon)
            .update_expression(
                "SET #st = :unused, returned_at_ms = :now REMOVE order_id, used_at_ms ADD returned_by :orders",
            )
            .condition_expression("grant_id = :grant AND #st = :used AND order_id = :order")
            .expression_attribute_values(":used", s("USED"))
            .expression_attribute_values(":unused", s("UNUSED"))
            .expression_attribute_values(":order", s(order.as_str()))
            .expression_attribute_values(":orders", AttributeValue::Ss(vec![order.as_str().to_owned()]))
            .expression_attribute_values(":now", n(now_ms));
        self.written(call).await
    }
}
