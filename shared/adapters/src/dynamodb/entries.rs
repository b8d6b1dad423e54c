//! A lottery's entries and draw in the coupons table ([`Entries`]):
//! `ENTRIES#<coupon>#<shard>` / `USER#<user>` per registration (sharded
//! like the stock, so a registration storm spreads over as many
//! partitions as the coupon has shards), `ENTRIES#<coupon>#<shard>` /
//! `#FROZEN` once the draw has frozen that shard's entries (each
//! registration's transaction checks its own shard's, so no one item is
//! hot), and on the definition's item (`COUPON#<coupon>` / `DEF`) the
//! seed, the instant the draw froze the entries and the result.

use async_trait::async_trait;
use aws_sdk_dynamodb::error::SdkError;
use aws_sdk_dynamodb::operation::transact_write_items::TransactWriteItemsError;
use aws_sdk_dynamodb::operation::update_item::UpdateItemError;
use aws_sdk_dynamodb::types::{ConditionCheck, Put, ReturnValue, TransactWriteItem};
use coupon_domain::error::StoreError;
use coupon_domain::ids::{CouponId, UserId};
use coupon_domain::lottery::ports::{Drawn, Entries, Lottery, Registered};
use coupon_domain::lottery::{Rank, Seed};

use super::items::{get_n, get_s, malformed, n, s, unavailable, Item, Tables};
use super::keys::{self, coupon_pk, entries_pk};

/// [`Entries`] on DynamoDB.
#[derive(Debug, Clone)]
pub struct DynamoEntries {
    tables: Tables,
}

impl DynamoEntries {
    /// Entries and draws in the coupons table.
    pub fn new(tables: Tables) -> Self {
        Self { tables }
    }

    /// The same, for a function that knows only the coupons table (the
    /// grab): entries and draws touch no other.
    pub fn in_coupons_table(client: aws_sdk_dynamodb::Client, coupons_table: impl Into<String>) -> Self {
        let names = crate::config::TableNames {
            coupons: coupons_table.into(),
            user_coupons: String::new(),
            claims: String::new(),
        };
        Self::new(Tables::new(client, &names))
    }
}

const SEED: &str = "seed";
const FROZEN: &str = "frozen_at_ms";
const DRAWN: &str = "drawn_at_ms";
/// The sort key of a shard's freeze marker (sorts before every `USER#`).
const FROZEN_SK: &str = "#FROZEN";

fn user_sk(user: &UserId) -> String {
    format!("USER#{user}")
}

/// The draw as the definition's item holds it.
fn lottery(item: &Item) -> Result<Lottery, StoreError> {
    let seed = get_s(item, SEED)
        .and_then(Seed::from_hex)
        .ok_or_else(|| malformed("lottery", "no seed on a lottery's definition"))?;
    let drawn = get_n::<i64>(item, DRAWN).map(|at_ms| Drawn {
        at_ms,
        entries: get_n(item, "draw_entries").unwrap_or(0),
        winners: get_n(item, "draw_winners").unwrap_or(0),
        places: get_n(item, "draw_places").unwrap_or(0),
        threshold: get_s(item, "draw_threshold").and_then(Rank::from_hex),
    });
    Ok(Lottery {
        seed,
        frozen_at_ms: get_n(item, FROZEN),
        drawn,
    })
}

#[async_trait]
impl Entries for DynamoEntries {
    async fn register(
        &self,
        coupon: &CouponId,
        shard: u32,
        user: &UserId,
        at_ms: i64,
    ) -> Result<Registered, StoreError> {
        let entry = Put::builder()
            .table_name(&self.tables.coupons)
            .item("pk", s(entries_pk(coupon, shard)))
            .item("sk", s(user_sk(user)))
            .item("user_id", s(user.as_str()))
            .item("registered_at_ms", n(at_ms))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(unavailable)?;
        // In one transaction with the draw's freeze of this shard: an entry
        // is either in the list the draw reads, or refused.
        let open = ConditionCheck::builder()
            .table_name(&self.tables.coupons)
            .key("pk", s(entries_pk(coupon, shard)))
            .key("sk", s(FROZEN_SK))
            .condition_expression("attribute_not_exists(pk)")
            .build()
            .map_err(unavailable)?;
        let result = self
            .tables
            .client
            .transact_write_items()
            .transact_items(TransactWriteItem::builder().put(entry).build())
            .transact_items(TransactWriteItem::builder().condition_check(open).build())
            .send()
            .await;
        let reasons = match result {
            Ok(_) => return Ok(Registered::New),
            Err(SdkError::ServiceError(e)) => match e.err() {
                TransactWriteItemsError::TransactionCanceledException(c) => c
                    .cancellation_reasons()
                    .iter()
                    .map(|r| r.code().unwrap_or("None").to_owned())
                    .collect::<Vec<_>>(),
                _ => return Err(unavailable(SdkError::ServiceError(e))),
            },
            Err(e) => return Err(unavailable(e)),
        };
        // Which condition failed: the entry's (a repeat, whether or not the
        // draw froze since), or the freeze's. Anything else (a transaction
        // conflict, throttling) decided nothing: BUSY, and the retry
        // decides.
        match reasons.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
            ["ConditionalCheckFailed", ..] => match self.registered(coupon, shard, user).await? {
                Some(at_ms) => Ok(Registered::Already { at_ms }),
                None => Err(StoreError::Unavailable(
                    "an entry's condition failed and no entry is there".into(),
                )),
            },
            [_, "ConditionalCheckFailed"] => Ok(Registered::Closed),
            other => Err(StoreError::Unavailable(
                format!("registration transaction cancelled: {other:?}").into(),
            )),
        }
    }

    async fn registered(&self, coupon: &CouponId, shard: u32, user: &UserId) -> Result<Option<i64>, StoreError> {
        let item = self.tables.get(entries_pk(coupon, shard), &user_sk(user)).await?;
        Ok(item.and_then(|i| get_n(&i, "registered_at_ms")))
    }

    async fn entries(&self, coupon: &CouponId, shard: u32) -> Result<Vec<UserId>, StoreError> {
        let items = self
            .tables
            .query_all(
                &self.tables.coupons,
                None,
                "pk = :pk",
                Item::from([(":pk".to_owned(), s(entries_pk(coupon, shard)))]),
            )
            .await?;
        items
            .iter()
            .filter(|i| get_s(i, "sk") != Some(FROZEN_SK))
            .map(|i| {
                get_s(i, "user_id")
                    .and_then(|u| UserId::parse(u).ok())
                    .ok_or_else(|| malformed("lottery entry", "no user id"))
            })
            .collect()
    }

    async fn lottery(&self, coupon: &CouponId) -> Result<Option<Lottery>, StoreError> {
        match self.tables.get(coupon_pk(coupon), keys::DEF).await? {
            Some(item) if item.contains_key(SEED) => lottery(&item).map(Some),
            _ => Ok(None),
        }
    }

    async fn freeze(&self, coupon: &CouponId, shards: u32, now_ms: i64) -> Result<Lottery, StoreError> {
        // Each shard's marker first (a registration racing one is refused,
        // or its transaction committed before and the draw's read sees it),
        // then the instant, on the definition.
        for shard in 0..shards {
            self.tables
                .client
                .put_item()
                .table_name(&self.tables.coupons)
                .item("pk", s(entries_pk(coupon, shard)))
                .item("sk", s(FROZEN_SK))
                .item("frozen_at_ms", n(now_ms))
                .send()
                .await
                .map_err(unavailable)?;
        }
        let out = self
            .tables
            .client
            .update_item()
            .table_name(&self.tables.coupons)
            .key("pk", s(coupon_pk(coupon)))
            .key("sk", s(keys::DEF))
            .update_expression("SET #f = if_not_exists(#f, :now)")
            .condition_expression("attribute_exists(#s)")
            .expression_attribute_names("#f", FROZEN)
            .expression_attribute_names("#s", SEED)
            .expression_attribute_values(":now", n(now_ms))
            .return_values(ReturnValue::AllNew)
            .send()
            .await
            .map_err(unavailable)?;
        lottery(&out.attributes.unwrap_or_default())
    }

    async fn record_draw(&self, coupon: &CouponId, drawn: &Drawn) -> Result<(), StoreError> {
        let mut update = self
            .tables
            .client
            .update_item()
            .table_name(&self.tables.coupons)
            .key("pk", s(coupon_pk(coupon)))
            .key("sk", s(keys::DEF))
            .update_expression(match drawn.threshold {
                Some(_) => "SET #d = :at, draw_entries = :e, draw_winners = :w, draw_places = :p, draw_threshold = :t",
                None => "SET #d = :at, draw_entries = :e, draw_winners = :w, draw_places = :p",
            })
            .condition_expression("attribute_not_exists(#d)")
            .expression_attribute_names("#d", DRAWN)
            .expression_attribute_values(":at", n(drawn.at_ms))
            .expression_attribute_values(":e", n(drawn.entries))
            .expression_attribute_values(":w", n(drawn.winners))
            .expression_attribute_values(":p", n(drawn.places));
        if let Some(t) = drawn.threshold {
            update = update.expression_attribute_values(":t", s(t.to_hex()));
        }
        match update.send().await {
            Ok(_) => Ok(()),
            // Recorded by an earlier run of the same draw: the same result.
            Err(SdkError::ServiceError(e))
                if matches!(e.err(), UpdateItemError::ConditionalCheckFailedException(_)) =>
            {
                Ok(())
            }
            Err(e) => Err(unavailable(e)),
        }
    }
}
