//! The SQS adapter: hands winners' grants to the issuer's queue.

use async_trait::async_trait;
pub use aws_sdk_sqs::Client;

use coupon_domain::error::PublishError;
use coupon_domain::grab::ports::GrantPublisher;
use coupon_domain::grant::Grant;

/// Sends each grant as one JSON message (the [`Grant`] serialization).
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
    async fn publish(&self, grant: &Grant) -> Result<(), PublishError> {
        let body = serde_json::to_string(grant).map_err(|e| PublishError(Box::new(e)))?;
        self.client
            .send_message()
            .queue_url(&self.queue_url)
            .message_body(body)
            .send()
            .await
            .map_err(|e| PublishError(Box::new(e)))?;
        Ok(())
    }
}

/// Re-drives grants to the issuer's queue and reads the dead-letter queue,
/// for the reconciler.
#[derive(Debug, Clone)]
pub struct SqsRedrive {
    client: Client,
    queue_url: String,
    dlq_url: Option<String>,
}

impl SqsRedrive {
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
    async fn redrive(&self, grants: &[Grant]) -> Result<usize, PublishError> {
        use aws_sdk_sqs::types::SendMessageBatchRequestEntry;
        let mut sent = 0;
        for chunk in grants.chunks(10) {
            let mut batch = self.client.send_message_batch().queue_url(&self.queue_url);
            for (i, grant) in chunk.iter().enumerate() {
                let body = serde_json::to_string(grant).map_err(|e| PublishError(Box::new(e)))?;
                let entry = SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
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
