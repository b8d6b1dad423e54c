//! Port sets that more than one function needs, assembled in one place:
//! the reconciler runs on its schedule and, for one coupon on demand, in
//! the admin API, over the same adapters.

use std::sync::Arc;

use coupon_domain::clock::Clock;
use coupon_domain::metrics::Metrics;
use coupon_domain::reconcile::ports::DurableFacts;
use coupon_domain::reconcile::ReconcilePorts;

use crate::dynamodb::{DynamoBlacklist, DynamoClaims, DynamoEntries, Tables};
use crate::redis::{Redis, RedisBlacklistFlags, RedisLedger, RedisLive, RedisRepair};
use crate::sqs::SqsRedrive;

/// The reconciler's ports over one Redis, the tables and the queue.
/// `facts` is passed in so tests can narrow it to their own coupons.
pub fn reconcile_ports(
    redis: &Redis,
    tables: &Tables,
    redrive: SqsRedrive,
    facts: Arc<dyn DurableFacts>,
    clock: Arc<dyn Clock>,
    metrics: Arc<dyn Metrics>,
) -> ReconcilePorts {
    ReconcilePorts {
        facts,
        repair: Arc::new(RedisRepair::new(redis.clone())),
        ledger: Arc::new(RedisLedger::new(redis.clone())),
        redrive: Arc::new(redrive),
        claims: Arc::new(DynamoClaims::new(tables.clone()).guarding_ordinals(redis.loses_acknowledged_writes())),
        blacklist: Arc::new(DynamoBlacklist::new(tables.clone())),
        flags: Arc::new(RedisBlacklistFlags::new(redis.clone())),
        live: Arc::new(RedisLive::new(redis.clone())),
        entries: Arc::new(DynamoEntries::new(tables.clone())),
        clock,
        metrics,
    }
}
