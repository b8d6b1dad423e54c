//! The seeds' lock-based grab (seed 002, `RedisLockUtil` and
//! `receiveCoupon`), reproduced as faithfully as the benchmark needs: take
//! `coupon:lock:<id>` with `SET NX EX 30` and a 100 ms spin for up to 5 s,
//! read and decrement the stock (`GET`, `DECR`, `INCR` back below zero), and
//! unlock with the compare-and-delete script. Everything else the seed does
//! (database writes, MQ) is left out, which only flatters the baseline.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::AsyncCommands;

const SPIN: Duration = Duration::from_millis(100);
const WAIT: Duration = Duration::from_secs(5);
const UNLOCK: &str =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";

/// What one lock-based run did.
#[derive(Debug, Default)]
pub struct LockRun {
    /// Grabs decided (won or sold out).
    pub decided: u64,
    /// Wins.
    pub won: u64,
    /// Gave up waiting for the lock (the seed answers "system error").
    pub gave_up: u64,
    /// Wall time.
    pub elapsed: Duration,
}

/// One caller's grab; `Some(true)` won, `Some(false)` sold out, `None` no lock.
async fn grab(
    conn: &mut redis::aio::MultiplexedConnection,
    coupon: &str,
    token: &str,
) -> redis::RedisResult<Option<bool>> {
    let lock = format!("coupon:lock:{coupon}");
    let stock = format!("coupon:stock:{coupon}");
    let start = Instant::now();
    loop {
        let ok: Option<String> = redis::cmd("SET")
            .arg(&lock)
            .arg(token)
            .arg("NX")
            .arg("EX")
            .arg(30)
            .query_async(conn)
            .await?;
        if ok.is_some() {
            break;
        }
        if start.elapsed() >= WAIT {
            return Ok(None);
        }
        tokio::time::sleep(SPIN).await;
    }
    let current: Option<i64> = conn.get(&stock).await?;
    let won = if current.unwrap_or(0) > 0 {
        let left: i64 = conn.decr(&stock, 1).await?;
        if left < 0 {
            let _: i64 = conn.incr(&stock, 1).await?;
            false
        } else {
            true
        }
    } else {
        false
    };
    let _: i64 = redis::Script::new(UNLOCK)
        .key(&lock)
        .arg(token)
        .invoke_async(conn)
        .await?;
    Ok(Some(won))
}

/// Sets the stock, then runs `callers` concurrent callers (one connection
/// each) until `deadline` passes or `attempts` grabs were made in all.
pub async fn run(url: &str, coupon: &str, stock: i64, callers: usize, duration: Duration, attempts: u64) -> LockRun {
    let client = redis::Client::open(url).expect("redis url");
    let mut setup = client.get_multiplexed_async_connection().await.expect("redis");
    let _: () = setup
        .set(format!("coupon:stock:{coupon}"), stock)
        .await
        .expect("set stock");
    let _: () = setup.del(format!("coupon:lock:{coupon}")).await.expect("del lock");
    let made = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = Vec::new();
    for caller in 0..callers {
        let mut conn = client.get_multiplexed_async_connection().await.expect("redis");
        let made = made.clone();
        let coupon = coupon.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut run = LockRun::default();
            let mut i = 0u64;
            while Instant::now() < deadline && made.fetch_add(1, Ordering::Relaxed) < attempts {
                i += 1;
                match grab(&mut conn, &coupon, &format!("{caller}-{i}")).await {
                    Ok(Some(true)) => {
                        run.decided += 1;
                        run.won += 1;
                    }
                    Ok(Some(false)) => run.decided += 1,
                    Ok(None) => run.gave_up += 1,
                    Err(e) => panic!("lock baseline: {e}"),
                }
            }
            run
        }));
    }
    let mut total = LockRun::default();
    for t in tasks {
        let r = t.await.expect("task");
        total.decided += r.decided;
        total.won += r.won;
        total.gave_up += r.gave_up;
    }
    total.elapsed = start.elapsed();
    total
}
