//! A hot sharded coupon on a 3-master Redis Cluster against one node.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde_json::{json, Value};

use super::{apps, coupon, drive, preheat, store, unique, Wiring};
use crate::{BenchEnv, Row, Table};
use coupon_domain::testing::CountingQueue;

/// Cluster against one node.
pub struct Cluster {
    /// Cluster throughput over single-node throughput.
    pub ratio: f64,
    /// Figures.
    pub detail: Value,
    /// Units sold beyond the stock.
    pub oversell: u64,
}

pub async fn cluster_vs_single(env: &BenchEnv, rows: &mut Table) -> Cluster {
    let cluster_url = env.cluster_url.clone().expect("cluster url");
    let c = env.levels.last().copied().unwrap_or(32);
    const SHARDS: u32 = 12;
    let mut figures = Vec::new();
    let mut oversell = 0;
    for (name, url, cluster) in [
        ("single node", env.redis_url.clone(), false),
        ("3-master cluster", cluster_url, true),
    ] {
        let id = unique(if cluster { "cl" } else { "sn" });
        let setup = store(&url, cluster).await;
        preheat(&setup, &coupon(&id, 1_000_000_000, SHARDS)).await;
        let publisher = Arc::new(CountingQueue::default());
        let apps = apps(&url, cluster, c, Wiring::ScriptOnly, 0, publisher.clone()).await;
        let d = drive(&apps, &id, name.split(' ').next().unwrap_or("x"), env.run, u64::MAX).await;
        assert_eq!(d.status(200), d.total);
        oversell += publisher
            .published
            .load(Ordering::Relaxed)
            .saturating_sub(d.status(200));
        rows.push(Row {
            name: format!("hot coupon, {SHARDS} shards, {c} callers: {name}"),
            value: d.per_sec(),
            unit: "grabs/s",
            note: "all Redis processes and the client share 2 cores here".into(),
        });
        figures.push((name, d.per_sec()));
    }
    let ratio = figures[1].1 / figures[0].1;
    rows.push(Row {
        name: "cluster_vs_single_node".into(),
        value: ratio,
        unit: "ratio",
        note: "see docs/performance.md for AWS".into(),
    });
    Cluster {
        ratio,
        detail: json!({"single_per_sec": figures[0].1, "cluster_per_sec": figures[1].1, "shards": SHARDS, "callers": c}),
        oversell,
    }
}
