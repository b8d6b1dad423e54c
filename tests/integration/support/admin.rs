//! The admin function on the harness's stores, prefix, queue and clock.

use std::sync::Arc;

use coupon_adapters::dynamodb::DynamoFacts;
use coupon_domain::admin::AdminPorts;
use coupon_domain::coupon::CouponDefinition;
use serde_json::Value;

use super::events::{decode, request, Event, Resp};
use super::harness::Harness;

impl Harness {
    /// The admin function as `main.rs` wires it.
    pub fn admin(&self) -> admin::AdminApp {
        self.admin_with(|_| {})
    }

    /// The admin function with one or more of its ports replaced by `edit`
    /// (a wrapper that injects a fault or an interleaving).
    pub fn admin_with(&self, edit: impl FnOnce(&mut AdminPorts)) -> admin::AdminApp {
        let config = admin::Config {
            redis: self.config.redis.clone(),
            tables: self.stack.tables.clone(),
            queue_url: self.queue_url.clone(),
            dlq_url: None,
            max_total_stock: 1_000_000,
            local_mode: true,
            max_body_bytes: 4_096,
            aws: self.config.sqs,
            grace_ms: 30_000,
            send_window_ms: 3_000,
            metrics_namespace: "Test".into(),
        };
        let clients = admin::Clients {
            redis: self.redis.clone(),
            dynamodb: self.stack.ddb.clone(),
            sqs: self.stack.sqs.clone(),
            clock: Arc::new(self.clock.clone()),
            metrics: self.metrics.clone(),
        };
        let facts = Arc::new(DynamoFacts::new(self.tables.clone()));
        let mut ports = admin::ports(&config, clients, facts);
        edit(&mut ports);
        admin::wire_ports(&config, ports)
    }

    /// An admin call signed by an IAM operator (the fixture's principal).
    pub async fn admin_call(&self, method: &str, path: &str, body: Option<Value>) -> Resp {
        self.admin_send(Event::admin(method, path, body).build()).await
    }

    /// An admin call with an idempotency key.
    pub async fn admin_call_keyed(&self, method: &str, path: &str, body: Value, key: &str) -> Resp {
        self.admin_send(
            Event::admin(method, path, Some(body))
                .header("idempotency-key", key)
                .build(),
        )
        .await
    }

    /// Any event through the admin handler.
    pub async fn admin_send(&self, event: Value) -> Resp {
        admin_send_to(&self.admin(), event).await
    }

    /// Creates `def` through the admin API and counts it as this harness's.
    pub async fn admin_create(&self, def: &CouponDefinition) -> Resp {
        self.own.lock().unwrap().insert(def.coupon_id.clone());
        self.admin_call("POST", "/admin/coupons", Some(serde_json::to_value(def).unwrap()))
            .await
    }
}

/// Any event through an admin function built by [`Harness::admin_with`].
pub async fn admin_send_to(app: &admin::AdminApp, event: Value) -> Resp {
    decode(admin::handle(app, request(&event)).await.expect("infallible"))
}
