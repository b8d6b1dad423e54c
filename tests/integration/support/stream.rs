//! The user-coupons change stream, read from the local endpoint and handed
//! over in the JSON shape Lambda's DynamoDB event source gives a function
//! (what `infra/local/pump.py` does for `make up`), and a bus of a test's own on
//! the local EventBridge with a rule to a queue, where the events land.

use aws_sdk_dynamodbstreams::types::{AttributeValue, ShardIteratorType};
use serde_json::{json, Map, Value};

use super::stack::{unique, Stack};

/// The stream of the user-coupons table.
pub struct CouponStream {
    client: aws_sdk_dynamodbstreams::Client,
    arn: String,
}

impl CouponStream {
    pub async fn open(stack: &Stack) -> Self {
        let table = stack
            .ddb
            .describe_table()
            .table_name(&stack.tables.user_coupons)
            .send()
            .await
            .expect("describe table")
            .table
            .expect("table");
        let arn = table
            .latest_stream_arn
            .expect("the user-coupons table has a stream (infra/local/provision.py)");
        Self {
            client: aws_sdk_dynamodbstreams::Client::new(&stack.sdk),
            arn,
        }
    }

    /// Every record now on the stream whose key names one of `users`, as
    /// Lambda's event records (`Records[i]`), in stream order.
    pub async fn records_of(&self, users: &[&str]) -> Vec<Value> {
        let pks: Vec<String> = users.iter().map(|u| format!("USER#{u}")).collect();
        let description = self
            .client
            .describe_stream()
            .stream_arn(&self.arn)
            .send()
            .await
            .expect("describe stream")
            .stream_description
            .expect("description");
        let mut records = Vec::new();
        for shard in description.shards.unwrap_or_default() {
            let mut iterator = self
                .client
                .get_shard_iterator()
                .stream_arn(&self.arn)
                .shard_id(shard.shard_id.unwrap_or_default())
                .shard_iterator_type(ShardIteratorType::TrimHorizon)
                .send()
                .await
                .expect("shard iterator")
                .shard_iterator;
            while let Some(it) = iterator {
                let out = self
                    .client
                    .get_records()
                    .shard_iterator(it)
                    .limit(1000)
                    .send()
                    .await
                    .expect("get records");
                let batch = out.records.unwrap_or_default();
                if batch.is_empty() {
                    break;
                }
                for r in batch {
                    let Some(d) = r.dynamodb else { continue };
                    let pk = d.keys.as_ref().and_then(|k| k.get("pk")).and_then(|v| v.as_s().ok());
                    if !pk.is_some_and(|pk| pks.contains(pk)) {
                        continue;
                    }
                    let mut change = Map::new();
                    change.insert("SequenceNumber".into(), json!(d.sequence_number));
                    change.insert("StreamViewType".into(), json!("NEW_AND_OLD_IMAGES"));
                    for (name, image) in [("Keys", d.keys), ("NewImage", d.new_image), ("OldImage", d.old_image)] {
                        if let Some(image) = image {
                            change.insert(name.into(), item(&image));
                        }
                    }
                    records.push(json!({
                        "eventID": r.event_id,
                        "eventName": r.event_name.map(|n| n.as_str().to_owned()),
                        "eventSource": "aws:dynamodb",
                        "eventSourceARN": self.arn,
                        "dynamodb": Value::Object(change),
                    }));
                }
                iterator = out.next_shard_iterator;
            }
        }
        records
    }
}

fn item(image: &std::collections::HashMap<String, AttributeValue>) -> Value {
    Value::Object(image.iter().map(|(k, v)| (k.clone(), attribute(v))).collect())
}

fn attribute(v: &AttributeValue) -> Value {
    match v {
        AttributeValue::S(s) => json!({"S": s}),
        AttributeValue::N(n) => json!({"N": n}),
        AttributeValue::Bool(b) => json!({"BOOL": b}),
        AttributeValue::Null(_) => json!({"NULL": true}),
        AttributeValue::Ss(ss) => json!({"SS": ss}),
        AttributeValue::Ns(ns) => json!({"NS": ns}),
        AttributeValue::L(l) => json!({"L": l.iter().map(attribute).collect::<Vec<_>>()}),
        AttributeValue::M(m) => json!({"M": item(m)}),
        other => panic!("an attribute type coupons never hold: {other:?}"),
    }
}

/// A custom bus of the test's own, with one rule taking every coupon event
/// to a queue of its own.
pub struct TestBus {
    pub name: String,
    pub queue_url: String,
}

impl TestBus {
    pub async fn create(stack: &Stack) -> Self {
        let events = aws_sdk_eventbridge::Client::new(&stack.sdk);
        let name = unique("bus");
        events.create_event_bus().name(&name).send().await.expect("create bus");
        let queue_url = stack.new_standard_queue().await;
        let arn = stack
            .sqs
            .get_queue_attributes()
            .queue_url(&queue_url)
            .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
            .send()
            .await
            .expect("queue arn")
            .attributes
            .and_then(|a| a.get(&aws_sdk_sqs::types::QueueAttributeName::QueueArn).cloned())
            .expect("arn");
        events
            .put_rule()
            .name("every-coupon-event")
            .event_bus_name(&name)
            .event_pattern(json!({"source": [coupon_adapters::eventbridge::SOURCE]}).to_string())
            .send()
            .await
            .expect("put rule");
        events
            .put_targets()
            .rule("every-coupon-event")
            .event_bus_name(&name)
            .targets(
                aws_sdk_eventbridge::types::Target::builder()
                    .id("queue")
                    .arn(arn)
                    .build()
                    .expect("target"),
            )
            .send()
            .await
            .expect("put targets");
        Self { name, queue_url }
    }

    /// The events delivered to the queue (EventBridge envelopes), once at
    /// least `expected` have arrived or 15 s have passed: a rule delivers
    /// to its target asynchronously (in AWS and LocalStack; moto at once),
    /// so the test waits for what it expects and then sees everything
    /// there, repeats included.
    pub async fn delivered(&self, stack: &Stack, expected: usize) -> Vec<Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        let mut bodies = Vec::new();
        loop {
            bodies.extend(stack.drain_bodies(&self.queue_url).await);
            if bodies.len() >= expected || std::time::Instant::now() >= deadline {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        bodies
            .iter()
            .map(|body| serde_json::from_str(body).expect("event json"))
            .collect()
    }
}
