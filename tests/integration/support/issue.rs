//! The issuer as deployed, and the SQS event source mapping's part:
//! receive, invoke, delete what succeeded.

use std::sync::Arc;

use coupon_domain::issuance::IssueLedger;

use super::events::sqs_event;
use super::harness::Harness;

impl Harness {
    /// The issuer function as deployed, over `ledger`.
    pub fn issuer_with(&self, ledger: Arc<dyn IssueLedger>) -> issuer::Issuer {
        issuer::wire_with(&self.issuer_config(), self.issuer_clients(), ledger)
    }

    fn issuer_config(&self) -> issuer::Config {
        issuer::Config {
            tables: self.stack.tables.clone(),
            dynamodb: self.config.sqs,
            concurrency: 8,
            metrics_namespace: "Test".into(),
        }
    }

    fn issuer_clients(&self) -> issuer::Clients {
        issuer::Clients {
            dynamodb: self.stack.ddb.clone(),
            clock: Arc::new(self.clock.clone()),
            metrics: self.metrics.clone(),
        }
    }

    /// The issuer function over the real DynamoDB ledger.
    pub fn issuer(&self) -> issuer::Issuer {
        issuer::wire(&self.issuer_config(), self.issuer_clients())
    }

    /// Receives up to 10 messages (visible now) from the harness queue.
    pub async fn receive(&self) -> Vec<aws_sdk_sqs::types::Message> {
        self.stack
            .sqs
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(0)
            .send()
            .await
            .expect("receive")
            .messages
            .unwrap_or_default()
    }

    /// What the SQS event source mapping does: messages in, one issuer
    /// invocation, the failed ones left on the queue (made visible again
    /// only after the test says so), the rest deleted. Returns the ids the
    /// issuer reported failed.
    pub async fn deliver(&self, issuer: &issuer::Issuer, messages: &[aws_sdk_sqs::types::Message]) -> Vec<String> {
        let response = issuer::handle(
            issuer,
            lambda_runtime::LambdaEvent::new(sqs_event(messages), Default::default()),
        )
        .await
        .expect("the batch is answered");
        let failed: Vec<String> = response
            .batch_item_failures
            .iter()
            .map(|f| f.item_identifier.clone())
            .collect();
        for m in messages {
            if !failed.iter().any(|id| Some(id.as_str()) == m.message_id()) {
                self.stack
                    .sqs
                    .delete_message()
                    .queue_url(&self.queue_url)
                    .receipt_handle(m.receipt_handle().unwrap_or_default())
                    .send()
                    .await
                    .expect("delete");
            }
        }
        failed
    }

    /// Delivers everything on the queue to the issuer until it is empty.
    /// Returns how many messages were delivered.
    pub async fn pump(&self) -> usize {
        let issuer = self.issuer();
        let mut delivered = 0;
        loop {
            let messages = self.receive().await;
            if messages.is_empty() {
                return delivered;
            }
            delivered += messages.len();
            let failed = self.deliver(&issuer, &messages).await;
            assert!(failed.is_empty(), "issuer failures while pumping: {failed:?}");
        }
    }
}
