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
