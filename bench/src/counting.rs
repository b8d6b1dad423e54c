//! Counters the benchmark plugs into the real code: an AWS SDK interceptor
//! that counts calls per operation, and port implementations that take the
//! network out of a measurement when that network is not what is measured.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use aws_sdk_dynamodb::config::ConfigBag;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;
use coupon_shared::error::{PublishError, StoreError};
use coupon_shared::grant::Grant;
use coupon_shared::ids::{ClientIp, UserId};
use coupon_shared::metrics::Metrics;
use coupon_shared::ports::{GrantPublisher, RiskDecision, RiskGuard, RiskHold};

/// Counts SDK operations (executions, not retry attempts: the hook runs
/// once per execution) by
/// `service.operation`.
#[derive(Debug, Clone, Default)]
pub struct CallCounter {
    calls: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl CallCounter {
    /// Calls so far, by operation.
    pub fn snapshot(&self) -> BTreeMap<String, u64> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Forgets everything counted.
    pub fn reset(&self) {
        if let Ok(mut c) = self.calls.lock() {
            c.clear();
        }
    }
}

impl Intercept for CallCounter {
    fn name(&self) -> &'static str {
        "CallCounter"
    }

    fn read_before_serialization(
        &self,
        _context: &BeforeSerializationInterceptorContextRef<'_>,
        _components: &aws_sdk_dynamodb::config::RuntimeComponents,
        cfg: &mut ConfigBag,
    ) -> Result<(), BoxError> {
        let name = cfg
            .load::<Metadata>()
            .map(|m| format!("{}.{}", m.service(), m.name()))
            .unwrap_or_else(|| "unknown".into());
        if let Ok(mut c) = self.calls.lock() {
            *c.entry(name).or_default() += 1;
        }
        Ok(())
    }
}

/// Metrics that go nowhere (EMF lines on stdout would measure the terminal).
pub struct Quiet;

impl Metrics for Quiet {
    fn count(&self, _: &'static str, _: Option<(&'static str, &str)>, _: u64) {}
}

/// Allows everything without a Redis call: isolates the grab script when
/// comparing with redis-benchmark running that one script.
pub struct NoRisk;

#[async_trait]
impl RiskGuard for NoRisk {
    async fn reserve(&self, user: &UserId, ip: Option<ClientIp>, _now_ms: i64) -> Result<RiskDecision, StoreError> {
        Ok(RiskDecision::Allowed(RiskHold {
            user: user.clone(),
            ip,
            day: 0,
            user_reserved: false,
            ip_reserved: false,
        }))
    }

    async fn release(&self, _hold: &RiskHold) -> Result<(), StoreError> {
        Ok(())
    }
}

/// Takes grants without a network call: SQS is counted in its own scenario,
/// not inside a Redis throughput figure.
#[derive(Default)]
pub struct CountingPublisher {
    /// Grants published.
    pub published: AtomicU64,
}

#[async_trait]
impl GrantPublisher for CountingPublisher {
    async fn publish(&self, _grant: &Grant) -> Result<(), PublishError> {
        self.published.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
