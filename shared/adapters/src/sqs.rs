//! The SQS adapter: hands winners' grants to the issuer's queue.
//!
//! The grant queue is FIFO: each grant travels in its coupon's lane
//! (`coupon_domain::barrier::group_of`, a message group), deduplicated by
//! its grant id for SQS's five minutes (a re-drive of a grant whose first
//! send did land is dropped by SQS, and absorbed by the issuer after).

use async_trait::async_trait;
pub use aws_sdk_sqs::Client;

use coupon_domain::barrier::group_of;
use coupon_domain::error::PublishError;
use coupon_domain::grab::ports::GrantPublisher;
use coupon_domain::grant::Grant;

/// Sends each grant as one JSON message (the [`Grant`] serialization), in
/// its lane.
#[derive(Debug, Clone)]
pub struct SqsPublisher {
    client: Client,
    queue_url: String,
}

impl SqsPublisher {
    /// `client` is built once per Lambda instance and shared.
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
        }
    }
}

#[async_trait]
impl GrantPublisher for SqsPublisher {
    async fn publish(&self, grant: &Grant, within_ms: u64) -> Result<(), PublishError> {
        let body = serde_json::to_string(grant).map_err(|e| PublishError(Box::new(e)))?;
        let send = self
            .client
            .send_message()
            .queue_url(&self.queue_url)
            .message_group_id(group_of(grant))
            .message_deduplication_id(grant.grant_id.as_str())
            .message_body(body)
            .send();
        // Given up at the deadline whatever the SDK's own timeouts are (an
        // operator may raise SQS_TIMEOUT_MS): a send that could still land
        // later would land outside the reconciler's send window.
        match tokio::time::timeout(std::time::Duration::from_millis(within_ms), send).await {
            Ok(sent) => sent.map(|_| ()).map_err(|e| PublishError(Box::new(e))),
            Err(elapsed) => Err(PublishError(Box::new(elapsed))),
        }
    }
}

/// Re-drives grants to the issuer's queue and reads
/// the dead-letter queue, for the reconciler.
#[derive(Debug, Clone)]
pub struct SqsRedrive {
    client: Client,
    queue_url: String,
    dlq_url: Option<String>,
}

impl SqsRedrive {
    /// Sends `(group, deduplication id, body)` messages in batches of ten
    /// (the most SQS takes); returns how many were accepted.
    async fn send_batches(&self, messages: Vec<(String, String, String)>) -> Result<usize, PublishError> {
        use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
        let mut sent = 0;
        for chunk in messages.chunks(10) {
            let mut batch = self.client.send_message_batch().queue_url(&self.queue_url);
            for (i, (group, dedup, body)) in chunk.iter().enumerate() {
                let entry = SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_group_id(group)
                    .message_deduplication_id(dedup)
                    .message_body(body)
                    .build()
                    .map_err(|e| PublishError(Box::new(e)))?;
                batch = batch.entries(entry);
            }
            let out = batch.send().await.map_err(|e| PublishError(Box::new(e)))?;
            sent += out.successful().len();
        }
        Ok(sent)
    }

    /// `dlq_url` is optional: without it the DLQ depth is not reported.
    pub fn new(client: Client, queue_url: impl Into<String>, dlq_url: Option<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
            dlq_url,
        }
    }
}

#[async_trait]
impl coupon_domain::reconcile::ports::Redrive for SqsRedrive {
    async fn redrive(&self, grants: &[Grant], within_ms: u64) -> Result<usize, PublishError> {
        let mut messages = Vec::with_capacity(grants.len());
        for grant in grants {
            let body = serde_json::to_string(grant).map_err(|e| PublishError(Box::new(e)))?;
            messages.push((group_of(grant), grant.grant_id.to_string(), body));
        }
        match tokio::time::timeout(std::time::Duration::from_millis(within_ms), self.send_batches(messages)).await {
            Ok(sent) => sent,
            Err(elapsed) => Err(PublishError(Box::new(elapsed))),
        }
    }

    async fn dlq_depth(&self) -> Result<Option<u64>, PublishError> {
        let Some(url) = &self.dlq_url else {
            return Ok(None);
        };
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
            .send()
            .await
            .map_err(|e| PublishError(Box::new(e)))?;
        Ok(out
            .attributes()
            .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages))
            .and_then(|v| v.parse().ok()))
    }

    async fn in_flight(&self) -> Result<Option<u64>, PublishError> {
        use aws_sdk_sqs::types::QueueAttributeName as A;
        let names = [
            A::ApproximateNumberOfMessages,
            A::ApproximateNumberOfMessagesNotVisible,
            A::ApproximateNumberOfMessagesDelayed,
        ];
        let out = self
            .client
            .get_queue_attributes()
            .queue_url(&self.queue_url)
            .set_attribute_names(Some(names.to_vec()))
            .send()
            .await
            .map_err(|e| PublishError(Box::new(e)))?;
        let Some(attributes) = out.attributes() else {
            return Ok(None);
        };
        let mut total = 0u64;
        for name in &names {
            match attributes.get(name).and_then(|v| v.parse::<u64>().ok()) {
                Some(n) => total += n,
                None => return Ok(None),
            }
        }
        Ok(Some(total))
    }
}

/// Asks the reconciler, through its repair queue, to rebuild a coupon whose
/// Redis state a grab found gone. The queue is FIFO for its deduplication:
/// the deduplication id names the coupon and a 5-second window,
/// so however many grab instances ask, SQS keeps one request per coupon
/// per window and the reconciler does one pass for it.
#[derive(Debug, Clone)]
pub struct SqsRepairs {
    client: Client,
    queue_url: String,
}

impl SqsRepairs {
    /// `queue_url` is the repair queue the reconciler consumes.
    pub fn new(client: Client, queue_url: impl Into<String>) -> Self {
        Self {
            client,
            queue_url: queue_url.into(),
        }
    }
}

/// Repair requests for one coupon within one such window are one request.
const REPAIR_WINDOW_MS: i64 = 5_000;

/// The body of a repair request: `{"couponId": "..."}`.
pub fn repair_message(coupon: &coupon_domain::ids::CouponId) -> String {
    serde_json::json!({ "couponId": coupon.as_str() }).to_string()
}

/// The coupon a repair request names; `None` for a body that is not one
/// (a poison message is dropped, not retried: nothing can repair it).
pub fn parse_repair_message(body: &str) -> Option<coupon_domain::ids::CouponId> {
    let value: serde_json::Value = serde_json::from_str(body).ok()?;
    coupon_domain::ids::CouponId::parse(value.get("couponId")?.as_str()?).ok()
}

#[async_trait]
impl coupon_domain::grab::ports::RepairRequests for SqsRepairs {
    async fn request_repair(&self, coupon: &coupon_domain::ids::CouponId, now_ms: i64) -> Result<(), PublishError> {
        let id = format!("{coupon}-{}", now_ms.div_euclid(REPAIR_WINDOW_MS));
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            // Its own group: a request being retried never holds back the
            // next window's (FIFO delivers a group in order, one at a time).
            .message_group_id(&id)
            .message_deduplication_id(&id)
            .message_body(repair_message(coupon))
            .send()
            .await
            .map_err(|e| PublishError(Box::new(e)))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use coupon_domain::ids::CouponId;

    #[test]
    fn a_repair_message_names_its_coupon_and_anything_else_is_none() {
        let coupon = CouponId::parse("spring-20").unwrap();
        assert_eq!(parse_repair_message(&repair_message(&coupon)), Some(coupon));
        assert_eq!(parse_repair_message("not json"), None);
        assert_eq!(parse_repair_message(r#"{"couponId": 7}"#), None);
        assert_eq!(parse_repair_message(r#"{"couponId": "bad id with spaces"}"#), None);
    }
}
