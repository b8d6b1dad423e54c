//! The domain's ports implemented on real services. SDK and `redis` types
//! stay inside this crate: each adapter maps them to domain types and
//! [`StoreError`](coupon_domain::error::StoreError) /
//! [`PublishError`](coupon_domain::error::PublishError), keeping the source.
//!
//! # Layout
//!
//! - [`config`]: how to reach Redis and how AWS SDK calls behave.
//! - [`redis`]: one adapter per port over one shared connection (always
//!   built: every function but the issuer talks to Redis).
//! - [`sqs`] (`sqs` feature): the grant publisher and the re-drive.
//! - [`dynamodb`] (`dynamodb` feature): one adapter per port over shared
//!   tables.
//! - [`eventbridge`] (`eventbridge` feature): the notifier's event bus.
//! - [`elasticache`], [`secrets`] (features of the same names): finding the
//!   cluster and its auth token at cold start.
//! - [`aws`]: the shared SDK configuration.
//! - [`assemble`] (`sqs` and `dynamodb`): port sets shared by functions.
//!
//! Each function enables only the features it calls, so it links only the
//! SDK clients it needs.

#![warn(missing_docs)]

pub mod config;
pub mod redis;

#[cfg(feature = "sqs")]
pub mod sqs;

#[cfg(feature = "dynamodb")]
pub mod dynamodb;

#[cfg(feature = "elasticache")]
pub mod elasticache;

#[cfg(feature = "eventbridge")]
pub mod eventbridge;

#[cfg(feature = "secrets")]
pub mod secrets;

#[cfg(any(
    feature = "sqs",
    feature = "dynamodb",
    feature = "elasticache",
    feature = "secrets",
    feature = "eventbridge"
))]
pub mod aws;

#[cfg(all(feature = "sqs", feature = "dynamodb"))]
pub mod assemble;
