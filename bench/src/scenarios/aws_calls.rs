//! AWS calls per issued coupon: a sale through the real SQS publisher and
//! the real claims table, then the issuer as the event source mapping calls it, every SDK call
//! counted by an interceptor.

use std::sync::Arc;
use std::time::{Duration, Instant};

use coupon_adapters::dynamodb::{DynamoCouponRepository, DynamoFacts, Tables};
use coupon_adapters::redis::RedisPreheater;
use coupon_domain::catalog::create_coupon;
use coupon_domain::clock::SystemClock;
use coupon_domain::reconcile::ports::DurableFacts;
use serde_json::{json, Value};

use super::{coupon, drive, grab_clients, grab_config, sdk, store, unique};
use coupon_domain::testing::Silent;

use crate::counting::CallCounter;
use crate::{BenchEnv, Row, Table};

/// AWS calls per issued coupon and the issuer's pace.
pub struct Aws {
    /// Grab's calls (the claim put and the SQS send of each win) plus the
    /// issuer's DynamoDB calls, per coupon issued.
    pub per_coupon: f64,
    /// The issuer's DynamoDB calls per grant.
    pub dynamodb_per_grant: f64,
    /// Grants issued per second (the issuer handler's time only).
    pub issuer_per_sec: f64,
    /// Calls by operation.
    pub detail: Value,
    /// Coupons issued beyond the stock.
    pub oversell: u64,
}

/// Every grant on the queue through the issuer, as the SQS event source
/// mapping delivers them (batches of ten, deleted once handled): the time
/// spent in the issuer and the grants delivered.
async fn deliver_every_grant(issuer: &issuer::Issuer, sqs: &aws_sdk_sqs::Client, queue_url: &str) -> (Duration, u64) {
    let mut issuing = Duration::ZERO;
    let mut delivered = 0u64;
    loop {
        let got = sqs
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(10)
            .wait_time_seconds(0)
            .send()
            .await
            .expect("receive");
        let messages = got.messages.unwrap_or_default();
        if messages.is_empty() {
            break;
        }
        let records: Vec<Value> = messages
            .iter()
            .map(|m| json!({"messageId": m.message_id(), "receiptHandle": m.receipt_handle(), "body": m.body(), "eventSource": "aws:sqs"}))
            .collect();
        let event: aws_lambda_events::event::sqs::SqsEvent =
            serde_json::from_value(json!({"Records": records})).expect("event");
        let start = Instant::now();
        let response = issuer::handle(issuer, lambda_runtime::LambdaEvent::new(event, Default::default()))
            .await
            .expect("batch");
        issuing += start.elapsed();
        assert!(response.batch_item_failures.is_empty(), "issuer failures");
        for m in &messages {
            sqs.delete_message()
                .queue_url(queue_url)
                .receipt_handle(m.receipt_handle().unwrap_or_default())
                .send()
                .await
                .expect("delete");
        }
        delivered += messages.len() as u64;
    }
    (issuing, delivered)
}

pub async fn aws_calls(env: &BenchEnv, rows: &mut Table) -> Aws {
    const STOCK: u64 = 400;
    let counter = CallCounter::default();
    let (sqs, ddb) = sdk(Some(&counter)).await;
    let (plain_sqs, plain_ddb) = sdk(None).await;
    let id = unique("aws");
    let def = coupon(&id, STOCK, 2);
    let redis = store(&env.redis_url, false).await;
    let tables = Tables::new(plain_ddb.clone(), &env.tables);
    let repo = DynamoCouponRepository::new(tables.clone());
    create_coupon(&def, 10_000_000, &repo, &RedisPreheater::new(redis), &SystemClock)
        .await
        .expect("create");
    // The sale: 8 instances wired as deployed, with the real SQS publisher.
    // The real claims table: each win's claim is one of the grab's calls.
    let config = grab::Config {
        claims_table: env.tables.claims.clone(),
        ..grab_config(&env.redis_url, false, &env.queue_url, 1_000)
    };
    let mut apps = Vec::new();
    for _ in 0..8 {
        let clients = grab_clients(store(&env.redis_url, false).await, sqs.clone(), ddb.clone());
        apps.push(Arc::new(grab::wire(&config, clients)));
    }
    let sale = drive(&apps, &id, "aws", Duration::from_secs(600), STOCK + 100).await;
    let won = sale.status(200);
    let grab_calls = counter.snapshot();
    counter.reset();

    // The issuer, as the SQS event source mapping would call it.
    let issuer = issuer::wire(
        &issuer::Config {
            tables: env.tables.clone(),
            dynamodb: config.sqs,
            concurrency: 16,
            metrics_namespace: "Bench".into(),
        },
        issuer::Clients {
            dynamodb: ddb.clone(),
            clock: Arc::new(SystemClock),
            metrics: Arc::new(Silent),
        },
    );
    let (issuing, delivered) = deliver_every_grant(&issuer, &plain_sqs, &env.queue_url).await;
    let issuer_calls = counter.snapshot();
    let issued = DynamoFacts::new(tables).issued(&def.coupon_id).await.expect("issued");
    assert_eq!(
        (won, delivered, issued),
        (STOCK, STOCK, STOCK),
        "every winner issued once"
    );
    let sends: u64 = grab_calls.values().sum();
    let ddb_calls: u64 = issuer_calls.values().sum();
    let per_coupon = (sends + ddb_calls) as f64 / issued as f64;
    let per_grant = ddb_calls as f64 / issued as f64;
    let per_sec = issued as f64 / issuing.as_secs_f64();
    rows.push(Row {
        name: "AWS calls per issued coupon (grab claim + SQS, issuer DynamoDB)".into(),
        value: per_coupon,
        unit: "calls",
        note: format!("grab {grab_calls:?}; issuer {issuer_calls:?}"),
    });
    rows.push(Row {
        name: "issuer: DynamoDB calls per grant".into(),
        value: per_grant,
        unit: "calls",
        note: "one TransactWriteItems; the definition read once per instance".into(),
    });
    rows.push(Row {
        name: "issuer: grants issued per second (local endpoint)".into(),
        value: per_sec,
        unit: "grants/s",
        note: "moto: one Python process, transactions serialized and copying tables".into(),
    });
    Aws {
        per_coupon,
        dynamodb_per_grant: per_grant,
        issuer_per_sec: per_sec,
        detail: json!({"grab": grab_calls, "issuer": issuer_calls, "issued": issued}),
        oversell: issued.saturating_sub(STOCK),
    }
}
