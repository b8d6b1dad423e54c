//! Test harness: real redis-server and local AWS endpoint, every test
//! isolated by its own Redis key prefix, SQS queue and coupon ids, so tests
//! run in parallel. Requests go through the real handlers as API Gateway
//! events built from `tests/fixtures/`; every function is built with its
//! own `wire()`, as `main.rs` builds it.
//!
//! - [`stack`]: clients for the local services, unique names.
//! - [`harness`]: the grab function and what a test inspects in Redis.
//! - [`events`]: API Gateway and SQS events, decoded responses.
//! - [`issue`]: the issuer and the SQS event source mapping's part.
//! - [`reconcile`]: the reconciler, narrowed to the harness's coupons.
//! - [`wallet`], [`admin`]: those functions on the harness's stores.
//! - [`replica`]: a primary and a replica of the test's own, for failover.
//! - [`stream`]: the user-coupons change stream as Lambda hands it over,
//!   and an event bus of the test's own.

mod admin;
mod events;
mod harness;
mod issue;
mod reconcile;
mod replica;
mod stack;
mod stream;
mod wallet;

pub use admin::admin_send_to;
pub use events::{send, send_all, sqs_event, Event, Resp};
pub use harness::{homed_on, plain_claim, Harness, Options};
pub use replica::{ReplicaSet, Server};
pub use stack::{unique, Stack, HOUR, T0};
pub use stream::{CouponStream, TestBus};

/// The keys matching `pattern`: `KEYS` where the server has it (a
/// multi-node cluster answers it from every master), else a `SCAN` (the
/// Serverless stand-in, like ElastiCache Serverless, has no `KEYS`, and
/// shows one node).
pub async fn keys_matching(conn: &mut coupon_adapters::redis::RedisConnection, pattern: &str) -> Vec<String> {
    if let Ok(keys) = redis::cmd("KEYS").arg(pattern).query_async::<Vec<String>>(conn).await {
        return keys;
    }
    let mut found = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(1000)
            .query_async(conn)
            .await
            .expect("SCAN");
        found.extend(batch);
        if next == 0 {
            return found;
        }
        cursor = next;
    }
}
