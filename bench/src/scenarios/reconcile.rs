//! One reconciliation pass over many grants, all issued: the time to
//! confirm and trim them.

use std::sync::Arc;
use std::time::Instant;

use aws_sdk_dynamodb::types::{AttributeValue, PutRequest, WriteRequest};
use coupon_adapters::assemble::reconcile_ports;
use coupon_adapters::dynamodb::{
    counter_sk, coupon_pk, user_coupon_sk, user_pk, Client as DynamoClient, DynamoCouponRepository, DynamoFacts, Tables,
};
use coupon_adapters::redis::Redis;
use coupon_adapters::sqs::SqsRedrive;
use coupon_domain::catalog::CouponRepository;
use coupon_domain::clock::SystemClock;
use coupon_domain::coupon::CouponDefinition;
use coupon_domain::ids::UserId;
use coupon_domain::reconcile::{ReconcileSettings, Reconciler};
use futures::StreamExt;
use redis::AsyncCommands;

use super::{coupon, now_ms, preheat, sdk, store, unique, HOUR};
use crate::{BenchEnv, Row, Table};
use coupon_domain::testing::Silent;

/// A reconciliation pass over many grants.
pub struct Reconcile {
    /// Grants in the outboxes, all issued in DynamoDB.
    pub grants: u64,
    /// Seconds for the pass.
    pub seconds: f64,
}

/// Redis: every unit granted, each grant in its shard's outbox.
async fn grant_every_unit(redis: &Redis, def: &CouponDefinition, granted_at: i64) {
    let cid = &def.coupon_id;
    let mut conn = redis.connection();
    for shard in 0..def.shards {
        let keys = redis.keys().shard(cid, shard);
        let n = def.shard_stock(shard);
        let mut seq = 0;
        while seq < n {
            let mut pipe = redis::pipe();
            for _ in 0..1_000.min(n - seq) {
                seq += 1;
                let user = format!("u{shard}-{seq}");
                pipe.cmd("XADD")
                    .arg(keys.outbox())
                    .arg(format!("{seq}-0"))
                    .arg("grant_id")
                    .arg(format!("{cid}-{shard}-{seq}"))
                    .arg("coupon_id")
                    .arg(cid.as_str())
                    .arg("user_id")
                    .arg(&user)
                    .arg("ordinal")
                    .arg(1)
                    .arg("request_id")
                    .arg("r1")
                    .arg("shard")
                    .arg(shard)
                    .arg("granted_at_ms")
                    .arg(granted_at)
                    .ignore();
                pipe.cmd("HSET").arg(keys.users()).arg(&user).arg(1).ignore();
            }
            pipe.query_async::<()>(&mut conn).await.expect("fill outbox");
        }
        let _: () = conn
            .hset_multiple(keys.meta(), &[("stock", "0".to_owned()), ("seq", n.to_string())])
            .await
            .expect("meta");
    }
}

/// DynamoDB: every grant issued (the wallets and the counters).
async fn issue_every_grant(ddb: &DynamoClient, env: &BenchEnv, def: &CouponDefinition) {
    let cid = &def.coupon_id;
    let mut batches = Vec::new();
    let mut batch = Vec::new();
    for shard in 0..def.shards {
        for seq in 1..=def.shard_stock(shard) {
            let user = UserId::parse(&format!("u{shard}-{seq}")).unwrap();
            let item = std::collections::HashMap::from([
                ("pk".to_owned(), AttributeValue::S(user_pk(&user))),
                ("sk".to_owned(), AttributeValue::S(user_coupon_sk(cid, 1))),
                ("coupon_id".to_owned(), AttributeValue::S(cid.to_string())),
                ("user_id".to_owned(), AttributeValue::S(user.to_string())),
                ("ordinal".to_owned(), AttributeValue::N("1".into())),
                ("grant_id".to_owned(), AttributeValue::S(format!("{cid}-{shard}-{seq}"))),
                ("status".to_owned(), AttributeValue::S("UNUSED".into())),
            ]);
            batch.push(
                WriteRequest::builder()
                    .put_request(PutRequest::builder().set_item(Some(item)).build().unwrap())
                    .build(),
            );
            if batch.len() == 25 {
                batches.push(std::mem::take(&mut batch));
            }
        }
    }
    if !batch.is_empty() {
        batches.push(batch);
    }
    let table = env.tables.user_coupons.clone();
    futures::stream::iter(batches)
        .for_each_concurrent(8, |b| {
            let ddb = ddb.clone();
            let table = table.clone();
            async move {
                let mut pending = Some(std::collections::HashMap::from([(table.clone(), b)]));
                while let Some(items) = pending.take() {
                    let out = ddb
                        .batch_write_item()
                        .set_request_items(Some(items))
                        .send()
                        .await
                        .expect("batch write");
                    pending = out.unprocessed_items.filter(|u| u.values().any(|v| !v.is_empty()));
                }
            }
        })
        .await;
    for k in 0..def.counter_items() {
        ddb.update_item()
            .table_name(&env.tables.coupons)
            .key("pk", AttributeValue::S(coupon_pk(cid)))
            .key("sk", AttributeValue::S(counter_sk(k)))
            .update_expression("SET issued = #cap")
            .expression_attribute_names("#cap", "cap")
            .send()
            .await
            .expect("counter");
    }
}

/// The reconciler as deployed (its default settings, a 30 s grace), over
/// the benchmark's Redis, DynamoDB and grant queue, with no metrics.
pub(super) fn bench_reconciler(
    redis: &Redis,
    tables: &Tables,
    sqs: aws_sdk_sqs::Client,
    queue_url: &str,
) -> Reconciler {
    Reconciler::new(
        reconcile_ports(
            redis,
            tables,
            SqsRedrive::new(sqs, queue_url, None),
            Arc::new(DynamoFacts::new(tables.clone())),
            Arc::new(SystemClock),
            Arc::new(Silent),
        ),
        ReconcileSettings {
            grace_ms: 30_000,
            ..ReconcileSettings::default()
        },
    )
}

pub async fn reconcile(env: &BenchEnv, rows: &mut Table) -> Reconcile {
    let grants = env.reconcile_grants;
    const SHARDS: u32 = 4;
    let (plain_sqs, ddb) = sdk(None).await;
    let id = unique("rec");
    let def = coupon(&id, grants, SHARDS);
    let redis = store(&env.redis_url, false).await;
    let tables = Tables::new(ddb.clone(), &env.tables);
    DynamoCouponRepository::new(tables.clone())
        .put_definition(&def)
        .await
        .expect("definition");
    preheat(&redis, &def).await;
    let granted_at = now_ms() - HOUR;

    grant_every_unit(&redis, &def, granted_at).await;
    issue_every_grant(&ddb, env, &def).await;

    let reconciler = bench_reconciler(&redis, &tables, plain_sqs, &env.queue_url);
    let start = Instant::now();
    let report = reconciler.coupon(&def, now_ms()).await.expect("reconcile");
    let seconds = start.elapsed().as_secs_f64();
    assert_eq!(
        (report.issued, report.trimmed, report.pending, report.drift),
        (grants, grants, 0, 0),
        "{report:?}"
    );
    rows.push(Row {
        name: format!("reconciler: one pass over {grants} grants (all issued, trimmed)"),
        value: seconds,
        unit: "s",
        note: "the local endpoint's BatchGetItem (moto), 100 keys per call".into(),
    });
    Reconcile { grants, seconds }
}
