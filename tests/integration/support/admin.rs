//! The admin function on the harness's stores, prefix, queue and clock.

use std::sync::Arc;

use coupon_domain::coupon::CouponDefinition;
use lambda_http::Body;
use serde_json::Value;

use super::events::{Event, Resp};
use super::harness::Harness;

impl Harness {
    pub fn admin(&self) -> admin::AdminApp {
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
            metrics_namespace: "Test".into(),
        };
        admin::wire(
            &config,
            admin::Clients {
                redis: self.redis.clone(),
                dynamodb: self.stack.ddb.clone(),
                sqs: self.stack.sqs.clone(),
                clock: Arc::new(self.clock.clone()),
                metrics: self.metrics.clone(),
            },
        )
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
        let req = lambda_http::request::from_str(&event.to_string()).expect("a valid API Gateway event");
        let resp = admin::handle(&self.admin(), req).await.expect("infallible");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = match resp.body() {
            Body::Text(t) => serde_json::from_str(t).expect("JSON body"),
            other => panic!("unexpected body {other:?}"),
        };
        assert!(status < 500 || status == 503, "no 5xx but BUSY: {status} {body}");
        Resp { status, body, headers }
    }

    /// Creates `def` through the admin API and counts it as this harness's.
    pub async fn admin_create(&self, def: &CouponDefinition) -> Resp {
        self.own.lock().unwrap().insert(def.coupon_id.clone());
        self.admin_call("POST", "/admin/coupons", Some(serde_json::to_value(def).unwrap()))
            .await
    }
}
