//! The reconciler against in-memory ports: what it re-drives, trims,
//! rebuilds and restores, and what it leaves alone.

use std::collections::HashMap;
use std::sync::Arc;

use super::*;
use crate::clock::ManualClock;
use crate::coupon::CouponDefinition;
use crate::coupon::CouponStatus;
use crate::grant::{Grant, GrantRecord};
use crate::ids::GrantId;
use crate::ids::UserId;
use crate::ids::{CouponId, RequestId};
use crate::metrics::RecordingMetrics;
use crate::reconcile::ports::OutboxEntry;
use crate::testing::{FakeRedrive, MemoryFacts, MemoryShards, ScriptedLedger};

mod rebuilds;
mod restarts;
mod settles;
mod waits;

const NOW: i64 = 1_000_000;
const GRACE: i64 = 30_000;
const SEND_WINDOW: i64 = 3_000;

struct World {
    facts: Arc<MemoryFacts>,
    shards: Arc<MemoryShards>,
    queue: Arc<FakeRedrive>,
    metrics: Arc<RecordingMetrics>,
    ledger: Arc<ScriptedLedger>,
    clock: ManualClock,
    reconciler: Reconciler,
}

fn world() -> World {
    world_with(ScriptedLedger::default())
}

fn world_with(ledger: ScriptedLedger) -> World {
    world_windowed(ledger, 0)
}

/// A world whose reconciler waits `send_window` ms for sends decided before
/// a loss or a restart (the others: none, so one pass rebuilds).
fn world_windowed(ledger: ScriptedLedger, send_window: i64) -> World {
    let facts = Arc::new(MemoryFacts::default());
    let shards = Arc::new(MemoryShards::default());
    let queue = Arc::new(FakeRedrive::default());
    let clock = ManualClock::new(NOW);
    let metrics = Arc::new(RecordingMetrics::default());
    let ledger = Arc::new(ledger);
    let reconciler = Reconciler::new(
        ReconcilePorts {
            facts: facts.clone(),
            repair: shards.clone(),
            ledger: ledger.clone(),
            redrive: queue.clone(),
            claims: facts.clone(),
            blacklist: facts.clone(),
            flags: shards.clone(),
            live: shards.clone(),
            entries: Arc::new(crate::testing::MemoryEntries::default()),
            clock: Arc::new(clock.clone()),
            metrics: metrics.clone(),
        },
        ReconcileSettings {
            grace_ms: GRACE,
            retention_ms: 86_400_000,
            backlog_ms: 600_000,
            send_window_ms: send_window,
        },
    );
    World {
        facts,
        shards,
        queue,
        metrics,
        ledger,
        clock,
        reconciler,
    }
}

fn coupon(total: u64, shards: u32) -> CouponDefinition {
    CouponDefinition {
        coupon_id: CouponId::parse("c1").unwrap(),
        name: "20 off".into(),
        amount: 2_000,
        total_stock: total,
        per_user_limit: 1,
        min_member_level: 0,
        grab_start_ms: 0,
        grab_end_ms: NOW + 3_600_000,
        valid_from_ms: 0,
        valid_until_ms: NOW + 86_400_000,
        shards,
        rate_per_sec: 0,
        burst: 0,
        status: CouponStatus::Online,
        waves: Vec::new(),
        rollover: true,
        device_required: false,
        mode: Default::default(),
        draw_at_ms: None,
    }
}

fn grant(seq: u64, shard: u32, user: &str, at: i64) -> Grant {
    Grant {
        grant_id: GrantId::new(&CouponId::parse("c1").unwrap(), shard, seq),
        coupon_id: CouponId::parse("c1").unwrap(),
        user_id: UserId::parse(user).unwrap(),
        ordinal: 1,
        request_id: RequestId::parse(&format!("r-{user}")).unwrap(),
        shard,
        granted_at_ms: at,
    }
}

#[tokio::test]
async fn a_stale_pending_grant_is_redriven_and_a_confirmed_one_trimmed() {
    let w = world();
    let def = coupon(10, 1);
    w.shards.put(&def.coupon_id, 0, 7);
    let (done, stale, young) = (
        grant(1, 0, "u1", NOW - 60_000),
        grant(2, 0, "u2", NOW - 60_000),
        grant(3, 0, "u3", NOW - 1_000),
    );
    for g in [&done, &stale, &young] {
        w.shards.push(g);
    }
    w.facts.issue(&done);

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!(
        *w.queue.sent.lock().unwrap(),
        vec![stale],
        "only the stale, unconfirmed grant"
    );
    assert_eq!((r.trimmed, r.pending, r.redriven), (1, 2, 1));
    assert_eq!(w.shards.state(&def.coupon_id, 0).unwrap().outbox.len(), 2);
    assert_eq!((r.remaining, r.issued, r.drift), (7, 1, 0));
}

/// A shard that failed over to a replica lacking a sent grant mints that
/// grant's id again for someone else: the second grant's claim is refused,
/// so it is never sent (SQS would drop it as the first's duplicate). The
/// re-drive sends every other grant, and drops that shard for a rebuild
/// from the claims (which know the first grant is on its way).
#[tokio::test]
async fn a_re_drive_sends_what_it_claimed_and_drops_the_shard_that_minted_a_claimed_id_again() {
    let w = world();
    let def = coupon(10, 2);
    w.shards.put(&def.coupon_id, 0, 7);
    w.shards.put(&def.coupon_id, 1, 1);
    let first = grant(5, 0, "u1", NOW - 60_000);
    let again = grant(5, 0, "u2", NOW - 60_000);
    let other = grant(9, 1, "u3", NOW - 60_000);
    w.facts.claims.lock().unwrap().push(first.clone());
    w.shards.push(&again);
    w.shards.push(&other);

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert_eq!(
        *w.queue.sent.lock().unwrap(),
        vec![other],
        "the other grant is not held up"
    );
    assert!(
        w.shards.state(&def.coupon_id, 0).is_none(),
        "the shard that minted the id again is dropped for the rebuild"
    );
    assert_eq!(r.shards_rolled_back, 1);
    assert_eq!(
        *w.facts.claims.lock().unwrap(),
        vec![first, grant(9, 1, "u3", NOW - 60_000)],
        "the first grant's claim stands"
    );
}

/// On a cache whose failover may lose a told win, a home shard that
/// rolled back past a user's win counts the user one claim short and mints
/// the same ordinal again under a new id: its claim is refused (the
/// ordinal is the first grant's), it is never sent, and the user's home
/// shard is dropped; the next pass trims it from the dropped outbox
/// instead of re-driving it, and rebuilds the shard from the claims.
#[tokio::test]
async fn a_re_drive_drops_the_home_shard_that_minted_a_users_claimed_ordinal_again_and_never_sends_it() {
    let w = world();
    let def = coupon(10, 2);
    let home = crate::grab::home_shard(&UserId::parse("u1").unwrap(), 2);
    w.shards.put(&def.coupon_id, 0, 4);
    w.shards.put(&def.coupon_id, 1, 4);
    let first = grant(5, home, "u1", NOW - 90_000);
    let again = Grant {
        request_id: RequestId::parse("r-again").unwrap(),
        ..grant(6, home, "u1", NOW - 60_000)
    };
    w.facts.claims.lock().unwrap().push(first.clone());
    w.shards.push(&again);

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert!(
        w.queue.sent.lock().unwrap().is_empty(),
        "the second grant for the ordinal is never sent"
    );
    assert!(
        w.shards.state(&def.coupon_id, home).is_none(),
        "the user's home shard is dropped for the rebuild"
    );
    assert_eq!(r.shards_rolled_back, 1, "{r:?}");
    assert_eq!(
        *w.facts.claims.lock().unwrap(),
        vec![first.clone()],
        "the first grant's claim stands"
    );

    let r = w.reconciler.coupon(&def, NOW + 60_000).await.unwrap();
    assert!(w.queue.sent.lock().unwrap().is_empty(), "{r:?}");
    assert!(r.causes.iter().any(|c| c.contains("trimmed, not re-driven")), "{r:?}");
}

#[tokio::test]
async fn lost_blacklist_flags_come_back_but_never_one_an_operator_lifted() {
    let w = world();
    let (kept, lifted) = (UserId::parse("bad").unwrap(), UserId::parse("forgiven").unwrap());
    w.facts.blacklist.lock().unwrap().extend([kept.clone(), lifted.clone()]);
    w.facts.lift_after_restore.lock().unwrap().insert(lifted.clone());

    let report = w.reconciler.run().await.unwrap();

    assert_eq!(report.blacklist_restored, 1);
    let flags = w.shards.flags.lock().unwrap();
    assert!(flags.contains(&kept));
    assert!(!flags.contains(&lifted), "the lifted user's flag was cleared again");
}

#[tokio::test]
async fn a_run_visits_live_coupons_and_skips_those_past_retention() {
    let w = world();
    let live = coupon(1, 1);
    let mut old = coupon(1, 1);
    old.coupon_id = CouponId::parse("old").unwrap();
    old.grab_end_ms = NOW - 2 * 86_400_000;
    w.shards.put(&live.coupon_id, 0, 1);
    w.facts.definitions.lock().unwrap().extend([live.clone(), old]);

    let report = w.reconciler.run().await.unwrap();

    assert_eq!(report.coupons.len(), 1);
    assert!(find(&report, &live.coupon_id).is_some());
    assert!(report.is_clean());
    // The dashboard's remaining stock, per live coupon, every run.
    assert_eq!(w.metrics.total_for("StockRemaining", "c1"), 1);
    assert_eq!(w.metrics.total_for("StockRemaining", "old"), 0);
}

#[tokio::test]
async fn a_shard_behind_the_stored_definition_is_brought_up_to_it() {
    let w = world();
    let mut def = coupon(10, 2);
    def.status = CouponStatus::Offline;
    w.facts.definitions.lock().unwrap().push(def.clone());
    w.facts.versions.lock().unwrap().insert(def.coupon_id.clone(), 3);
    w.shards.put(&def.coupon_id, 0, 5);
    w.shards.put(&def.coupon_id, 1, 5);

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    for shard in 0..2 {
        let s = w.shards.state(&def.coupon_id, shard).unwrap();
        assert_eq!((s.version, s.status), (3, Some(CouponStatus::Offline)), "shard {shard}");
        assert_eq!(s.epochs, 1, "two phases: every epoch after every shard");
    }
    assert!(r.causes.iter().any(|c| c.contains("behind the stored definition")));
    let again = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert!(
        again.causes.is_empty(),
        "a current shard is left alone: {:?}",
        again.causes
    );
}

/// A grant waiting in a normal queue backlog is not sent a second time every
/// pass; once the queue is empty, one that DynamoDB still lacks was never
/// sent, and goes at once.
#[tokio::test]
async fn a_pending_grant_is_re_driven_at_once_only_when_the_queue_is_empty() {
    let w = world();
    let def = coupon(10, 1);
    w.shards.put(&def.coupon_id, 0, 9);
    w.shards.push(&grant(1, 0, "waiting", NOW - 60_000));

    *w.queue.in_flight.lock().unwrap() = Some(40);
    let backlog = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert_eq!((backlog.pending, backlog.redriven), (1, 0), "it may be in the backlog");

    *w.queue.in_flight.lock().unwrap() = Some(0);
    let empty = w.reconciler.coupon(&def, NOW).await.unwrap();
    assert_eq!((empty.pending, empty.redriven), (1, 1), "never sent: re-driven");

    *w.queue.in_flight.lock().unwrap() = Some(40);
    let old = w.reconciler.coupon(&def, NOW + 600_000).await.unwrap();
    assert_eq!(old.redriven, 1, "past the backlog horizon it goes anyway");
}

/// A grab that found the coupon's Redis state gone asks for a repair: the
/// named coupon is rebuilt once the sends decided before the loss can no
/// longer land, an unknown one is skipped, and a rebuild that must wait
/// says so (the request is retried).
#[tokio::test]
async fn a_repair_request_rebuilds_the_named_coupon_or_says_it_waits() {
    let w = world_windowed(ScriptedLedger::default(), SEND_WINDOW);
    let def = coupon(10, 1);
    w.facts.definitions.lock().unwrap().push(def.clone());
    let unknown = CouponId::parse("never-created").unwrap();

    let waiting = w
        .reconciler
        .repair(&[def.coupon_id.clone(), unknown.clone()])
        .await
        .unwrap();
    assert_eq!(waiting.coupons.len(), 1, "the unknown coupon is skipped");
    assert_eq!(waiting.coupons[0].shards_waiting, 1);
    assert!(w.shards.state(&def.coupon_id, 0).is_none());

    w.clock.set(NOW + SEND_WINDOW);
    let repaired = w
        .reconciler
        .repair(&[def.coupon_id.clone(), def.coupon_id.clone()])
        .await
        .unwrap();
    assert_eq!(repaired.coupons.len(), 1, "a coupon named twice is repaired once");
    assert_eq!(
        (repaired.coupons[0].shards_rebuilt, repaired.coupons[0].shards_waiting),
        (1, 0)
    );
    assert_eq!(w.shards.state(&def.coupon_id, 0).unwrap().stock, 10);
}

/// A node restored from a snapshot loses every coupon it held at once, and
/// one repair batch names them all: the coupons are repaired side by side,
/// so the last one's sale does not stay shut while the first is rebuilt.
/// (The first coupon's pass is held at its first read until the second's
/// pass has begun; one after another, the batch would never get there.)
#[tokio::test]
async fn a_repair_batch_repairs_its_coupons_side_by_side_not_one_after_another() {
    let w = world();
    let [first, second] = batch(&w, [10, 6]);
    let reconciler = over(&w, held_until(&w, &first, None, None));

    let report = reconciler
        .repair(&[first.coupon_id.clone(), second.coupon_id.clone()])
        .await
        .expect("both repaired");

    let rebuilt: Vec<(&str, u32)> = report
        .coupons
        .iter()
        .map(|c| (c.coupon_id.as_str(), c.shards_rebuilt))
        .collect();
    assert_eq!(rebuilt, [("c1", 1), ("c2", 1)], "in the batch's order");
    assert_eq!(w.shards.state(&first.coupon_id, 0).unwrap().stock, 10);
    assert_eq!(w.shards.state(&second.coupon_id, 0).unwrap().stock, 6);
}

/// A slow rebuild in a batch holds up only its own slot: the batch's
/// fifth coupon starts while its first is still being rebuilt. (The first
/// waits until the fifth's pass has begun; with the finished passes kept
/// behind the first as slots, the fifth would never begin.)
#[tokio::test]
async fn a_slow_rebuild_in_a_repair_batch_does_not_hold_up_the_coupons_after_it() {
    let w = world();
    let defs = batch(&w, [1, 2, 3, 4, 5, 6]);
    let facts = held_until(&w, &defs[0], Some(&defs[4]), None);

    let ids: Vec<CouponId> = defs.iter().map(|d| d.coupon_id.clone()).collect();
    let report = over(&w, facts).repair(&ids).await.expect("every coupon repaired");

    let order: Vec<&str> = report.coupons.iter().map(|c| c.coupon_id.as_str()).collect();
    assert_eq!(order, ["c1", "c2", "c3", "c4", "c5", "c6"], "in the batch's order");
    for def in &defs {
        assert_eq!(w.shards.state(&def.coupon_id, 0).unwrap().stock, def.total_stock as i64);
    }
}

/// One coupon's pass failing (its store read fails) fails the batch, so
/// the request is tried again, but does not cut the other coupon's pass
/// short: its sale is open again already.
#[tokio::test]
async fn a_pass_that_fails_in_a_repair_batch_does_not_cut_the_others_short() {
    let w = world();
    let [failing, other] = batch(&w, [10, 6]);
    let facts = held_until(&w, &other, None, Some(&failing));

    let result = over(&w, facts)
        .repair(&[failing.coupon_id.clone(), other.coupon_id.clone()])
        .await;

    assert!(result.is_err(), "the batch fails, to be tried again");
    assert!(w.shards.state(&failing.coupon_id, 0).is_none());
    assert_eq!(w.shards.state(&other.coupon_id, 0).unwrap().stock, 6, "repaired anyway");
}

/// Coupons `c1`, `c2`, ... of one shard each, with these stocks, defined
/// in the world's durable store.
fn batch<const N: usize>(w: &World, stocks: [u64; N]) -> [CouponDefinition; N] {
    let defs = std::array::from_fn(|i| CouponDefinition {
        coupon_id: CouponId::parse(&format!("c{}", i + 1)).unwrap(),
        ..coupon(stocks[i], 1)
    });
    w.facts.definitions.lock().unwrap().extend(defs.iter().cloned());
    defs
}

/// The world's durable facts, `held`'s pass waiting until `releaser`'s
/// (any other's when `None`) has begun, every read of `failing` failing.
fn held_until(
    w: &World,
    held: &CouponDefinition,
    releaser: Option<&CouponDefinition>,
    failing: Option<&CouponDefinition>,
) -> Arc<HeldUntilAnother> {
    Arc::new(HeldUntilAnother {
        inner: w.facts.clone(),
        held: held.coupon_id.clone(),
        releaser: releaser.map(|d| d.coupon_id.clone()),
        begun: std::sync::atomic::AtomicBool::new(false),
        failing: failing.map(|d| d.coupon_id.clone()),
    })
}

/// The world's reconciler, its durable facts read through `facts`.
fn over(w: &World, facts: Arc<HeldUntilAnother>) -> Reconciler {
    Reconciler::new(
        ReconcilePorts {
            facts,
            repair: w.shards.clone(),
            ledger: w.ledger.clone(),
            redrive: w.queue.clone(),
            claims: w.facts.clone(),
            blacklist: w.facts.clone(),
            flags: w.shards.clone(),
            live: w.shards.clone(),
            entries: Arc::new(crate::testing::MemoryEntries::default()),
            clock: Arc::new(w.clock.clone()),
            metrics: w.metrics.clone(),
        },
        ReconcileSettings {
            grace_ms: GRACE,
            retention_ms: 86_400_000,
            backlog_ms: 600_000,
            send_window_ms: 0,
        },
    )
}

/// The durable facts, but a pass over `held` waits at its first read
/// until a pass over another coupon (`releaser`) has begun (and gives up, failing the
/// pass, after many tries), and every read of `failing`'s definition fails.
struct HeldUntilAnother {
    inner: Arc<MemoryFacts>,
    held: CouponId,
    /// The coupon whose pass releases `held`'s (any other when `None`).
    releaser: Option<CouponId>,
    begun: std::sync::atomic::AtomicBool,
    failing: Option<CouponId>,
}

#[async_trait::async_trait]
impl DurableFacts for HeldUntilAnother {
    async fn definitions(&self) -> Result<Vec<CouponDefinition>, StoreError> {
        self.inner.definitions().await
    }
    async fn stored(&self, c: &CouponId) -> Result<Option<crate::coupon::StoredCoupon>, StoreError> {
        use std::sync::atomic::Ordering;
        if self.failing.as_ref() == Some(c) {
            self.begun.store(true, Ordering::SeqCst);
            return Err(StoreError::Conflict("the store failed this read".into()));
        }
        if *c == self.held {
            let mut tries = 0;
            while !self.begun.load(Ordering::SeqCst) {
                tries += 1;
                if tries > 10_000 {
                    return Err(StoreError::Conflict("no other coupon's pass began".into()));
                }
                tokio::task::yield_now().await;
            }
        } else if self.releaser.as_ref().is_none_or(|r| r == c) {
            self.begun.store(true, Ordering::SeqCst);
        }
        self.inner.stored(c).await
    }
    async fn issued(&self, c: &CouponId) -> Result<u64, StoreError> {
        self.inner.issued(c).await
    }
    async fn rejections(&self, c: &CouponId) -> Result<Vec<ports::RejectedGrant>, StoreError> {
        self.inner.rejections(c).await
    }
    async fn issued_grants(&self, g: &[Grant]) -> Result<std::collections::HashSet<GrantId>, StoreError> {
        self.inner.issued_grants(g).await
    }
    async fn holdings(&self, c: &CouponId) -> Result<crate::user_coupon::Holdings, StoreError> {
        self.inner.holdings(c).await
    }
    async fn claims(&self, c: &CouponId) -> Result<Vec<Grant>, StoreError> {
        self.inner.claims(c).await
    }
    async fn record_rebuild(&self, c: &CouponId, now: i64, n: u64) -> Result<(), StoreError> {
        self.inner.record_rebuild(c, now, n).await
    }
    async fn raise_high_water(&self, c: &CouponId, shard: u32, seq: u64) -> Result<(), StoreError> {
        self.inner.raise_high_water(c, shard, seq).await
    }
    async fn was_rebuilt(&self, c: &CouponId) -> Result<bool, StoreError> {
        self.inner.was_rebuilt(c).await
    }
    async fn high_water(&self, c: &CouponId) -> Result<HashMap<u32, u64>, StoreError> {
        self.inner.high_water(c).await
    }
    async fn barrier(&self, c: &CouponId) -> Result<Option<crate::barrier::BarrierRecord>, StoreError> {
        self.inner.barrier(c).await
    }
    async fn open_barrier(
        &self,
        c: &CouponId,
        r: &crate::barrier::BarrierRecord,
        replacing: Option<&str>,
    ) -> Result<bool, StoreError> {
        self.inner.open_barrier(c, r, replacing).await
    }
    async fn close_barrier(&self, c: &CouponId, id: &str) -> Result<bool, StoreError> {
        self.inner.close_barrier(c, id).await
    }
}

/// A grant whose shard no replica has acknowledged (the replica lags; a
/// failover now would promote it without the grant) is not re-driven yet:
/// issued, it would be a coupon for a unit the promoted replica sells
/// again, and for a user who may never have been told SUCCESS.
#[tokio::test]
async fn a_stale_grant_is_re_driven_only_once_a_replica_holds_its_shard() {
    let w = world_with(ScriptedLedger {
        unreplicated: true,
        ..ScriptedLedger::default()
    });
    let def = coupon(10, 1);
    w.shards.put(&def.coupon_id, 0, 7);
    w.shards.push(&grant(2, 0, "u2", NOW - 60_000));

    let r = w.reconciler.coupon(&def, NOW).await.unwrap();

    assert!(w.queue.sent.lock().unwrap().is_empty(), "nothing re-driven");
    assert_eq!((r.pending, r.redriven), (1, 0));
    assert!(r.causes.iter().any(|c| c.contains("no replica")), "{:?}", r.causes);
}
