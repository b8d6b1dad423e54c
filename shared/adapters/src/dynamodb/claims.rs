//! The grants on their way ([`GrantClaims`]): each grant's claim is put in
//! the claims table before the grant is sent, and read back, every one of
//! a coupon's, by the rebuild of a shard Redis lost
//! ([`DynamoClaims::all`]), and one by one by a retry replaying a win a
//! restarted shard remembers ([`GrantClaims::holds`], which also looks for
//! the grant's rejection in the coupons table).
//!
//! A coupon's claims are spread over its [`LANES`] partitions
//! (`CLAIMS#<coupon>#<lane>`, the lane its grant travels in), so a sale
//! writes them at `LANES` times one partition's rate, as it sends them,
//! and a rebuild reads the lanes at once. Each item holds the grant as
//! the queue carries it (`grant`, JSON). A claim is never deleted while
//! its coupon may be rebuilt: the rebuild counts the units that left the
//! shards as the claims there are, so a claim deleted once its grant is
//! issued would make a grant issued between two of its reads count
//! nowhere, or twice. DynamoDB's TTL (`expires_at`) removes it after
//! [`KEEP_SECONDS`]; its own table keeps it out of every scan.

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::put_item::PutItemError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::types::{Put, TransactWriteItem};
use coupon_domain::barrier::{lane_of, LANES};
use coupon_domain::error::{PublishError, StoreError};
use coupon_domain::grab::ports::{ClaimError, GrantClaims};
use coupon_domain::grant::Grant;
use coupon_domain::ids::CouponId;
use futures::stream::{self, StreamExt, TryStreamExt};

use super::items::{get_s, malformed, n, s, unavailable, Item, Tables};
use super::keys::{claims_pk, coupon_pk, grant_sk, ordinal_sk, ordinals_pk, request_sk, requests_pk};

/// How long a claim is kept: far longer than a coupon sells, so every
/// claim of a coupon that can still be rebuilt is there.
pub const KEEP_SECONDS: i64 = 400 * 86_400;

/// Claims written or lanes read at once.
const AT_ONCE: usize = 16;

/// [`GrantClaims`] on DynamoDB, and the claims' reader.
#[derive(Debug, Clone)]
pub struct DynamoClaims {
    tables: Tables,
    ordinals: bool,
}

impl DynamoClaims {
    /// Claims in the claims table of `tables`.
    pub fn new(tables: Tables) -> Self {
        Self {
            tables,
            ordinals: false,
        }
    }

    /// Claims that also guard the user's ordinal (`guard`: the cache's
    /// acknowledged writes may be lost, `CACHE_DURABILITY=none`): each
    /// claim and its user's ordinal are written in one transaction, and a
    /// grant whose user and ordinal are claimed for another grant that was
    /// not rejected is refused ([`ClaimError::OrdinalClaimed`]). On such a
    /// cache a failover may roll a home shard back past a win its user
    /// was told, so the shard counts the user one claim short and would
    /// mint the same ordinal again; the grant id alone (the other
    /// condition) catches only a unit sold twice. Elsewhere a replica or
    /// the cache's log holds every told win, and the single put is enough.
    pub fn guarding_ordinals(mut self, guard: bool) -> Self {
        self.ordinals = guard;
        self
    }

    /// The same, for a function that knows only the claims table and the
    /// coupons table (where a rejected grant is recorded) among the three:
    /// the grab.
    pub fn in_tables(
        client: aws_sdk_dynamodb::Client,
        claims_table: impl Into<String>,
        coupons_table: impl Into<String>,
    ) -> Self {
        let names = crate::config::TableNames {
            coupons: coupons_table.into(),
            user_coupons: String::new(),
            claims: claims_table.into(),
        };
        Self::new(Tables::new(client, &names))
    }

    /// One item by key, read consistently.
    async fn get(&self, table: &str, pk: String, sk: String) -> Result<Option<Item>, StoreError> {
        let found = self
            .tables
            .client
            .get_item()
            .table_name(table)
            .key("pk", s(pk))
            .key("sk", s(sk))
            .consistent_read(true)
            .send()
            .await
            .map_err(unavailable)?;
        Ok(found.item().cloned())
    }

    fn item(grant: &Grant) -> Result<Item, PublishError> {
        let body = serde_json::to_string(grant).map_err(|e| PublishError(Box::new(e)))?;
        Ok(HashMap::from([
            (
                "pk".to_owned(),
                s(claims_pk(&grant.coupon_id, lane_of(grant.grant_id.as_str()))),
            ),
            ("sk".to_owned(), s(grant.grant_id.as_str())),
            ("grant".to_owned(), s(body)),
            // What makes the grant itself (`Grant::same_as`), for the
            // condition: not the instant it was decided at.
            ("user_id".to_owned(), s(grant.user_id.as_str())),
            ("ordinal".to_owned(), n(grant.ordinal)),
            ("request_id".to_owned(), s(grant.request_id.as_str())),
            ("expires_at".to_owned(), n(grant.granted_at_ms / 1000 + KEEP_SECONDS)),
        ]))
    }

    /// The condition a claim is written on: new, or this very grant again
    /// (the same id, user, ordinal and request; a claim written before
    /// those were kept apart, by its whole body).
    const SAME_GRANT: &'static str = "attribute_not_exists(pk) OR #g = :g OR (#u = :u AND #o = :o AND #r = :r)";

    /// Puts one claim, unless the grant id is claimed for another grant: a
    /// shard that minted the id again (a failover to a replica that lacked
    /// the first) must not have the second grant sent as if it were the
    /// first, which SQS would drop as a duplicate.
    async fn put(&self, grant: &Grant) -> Result<(), ClaimError> {
        if self.ordinals {
            return self.put_guarded(grant).await;
        }
        let item = Self::item(grant).map_err(ClaimError::Unavailable)?;
        let result = self
            .tables
            .client
            .put_item()
            .table_name(&self.tables.claims)
            .set_item(Some(item.clone()))
            .condition_expression(Self::SAME_GRANT)
            .set_expression_attribute_names(Some(Self::same_names()))
            .set_expression_attribute_values(Some(Self::same_values(&item)))
            .send()
            .await;
        match result {
            Ok(_) => Ok(()),
            Err(SdkError::ServiceError(e)) if matches!(e.err(), PutItemError::ConditionalCheckFailedException(_)) => {
                Err(ClaimError::Reminted(grant.grant_id.clone()))
            }
            Err(e) => Err(ClaimError::Unavailable(PublishError(Box::new(e)))),
        }
    }

    fn same_names() -> HashMap<String, String> {
        ["g:grant", "u:user_id", "o:ordinal", "r:request_id"]
            .into_iter()
            .map(|p| {
                let (k, v) = p.split_once(':').unwrap_or((p, p));
                (format!("#{k}"), v.to_owned())
            })
            .collect()
    }

    fn same_values(item: &Item) -> Item {
        [("g", "grant"), ("u", "user_id"), ("o", "ordinal"), ("r", "request_id")]
            .into_iter()
            .filter_map(|(k, attr)| item.get(attr).map(|v| (format!(":{k}"), v.clone())))
            .collect()
    }

    /// A marker of the guarded claim: `pk` and `sk`, naming the grant that
    /// holds it.
    fn marker(pk: String, sk: String, grant: &Grant) -> Item {
        HashMap::from([
            ("pk".to_owned(), s(pk)),
            ("sk".to_owned(), s(sk)),
            ("grant_id".to_owned(), s(grant.grant_id.as_str())),
            ("expires_at".to_owned(), n(grant.granted_at_ms / 1000 + KEEP_SECONDS)),
        ])
    }

    /// The claim, its user's ordinal and its request, in one transaction:
    /// all three written (or found already written for this grant), or
    /// none. An ordinal or a request held by a grant the issuer rejected
    /// (it counts nowhere, and its user's next claim takes the same
    /// ordinal) is taken over.
    async fn put_guarded(&self, grant: &Grant) -> Result<(), ClaimError> {
        let claim = Self::item(grant).map_err(ClaimError::Unavailable)?;
        let lane = lane_of(grant.user_id.as_str());
        let markers = [
            Self::marker(
                ordinals_pk(&grant.coupon_id, lane),
                ordinal_sk(&grant.user_id, grant.ordinal),
                grant,
            ),
            Self::marker(
                requests_pk(&grant.coupon_id, lane),
                request_sk(&grant.user_id, &grant.request_id),
                grant,
            ),
        ];
        // The rejected grant each marker may be taken over from.
        let mut rejected: [Option<String>; 2] = [None, None];
        loop {
            let unavailable =
                |e: aws_sdk_dynamodb::error::BuildError| ClaimError::Unavailable(PublishError(Box::new(e)));
            let mut request = self.tables.client.transact_write_items().transact_items(
                TransactWriteItem::builder()
                    .put(
                        Put::builder()
                            .table_name(&self.tables.claims)
                            .set_item(Some(claim.clone()))
                            .condition_expression(Self::SAME_GRANT)
                            .set_expression_attribute_names(Some(Self::same_names()))
                            .set_expression_attribute_values(Some(Self::same_values(&claim)))
                            .build()
                            .map_err(unavailable)?,
                    )
                    .build(),
            );
            for (marker, taken_from) in markers.iter().zip(&rejected) {
                let put = Put::builder()
                    .table_name(&self.tables.claims)
                    .set_item(Some(marker.clone()))
                    .expression_attribute_names("#i", "grant_id")
                    .expression_attribute_values(":i", s(grant.grant_id.as_str()));
                let put = match taken_from {
                    None => put.condition_expression("attribute_not_exists(pk) OR #i = :i"),
                    Some(from) => put
                        .condition_expression("#i = :i OR #i = :r")
                        .expression_attribute_values(":r", s(from.as_str())),
                };
                request = request.transact_items(
                    TransactWriteItem::builder()
                        .put(put.build().map_err(unavailable)?)
                        .build(),
                );
            }
            let err = match request.send().await {
                Ok(_) => return Ok(()),
                Err(e) => e,
            };
            let reasons = match &err {
                SdkError::ServiceError(se) => match se.err() {
                    TransactWriteItemsError::TransactionCanceledException(ex) => ex.cancellation_reasons().to_vec(),
                    _ => Vec::new(),
                },
                _ => Vec::new(),
            };
            let failed = |i: usize| reasons.get(i).and_then(|r| r.code()) == Some("ConditionalCheckFailed");
            if failed(0) {
                return Err(ClaimError::Reminted(grant.grant_id.clone()));
            }
            let conflict = |at: usize| match at {
                0 => ClaimError::OrdinalClaimed(grant.grant_id.clone()),
                _ => ClaimError::RequestClaimed(grant.grant_id.clone()),
            };
            let Some(at) = (0..2).find(|&m| failed(m + 1)) else {
                return Err(ClaimError::Unavailable(PublishError(Box::new(err))));
            };
            if rejected[at].is_some() {
                return Err(conflict(at));
            }
            // The marker is another grant's: taken over only if the issuer
            // rejected that grant (then nothing counts it).
            let held = self
                .get(
                    &self.tables.claims,
                    get_s(&markers[at], "pk").unwrap_or_default().to_owned(),
                    get_s(&markers[at], "sk").unwrap_or_default().to_owned(),
                )
                .await
                .map_err(|e| ClaimError::Unavailable(PublishError(Box::new(e))))?;
            let Some(id) = held.as_ref().and_then(|i| get_s(i, "grant_id")).map(str::to_owned) else {
                continue; // gone meanwhile (expired): the next attempt writes it
            };
            let is_rejected = self
                .get(&self.tables.coupons, coupon_pk(&grant.coupon_id), grant_sk(&id))
                .await
                .map_err(|e| ClaimError::Unavailable(PublishError(Box::new(e))))?
                .is_some();
            if !is_rejected {
                return Err(conflict(at));
            }
            rejected[at] = Some(id);
        }
    }

    /// [`Self::put`], begun only before `deadline` and given up at it.
    async fn put_by(&self, grant: &Grant, deadline: tokio::time::Instant) -> Result<(), ClaimError> {
        if tokio::time::Instant::now() >= deadline {
            return Err(ClaimError::Unavailable(PublishError(
                "the send budget was spent before the claim".into(),
            )));
        }
        match tokio::time::timeout_at(deadline, self.put(grant)).await {
            Ok(written) => written,
            Err(elapsed) => Err(ClaimError::Unavailable(PublishError(Box::new(elapsed)))),
        }
    }

    /// Every grant of `coupon` ever claimed (and not expired): each one
    /// sent, or about to be, and on its way unless DynamoDB has issued or
    /// rejected it since. Read consistently, the lanes at once.
    pub async fn all(&self, coupon: &CouponId) -> Result<Vec<Grant>, StoreError> {
        let lanes: Vec<Vec<Item>> = stream::iter(0..LANES)
            .map(|lane| {
                self.tables.query_all(
                    &self.tables.claims,
                    None,
                    "pk = :pk",
                    HashMap::from([(":pk".to_owned(), s(claims_pk(coupon, lane)))]),
                )
            })
            .buffered(AT_ONCE)
            .try_collect()
            .await?;
        lanes
            .iter()
            .flatten()
            .map(|item| {
                let body = get_s(item, "grant").ok_or_else(|| malformed("grant claim", "no grant attribute"))?;
                serde_json::from_str(body).map_err(|e| malformed("grant claim", e.to_string()))
            })
            .collect()
    }
}

#[async_trait]
impl GrantClaims for DynamoClaims {
    async fn claim(&self, grants: &[Grant], within_ms: u64) -> Vec<Result<(), ClaimError>> {
        let deadline = tokio::time::Instant::now() + Duration::from_millis(within_ms);
        // Each put given up at the deadline whatever the SDK's own timeouts
        // are, and none begun after it: the send that follows must fit in
        // the same budget, and a claim must not land after the window the
        // rebuild waits out. (One already on the wire may still land after
        // its caller gave up: it names a grant never sent, which a rebuild
        // counts on its way, writes back to its shard's outbox, and the
        // reconciler re-drives from there.)
        let puts: Vec<_> = grants.iter().map(|g| self.put_by(g, deadline)).collect();
        stream::iter(puts).buffered(AT_ONCE).collect().await
    }

    /// The claim, and no rejection of it: a rebuild restores no claim
    /// whose grant the issuer rejected (nor any answer for its request),
    /// so such a claim vouches for nothing.
    async fn holds(&self, grant: &Grant) -> Result<bool, StoreError> {
        let id = grant.grant_id.as_str();
        let (claim, rejection) = futures::try_join!(
            self.get(
                &self.tables.claims,
                claims_pk(&grant.coupon_id, lane_of(id)),
                id.to_owned()
            ),
            self.get(&self.tables.coupons, coupon_pk(&grant.coupon_id), grant_sk(id)),
        )?;
        let Some(item) = claim else { return Ok(false) };
        let body = get_s(&item, "grant").ok_or_else(|| malformed("grant claim", "no grant attribute"))?;
        let claimed: Grant = serde_json::from_str(body).map_err(|e| malformed("grant claim", e.to_string()))?;
        Ok(claimed.same_as(grant) && rejection.is_none())
    }
}
