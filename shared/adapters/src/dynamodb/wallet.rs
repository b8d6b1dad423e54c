//! The wallet's reads: a user's coupons (one query on their partition) and
//! the status of one of their grants.

use std::collections::HashMap;

use async_trait::async_trait;
use coupon_domain::error::StoreError;
use coupon_domain::ids::GrantId;
use coupon_domain::ids::{CouponId, OrderId, UserId};
use coupon_domain::user_coupon::{CouponState, GrantStatus, RejectReason, UserCoupon};
use coupon_domain::wallet::WalletStore;

use super::items::{get_n, get_s, s, unavailable, Item, Tables};
use super::keys::{self, coupon_pk, user_pk};

/// [`WalletStore`] on DynamoDB.
#[derive(Debug, Clone)]
pub struct DynamoWallet {
    tables: Tables,
}

impl DynamoWallet {
    /// Reads of the user-coupons table (and rejections).
    pub fn new(tables: Tables) -> Self {
        Self { tables }
    }
}

/// A user-coupon item as the domain sees it; `None` for an item it cannot
/// read (logged by the callers that care).
pub(super) fn parse_user_coupon(item: &Item) -> Option<UserCoupon> {
    Some(UserCoupon {
        coupon_id: CouponId::parse(get_s(item, "coupon_id")?).ok()?,
        ordinal: get_n(item, "ordinal")?,
        grant_id: GrantId::parse(get_s(item, "grant_id")?).ok()?,
        status: match get_s(item, "status")? {
            "UNUSED" => CouponState::Unused,
            "USED" => CouponState::Used,
            "REVOKED" => CouponState::Revoked,
            _ => return None,
        },
        name: get_s(item, "name")?.to_owned(),
        amount: get_n(item, "amount")?,
        received_at_ms: get_n(item, "received_at_ms")?,
        valid_from_ms: get_n(item, "valid_from_ms")?,
        valid_until_ms: get_n(item, "valid_until_ms")?,
        order_id: get_s(item, "order_id").and_then(|o| OrderId::parse(o).ok()),
        used_at_ms: get_n(item, "used_at_ms"),
        returned_by: item
            .get("returned_by")
            .and_then(|v| v.as_ss().ok())
            .map(|orders| orders.iter().filter_map(|o| OrderId::parse(o).ok()).collect())
            .unwrap_or_default(),
        returned_at_ms: get_n(item, "returned_at_ms"),
        revoked_at_ms: get_n(item, "revoked_at_ms"),
    })
}

#[async_trait]
impl WalletStore for DynamoWallet {
    async fn coupons(&self, user: &UserId) -> Result<Vec<UserCoupon>, StoreError> {
        let items = self
            .tables
            .query_all(
                &self.tables.user_coupons,
                None,
                "pk = :pk",
                HashMap::from([(":pk".to_owned(), s(user_pk(user)))]),
            )
            .await?;
        let mut coupons: Vec<UserCoupon> = items.iter().filter_map(parse_user_coupon).collect();
        coupons.sort_by(|a, b| {
            b.received_at_ms
                .cmp(&a.received_at_ms)
                .then(a.grant_id.cmp(&b.grant_id))
        });
        Ok(coupons)
    }

    async fn grant_status(&self, user: &UserId, grant: &GrantId) -> Result<Option<GrantStatus>, StoreError> {
        let held = held_of_coupon(&self.tables, user, grant).await?;
        if held.iter().any(|i| get_s(i, "grant_id") == Some(grant.as_str())) {
            return Ok(Some(GrantStatus::Issued));
        }
        let out = self
            .tables
            .client
            .get_item()
            .table_name(&self.tables.coupons)
            .key("pk", s(coupon_pk(grant.coupon())))
            .key("sk", s(keys::grant_sk(grant.as_str())))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        Ok(out
            .item
            .filter(|i| get_s(i, "user_id") == Some(user.as_str()))
            .and_then(|i| get_s(&i, "reason").and_then(RejectReason::parse))
            .map(GrantStatus::Rejected))
    }
}

/// The user's coupons of the grant's coupon (one query on the user's
/// partition, at most the per-user limit of items).
pub(super) async fn held_of_coupon(tables: &Tables, user: &UserId, grant: &GrantId) -> Result<Vec<Item>, StoreError> {
    tables
        .query_all(
            &tables.user_coupons,
            None,
            "pk = :pk AND begins_with(sk, :prefix)",
            HashMap::from([
                (":pk".to_owned(), s(user_pk(user))),
                (":prefix".to_owned(), s(keys::user_coupon_prefix(grant.coupon()))),
            ]),
        )
        .await
}
