//! The DynamoDB adapters: durable coupon definitions, the capped counters, the
//! users' coupons, rejections, and the facts the reconciler reads.
//!
//! Three tables, each keyed `pk` (S) / `sk` (S), every key spelled once in
//! `keys.rs`:
//!
//! | table | `pk` | `sk` | what |
//! | --- | --- | --- | --- |
//! | coupons | `COUPON#<id>` | `DEF` | the definition (JSON) and fingerprint; a lottery's `seed`, `frozen_at_ms` (the draw froze its entries), `drawn_at_ms`, `draw_entries`, `draw_winners`, `draw_threshold` |
//! | coupons | `ENTRIES#<id>#<shard>` | `USER#<user>` | a lottery registration: `user_id`, `registered_at_ms` (sharded like the stock) |
//! | coupons | `COUPON#<id>` | `COUNTER#<k>` | capped counter `k`: `cap`, `issued` |
//! | coupons | `COUPON#<id>` | `GRANT#<grantId>` | a rejected grant and why |
//! | coupons | `COUPON#<id>` | `REBUILD#<ms>` | Redis was rebuilt from here |
//! | coupons | `COUPON#<id>` | `SEQ#<shard>` | the shard's high-water mark: the highest grant sequence the issuer has seen |
//! | coupons | `COUPON#<id>` | `AUDIT#<ms>#<operation>` | an admin change: who, what, when |
//! | coupons | `COUPON#<id>` | `OP#<key>` | an idempotency key an admin change claimed |
//! | coupons | `COUPON#<id>` | `REPORT` | the latest on-demand reconciliation report |
//! | coupons | `COUPON#<id>` | `BARRIER` | the reconciler's wait for the coupon's grants on their way after a loss or a restart (an episode): `barrier_id`, `opened_ms`, `send_after_ms` (the send window's end), `shards` |
//! | coupons | `BLACKLIST#<user>` | `ENTRY` / `AUDIT#<ms>#<operation>` | the durable blacklist and its log |
//! | coupons | `COUPON#<id>` | `REMIND#<user>` | a user's reminder, as its sender reads it: `created_ms`, `sent_for_ms` (the opening it was last sent for) |
//! | coupons | `REMINDERS#<user>` | `COUPON#<id>` | the same reminder, as its user lists it (written and removed with it in one transaction) |
//! | claims | `CLAIMS#<id>#<lane>` | `<grantId>` | a grant's claim, put before the grant is sent: `grant` (the grant, as the queue carries it), `expires_at` (kept about 400 days) |
//! | user coupons | `USER#<user>` | `COUPON#<id>#<ordinal>` | a coupon in a wallet: `UNUSED`, `USED` (`order_id`, `used_at_ms`) or `REVOKED` (who, when); `returned_by` lists orders that gave it back, `returned_at_ms` the last return; its change stream feeds the notifier |
//!
//! A coupon's data shares one partition; a user's wallet is one query. The
//! user-coupons index `by-coupon` (`coupon_id`, `pk`) lists a coupon's
//! holders, for rebuilding per-user counts after Redis data loss. The
//! coupons index `live` (`sk`, `grab_end_ms`) holds only definitions (no
//! other item has a `grab_end_ms`): the coupon center's one query for the
//! coupons whose window is not over.

//!
//! One adapter per port, all over one shared [`Tables`]:
//! [`DynamoCouponRepository`] (definitions), [`DynamoIssueLedger`] (the
//! issuer), [`DynamoWallet`], [`DynamoFacts`] (the reconciler),
//! [`DynamoAdminStore`], [`DynamoBlacklist`] and [`DynamoRevocations`]
//! (the admin API); [`DynamoRedemptions`] (orders spending coupons);
//! [`DynamoCatalog`] (the grab's one read); [`DynamoClaims`] (the grants
//! on their way: the grab's and the re-drive's claims, the rebuild's read); [`DynamoEntries`] (a
//! lottery's registrations and draw); [`DynamoLiveCoupons`] (the
//! coupon center's listing); [`DynamoReminders`] (reminders, for the wallet
//! and the reconciler's sender); [`stream_record`] reads the
//! user-coupons change stream for the notifier.

pub use aws_sdk_dynamodb::Client;

mod admin;
mod blacklist;
mod claims;
mod definitions;
mod entries;
mod facts;
mod issue;
mod items;
mod keys;
mod live;
mod redeem;
mod reminders;
mod revoke;
mod stream;
mod wallet;

pub use admin::DynamoAdminStore;
pub use blacklist::DynamoBlacklist;
pub use claims::DynamoClaims;
pub use definitions::{DynamoCatalog, DynamoCouponRepository};
pub use entries::DynamoEntries;
pub use facts::DynamoFacts;
pub use issue::DynamoIssueLedger;
pub use items::{Tables, BY_COUPON_INDEX, LIVE_INDEX};
pub use keys::{counter_sk, coupon_pk, user_coupon_sk, user_pk};
pub use live::DynamoLiveCoupons;
pub use redeem::DynamoRedemptions;
pub use reminders::DynamoReminders;
pub use revoke::DynamoRevocations;
pub use stream::stream_record;
pub use wallet::DynamoWallet;
