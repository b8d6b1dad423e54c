//! The DynamoDB adapter: durable coupon definitions, the capped counters, the
//! users' coupons, rejections, and the facts the reconciler reads.
//!
//! Two tables, both keyed `pk` (S) / `sk` (S):
//!
//! | table | `pk` | `sk` | what |
//! | --- | --- | --- | --- |
//! | coupons | `COUPON#<id>` | `DEF` | the definition (JSON) and fingerprint |
//! | coupons | `COUPON#<id>` | `COUNTER#<k>` | capped counter `k`: `cap`, `issued` |
//! | coupons | `COUPON#<id>` | `GRANT#<grantId>` | a rejected grant and why |
//! | coupons | `COUPON#<id>` | `REBUILD#<ms>` | Redis was rebuilt from here |
//! | coupons | `COUPON#<id>` | `AUDIT#<ms>#<operation>` | an admin change: who, what, when |
//! | coupons | `COUPON#<id>` | `OP#<key>` | an idempotency key an admin change claimed |
//! | coupons | `COUPON#<id>` | `REPORT` | the latest on-demand reconciliation report |
//! | coupons | `BLACKLIST#<user>` | `ENTRY` / `AUDIT#<ms>#<operation>` | the durable blacklist and its log |
//! | user coupons | `USER#<user>` | `COUPON#<id>#<ordinal>` | a coupon in a wallet |
//!
//! A coupon's data shares one partition; a user's wallet is one query. The
//! user-coupons index `by-coupon` (`coupon_id`, `pk`) lists a coupon's
//! holders, for rebuilding per-user counts after Redis data loss.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;
use aws_sdk_dynamodb::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{AttributeValue, Delete, KeysAndAttributes, Put, TransactWriteItem, Update};
pub use aws_sdk_dynamodb::Client;

use crate::admin::{AdminStore, AuditEntry, AuditTarget, ChangeResult, CouponChange};
use crate::coupon::{counter_additions, counter_items_for, fnv1a64, CouponDefinition, StoredCoupon};
use crate::error::{BoxError, StoreError};
use crate::grant::Grant;
use crate::ids::{CouponId, UserId};
use crate::issuance::{
    CouponState, GrantRef, GrantStatus, Holdings, IssueError, IssueOutcome, RejectReason, UserCoupon,
};
use crate::ports::{CouponRepository, DurableFacts, IssueLedger, RejectedGrant, WalletStore};

type Item = HashMap<String, AttributeValue>;

/// The partition key of everything about one coupon.
pub fn coupon_pk(coupon: &CouponId) -> String {
    format!("COUPON#{coupon}")
}

/// The partition key of a user's wallet.
pub fn user_pk(user: &UserId) -> String {
    format!("USER#{user}")
}

/// The sort key of a user's n-th claim of a coupon: the idempotency key of
/// issuance (invariant 2).
pub fn user_coupon_sk(coupon: &CouponId, ordinal: u32) -> String {
    format!("COUPON#{coupon}#{ordinal:03}")
}

/// The user-coupons index by coupon.
pub const BY_COUPON_INDEX: &str = "by-coupon";

fn s(v: impl Into<String>) -> AttributeValue {
    AttributeValue::S(v.into())
}

fn n(v: impl ToString) -> AttributeValue {
    AttributeValue::N(v.to_string())
}

fn get_s<'a>(item: &'a Item, name: &str) -> Option<&'a str> {
    item.get(name).and_then(|v| v.as_s().ok()).map(String::as_str)
}

fn get_n<T: std::str::FromStr>(item: &Item, name: &str) -> Option<T> {
    item.get(name).and_then(|v| v.as_n().ok()).and_then(|v| v.parse().ok())
}

fn unavailable<E: std::error::Error + Send + Sync + 'static>(e: E) -> StoreError {
    StoreError::Unavailable(Box::new(e))
}

fn malformed(what: &'static str, detail: impl Into<String>) -> StoreError {
    StoreError::Protocol {
        what,
        detail: detail.into(),
    }
}

/// Coupon definitions and their capped counters (operator tooling, issuer).
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

#[async_trait]
impl CouponRepository for DynamoCouponRepository {
    async fn put_definition(&self, def: &CouponDefinition) -> Result<bool, StoreError> {
        let json = serde_json::to_string(def).map_err(unavailable)?;
        let pk = coupon_pk(&def.coupon_id);
        let put = |item: Item| -> Result<TransactWriteItem, StoreError> {
            let put = Put::builder()
                .table_name(&self.table)
                .set_item(Some(item))
                .condition_expression("attribute_not_exists(pk)")
                .build()
                .map_err(unavailable)?;
            Ok(TransactWriteItem::builder().put(put).build())
        };
        // The definition and its counters appear together or not at all.
        let mut request = self.client.transact_write_items().transact_items(put(HashMap::from([
            ("pk".to_owned(), s(pk.clone())),
            ("sk".to_owned(), s("DEF")),
            ("definition".to_owned(), s(json)),
            ("fingerprint".to_owned(), s(def.fingerprint())),
            ("total_stock".to_owned(), n(def.total_stock)),
            ("status".to_owned(), s(def.status.as_str())),
            ("grab_end_ms".to_owned(), n(def.grab_end_ms)),
            ("version".to_owned(), n(0)),
        ]))?);
        for k in 0..def.counter_items() {
            request = request.transact_items(put(HashMap::from([
                ("pk".to_owned(), s(pk.clone())),
                ("sk".to_owned(), s(format!("COUNTER#{k}"))),
                ("cap".to_owned(), n(def.counter_cap(k))),
                ("issued".to_owned(), n(0)),
            ]))?);
        }
        match request.send().await {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), TransactWriteItemsError::TransactionCanceledException(_)) =>
            {
                match self.get_definition(&def.coupon_id).await? {
                    Some(existing) if existing.fingerprint() == def.fingerprint() => Ok(false),
                    Some(_) => Err(StoreError::Conflict(format!(
                        "coupon {} exists with a different definition",
                        def.coupon_id
                    ))),
                    None => Err(StoreError::Unavailable("definition write cancelled".into())),
                }
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn get_definition(&self, coupon: &CouponId) -> Result<Option<CouponDefinition>, StoreError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.table)
            .key("pk", s(coupon_pk(coupon)))
            .key("sk", s("DEF"))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        out.item.as_ref().map(parse_definition).transpose()
    }
}

fn parse_definition(item: &Item) -> Result<CouponDefinition, StoreError> {
    let json = get_s(item, "definition").ok_or_else(|| malformed("coupon definition", "no definition attribute"))?;
    serde_json::from_str(json).map_err(|e| malformed("coupon definition", e.to_string()))
}

/// The issuer's ledger, the wallet and the reconciler's facts.
#[derive(Debug, Clone)]
pub struct DynamoLedger {
    client: Client,
    coupons_table: String,
    user_coupons_table: String,
}

impl DynamoLedger {
    /// Both tables; `client` is built once and shared.
    pub fn new(client: Client, coupons_table: impl Into<String>, user_coupons_table: impl Into<String>) -> Self {
        Self {
            client,
            coupons_table: coupons_table.into(),
            user_coupons_table: user_coupons_table.into(),
        }
    }

    /// The number of counter items the coupon has now (its stock may have
    /// grown since the issuer cached the definition).
    async fn live_counter_items(&self, coupon: &CouponId) -> Result<u32, IssueError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.coupons_table)
            .key("pk", s(coupon_pk(coupon)))
            .key("sk", s("DEF"))
            .projection_expression("total_stock")
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify(Box::new(e), false))?;
        Ok(counter_items_for(
            out.item.as_ref().and_then(|i| get_n(i, "total_stock")).unwrap_or(0),
        ))
    }

    fn user_coupon_item(grant: &Grant, def: &CouponDefinition, now_ms: i64) -> Item {
        // Kept 90 days past validity, then DynamoDB's TTL removes it.
        let expires_at = def.valid_until_ms / 1000 + 90 * 86_400;
        HashMap::from([
            ("pk".to_owned(), s(user_pk(&grant.user_id))),
            ("sk".to_owned(), s(user_coupon_sk(&grant.coupon_id, grant.ordinal))),
            ("coupon_id".to_owned(), s(grant.coupon_id.as_str())),
            ("user_id".to_owned(), s(grant.user_id.as_str())),
            ("ordinal".to_owned(), n(grant.ordinal)),
            ("grant_id".to_owned(), s(grant.grant_id.clone())),
            ("status".to_owned(), s("UNUSED")),
            ("name".to_owned(), s(def.name.clone())),
            ("amount".to_owned(), n(def.amount)),
            ("received_at_ms".to_owned(), n(now_ms)),
            ("valid_from_ms".to_owned(), n(def.valid_from_ms)),
            ("valid_until_ms".to_owned(), n(def.valid_until_ms)),
            ("expires_at".to_owned(), n(expires_at)),
        ])
    }

    /// The key (user, coupon, ordinal) is taken: by this grant (a repeated
    /// delivery) or by another one.
    async fn existing(&self, grant: &Grant, now_ms: i64) -> Result<IssueOutcome, IssueError> {
        let out = self
            .client
            .get_item()
            .table_name(&self.user_coupons_table)
            .key("pk", s(user_pk(&grant.user_id)))
            .key("sk", s(user_coupon_sk(&grant.coupon_id, grant.ordinal)))
            .consistent_read(true)
            .send()
            .await
            .map_err(|e| classify(Box::new(e), false))?;
        match out.item.as_ref().and_then(|i| get_s(i, "grant_id")) {
            Some(id) if id == grant.grant_id => Ok(IssueOutcome::Duplicate),
            Some(_) => self.reject(grant, RejectReason::OrdinalTaken, now_ms).await,
            None => Err(IssueError::Unavailable(
                "user coupon vanished after a failed condition".into(),
            )),
        }
    }

    async fn reject(&self, grant: &Grant, reason: RejectReason, now_ms: i64) -> Result<IssueOutcome, IssueError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.coupons_table)
            .item("pk", s(coupon_pk(&grant.coupon_id)))
            .item("sk", s(format!("GRANT#{}", grant.grant_id)))
            .item("status", s("REJECTED"))
            .item("reason", s(reason.as_str()))
            .item("user_id", s(grant.user_id.as_str()))
            .item("ordinal", n(grant.ordinal))
            .item("rejected_at_ms", n(now_ms))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(IssueOutcome::Rejected(reason)),
            // Recorded by an earlier delivery.
            Err(SdkError::ServiceError(e)) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                Ok(IssueOutcome::Rejected(reason))
            }
            Err(e) => {
                let throttled = matches!(&e, SdkError::ServiceError(se) if is_throttle_code(se.err().code()));
                Err(classify(Box::new(e), throttled))
            }
        }
    }

    async fn query_all(
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
    async fn scan_coupons(&self, filter: &str, values: Item) -> Result<Vec<Item>, StoreError> {
        paginate(|start| async {
            let out = self
                .client
                .scan()
                .table_name(&self.coupons_table)
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

    async fn coupon_items(&self, coupon: &CouponId, prefix: &str) -> Result<Vec<Item>, StoreError> {
        self.query_all(
            &self.coupons_table,
            None,
            "pk = :pk AND begins_with(sk, :prefix)",
            HashMap::from([
                (":pk".to_owned(), s(coupon_pk(coupon))),
                (":prefix".to_owned(), s(prefix)),
            ]),
        )
        .await
    }
}

/// Reads every page: `page(start)` returns one page's items and the key to
/// go on from (absent or empty on the last page).
async fn paginate<F, Fut>(mut page: F) -> Result<Vec<Item>, StoreError>
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

fn is_throttle_code(code: Option<&str>) -> bool {
    matches!(
        code,
        Some(
            "ThrottlingException"
                | "ProvisionedThroughputExceededException"
                | "RequestLimitExceeded"
                | "TransactionInProgressException"
                | "TransactionConflictException"
        )
    )
}

fn classify(e: BoxError, throttled: bool) -> IssueError {
    if throttled {
        IssueError::Throttled(e)
    } else {
        IssueError::Unavailable(e)
    }
}

#[async_trait]
impl IssueLedger for DynamoLedger {
    async fn issue(&self, grant: &Grant, def: &CouponDefinition, now_ms: i64) -> Result<IssueOutcome, IssueError> {
        let item = Self::user_coupon_item(grant, def, now_ms);
        let mut items = def.counter_items();
        // Spread grants over the counters; walk on when one is full.
        let start = (fnv1a64(grant.grant_id.as_bytes()) % u64::from(items)) as u32;
        let mut order: Vec<u32> = (0..items).map(|step| (start + step) % items).collect();
        let mut at = 0;
        loop {
            let Some(&counter) = order.get(at) else {
                // Every counter we know of is full. Stock may have been added
                // since `def` was read (more counters): check once.
                let live = self.live_counter_items(&grant.coupon_id).await?;
                if live > items {
                    order.extend(items..live);
                    items = live;
                    continue;
                }
                break;
            };
            at += 1;
            let put = Put::builder()
                .table_name(&self.user_coupons_table)
                .set_item(Some(item.clone()))
                .condition_expression("attribute_not_exists(pk)")
                .build()
                .map_err(|e| IssueError::Unavailable(Box::new(e)))?;
            let take = Update::builder()
                .table_name(&self.coupons_table)
                .key("pk", s(coupon_pk(&grant.coupon_id)))
                .key("sk", s(format!("COUNTER#{counter}")))
                .update_expression("SET issued = issued + :one")
                .condition_expression("issued < cap")
                .expression_attribute_values(":one", n(1))
                .build()
                .map_err(|e| IssueError::Unavailable(Box::new(e)))?;
            let result = self
                .client
                .transact_write_items()
                .transact_items(TransactWriteItem::builder().put(put).build())
                .transact_items(TransactWriteItem::builder().update(take).build())
                .send()
                .await;
            let err = match result {
                Ok(_) => return Ok(IssueOutcome::Issued),
                Err(e) => e,
            };
            if let SdkError::ServiceError(se) = &err {
                if let TransactWriteItemsError::TransactionCanceledException(ex) = se.err() {
                    let reasons = ex.cancellation_reasons();
                    let code = |i: usize| reasons.get(i).and_then(|r| r.code()).unwrap_or("None");
                    if code(0) == "ConditionalCheckFailed" {
                        return self.existing(grant, now_ms).await;
                    }
                    if code(1) == "ConditionalCheckFailed" {
                        continue; // this counter is full
                    }
                    let throttled = reasons.iter().any(|r| {
                        matches!(
                            r.code(),
                            Some(
                                "ThrottlingError"
                                    | "ProvisionedThroughputExceeded"
                                    | "TransactionConflict"
                                    | "RequestLimitExceeded"
                            )
                        )
                    });
                    return Err(classify(Box::new(err), throttled));
                }
                let throttled = is_throttle_code(se.err().code());
                return Err(classify(Box::new(err), throttled));
            }
            return Err(classify(Box::new(err), false));
        }
        self.reject(grant, RejectReason::CapReached, now_ms).await
    }
}

fn parse_user_coupon(item: &Item) -> Option<UserCoupon> {
    Some(UserCoupon {
        coupon_id: CouponId::parse(get_s(item, "coupon_id")?).ok()?,
        ordinal: get_n(item, "ordinal")?,
        grant_id: get_s(item, "grant_id")?.to_owned(),
        status: match get_s(item, "status")? {
            "UNUSED" => CouponState::Unused,
            _ => return None,
        },
        name: get_s(item, "name")?.to_owned(),
        amount: get_n(item, "amount")?,
        received_at_ms: get_n(item, "received_at_ms")?,
        valid_from_ms: get_n(item, "valid_from_ms")?,
        valid_until_ms: get_n(item, "valid_until_ms")?,
    })
}

#[async_trait]
impl WalletStore for DynamoLedger {
    async fn coupons(&self, user: &UserId) -> Result<Vec<UserCoupon>, StoreError> {
        let items = self
            .query_all(
                &self.user_coupons_table,
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

    async fn grant_status(&self, user: &UserId, grant: &GrantRef) -> Result<Option<GrantStatus>, StoreError> {
        let held = self
            .query_all(
                &self.user_coupons_table,
                None,
                "pk = :pk AND begins_with(sk, :prefix)",
                HashMap::from([
                    (":pk".to_owned(), s(user_pk(user))),
                    (":prefix".to_owned(), s(format!("COUPON#{}#", grant.coupon))),
                ]),
            )
            .await?;
        if held
            .iter()
            .any(|i| get_s(i, "grant_id") == Some(grant.grant_id.as_str()))
        {
            return Ok(Some(GrantStatus::Issued));
        }
        let out = self
            .client
            .get_item()
            .table_name(&self.coupons_table)
            .key("pk", s(coupon_pk(&grant.coupon)))
            .key("sk", s(format!("GRANT#{}", grant.grant_id)))
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

#[async_trait]
impl DurableFacts for DynamoLedger {
    async fn definitions(&self) -> Result<Vec<CouponDefinition>, StoreError> {
        let items = self
            .scan_coupons("sk = :def", HashMap::from([(":def".to_owned(), s("DEF"))]))
            .await?;
        items.iter().map(parse_definition).collect()
    }

    async fn issued(&self, coupon: &CouponId) -> Result<u64, StoreError> {
        let counters = self.coupon_items(coupon, "COUNTER#").await?;
        Ok(counters.iter().filter_map(|i| get_n::<u64>(i, "issued")).sum())
    }

    async fn rejections(&self, coupon: &CouponId) -> Result<Vec<RejectedGrant>, StoreError> {
        let items = self.coupon_items(coupon, "GRANT#").await?;
        Ok(items
            .iter()
            .filter_map(|i| {
                Some(RejectedGrant {
                    grant_id: get_s(i, "sk")?.strip_prefix("GRANT#")?.to_owned(),
                    reason: RejectReason::parse(get_s(i, "reason")?)?,
                })
            })
            .collect())
    }

    async fn issued_grants(&self, grants: &[Grant]) -> Result<HashSet<String>, StoreError> {
        let mut wanted: HashMap<(String, String), &str> = HashMap::new();
        for g in grants {
            wanted.insert(
                (user_pk(&g.user_id), user_coupon_sk(&g.coupon_id, g.ordinal)),
                g.grant_id.as_str(),
            );
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
                    .projection_expression("pk, sk, grant_id")
                    .consistent_read(true)
                    .build()
                    .map_err(unavailable)?;
                let out = self
                    .client
                    .batch_get_item()
                    .request_items(&self.user_coupons_table, request)
                    .send()
                    .await
                    .map_err(unavailable)?;
                for item in out
                    .responses
                    .unwrap_or_default()
                    .remove(&self.user_coupons_table)
                    .unwrap_or_default()
                {
                    let key = (
                        get_s(&item, "pk").unwrap_or("").to_owned(),
                        get_s(&item, "sk").unwrap_or("").to_owned(),
                    );
                    if let (Some(expected), Some(actual)) = (wanted.get(&key), get_s(&item, "grant_id")) {
                        if *expected == actual {
                            found.insert(actual.to_owned());
                        }
                    }
                }
                pending = out
                    .unprocessed_keys
                    .and_then(|mut u| u.remove(&self.user_coupons_table))
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
            .query_all(
                &self.user_coupons_table,
                Some(BY_COUPON_INDEX),
                "coupon_id = :c",
                HashMap::from([(":c".to_owned(), s(coupon.as_str()))]),
            )
            .await?;
        let mut holdings = Holdings::new();
        for item in &items {
            if let Some(user) = get_s(item, "user_id").and_then(|u| UserId::parse(u).ok()) {
                *holdings.entry(user).or_default() += 1;
            }
        }
        Ok(holdings)
    }

    async fn record_rebuild(&self, coupon: &CouponId, now_ms: i64, restored: u64) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.coupons_table)
            .item("pk", s(coupon_pk(coupon)))
            .item("sk", s(format!("REBUILD#{now_ms:015}")))
            .item("restored", n(restored))
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn was_rebuilt(&self, coupon: &CouponId) -> Result<bool, StoreError> {
        Ok(!self.coupon_items(coupon, "REBUILD#").await?.is_empty())
    }

    async fn blacklisted_users(&self) -> Result<Vec<UserId>, StoreError> {
        let items = self
            .scan_coupons(
                "sk = :entry AND begins_with(pk, :black)",
                HashMap::from([
                    (":entry".to_owned(), s("ENTRY")),
                    (":black".to_owned(), s("BLACKLIST#")),
                ]),
            )
            .await?;
        Ok(items
            .iter()
            .filter_map(|i| get_s(i, "user_id").and_then(|u| UserId::parse(u).ok()))
            .collect())
    }

    async fn still_blacklisted(&self, user: &UserId) -> Result<bool, StoreError> {
        AdminStore::is_blacklisted(self, user).await
    }
}

fn audit_pk(target: &AuditTarget) -> String {
    match target {
        AuditTarget::Coupon(c) => coupon_pk(c),
        AuditTarget::User(u) => format!("BLACKLIST#{u}"),
    }
}

/// `AUDIT#<ms, 15 digits>#<operation>`: sorted by time, so the latest
/// entries are one descending, limited query. A coupon's creation is
/// recorded under time 0: it sorts first, and a retried create (same
/// operation id) finds its entry instead of adding a second one.
fn audit_sk(entry: &AuditEntry) -> String {
    let ms = if entry.action == crate::admin::AdminAction::CreateCoupon {
        0
    } else {
        entry.at_ms.max(0)
    };
    format!("AUDIT#{ms:015}#{}", entry.operation_id)
}

fn audit_item(pk: String, entry: &AuditEntry) -> Result<Item, StoreError> {
    Ok(HashMap::from([
        ("pk".to_owned(), s(pk)),
        ("sk".to_owned(), s(audit_sk(entry))),
        ("actor".to_owned(), s(entry.actor.as_str())),
        (
            "action".to_owned(),
            s(serde_json::to_value(entry.action)
                .map_err(unavailable)?
                .as_str()
                .unwrap_or("?")),
        ),
        ("at_ms".to_owned(), n(entry.at_ms)),
        (
            "entry".to_owned(),
            s(serde_json::to_string(entry).map_err(unavailable)?),
        ),
    ]))
}

fn put_if_absent(table: &str, item: Item) -> Result<TransactWriteItem, StoreError> {
    let put = Put::builder()
        .table_name(table)
        .set_item(Some(item))
        .condition_expression("attribute_not_exists(pk)")
        .build()
        .map_err(unavailable)?;
    Ok(TransactWriteItem::builder().put(put).build())
}

impl DynamoLedger {
    async fn get(&self, pk: String, sk: &str) -> Result<Option<Item>, StoreError> {
        Ok(self
            .client
            .get_item()
            .table_name(&self.coupons_table)
            .key("pk", s(pk))
            .key("sk", s(sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?
            .item)
    }
}

#[async_trait]
impl AdminStore for DynamoLedger {
    async fn stored(&self, coupon: &CouponId) -> Result<Option<StoredCoupon>, StoreError> {
        let Some(item) = self.get(coupon_pk(coupon), "DEF").await? else {
            return Ok(None);
        };
        Ok(Some(StoredCoupon {
            definition: parse_definition(&item)?,
            version: get_n(&item, "version").unwrap_or(0),
        }))
    }

    async fn change(&self, change: &CouponChange) -> Result<ChangeResult, StoreError> {
        let def = &change.after;
        let pk = coupon_pk(&def.coupon_id);
        let update = Update::builder()
            .table_name(&self.coupons_table)
            .key("pk", s(pk.clone()))
            .key("sk", s("DEF"))
            .update_expression("SET #def = :d, #fp = :f, #total = :t, #st = :s, #ver = :next")
            .condition_expression("#ver = :read")
            .expression_attribute_names("#def", "definition")
            .expression_attribute_names("#fp", "fingerprint")
            .expression_attribute_names("#total", "total_stock")
            .expression_attribute_names("#st", "status")
            .expression_attribute_names("#ver", "version")
            .expression_attribute_values(":d", s(serde_json::to_string(def).map_err(unavailable)?))
            .expression_attribute_values(":f", s(def.fingerprint()))
            .expression_attribute_values(":t", n(def.total_stock))
            .expression_attribute_values(":s", s(def.status.as_str()))
            .expression_attribute_values(":read", n(change.expected_version))
            .expression_attribute_values(":next", n(change.expected_version + 1))
            .build()
            .map_err(unavailable)?;
        let mut items = vec![TransactWriteItem::builder().update(update).build()];
        let before = def.total_stock - change.added_stock;
        for (k, add, new) in counter_additions(before, change.added_stock) {
            let sk = format!("COUNTER#{k}");
            if new {
                items.push(put_if_absent(
                    &self.coupons_table,
                    HashMap::from([
                        ("pk".to_owned(), s(pk.clone())),
                        ("sk".to_owned(), s(sk)),
                        ("cap".to_owned(), n(add)),
                        ("issued".to_owned(), n(0)),
                    ]),
                )?);
            } else {
                let grow = Update::builder()
                    .table_name(&self.coupons_table)
                    .key("pk", s(pk.clone()))
                    .key("sk", s(sk))
                    .update_expression("SET #cap = #cap + :add")
                    .expression_attribute_names("#cap", "cap")
                    .condition_expression("attribute_exists(pk)")
                    .expression_attribute_values(":add", n(add))
                    .build()
                    .map_err(unavailable)?;
                items.push(TransactWriteItem::builder().update(grow).build());
            }
        }
        items.push(put_if_absent(
            &self.coupons_table,
            audit_item(pk.clone(), &change.audit)?,
        )?);
        if let Some(key) = &change.operation_key {
            items.push(put_if_absent(
                &self.coupons_table,
                HashMap::from([
                    ("pk".to_owned(), s(pk.clone())),
                    ("sk".to_owned(), s(format!("OP#{key}"))),
                    ("at_ms".to_owned(), n(change.audit.at_ms)),
                ]),
            )?);
        }
        let count = items.len();
        match self
            .client
            .transact_write_items()
            .set_transact_items(Some(items))
            .send()
            .await
        {
            Ok(_) => Ok(ChangeResult::Applied),
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), TransactWriteItemsError::TransactionCanceledException(_)) =>
            {
                let TransactWriteItemsError::TransactionCanceledException(ex) = e.err() else {
                    unreachable!("matched above")
                };
                let failed = |i: usize| {
                    ex.cancellation_reasons()
                        .get(i)
                        .and_then(|r| r.code())
                        .is_some_and(|c| c == "ConditionalCheckFailed")
                };
                if change.operation_key.is_some() && failed(count - 1) {
                    return Ok(ChangeResult::AlreadyDone);
                }
                if failed(0) {
                    return Ok(ChangeResult::VersionMoved);
                }
                Err(StoreError::Unavailable(Box::new(SdkError::ServiceError(e))))
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn record(&self, target: &AuditTarget, entry: &AuditEntry) -> Result<bool, StoreError> {
        let result = self
            .client
            .put_item()
            .table_name(&self.coupons_table)
            .set_item(Some(audit_item(audit_pk(target), entry)?))
            .condition_expression("attribute_not_exists(pk)")
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(SdkError::ServiceError(e)) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                Ok(false)
            }
            Err(e) => Err(unavailable(e)),
        }
    }

    async fn audit(&self, target: &AuditTarget, limit: usize) -> Result<(Vec<AuditEntry>, bool), StoreError> {
        let out = self
            .client
            .query()
            .table_name(&self.coupons_table)
            .key_condition_expression("pk = :pk AND begins_with(sk, :prefix)")
            .expression_attribute_values(":pk", s(audit_pk(target)))
            .expression_attribute_values(":prefix", s("AUDIT#"))
            .scan_index_forward(false)
            .limit(i32::try_from(limit + 1).unwrap_or(i32::MAX))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        let mut entries = out
            .items
            .unwrap_or_default()
            .iter()
            .map(|i| {
                let json = get_s(i, "entry").ok_or_else(|| malformed("audit entry", "no entry attribute"))?;
                serde_json::from_str::<AuditEntry>(json).map_err(|e| malformed("audit entry", e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let more = entries.len() > limit;
        entries.truncate(limit);
        Ok((entries, more))
    }

    async fn set_blacklisted(&self, user: &UserId, on: bool, entry: &AuditEntry) -> Result<(), StoreError> {
        let pk = format!("BLACKLIST#{user}");
        let flag = if on {
            let put = Put::builder()
                .table_name(&self.coupons_table)
                .item("pk", s(pk.clone()))
                .item("sk", s("ENTRY"))
                .item("user_id", s(user.as_str()))
                .item("actor", s(entry.actor.as_str()))
                .item("at_ms", n(entry.at_ms))
                .build()
                .map_err(unavailable)?;
            TransactWriteItem::builder().put(put).build()
        } else {
            let delete = Delete::builder()
                .table_name(&self.coupons_table)
                .key("pk", s(pk.clone()))
                .key("sk", s("ENTRY"))
                .build()
                .map_err(unavailable)?;
            TransactWriteItem::builder().delete(delete).build()
        };
        // No condition on the audit entry: its id is unique per operation,
        // and a retried operation overwriting its own entry is harmless.
        let audit = Put::builder()
            .table_name(&self.coupons_table)
            .set_item(Some(audit_item(pk, entry)?))
            .build()
            .map_err(unavailable)?;
        self.client
            .transact_write_items()
            .transact_items(flag)
            .transact_items(TransactWriteItem::builder().put(audit).build())
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn is_blacklisted(&self, user: &UserId) -> Result<bool, StoreError> {
        Ok(self.get(format!("BLACKLIST#{user}"), "ENTRY").await?.is_some())
    }

    async fn save_report(&self, coupon: &CouponId, report: &serde_json::Value) -> Result<(), StoreError> {
        self.client
            .put_item()
            .table_name(&self.coupons_table)
            .item("pk", s(coupon_pk(coupon)))
            .item("sk", s("REPORT"))
            .item("report", s(report.to_string()))
            .send()
            .await
            .map_err(unavailable)?;
        Ok(())
    }

    async fn last_report(&self, coupon: &CouponId) -> Result<Option<serde_json::Value>, StoreError> {
        self.get(coupon_pk(coupon), "REPORT")
            .await?
            .map(|item| {
                let json = get_s(&item, "report").ok_or_else(|| malformed("report", "no report attribute"))?;
                serde_json::from_str(json).map_err(|e| malformed("report", e.to_string()))
            })
            .transpose()
    }
}
