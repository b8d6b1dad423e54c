//! The SQS adapter: hands winners' grants to the issuer's queue.

use async_trait::async_trait;
pub use aws_sdk_sqs::Client;

use crate::error::PublishError;
use crate::grant::Grant;
use crate::ports::GrantPublisher;

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
