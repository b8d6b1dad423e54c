//! The reconciler function: runs on a schedule (EventBridge Scheduler), does
//! one reconciliation pass (`coupon_shared::reconcile`) and returns its report
//! as JSON, with the ElastiCache replication group's status when one is
//! configured.
//!
//! Safe to run twice at once and to die half way; see the module docs of
//! `coupon_shared::reconcile`.

#![warn(missing_docs)]

use coupon_shared::adapters::elasticache::{self, Client};
use coupon_shared::reconcile::Reconciler;
use lambda_runtime::{Error, LambdaEvent};
use serde_json::{json, Value};
use tracing::warn;

/// Everything the handler needs, built once per Lambda instance.
pub struct App {
    /// The pass.
    pub reconciler: Reconciler,
    /// The replication group to report on, if configured.
    pub elasticache: Option<(Client, String)>,
}

/// One scheduled run. The event (the schedule's payload) is not read.
pub async fn handle(app: &App, _event: LambdaEvent<Value>) -> Result<Value, Error> {
    let report = app.reconciler.run().await?;
    let mut out = serde_json::to_value(&report)?;
    if let Some((client, group)) = &app.elasticache {
        out["redis"] = match elasticache::describe(client, group).await {
            Ok(g) => json!({"replicationGroup": group, "status": g.status, "clusterMode": g.cluster_mode}),
            Err(e) => {
                warn!(group = %group, error = %e, "replication group status unknown");
                json!({"replicationGroup": group, "status": "unknown", "error": e.to_string()})
            }
        };
    }
    Ok(out)
}
