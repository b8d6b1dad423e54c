//! Redis commands per grab by outcome, counted at the wire by a counting
//! proxy between the handler and Redis.

use std::sync::Arc;
use std::time::Duration;

use grab::GrabApp;
use serde_json::{json, Value};

use super::{apps, coupon, drive, preheat, store, unique, Wiring};
use crate::{BenchEnv, Row, Table};
use coupon_domain::testing::CountingQueue;

/// Redis commands per grab, counted at the wire by [`crate::proxy`].
pub struct Trips {
    /// Per winner.
    pub winner: f64,
    /// Per loser (sold out, memory off).
    pub loser: f64,
    /// Per loser with the sold-out memory on.
    pub loser_remembered: f64,
    /// Commands by name per scenario.
    pub detail: Value,
}

pub async fn round_trips(env: &BenchEnv, rows: &mut Table) -> Trips {
    const N: u64 = 2_000;
    let upstream = env
        .redis_url
        .trim_start_matches("redis://")
        .trim_end_matches('/')
        .to_owned();
    let (port, wire) = crate::proxy::start(upstream).await;
    let url = format!("redis://127.0.0.1:{port}");
    let publisher = Arc::new(CountingQueue::default());
    let id = unique("trips");
    let setup = store(&env.redis_url, false).await;
    preheat(&setup, &coupon(&id, N, 1)).await;
    let one = apps(&url, false, 1, Wiring::Production, 0, publisher.clone()).await;
    // Warm: the shard count is read once per instance, scripts loaded once.
    drive(&one, &id, "warm", Duration::from_secs(60), 1).await;
    let measure = |label: &'static str, apps: Vec<Arc<GrabApp>>, n: u64, expect: u16| {
        let id = id.clone();
        let wire = wire.clone();
        async move {
            let before = wire.get();
            let d = drive(&apps, &id, label, Duration::from_secs(600), n).await;
            assert_eq!(d.status(expect), n, "{label}: {:?}", d.by_status);
            (wire.get() - before) as f64 / n as f64
        }
    };
    let winner = measure("win", one.clone(), N - 1, 200).await;
    let loser = measure("lose", one.clone(), N, 410).await;
    let remembering = apps(&url, false, 1, Wiring::Production, 600_000, publisher).await;
    drive(&remembering, &id, "learn", Duration::from_secs(60), 1).await;
    let remembered = measure("mem", remembering, N, 410).await;
    rows.push(Row {
        name: "Redis commands per winner (production wiring)".into(),
        value: winner,
        unit: "commands",
        note: "risk user + risk IP (sent together: 1 round trip of latency) + grab".into(),
    });
    rows.push(Row {
        name: "Redis commands per loser (sold out, memory off)".into(),
        value: loser,
        unit: "commands",
        note: "risk reserve x2, grab, risk release x2".into(),
    });
    rows.push(Row {
        name: "Redis commands per loser (sold-out memory on)".into(),
        value: remembered,
        unit: "commands",
        note: "the request id's record, read once".into(),
    });
    Trips {
        winner,
        loser,
        loser_remembered: remembered,
        detail: json!({"countedAt": "the wire (a counting proxy)", "warmup": "one grab per instance first"}),
    }
}
