//! A press is admitted before it reserves anything: every refusal the home
//! shard can decide costs one Redis command, counted at the server (its
//! MONITOR feed), and a press the risk rules refuse after its admission
//! holds no stock, so nobody hears a false SOLD_OUT because of it.

use std::sync::Arc;
use std::time::Duration;

use coupon_domain::blacklist::BlacklistFlags;
use futures::stream::{self, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::support::{send, Event, Harness, Options, Server, HOUR, T0};

/// The commands clients send to the local Redis, read from its MONITOR
/// feed (scripts' own commands excluded: those run inside one command).
struct Wire {
    lines: mpsc::UnboundedReceiver<String>,
    marker: redis::aio::MultiplexedConnection,
    prefix: String,
    marks: u32,
}

impl Wire {
    async fn watch(h: &Harness) -> Self {
        let url = &h.stack.redis_url;
        let addr = url.trim_start_matches("redis://").trim_end_matches('/').to_owned();
        let mut monitor = TcpStream::connect(&addr).await.expect("redis for MONITOR");
        monitor.write_all(b"MONITOR\r\n").await.expect("MONITOR");
        let (tx, lines) = mpsc::unbounded_channel();
        let mut reader = BufReader::new(monitor).lines();
        tokio::spawn(async move {
            while let Ok(Some(line)) = reader.next_line().await {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let client = redis::Client::open(url.as_str()).expect("url");
        let marker = client.get_multiplexed_async_connection().await.expect("redis");
        let mut wire = Self {
            lines,
            marker,
            prefix: h.config.redis.key_prefix.clone(),
            marks: 0,
        };
        wire.sent().await; // up to now: nothing of this test's
        wire
    }

    /// The names of the commands sent under this harness's key prefix
    /// since the last call, in order.
    async fn sent(&mut self) -> Vec<String> {
        // Commands are fed to MONITOR in the order they run: everything the
        // press sent comes before this marker.
        self.marks += 1;
        let mark = format!("{}mark-{}", self.prefix, self.marks);
        let _: String = redis::cmd("ECHO")
            .arg(&mark)
            .query_async(&mut self.marker)
            .await
            .expect("ECHO");
        let mut out = Vec::new();
        loop {
            let line = tokio::time::timeout(Duration::from_secs(10), self.lines.recv())
                .await
                .expect("MONITOR feed")
                .expect("MONITOR open");
            if line.contains(&mark) {
                return out;
            }
            if line.contains(" lua] ") || !line.contains(&self.prefix) {
                continue;
            }
            if let Some(name) = line.split("] \"").nth(1).and_then(|rest| rest.split('"').next()) {
                out.push(name.to_ascii_uppercase());
            }
        }
    }
}

#[tokio::test]
async fn every_refusal_the_home_shard_decides_costs_one_command_and_a_win_four() {
    let h = Harness::new().await;
    let mut wire = Wire::watch(&h).await;

    let mut def = h.coupon(3);
    def.rate_per_sec = 1;
    def.burst = 2;
    let coupon = h.create(&def).await;
    let mut gated = h.coupon(5);
    gated.min_member_level = 3;
    let gated = h.create(&gated).await;
    let mut later = h.coupon(5);
    later.grab_start_ms = T0 + HOUR;
    later.grab_end_ms = T0 + 2 * HOUR;
    let later = h.create(&later).await;
    // This instance learns each coupon's shard count once, and every
    // script is loaded by a first win: what follows is the steady state.
    let warm = h.create(&h.coupon(5)).await;
    assert_eq!(h.grab(&warm, "warm", "r0").await.code(), "SUCCESS");
    for c in [&gated, &later] {
        h.grab(c, "warm", "r0").await;
    }
    // The read of a request's record a sold-out memory answers with is a
    // script of its own: loaded here too.
    {
        use coupon_domain::grab::ports::StockLedger;
        let (user, request) = (
            coupon_domain::ids::UserId::parse("warm").unwrap(),
            coupon_domain::ids::RequestId::parse("r0").unwrap(),
        );
        let claim = crate::support::plain_claim(&warm, &user, &request, T0);
        assert!(h.stock_ledger().recorded(&claim).await.unwrap().is_some());
    }
    wire.sent().await;

    assert_eq!(h.grab(&coupon, "w1", "r1").await.code(), "SUCCESS");
    // The shard count (this instance's first press on the coupon), the
    // admission, the user's and the IP's reservations (sent together),
    // the commit. No release.
    assert_eq!(
        wire.sent().await,
        ["HGET", "EVALSHA", "EVALSHA", "EVALSHA", "EVALSHA"],
        "a win"
    );

    // The bucket held 2 tokens: the win's admission took one. Refusals
    // decided before the rate limit take none; the next win takes the
    // last; then the bucket is empty.
    for (coupon, user, want, cost) in [
        (&coupon, "w1", "ALREADY_CLAIMED", 1),
        (&gated, "u-level-2", "NOT_ELIGIBLE", 1),
        (&later, "u-early", "COUPON_NOT_ACTIVE", 1),
        (&coupon, "w2", "SUCCESS", 4),
        (&coupon, "w3", "RATE_LIMITED", 1),
    ] {
        assert_eq!(h.grab(coupon, user, "r2").await.code(), want, "{user}");
        let sent = wire.sent().await;
        assert_eq!(sent.len(), cost, "{want}: {sent:?}");
        assert!(sent.iter().all(|c| c == "EVALSHA"), "{want}: {sent:?}");
    }

    // Sold out: the admission decides the first; then the instance's
    // memory answers with one read of the request's record.
    h.clock.advance(10_000);
    assert_eq!(h.grab(&coupon, "w4", "r1").await.code(), "SUCCESS");
    wire.sent().await;
    assert_eq!(h.grab(&coupon, "w5", "r1").await.code(), "SOLD_OUT");
    assert_eq!(wire.sent().await, ["EVALSHA"], "sold out, decided at admission");
    assert_eq!(h.grab(&coupon, "w6", "r1").await.code(), "SOLD_OUT");
    assert_eq!(
        wire.sent().await,
        ["EVALSHA"],
        "sold out, from the instance's memory: the request's record"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn presses_the_risk_rules_refuse_after_admission_hold_no_stock_so_the_last_unit_still_sells() {
    let h = Harness::new().await;
    let def = h.coupon(1);
    let coupon = h.create(&def).await;
    let mut presses = Vec::new();
    for i in 0..40 {
        let user = coupon_domain::ids::UserId::parse(&format!("bot-{i}")).unwrap();
        h.flags().set_flag(&user, true).await.unwrap();
        let ip = format!("198.51.100.{i}");
        presses.push((
            user.to_string(),
            Event::grab(coupon.as_str(), user.as_str(), "r1").ip(&ip).build(),
        ));
    }
    // The honest user presses in the middle of the flood.
    let honest = Event::grab(coupon.as_str(), "honest", "r1")
        .ip("198.51.100.200")
        .build();
    presses.insert(20, ("honest".to_owned(), honest));
    let app = Arc::clone(&h.app);
    let responses: Vec<(String, _)> = stream::iter(presses)
        .map(|(user, e)| {
            let app = Arc::clone(&app);
            tokio::spawn(async move { (user, send(&app, e).await) })
        })
        .buffer_unordered(41)
        .map(|r| r.expect("task"))
        .collect()
        .await;
    let codes: Vec<(&str, &str)> = responses.iter().map(|(u, r)| (u.as_str(), r.code())).collect();
    // Every bot was admitted or refused, but none held the unit: the honest
    // user wins it whatever the order. A bot pressing after that sale
    // hears SOLD_OUT, which is then true.
    assert!(codes.contains(&("honest", "SUCCESS")), "{codes:?}");
    assert!(
        codes
            .iter()
            .all(|(u, c)| *u == "honest" || *c == "RISK_REJECTED" || *c == "SOLD_OUT"),
        "{codes:?}"
    );
    assert_eq!(h.stock(&def).await, 0);
}

/// Every press reads 13 fields of its shard's meta: the preheat keeps it a
/// hash table (direct reads), not a listpack (a scan per field).
#[tokio::test]
async fn a_preheated_shard_keeps_its_meta_as_a_hash_table() {
    let h = Harness::new().await;
    let mut def = h.coupon(10);
    def.shards = 2;
    let coupon = h.create(&def).await;
    let mut conn = h.redis.connection();
    for shard in 0..2 {
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(h.redis.keys().shard(&coupon, shard).meta())
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(encoding, "hashtable", "shard {shard}");
    }
}

/// The grab builds its EVALSHA itself (not through `Script::invoke`), so it
/// must still load the script when Redis has forgotten it (a restart, a
/// failover to a node that never ran it): every step, admission and claim.
#[tokio::test]
async fn a_grab_after_redis_forgot_its_scripts_loads_them_again_and_decides() {
    let server = Server::standalone();
    let h = Harness::with(Options {
        redis_url: Some(server.url()),
        ..Options::default()
    })
    .await;
    let coupon = h.create(&h.coupon(1)).await;
    assert_eq!(server.cmd(&["SCRIPT", "FLUSH"]).trim(), "OK");
    assert_eq!(h.grab(&coupon, "first", "r1").await.code(), "SUCCESS");
    assert_eq!(server.cmd(&["SCRIPT", "FLUSH"]).trim(), "OK");
    assert_eq!(h.grab(&coupon, "second", "r1").await.code(), "SOLD_OUT");
    assert_eq!(server.cmd(&["SCRIPT", "FLUSH"]).trim(), "OK");
    let replay = h.grab(&coupon, "first", "r1").await;
    assert_eq!(
        (replay.code(), replay.body["data"]["replayed"].as_bool()),
        ("SUCCESS", Some(true))
    );
}
