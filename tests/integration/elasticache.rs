//! Finding Redis through the ElastiCache API (the reconciler without a
//! `REDIS_URL`), against the local endpoint's ElastiCache emulation.

use coupon_adapters::elasticache::{self, DiscoveryError};

use crate::support::{unique, Stack};

#[tokio::test]
async fn a_tls_replication_group_is_found_with_its_primary_endpoint() {
    let stack = Stack::connect().await;
    let group = unique("cache");
    stack
        .elasticache
        .create_replication_group()
        .replication_group_id(&group)
        .replication_group_description("coupon grab test")
        .engine("redis")
        .cache_node_type("cache.t4g.micro")
        .num_node_groups(1)
        .transit_encryption_enabled(true)
        .send()
        .await
        .expect("the local endpoint creates replication groups");
    let found = elasticache::describe(&stack.elasticache, &group).await.unwrap();
    assert_eq!(found.status, "available");
    assert!(!found.cluster_mode);
    let url = found.url.expect("a primary endpoint");
    assert!(url.starts_with("rediss://") && url.ends_with(":6379"), "{url}");
    assert!(url.contains(&group), "{url}");
}

#[tokio::test]
async fn an_unknown_replication_group_is_reported_by_name() {
    let stack = Stack::connect().await;
    match elasticache::describe(&stack.elasticache, "no-such-group").await {
        Err(e @ DiscoveryError::NotFound(_)) => assert_eq!(e.to_string(), "replication group no-such-group not found"),
        other => panic!("expected not found, got {other:?}"),
    }
}
