//! The Redis adapters: one per port, all over one shared [`Redis`]
//! connection per function.
//!
//! - [`conn`]: the connection (standalone or cluster) and [`Redis`].
//! - [`keys`]: the key layout and its hash tags.
//! - [`scripts`]: the Lua scripts.
//! - [`records`]: the records they store under a request id (`W|`, `B|`, `L|`).
//! - [`ledger`]: the grab's [`StockLedger`](coupon_domain::grab::ports::StockLedger).
//! - [`standing`]: the coupon center's [`Standings`](coupon_domain::center::Standings).
//! - [`risk`]: the grab's [`RiskGuard`](coupon_domain::grab::ports::RiskGuard).
//! - [`preheat`]: creating a coupon's shards.
//! - [`repair`]: what the reconciler reads and repairs.
//! - [`outbox`]: the wallet's pending-grant lookup.
//! - [`live`]: operators' changes applied to every shard.
//! - [`blacklist`]: the blacklist flags.

pub mod blacklist;
pub mod conn;
pub mod keys;
pub mod ledger;
pub mod live;
pub mod outbox;
pub mod preheat;
pub mod records;
pub mod repair;
pub mod risk;
pub mod scripts;
pub mod standing;

pub use blacklist::RedisBlacklistFlags;
pub use conn::{Redis, RedisConnection, StartError};
pub use keys::KeySpace;
pub use ledger::RedisLedger;
pub use live::RedisLive;
pub use outbox::RedisOutbox;
pub use preheat::RedisPreheater;
pub use repair::RedisRepair;
pub use risk::RedisRisk;
pub use standing::RedisStandings;
