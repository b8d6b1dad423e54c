//! Operators taking a user's coupon back: the user coupon goes UNUSED ->
//! REVOKED in one transaction with its audit entry (on the coupon), only
//! while it is still unused and still the grant named.

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem, Update};
use coupon_domain::admin::{CouponRevocations, Revoked};
use coupon_domain::audit::{AuditEntry, AuditTarget};
use coupon_domain::error::StoreError;
use coupon_domain::ids::GrantId;
use coupon_domain::ids::UserId;
use coupon_domain::user_coupon::{CouponState, UserCoupon};

use super::admin::{audit_item, audit_pk};
use super::items::{get_s, n, s, unavailable, Item, Tables};
use super::wallet::{held_of_coupon, parse_user_coupon};

/// [`CouponRevocations`] on DynamoDB.
#[derive(Debug, Clone)]
pub struct DynamoRevocations {
    tables: Tables,
}

impl DynamoRevocations {
    /// Writes to the user-coupons table, audited in the coupons table.
    pub fn new(tables: Tables) -> Self {
        Self { tables }
    }

    async fn find(&self, user: &UserId, grant: &GrantId) -> Result<Option<(Item, UserCoupon)>, StoreError> {
        for item in held_of_coupon(&self.tables, user, grant).await? {
            if get_s(&item, "grant_id") == Some(grant.as_str()) {
                let coupon = parse_user_coupon(&item).ok_or_else(|| StoreError::Protocol {
                    what: "user coupon",
                    detail: "an item the wallet cannot read".into(),
                })?;
                return Ok(Some((item, coupon)));
            }
        }
        Ok(None)
    }
}

#[async_trait]
impl CouponRevocations for DynamoRevocations {
    async fn revoke(&self, user: &UserId, grant: &GrantId, entry: &AuditEntry) -> Result<Revoked, StoreError> {
        let Some((item, coupon)) = self.find(user, grant).await? else {
            return Ok(Revoked::NotFound);
        };
        match coupon.status {
            CouponState::Revoked => return Ok(Revoked::Already(coupon)),
            CouponState::Used => return Ok(Revoked::Used),
            CouponState::Unused | CouponState::Expired => {}
        }
        let key = |name: &str| item.get(name).cloned().unwrap_or_else(|| s(""));
        let update = Update::builder()
            .table_name(&self.tables.user_coupons)
            .key("pk", key("pk"))
            .key("sk", key("sk"))
            .update_expression("SET #st = :revoked, revoked_at_ms = :at, revoked_by = :by")
            .condition_expression("grant_id = :grant AND #st = :unused")
            .expression_attribute_names("#st", "status")
            .expression_attribute_values(":revoked", s("REVOKED"))
            .expression_attribute_values(":unused", s("UNUSED"))
            .expression_attribute_values(":grant", s(grant.to_string()))
            .expression_attribute_values(":at", n(entry.at_ms))
            .expression_attribute_values(":by", s(entry.actor.as_str()))
            .build()
            .map_err(unavailable)?;
        let audit = Put::builder()
            .table_name(&self.tables.coupons)
            .set_item(Some(audit_item(
                audit_pk(&AuditTarget::Coupon(grant.coupon().clone())),
                entry,
            )?))
            .build()
            .map_err(unavailable)?;
        let result = self
            .tables
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().update(update).build())
            .transact_items(TransactWriteItem::builder().put(audit).build())
            .send()
            .await;
        match result {
            Ok(_) => Ok(Revoked::Now(UserCoupon {
                status: CouponState::Revoked,
                revoked_at_ms: Some(entry.at_ms),
                ..coupon
            })),
            // Someone changed it between the read and the write: read again.
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), TransactWriteItemsError::TransactionCanceledException(_)) =>
            {
                match self.find(user, grant).await? {
                    Some((_, now)) if now.status == CouponState::Revoked => Ok(Revoked::Already(now)),
                    Some((_, now)) if now.status == CouponState::Used => Ok(Revoked::Used),
                    None => Ok(Revoked::NotFound),
                    Some(_) => Err(StoreError::Unavailable(
                        "the coupon changed during the revocation".into(),
                    )),
                }
            }
            Err(e) => Err(unavailable(e)),
        }
    }
}
