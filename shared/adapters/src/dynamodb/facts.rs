//! What the reconciler reads from DynamoDB: definitions, issued counts,
//! rejections, which grants are issued, holdings, and rebuild records.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::AttributeValue;
use aws_sdk_dynamodb::types::KeysAndAttributes;
use coupon_domain::barrier::BarrierRecord;
use coupon_domain::coupon::{CouponDefinition, StoredCoupon};
use coupon_domain::error::StoreError;
use coupon_domain::grant::{Grant, GrantRecord};
use coupon_domain::ids::{CouponId, GrantId, RequestId, UserId};
use coupon_domain::reconcile::ports::{DurableFacts, RejectedGrant};
use coupon_domain::user_coupon::{Held, Holdings, RejectReason};

use super::items::{
    conditional, get_n, get_s, malformed, n, parse_definition, s, unavailable, Item, Tables, BY_COUPON_INDEX,
};
use super::keys::{self, coupon_pk, user_coupon_sk, user_pk};

/// One user coupon item as the rebuild needs it: the request that won it
/// and its grant, when the item records them (items issued before they were
/// recorded count, with no outcome to restore).
fn held(item: &Item) -> Held {
    let outcome = (|| {
        let request = RequestId::parse(get_s(item, "request_id")?).ok()?;
        let record = GrantRecord {
            grant_id: GrantId::parse(get_s(item, "grant_id")?).ok()?,
            ordinal: get_n(item, "ordinal")?,
            shard: get_n(item, "shard")?,
            granted_at_ms: get_n(item, "granted_at_ms")?,
        };
        Some((request, record))
    })();
    Held { outcome }
}

/// [`DurableFacts`] on DynamoDB.
#[derive(Debug, Clone)]
pub struct DynamoFacts {
    tables: Tables,
}

impl DynamoFacts {
    /// The reconciler's reads over both tables.
    pub fn new(tables: Tables) -> Self {
        Self { tables }
    }
}

#[async_trait]
impl DurableFacts for DynamoFacts {
    async fn definitions(&self) -> Result<Vec<CouponDefinition>, StoreError> {
        let items = self
            .tables
            .scan_coupons("sk = :def", HashMap::from([(":def".to_owned(), s(keys::DEF))]))
            .await?;
        // One definition this release cannot read (written by a newer one
        // during a deployment, or damaged by hand) must not stop the pass
        // for every other coupon: it is left out, loudly.
        Ok(items
            .iter()
            .filter_map(|item| match parse_definition(item) {
                Ok(def) => Some(def),
                Err(e) => {
                    tracing::error!(
                        pk = get_s(item, "pk").unwrap_or("?"),
                        error = %e,
                        "coupon definition unreadable; left out of this pass"
                    );
                    None
                }
            })
            .collect())
    }

    async fn stored(&self, coupon: &CouponId) -> Result<Option<StoredCoupon>, StoreError> {
        self.tables.stored(coupon).await
    }

    async fn issued(&self, coupon: &CouponId) -> Result<u64, StoreError> {
        let counters = self.tables.coupon_items(coupon, keys::COUNTER_PREFIX).await?;
        Ok(counters.iter().filter_map(|i| get_n::<u64>(i, "issued")).sum())
    }

    async fn rejections(&self, coupon: &CouponId) -> Result<Vec<RejectedGrant>, StoreError> {
        let items = self.tables.coupon_items(coupon, keys::GRANT_PREFIX).await?;
        Ok(items
            .iter()
            .filter_map(|i| {
                Some(RejectedGrant {
                    grant_id: GrantId::parse(get_s(i, "sk")?.strip_prefix(keys::GRANT_PREFIX)?).ok()?,
                    reason: RejectReason::parse(get_s(i, "reason")?)?,
                })
            })
            .collect())
    }

    async fn claims(&self, coupon: &CouponId) -> Result<Vec<Grant>, StoreError> {
        super::DynamoClaims::new(self.tables.clone()).all(coupon).await
    }

    async fn issued_grants(&self, grants: &[Grant]) -> Result<HashSet<GrantId>, StoreError> {
        // Two grants may share a key (a second grant for one claim, which
        // the issuer rejects as ORDINAL_TAKEN): each is looked for. A grant
        // is issued only as itself: its id *and* the request that won it
        // (a shard a failover rolled back may mint an issued grant's id
        // again, for the same user and ordinal, from another request of
        // theirs; that one is on no way anywhere, and its request's record
        // must not be taken for the issued coupon's).
        let mut wanted: HashMap<(String, String), Vec<&Grant>> = HashMap::new();
        for g in grants {
            wanted
                .entry((user_pk(&g.user_id), user_coupon_sk(&g.coupon_id, g.ordinal)))
                .or_default()
                .push(g);
        }
        let keys: Vec<(String, String)> = wanted.keys().cloned().collect();
        let mut found = HashSet::new();
        for chunk in keys.chunks(100) {
            let mut pending: Vec<Item> = chunk
                .iter()
                .map(|(pk, sk)| HashMap::from([("pk".to_owned(), s(pk.clone())), ("sk".to_owned(), s(sk.clone()))]))
                .collect();
            for _attempt in 0..8 {
                if pending.is_empty() {
                    break;
                }
                let request = KeysAndAttributes::builder()
                    .set_keys(Some(std::mem::take(&mut pending)))
                    .projection_expression("pk, sk, grant_id, request_id")
                    .consistent_read(true)
                    .build()
                    .map_err(unavailable)?;
                let out = self
                    .tables
                    .client
                    .batch_get_item()
                    .request_items(&self.tables.user_coupons, request)
                    .send()
                    .await
                    .map_err(unavailable)?;
                for item in out
                    .responses
                    .unwrap_or_default()
                    .remove(&self.tables.user_coupons)
                    .unwrap_or_default()
                {
                    let key = (
                        get_s(&item, "pk").unwrap_or("").to_owned(),
                        get_s(&item, "sk").unwrap_or("").to_owned(),
                    );
                    if let (Some(expected), Some(actual)) = (wanted.get(&key), get_s(&item, "grant_id")) {
                        let request = get_s(&item, "request_id");
                        for g in expected.iter().filter(|g| g.grant_id.as_str() == actual) {
                            if request.is_none_or(|r| r == g.request_id.as_str()) {
                                found.insert(g.grant_id.clone());
                            }
                        }
                    }
                }
                pending = out
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.tables.user_coupons))
                    .map(|k| k.keys)
                    .unwrap_or_default();
            }
            if !pending.is_empty() {
                return Err(StoreError::Unavailable("batch reads stayed unprocessed".into()));
            }
        }
        Ok(found)
    }

    async fn holdings(&self, coupon: &CouponId) -> Result<Holdings, StoreError> {
        let items = self
            .tables
            .query_all(
                &self.tables.user_coupons,
                Some(BY_COUPON_INDEX),
                "coupon_id = :c",
                HashMap::from([(":c".to_owned(), s(coupon.as_str()))]),
            )
            .await?;
        let mut holdings = Holdings::new();
        for item in &items {
            if let Some(user) = get_s(item, "user_id").and_then(|u| UserId::parse(u).ok()) {
                holdings.entry(user).or_default().push(held(item));
            }
        }
        Ok(holdings)
    }

    async fn record_rebuild(&self, coupon: &CouponId, now_ms: i64, restored: u64) -> Result<(), StoreError> {
        self.tables
            .client
            .put_item()
            .table_name(&self.tables.coupons)
            .item("pk", s(coupon_pk(coupon)))
            .item("sk", s(keys::rebuild_sk(now_ms)))
            .item("restored", n(restored))
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn raise_high_water(&self, coupon: &CouponId, shard: u32, seq: u64) -> Result<(), StoreError> {
        match super::issue::raise_mark(&self.tables, coupon, shard, seq).await {
            Ok(()) => Ok(()),
            // Already at or above: raised is what was asked.
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(())
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn was_rebuilt(&self, coupon: &CouponId) -> Result<bool, StoreError> {
        Ok(!self.tables.coupon_items(coupon, keys::REBUILD_PREFIX).await?.is_empty())
    }

    async fn high_water(&self, coupon: &CouponId) -> Result<HashMap<u32, u64>, StoreError> {
        let items = self.tables.coupon_items(coupon, keys::SEQ_PREFIX).await?;
        Ok(items
            .iter()
            .filter_map(|i| {
                let shard = get_s(i, "sk")?.strip_prefix(keys::SEQ_PREFIX)?.parse().ok()?;
                Some((shard, get_n(i, super::issue::HIGH_WATER)?))
            })
            .collect())
    }

    async fn barrier(&self, coupon: &CouponId) -> Result<Option<BarrierRecord>, StoreError> {
        let Some(item) = self.tables.get(coupon_pk(coupon), keys::BARRIER).await? else {
            return Ok(None);
        };
        let numbers = |name: &str| -> Vec<u32> {
            match item.get(name) {
                Some(AttributeValue::Ns(ns)) => ns.iter().filter_map(|n| n.parse().ok()).collect(),
                _ => Vec::new(),
            }
        };
        let id = get_s(&item, "barrier_id")
            .ok_or_else(|| malformed("barrier", "no barrier_id"))?
            .to_owned();
        Ok(Some(BarrierRecord {
            id,
            opened_ms: get_n(&item, "opened_ms").ok_or_else(|| malformed("barrier", "no opened_ms"))?,
            send_after_ms: get_n(&item, "send_after_ms").ok_or_else(|| malformed("barrier", "no send_after_ms"))?,
            shards: numbers("shards"),
        }))
    }

    async fn open_barrier(
        &self,
        coupon: &CouponId,
        record: &BarrierRecord,
        replacing: Option<&str>,
    ) -> Result<bool, StoreError> {
        let mut put = self
            .tables
            .client
            .put_item()
            .table_name(&self.tables.coupons)
            .item("pk", s(coupon_pk(coupon)))
            .item("sk", s(keys::BARRIER))
            .item("barrier_id", s(&record.id))
            .item("opened_ms", n(record.opened_ms))
            .item("send_after_ms", n(record.send_after_ms));
        if !record.shards.is_empty() {
            put = put.item(
                "shards",
                AttributeValue::Ns(record.shards.iter().map(u32::to_string).collect()),
            );
        }
        put = match replacing {
            None => put.condition_expression("attribute_not_exists(sk)"),
            Some(old) => put
                .condition_expression("barrier_id = :old")
                .expression_attribute_values(":old", s(old)),
        };
        conditional(put.send().await)
    }

    async fn close_barrier(&self, coupon: &CouponId, id: &str) -> Result<bool, StoreError> {
        let delete = self
            .tables
            .client
            .delete_item()
            .table_name(&self.tables.coupons)
            .key("pk", s(coupon_pk(coupon)))
            .key("sk", s(keys::BARRIER))
            .condition_expression("barrier_id = :id")
            .expression_attribute_values(":id", s(id))
            .send()
            .await;
        conditional(delete)
    }
}
