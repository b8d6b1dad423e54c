//! API Gateway HTTP API and SQS events built from the fixtures, and the
//! responses, decoded.

use aws_lambda_events::event::sqs::SqsEvent;
use grab::GrabApp;
use lambda_http::Body;
use serde_json::{json, Value};

/// A response, decoded.
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub body: Value,
    pub headers: lambda_http::http::HeaderMap,
}

impl Resp {
    pub fn code(&self) -> &str {
        self.body["code"].as_str().unwrap_or("<no code>")
    }
    pub fn grant_id(&self) -> Option<String> {
        self.body["data"]["grantId"].as_str().map(str::to_owned)
    }
}

/// An SQS event as the event source mapping sends it.
pub fn sqs_event(messages: &[aws_sdk_sqs::types::Message]) -> SqsEvent {
    let records: Vec<Value> = messages
        .iter()
        .map(|m| {
            json!({
                "messageId": m.message_id(),
                "receiptHandle": m.receipt_handle(),
                "body": m.body(),
                "attributes": {"ApproximateReceiveCount": "1", "SentTimestamp": "1796040000000"},
                "messageAttributes": {},
                "md5OfBody": m.md5_of_body(),
                "eventSource": "aws:sqs",
                "eventSourceARN": "arn:aws:sqs:us-east-1:123456789012:coupon-grants.fifo",
                "awsRegion": "us-east-1"
            })
        })
        .collect();
    serde_json::from_value(json!({ "Records": records })).expect("an SQS event")
}

/// Sends an event through a handler (for concurrent use with a shared app).
pub async fn send(app: &GrabApp, event: Value) -> Resp {
    decode(grab::handle(app, request(&event)).await.expect("infallible"))
}

/// Every event through the grab handler, `at_once` of them at a time on
/// tasks of their own (as many Lambda instances answer at once); the
/// answers in the order they came.
pub async fn send_all(app: &std::sync::Arc<GrabApp>, events: Vec<Value>, at_once: usize) -> Vec<Resp> {
    use futures::stream::{self, StreamExt};
    stream::iter(events)
        .map(|e| {
            let app = std::sync::Arc::clone(app);
            tokio::spawn(async move { send(&app, e).await })
        })
        .buffer_unordered(at_once)
        .map(|r| r.expect("task"))
        .collect()
        .await
}

/// An API Gateway event as the runtime hands it to a handler.
pub fn request(event: &Value) -> lambda_http::Request {
    lambda_http::request::from_str(&event.to_string()).expect("a valid API Gateway event")
}

/// A handler's response, decoded; no 5xx but BUSY, whatever was sent.
pub fn decode(resp: lambda_http::Response<Body>) -> Resp {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let body = match resp.body() {
        Body::Text(t) => serde_json::from_str(t).expect("JSON body"),
        other => panic!("unexpected body {other:?}"),
    };
    assert!(status < 500 || status == 503, "no 5xx but BUSY: {status} {body}");
    Resp { status, body, headers }
}

/// Builds API Gateway HTTP API events from the fixtures.
pub struct Event(Value);

impl Event {
    /// `tests/fixtures/grab_jwt.json`, for `user` (level 2) grabbing `coupon`,
    /// from no device (the fixture's device claim dropped: a test that
    /// means one says so with [`Self::device`]).
    pub fn grab(coupon: &str, user: &str, request_id: &str) -> Self {
        let mut v: Value = serde_json::from_str(include_str!("../../fixtures/grab_jwt.json")).unwrap();
        v["requestContext"]["authorizer"]["jwt"]["claims"]["sub"] = user.into();
        if let Some(claims) = v["requestContext"]["authorizer"]["jwt"]["claims"].as_object_mut() {
            claims.remove("device_id");
        }
        let mut e = Self(v).path(&format!("/coupons/{coupon}/grab"));
        e.0["pathParameters"]["couponId"] = coupon.into();
        e.body(&json!({ "requestId": request_id }).to_string())
    }

    /// `tests/fixtures/eligibility_jwt.json`, for `user` (level 2) asking
    /// what a press on `coupon` would get now.
    pub fn eligibility(coupon: &str, user: &str) -> Self {
        let mut v: Value = serde_json::from_str(include_str!("../../fixtures/eligibility_jwt.json")).unwrap();
        v["requestContext"]["authorizer"]["jwt"]["claims"]["sub"] = user.into();
        let mut e = Self(v).path(&format!("/coupons/{coupon}/eligibility"));
        e.0["pathParameters"]["couponId"] = coupon.into();
        e
    }

    /// `tests/fixtures/center_jwt.json`, for `user` (level 2) listing the
    /// coupon center (first page, the fixture's `limit=2` dropped).
    pub fn center(user: &str) -> Self {
        let mut v: Value = serde_json::from_str(include_str!("../../fixtures/center_jwt.json")).unwrap();
        v["requestContext"]["authorizer"]["jwt"]["claims"]["sub"] = user.into();
        Self(v).query("")
    }

    /// `tests/fixtures/grab_function_url.json`: no JWT, identity headers.
    pub fn function_url() -> Self {
        Self(serde_json::from_str(include_str!("../../fixtures/grab_function_url.json")).unwrap())
    }

    /// The query string, raw and parsed, as API Gateway sends both (values
    /// here are plain: no percent-encoding).
    pub fn query(mut self, raw: &str) -> Self {
        self.0["rawQueryString"] = raw.into();
        let params: serde_json::Map<String, Value> = raw
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.to_owned(), Value::from(v)))
            .collect();
        self.0["queryStringParameters"] = Value::Object(params);
        self
    }

    pub fn path(mut self, path: &str) -> Self {
        self.0["rawPath"] = path.into();
        self.0["requestContext"]["http"]["path"] = path.into();
        self
    }

    pub fn method(mut self, method: &str) -> Self {
        self.0["requestContext"]["http"]["method"] = method.into();
        self
    }

    pub fn body(mut self, body: &str) -> Self {
        self.0["body"] = body.into();
        self.0["isBase64Encoded"] = false.into();
        self
    }

    pub fn base64_body(mut self, encoded: &str) -> Self {
        self.0["body"] = encoded.into();
        self.0["isBase64Encoded"] = true.into();
        self
    }

    pub fn level(mut self, level: &str) -> Self {
        self.0["requestContext"]["authorizer"]["jwt"]["claims"]["member_level"] = level.into();
        self
    }

    /// The attested device id, in the claim the harness configures
    /// (`device_id`).
    pub fn device(mut self, device: &str) -> Self {
        self.0["requestContext"]["authorizer"]["jwt"]["claims"]["device_id"] = device.into();
        self
    }

    pub fn ip(mut self, ip: &str) -> Self {
        self.0["requestContext"]["http"]["sourceIp"] = ip.into();
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.0["headers"][name] = value.into();
        self
    }

    pub fn without_authorizer(mut self) -> Self {
        if let Some(ctx) = self.0["requestContext"].as_object_mut() {
            ctx.remove("authorizer");
        }
        self
    }

    pub fn build(self) -> Value {
        self.0
    }
}

impl Event {
    /// Wraps an event built elsewhere.
    pub fn from_value(v: Value) -> Self {
        Self(v)
    }

    /// `tests/fixtures/admin_iam.json`: an IAM-signed admin call.
    pub fn admin(method: &str, path: &str, body: Option<Value>) -> Self {
        let mut v: Value = serde_json::from_str(include_str!("../../fixtures/admin_iam.json")).unwrap();
        if let Some(h) = v["headers"].as_object_mut() {
            h.remove("idempotency-key");
        }
        if let Some(ctx) = v.as_object_mut() {
            ctx.remove("pathParameters");
        }
        let e = Self(v).path(path).method(method);
        match body {
            Some(b) => e.body(&b.to_string()),
            None => e.body(""),
        }
    }
}
