//! The library behind the coupon-grab functions: domain, ports, adapters,
//! configuration and telemetry.
//!
//! A flash sale is decided in Redis and made durable in DynamoDB. The grab
//! function calls [`service::GrabService`], which decides each press in one
//! atomic Lua script on the user's home stock shard and queues winners on
//! SQS; the issuer (a later function) turns grants into coupons with
//! conditional writes. Nothing in the domain knows Lambda events or AWS SDK
//! types: those live at the edges (`functions/`) and in [`adapters`].
//!
//! # Layout
//!
//! - [`ids`], [`coupon`], [`grant`], [`outcome`]: the domain: identifiers
//!   that parse, a coupon's definition and its shard split, grants, outcomes.
//! - [`error`]: the one table of client-visible codes (status, English and
//!   Chinese messages) and the adapters' errors.
//! - [`ports`]: the traits the domain needs (stock ledger, risk guard, grant
//!   publisher, coupon repository, preheater).
//! - [`service`]: the grab use case; [`preheat`]: creating a coupon;
//!   [`issuance`]: grants into coupons; [`reconcile`]: re-drive, repair,
//!   report.
//! - [`admin`]: operating a campaign (create, status, stock, rate,
//!   blacklist, on-demand reconciliation), every change audited.
//! - [`soldout`]: the per-instance sold-out memory.
//! - [`keys`]: the Redis key layout and its hash tags.
//! - [`adapters`]: Redis (always), SQS (`sqs` feature), DynamoDB
//!   (`dynamodb` feature); each function enables only what it calls.
//! - [`config`], [`clock`], [`metrics`]: typed settings read at cold start,
//!   injected time, CloudWatch embedded-metric-format lines.
//!
//! The Lua scripts are in the repository's `lua/` folder and compiled in.

#![warn(missing_docs)]

pub mod adapters;
pub mod admin;
pub mod clock;
pub mod config;
pub mod coupon;
pub mod error;
pub mod grant;
pub mod ids;
pub mod issuance;
pub mod keys;
pub mod metrics;
pub mod outcome;
pub mod ports;
pub mod preheat;
pub mod reconcile;
pub mod service;
pub mod soldout;
