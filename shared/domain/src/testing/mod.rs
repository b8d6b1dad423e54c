//! In-memory fakes of the ports, for tests and benchmarks that must run
//! without Redis or AWS: the domain's unit tests, the functions' handler
//! tests and the benchmark's counting wrappers.
//!
//! Behind the `test-support` feature (and always in this crate's own
//! tests), so no production build links them. They model what each port
//! promises, not how Redis or DynamoDB do it; the integration tests check
//! the real adapters against the same promises.

mod center;
mod grab;
mod lottery;
mod notify;
mod reconcile;
mod redemption;
mod remind;
mod shards;
mod wallet;

pub use center::{MemoryLiveCoupons, ScriptedStandings};
pub use grab::{
    AllowAll, CountingQueue, FakeClaims, FakeQueue, FakeRepairs, FakeRisk, MemoryCatalog, ScriptedLedger, Silent,
};
pub use lottery::MemoryEntries;
pub use notify::{MemoryBus, MemoryReminderBus};
pub use reconcile::{FakeRedrive, MemoryFacts};
pub use redemption::{CouponsHook, MemoryRedemptions};
pub use remind::{MemoryDefinitions, MemoryReminders};
pub use shards::{MemoryShards, ShardState, ShardsHook};
pub use wallet::{MemoryOutbox, MemoryWallet};
