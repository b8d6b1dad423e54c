//! The AWS SDK interceptor the benchmark plugs into the real clients: it
//! counts calls per operation. The ports that take the network out of a
//! measurement (a counting queue, no risk checks, silent metrics) are the
//! domain's in-memory fakes (`coupon_domain::testing`).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use aws_sdk_dynamodb::config::ConfigBag;
use aws_smithy_runtime_api::box_error::BoxError;
use aws_smithy_runtime_api::client::interceptors::context::BeforeSerializationInterceptorContextRef;
use aws_smithy_runtime_api::client::interceptors::Intercept;
use aws_smithy_runtime_api::client::orchestrator::Metadata;

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
