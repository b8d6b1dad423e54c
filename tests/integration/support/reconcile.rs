//! The reconciler as deployed, but visiting only this harness's coupons
//! (parallel tests share one endpoint and must not reconcile each other's).

use coupon_domain::barrier::BarrierRecord;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use coupon_adapters::dynamodb::DynamoFacts;
use coupon_domain::coupon::{CouponDefinition, StoredCoupon};
use coupon_domain::error::StoreError;
use coupon_domain::grant::Grant;
use coupon_domain::ids::{CouponId, GrantId};
use coupon_domain::reconcile::ports::{DurableFacts, RejectedGrant};
use coupon_domain::reconcile::{CouponReport, ReconcilePorts, ReconcileSettings, Reconciler};
use coupon_domain::user_coupon::Holdings;

use super::harness::Harness;
use super::stack::HOUR;

impl Harness {
    /// The reconciler's configuration for this harness, re-driving to
    /// `queue_url`.
    pub fn reconciler_config(&self, queue_url: &str) -> reconciler::Config {
        reconciler::Config {
            redis: reconciler::RedisSource::Url(self.config.redis.clone()),
            replication_group: None,
            tables: self.stack.tables.clone(),
            queue_url: queue_url.to_owned(),
            dlq_url: None,
            aws: self.config.sqs,
            grace_ms: 30_000,
            retention_hours: 7 * 24,
            backlog_ms: 900_000,
            // No wait for sends decided before a loss or restart (the
            // tests' sends have landed); `reconcile_windowed` has one.
            send_window_ms: 0,
            repair_follow_ms: 0,
            metrics_namespace: "Test".into(),
            event_bus: None,
            reminder_lead_ms: coupon_domain::remind::DEFAULT_LEAD_MS,
        }
    }

    /// The reconciler function's clients on this harness's stores and clock.
    pub fn reconciler_clients(&self) -> reconciler::Clients {
        reconciler::Clients {
            redis: self.redis.clone(),
            dynamodb: self.stack.ddb.clone(),
            sqs: self.stack.sqs.clone(),
            elasticache: self.stack.elasticache.clone(),
            events: coupon_adapters::eventbridge::Client::new(&self.stack.sdk),
            clock: Arc::new(self.clock.clone()),
            metrics: self.metrics.clone(),
        }
    }

    /// The reconciler function as deployed, its reminders going to `bus`.
    pub fn reconciler_app(&self, bus: &str) -> reconciler::App {
        let mut config = self.reconciler_config(&self.queue_url);
        config.event_bus = Some(bus.to_owned());
        reconciler::wire(&config, self.reconciler_clients())
    }

    /// The reconciler as deployed, re-driving to `queue_url`.
    pub fn reconciler_to(&self, queue_url: &str) -> Reconciler {
        self.reconciler_with(queue_url, 0)
    }

    /// One pass over this harness's coupons by a reconciler that waits
    /// `send_window_ms` for sends decided before a loss or a restart (as
    /// deployed); the report of `def`'s coupon.
    /// (With the issuer consuming the queue meanwhile, as [`Self::reconcile`].)
    pub async fn reconcile_windowed(&self, def: &CouponDefinition, send_window_ms: i64) -> CouponReport {
        let reconciler = self.reconciler_with(&self.queue_url, send_window_ms);
        let mut report = self.pass(&reconciler, def).await;
        for _ in 0..2 {
            if report.shards_waiting == 0 || self.pump().await == 0 {
                break;
            }
            report = self.pass(&reconciler, def).await;
        }
        report
    }

    async fn pass(&self, reconciler: &Reconciler, def: &CouponDefinition) -> CouponReport {
        let report = reconciler.run().await.expect("reconcile");
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        coupon_domain::reconcile::find(&report, &def.coupon_id)
            .expect("the coupon was visited")
            .clone()
    }

    fn reconciler_with(&self, queue_url: &str, send_window_ms: i64) -> Reconciler {
        self.reconciler_over(queue_url, send_window_ms, |ports| ports)
    }

    /// A reconciler over this harness's services whose ports `adjust` may
    /// change (a test's fault in one of them).
    pub fn reconciler_over(
        &self,
        queue_url: &str,
        send_window_ms: i64,
        adjust: impl FnOnce(ReconcilePorts) -> ReconcilePorts,
    ) -> Reconciler {
        let mut config = self.reconciler_config(queue_url);
        config.send_window_ms = send_window_ms;
        let clients = self.reconciler_clients();
        let facts = Arc::new(OwnCoupons {
            inner: DynamoFacts::new(reconciler::tables(&config, &clients)),
            own: self.own.clone(),
            held: None,
        });
        let settings = ReconcileSettings {
            retention_ms: 7 * 24 * HOUR,
            ..reconciler::settings(&config)
        };
        Reconciler::new(adjust(reconciler::ports(&config, &clients, facts)), settings)
    }

    /// A reconciler whose pass is held up at its first read (a store that
    /// answers slowly, a pass over many coupons) until `release` is
    /// notified, and then fails.
    pub fn reconciler_held_then_failing(&self, release: Arc<tokio::sync::Notify>) -> Reconciler {
        let config = self.reconciler_config(&self.queue_url);
        let clients = self.reconciler_clients();
        let facts = Arc::new(OwnCoupons {
            inner: DynamoFacts::new(reconciler::tables(&config, &clients)),
            own: self.own.clone(),
            held: Some(release),
        });
        Reconciler::new(
            reconciler::ports(&config, &clients, facts),
            reconciler::settings(&config),
        )
    }

    /// Reconciles this harness's coupons as deployed, with the issuer
    /// consuming the grant queue meanwhile: a pass, and while `def`'s
    /// coupon waits (the send window after a loss or a restart), the
    /// issuer takes the queue and another pass follows.
    /// The report of `def`'s coupon from the last pass.
    pub async fn reconcile(&self, def: &CouponDefinition) -> CouponReport {
        self.reconcile_windowed(def, 0).await
    }

    /// One reconciliation pass over this harness's coupons, the queue left
    /// as it is; the report of `def`'s coupon.
    pub async fn reconcile_once(&self, def: &CouponDefinition) -> CouponReport {
        self.pass(&self.reconciler_to(&self.queue_url), def).await
    }
}

/// The durable facts of the real ledger, limited to one harness's coupons;
/// with `held`, a pass that waits for it at its first read, then fails.
struct OwnCoupons {
    inner: DynamoFacts,
    own: Arc<Mutex<HashSet<CouponId>>>,
    held: Option<Arc<tokio::sync::Notify>>,
}

#[async_trait::async_trait]
impl DurableFacts for OwnCoupons {
    async fn definitions(&self) -> Result<Vec<CouponDefinition>, StoreError> {
        if let Some(release) = &self.held {
            release.notified().await;
            return Err(StoreError::Conflict("the test's pass was held up, then failed".into()));
        }
        let own = self.own.lock().unwrap().clone();
        // Read through the real scan, then keep this test's coupons.
        Ok(self
            .inner
            .definitions()
            .await?
            .into_iter()
            .filter(|d| own.contains(&d.coupon_id))
            .collect())
    }
    async fn stored(&self, c: &CouponId) -> Result<Option<StoredCoupon>, StoreError> {
        self.inner.stored(c).await
    }
    async fn issued(&self, c: &CouponId) -> Result<u64, StoreError> {
        self.inner.issued(c).await
    }
    async fn rejections(&self, c: &CouponId) -> Result<Vec<RejectedGrant>, StoreError> {
        self.inner.rejections(c).await
    }
    async fn issued_grants(&self, g: &[Grant]) -> Result<HashSet<GrantId>, StoreError> {
        self.inner.issued_grants(g).await
    }
    async fn holdings(&self, c: &CouponId) -> Result<Holdings, StoreError> {
        self.inner.holdings(c).await
    }
    async fn claims(&self, c: &CouponId) -> Result<Vec<Grant>, StoreError> {
        self.inner.claims(c).await
    }
    async fn record_rebuild(&self, c: &CouponId, now: i64, n: u64) -> Result<(), StoreError> {
        self.inner.record_rebuild(c, now, n).await
    }
    async fn was_rebuilt(&self, c: &CouponId) -> Result<bool, StoreError> {
        self.inner.was_rebuilt(c).await
    }
    async fn raise_high_water(&self, c: &CouponId, shard: u32, seq: u64) -> Result<(), StoreError> {
        self.inner.raise_high_water(c, shard, seq).await
    }
    async fn high_water(&self, c: &CouponId) -> Result<std::collections::HashMap<u32, u64>, StoreError> {
        self.inner.high_water(c).await
    }
    async fn barrier(&self, c: &CouponId) -> Result<Option<BarrierRecord>, StoreError> {
        self.inner.barrier(c).await
    }
    async fn open_barrier(&self, c: &CouponId, r: &BarrierRecord, replacing: Option<&str>) -> Result<bool, StoreError> {
        self.inner.open_barrier(c, r, replacing).await
    }
    async fn close_barrier(&self, c: &CouponId, id: &str) -> Result<bool, StoreError> {
        self.inner.close_barrier(c, id).await
    }
}
