//! The coupon-grab domain: what a flash sale is, the use cases that run it,
//! and the ports they need from the outside world.
//!
//! A flash sale is decided in Redis and made durable in DynamoDB, but this
//! crate knows neither: it has no Redis, AWS or Lambda dependency (the
//! crate boundary enforces it; `cargo tree -p coupon-domain` shows none).
//! Each use case declares its ports (traits) beside it; `coupon-adapters`
//! implements them on real services, [`testing`] in memory.
//!
//! # Layout
//!
//! - [`ids`], [`coupon`], [`grant`], [`outcome`]: identifiers that parse, a
//!   coupon's definition and its shard split, grants, grab outcomes.
//! - [`grab`]: one press of the button, decided in one atomic call on the
//!   user's home shard, borrowing from other shards before SOLD_OUT.
//! - [`issuance`]: grants become coupons, exactly once; [`barrier`]: the
//!   lanes a coupon's grants (and their claims) travel in, and the durable
//!   record of the reconciler's wait after a fault.
//! - [`reconcile`]: re-drive, repair and report, so Redis and DynamoDB
//!   agree; its arithmetic is pure and tested alone.
//! - [`admin`]: operating a campaign, every change audited; [`catalog`]:
//!   definitions and creating a coupon; [`blacklist`]: its two stores.
//! - [`center`]: the coupon center, what an app lists before a press;
//! - [`wallet`]: what a user holds and where their grants are;
//!   [`redemption`]: orders spending and giving back coupons;
//!   [`notify`]: each coupon's transitions as events for the bus;
//!   [`remind`]: reminders before a sale or a wave opens, and their sender.
//! - [`error`]: what ports return; [`config`]: the environment reader every
//!   function's `Config` is built with; [`clock`], [`metrics`]: injected
//!   time and CloudWatch embedded-metric-format lines.
//! - [`testing`] (feature `test-support`): in-memory fakes of the ports.
//!
//! The dependencies point one way: functions -> edge, adapters -> domain.

#![warn(missing_docs)]

pub mod admin;
pub mod audit;
pub mod barrier;
pub mod blacklist;
pub mod catalog;
pub mod center;
pub mod clock;
pub mod config;
pub mod coupon;
pub mod error;
pub mod grab;
pub mod grant;
pub mod hash;
pub mod ids;
pub mod issuance;
pub mod live;
pub mod lottery;
pub mod metrics;
pub mod notify;
pub mod outcome;
pub mod reconcile;
pub mod redemption;
pub mod remind;
#[cfg(any(test, feature = "test-support"))]
pub mod testing;
pub mod user_coupon;
pub mod wallet;
