//! One schedule of the explorer: a small sale on the real scripts (a real
//! `redis-server` or `valkey-server`) and the real use cases (the grab,
//! the issuer, the reconciler's pass, each over its real adapters, moto
//! for DynamoDB and SQS), every port call at the scheduler's gate, faults
//! between any two steps; then every fault heals, the clients finish their
//! retries as the documented client does, the queue drains, the reconciler
//! passes until quiet, and the promise is judged.
//!
//! What a seed decides: the world (stock 1-8, 2-4 shards, 2-6 users, a
//! per-user limit of 1-3, how many presses and second presses, each
//! instance's clock skew), the order of every step, and the faults: a
//! shard's Redis state lost, an instance dying at a step (its client
//! retries the same request id on a fresh instance), a press sent twice at
//! once, release waves crossed by instances whose clocks disagree, a
//! message off the queue until a re-drive, the issuer dying after its
//! write and before its delete (the message is delivered again), the
//! clock jumping ahead, the issuer paused for the whole schedule (a
//! backlog: every grant still on the queue when shards are lost or
//! restarted and repaired).
//!
//! In a fifth of the seeds (a stream of its own, so the other seeds replay
//! as before) the sale is a lottery instead: the users register (twins
//! register twice at once), the window closes, and the reconciler's pass
//! draws and claims each winner's unit on its home shard, borrowing from
//! the others, among the same faults; then the draw is judged as
//! `couponctl verify-draw` judges it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use coupon_domain::clock::{Clock, ManualClock};
use coupon_domain::coupon::CouponDefinition;
use coupon_domain::grab::{EntryOutcome, EntryRequest, GrabError, GrabRequest};
use coupon_domain::ids::{DeviceId, RequestId, UserId};
use coupon_domain::issuance::IssueLedger;
use coupon_domain::outcome::{GrabOutcome, Rejection, RiskReason};
use tokio::task::JoinHandle;

use super::actors::{entrant_actor, issuer_actor, reconciler_actor, repair_actor, twin_actor, user_actor};
use super::gated::{Gate, GatedClaims, GatedLedger, GatedPublisher, GatedRisk};
use super::heal::{fault, flush_shard, heal, judge, node_fault};
use super::nodes::Nodes;
use super::sched::{ActorId, Rng, Scheduler};
use crate::support::{Harness, Options};

/// The small world a seed draws.
#[derive(Debug, Clone)]
pub struct Shape {
    pub stock: u64,
    pub shards: u32,
    pub users: usize,
    pub per_user_limit: u32,
    /// Presses each user makes (each a request id of its own).
    pub presses: Vec<u32>,
    /// Percent chance of a fault before each step.
    pub fault_percent: u64,
    /// Release waves: (ms after the sale opens, units), or none.
    pub waves: Vec<(i64, u64)>,
    pub rollover: bool,
    /// Users whose first press has a twin: the same request id sent again
    /// from another instance while the first is in flight.
    pub twins: Vec<usize>,
    /// Each user's device (`Some(d)`: the press comes from device `d`,
    /// which family members share), or none.
    pub devices: Vec<Option<u32>>,
    /// The device rules: distinct users and claims per device per day.
    pub device_limits: (u32, u32),
    /// A lottery beside the sale: the users who register for it (from
    /// their devices, while the sale runs).
    pub entrants: Vec<usize>,
}

impl Shape {
    pub fn draw(rng: &mut Rng) -> Self {
        let users = rng.between(2, 6) as usize;
        let per_user_limit = rng.between(1, 3) as u32;
        let stock = rng.between(1, 8) as u64;
        let waves = if stock >= 2 && rng.chance(35) {
            let first = rng.between(1, stock as i64 - 1) as u64;
            vec![(rng.between(0, 800), first), (rng.between(1_200, 3_500), stock - first)]
        } else {
            Vec::new()
        };
        Self {
            stock,
            shards: rng.between(2, 4).min(stock as i64) as u32,
            users,
            per_user_limit,
            presses: (0..users)
                .map(|_| rng.between(1, per_user_limit as i64 + 1) as u32)
                .collect(),
            fault_percent: rng.between(2, 8) as u64,
            waves,
            rollover: rng.chance(50),
            twins: (0..users).filter(|_| rng.chance(25)).collect(),
            devices: if rng.chance(40) {
                (0..users)
                    .map(|_| rng.chance(60).then(|| rng.below(2) as u32))
                    .collect()
            } else {
                vec![None; users]
            },
            device_limits: (rng.between(2, 4) as u32, rng.between(1, 3) as u32),
            entrants: if rng.chance(30) {
                (0..users).filter(|_| rng.chance(60)).collect()
            } else {
                Vec::new()
            },
        }
    }

    /// The risk rules the world runs with: the device's as drawn, a user's
    /// daily claims above anything a user presses here, no IP rule.
    fn risk(&self) -> coupon_domain::config::RiskLimits {
        let mut options = Options::without_ip_limit();
        options.risk.daily_claims_per_user = 5;
        options.risk.users_per_device = self.device_limits.0;
        options.risk.claims_per_device = self.device_limits.1;
        options.risk
    }
}

/// A clock skewed from the world's by a fixed offset (an instance whose
/// clock runs ahead or behind).
struct Skewed {
    base: ManualClock,
    offset_ms: i64,
}

impl Clock for Skewed {
    fn now_ms(&self) -> i64 {
        self.base.now_ms() + self.offset_ms
    }
}

/// What one user lived: every SUCCESS heard per request, the final answer
/// of each press, and the press in progress.
#[derive(Debug, Default)]
pub(super) struct UserLog {
    pub(super) told: BTreeMap<String, BTreeSet<String>>,
    pub(super) finals: BTreeMap<String, String>,
    /// Presses not yet decided, in order (the first is in progress).
    pub(super) to_press: Vec<String>,
    pub(super) attempts: u32,
    /// Attempts under way, per request: a press another copy decided may
    /// still be running (and hold its risk places) on an instance of its
    /// own; one that died holds them until a retry gives them back.
    pub(super) attempting: BTreeMap<String, u32>,
}

/// What a schedule found.
#[derive(Debug, Default)]
pub struct Outcome {
    pub seed: u64,
    pub shape: String,
    pub violations: Vec<String>,
    pub story: Vec<String>,
    pub steps: u64,
    pub faults: BTreeMap<String, u64>,
    pub branches: BTreeMap<String, u64>,
}

pub(super) struct World {
    pub(super) h: Harness,
    pub(super) def: CouponDefinition,
    pub(super) sched: Arc<Scheduler>,
    pub(super) users: Vec<Arc<Mutex<UserLog>>>,
    pub(super) tasks: Mutex<HashMap<ActorId, (Role, JoinHandle<()>)>>,
    pub(super) next_actor: Mutex<ActorId>,
    /// The issuer dies after its write, before its delete, this many
    /// times (a fault sets it; the issuer takes it).
    pub(super) skip_deletes: Mutex<u32>,
    /// Receipt handles the issuer took (deleted or not).
    pub(super) in_flight: Mutex<Vec<String>>,
    /// Messages taken off the queue by a fault (as the dead-letter queue
    /// takes a message after its receives), `(body, group)`: they come
    /// back later (a re-drive), never lost for good: SQS keeps what it
    /// accepted, and that is what a SUCCESS stands on.
    pub(super) held_back: Mutex<Vec<(String, String)>>,
    /// The lottery beside the sale, if the seed drew one.
    pub(super) lottery: Option<CouponDefinition>,
    pub(super) devices: Vec<Option<u32>>,
    pub(super) claims_per_device: u32,
    /// What the judge finds while the schedule runs (a refusal no rule
    /// allowed at its instant).
    pub(super) seen: Mutex<Vec<String>>,
    /// The shards' nodes: their replicas and snapshots.
    pub(super) nodes: Arc<Nodes>,
}

/// The draw worlds' random stream's constant (see `schedule`).
const DRAW_STREAM: u64 = 0x0D2A_3019;

/// A win's send budget, as deployed (`GRANT_SEND_BUDGET_MS`).
pub(super) const SEND_BUDGET_MS: i64 = 2_000;
/// The reconciler's wait for sends decided before a loss, as deployed
/// (`RECONCILE_SEND_WINDOW_MS`).
pub(super) const SEND_WINDOW_MS: i64 = 3_000;

/// What an actor is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// A user's presses, one after the other.
    User(usize),
    /// A second copy of a user's press.
    Twin(usize),
    /// A user's lottery registration.
    Entrant(usize),
    Issuer,
    Reconciler,
    /// The repair request's invocation after a restart.
    Repair,
}

pub(super) fn user_name(u: usize) -> String {
    format!("u{u}")
}

impl World {
    pub(super) fn gate(&self, actor: ActorId, who: String) -> Gate {
        Gate {
            sched: self.sched.clone(),
            actor,
            who,
            clock: self.h.clock.clone(),
            nodes: self.nodes.clone(),
        }
    }

    pub(super) fn new_actor(&self) -> ActorId {
        let mut next = self.next_actor.lock().unwrap();
        *next += 1;
        self.sched.start(*next);
        *next
    }

    /// A fresh grab instance for `actor` (its own sold-out memory), its
    /// ports behind the gate, its clock skewed by `offset_ms`.
    pub(super) fn grab_instance(&self, actor: ActorId, who: String, offset_ms: i64) -> grab::GrabApp {
        let clients = grab::Clients {
            redis: self.h.redis.clone(),
            sqs: self.h.stack.sqs.clone(),
            dynamodb: self.h.stack.ddb.clone(),
            clock: Arc::new(Skewed {
                base: self.h.clock.clone(),
                offset_ms,
            }),
            metrics: self.h.metrics.clone(),
            origin: None,
        };
        let config = self.grab_config();
        let mut ports = grab::ports(&config, clients);
        let gate = self.gate(actor, who);
        ports.grab.ledger = Arc::new(GatedLedger {
            inner: ports.grab.ledger,
            gate: gate.clone(),
        });
        ports.grab.risk = Arc::new(GatedRisk {
            inner: ports.grab.risk,
            gate: gate.clone(),
        });
        ports.grab.claims = Arc::new(GatedClaims {
            inner: ports.grab.claims,
            gate: gate.clone(),
        });
        ports.grab.publisher = Arc::new(GatedPublisher {
            inner: ports.grab.publisher,
            gate,
        });
        grab::wire_ports(&config, ports)
    }

    /// The grab's settings as deployed where they meet the reconciler's:
    /// a win's send is over within `SEND_BUDGET_MS` (2 s), and the
    /// reconciler waits `SEND_WINDOW_MS` (3 s) for sends decided before a
    /// loss, more than the budget and a skew (the harness's own budget is
    /// stretched for a loaded emulator, which would break that rule).
    pub(super) fn grab_config(&self) -> grab::Config {
        let mut config = self.h.config.clone();
        config.send_budget_ms = SEND_BUDGET_MS;
        config
    }

    pub(super) fn issuer(&self, ledger: Arc<dyn IssueLedger>) -> issuer::Issuer {
        let config = issuer::Config {
            tables: self.h.stack.tables.clone(),
            dynamodb: self.h.config.sqs,
            concurrency: 1,
            metrics_namespace: "Test".into(),
        };
        let clients = issuer::Clients {
            dynamodb: self.h.stack.ddb.clone(),
            clock: Arc::new(self.h.clock.clone()),
            metrics: self.h.metrics.clone(),
        };
        issuer::wire_with(&config, clients, ledger)
    }

    pub(super) fn request(&self, user: usize, request: &str) -> GrabRequest {
        GrabRequest {
            coupon: self.def.coupon_id.clone(),
            user: UserId::parse(&user_name(user)).unwrap(),
            level: 0,
            request: RequestId::parse(request).unwrap(),
            ip: None,
            device: self.device(user),
        }
    }

    pub(super) fn device(&self, user: usize) -> Option<DeviceId> {
        self.devices[user].map(|d| DeviceId::parse(&format!("d{d}-{}", self.def.coupon_id)).unwrap())
    }

    /// True when the sale itself is a lottery (a draw world).
    pub(super) fn draws(&self) -> bool {
        self.def.mode == coupon_domain::coupon::Mode::Lottery
    }

    /// `user`'s registration: for the sale itself in a draw world, else
    /// for the lottery beside it, if any.
    pub(super) fn entry(&self, user: usize) -> Option<EntryRequest> {
        let coupon = if self.draws() {
            &self.def
        } else {
            self.lottery.as_ref()?
        };
        Some(EntryRequest {
            coupon: coupon.coupon_id.clone(),
            user: UserId::parse(&user_name(user)).unwrap(),
            level: 0,
            ip: None,
            device: self.device(user),
        })
    }

    /// A refusal for the device's claims must come from claims: the
    /// device's wins so far and the presses in flight on it (each may hold
    /// a place) reach the limit. A lottery registration is not a claim.
    fn judge_device_refusal(&self, user: usize, request: &str) {
        let Some(device) = self.devices[user] else { return };
        let (mut won, mut pressing) = (0u32, 0u32);
        for (v, log) in self.users.iter().enumerate() {
            if self.devices[v] != Some(device) {
                continue;
            }
            let log = log.lock().unwrap();
            won += log.finals.values().filter(|f| f.starts_with("SUCCESS")).count() as u32;
            // Every undecided press on the device may hold a place there,
            // and so may every attempt still running (or dead) of a press
            // decided by another copy, the user's own other presses
            // included; the refused one not.
            // (A won press's place is counted with its win.)
            let running = log
                .attempting
                .iter()
                .filter(|(r, &n)| n > 0 && !log.finals.get(*r).is_some_and(|f| f.starts_with("SUCCESS")))
                .map(|(r, _)| r);
            let held: BTreeSet<&String> = log.to_press.iter().chain(running).collect();
            pressing += held.into_iter().filter(|r| v != user || r.as_str() != request).count() as u32;
        }
        if won + pressing < self.claims_per_device {
            self.seen.lock().unwrap().push(format!(
                "{} {request} was refused DEVICE_CLAIM_LIMIT on d{device} (limit {}) while the device had \
                 {won} win(s) and {pressing} other press(es) in flight",
                user_name(user),
                self.claims_per_device
            ));
        }
    }

    /// Records a registration's answer (a draw world's press); true when
    /// it is decided.
    pub(super) fn heard_entry(&self, user: usize, request: &str, answer: &Result<EntryOutcome, GrabError>) -> bool {
        let final_answer = match answer {
            Ok(EntryOutcome::Registered { .. }) => "REGISTERED".to_owned(),
            Ok(EntryOutcome::Rejected(reason)) => format!("{reason:?}"),
            Err(_) => return false,
        };
        let mut log = self.users[user].lock().unwrap();
        log.finals.insert(request.to_owned(), final_answer);
        log.to_press.retain(|r| r != request);
        true
    }

    /// Sends `user`'s press `request` through `app`, records the answer,
    /// and returns whether it is decided and how the story tells it: a
    /// grab, or in a draw world a registration.
    pub(super) async fn press(&self, app: &grab::GrabApp, user: usize, request: &str) -> (bool, String) {
        fn told<T: std::fmt::Debug>(answer: &Result<T, GrabError>) -> String {
            match answer {
                Ok(o) => format!("{o:?}").chars().take(120).collect(),
                Err(e) => format!("retryable: {e} {e:?}"),
            }
        }
        if let (true, Some(entry)) = (self.draws(), self.entry(user)) {
            let answer = app.service.enter(&entry).await;
            return (self.heard_entry(user, request, &answer), told(&answer));
        }
        *self.users[user]
            .lock()
            .unwrap()
            .attempting
            .entry(request.to_owned())
            .or_default() += 1;
        let answer = app.service.grab(&self.request(user, request)).await;
        if let Some(n) = self.users[user].lock().unwrap().attempting.get_mut(request) {
            *n -= 1;
        }
        (self.heard(user, request, &answer), told(&answer))
    }

    /// Records an answer; true when the press is decided.
    pub(super) fn heard(&self, user: usize, request: &str, answer: &Result<GrabOutcome, GrabError>) -> bool {
        if let Ok(GrabOutcome::Rejected {
            reason: Rejection::Risk(RiskReason::DeviceClaimLimit),
            ..
        }) = answer
        {
            self.judge_device_refusal(user, request);
        }
        let mut log = self.users[user].lock().unwrap();
        let decided = match answer {
            Ok(GrabOutcome::Won { grant, .. }) => {
                log.told
                    .entry(request.to_owned())
                    .or_default()
                    .insert(grant.grant_id.to_string());
                log.finals
                    .insert(request.to_owned(), format!("SUCCESS {}", grant.grant_id));
                true
            }
            Ok(GrabOutcome::Rejected { reason, .. }) => {
                log.finals.insert(request.to_owned(), format!("{reason:?}"));
                true
            }
            Err(_) => false,
        };
        if decided {
            log.to_press.retain(|r| r != request);
        }
        decided
    }
}

/// Whether the run's engine is the Serverless stand-in
/// (`REDIS_ENGINE=valkey-serverless`): its worlds wait for no replica, and
/// their replicas lag as the seed picks (nodes.rs).
pub(super) fn serverless() -> bool {
    std::env::var("REDIS_ENGINE").is_ok_and(|e| e == "valkey-serverless")
}

/// One seed's schedule, judged. Its actors are tasks of one thread (a
/// `LocalSet`): the scheduler runs one step at a time anyway.
///
/// `redis_url` is a primary with a replica in sync: every win, borrow step
/// and re-drive waits for the replica's acknowledgement as deployed
/// (`REDIS_REPLICA_ACKS=1`), so the fence (`lua/fence.lua`) runs, and the
/// failovers of `nodes.rs` meet it.
pub async fn explore(seed: u64, redis_url: &str) -> Outcome {
    let local = tokio::task::LocalSet::new();
    let run = local.run_until(schedule(seed, redis_url));
    match tokio::time::timeout(std::time::Duration::from_secs(180), run).await {
        Ok(outcome) => outcome,
        Err(_) => Outcome {
            seed,
            violations: vec!["the schedule did not end within 180 s (an actor hung outside its gates)".into()],
            ..Outcome::default()
        },
    }
}

async fn schedule(seed: u64, redis_url: &str) -> Outcome {
    let mut rng = Rng::new(seed);
    let shape = Shape::draw(&mut rng);
    let h = Harness::with(Options {
        risk: shape.risk(),
        redis_url: Some(redis_url.to_owned()),
        // Nothing to wait for on Serverless: its told wins are kept by the
        // claims that guard ordinals (CACHE_DURABILITY=none).
        replica_acks: if serverless() { 0 } else { 1 },
        ..Options::without_ip_limit()
    })
    .await;
    let mut def = h.coupon(shape.stock);
    def.shards = shape.shards;
    def.per_user_limit = shape.per_user_limit;
    if !shape.waves.is_empty() {
        let opens = h.clock.now_ms();
        def.waves = shape
            .waves
            .iter()
            .map(|&(after, units)| coupon_domain::coupon::Wave {
                at_ms: opens + after,
                units,
            })
            .collect();
        def.rollover = shape.rollover;
    }
    // A draw world: the sale is a lottery whose window closes within the
    // schedule and whose draw the reconciler's actor runs (a stream of its
    // own; its constant leaves the kept seeds' worlds as they were found).
    let mut draw_rng = Rng::new(seed.rotate_left(29) ^ DRAW_STREAM);
    let draw_world = draw_rng.chance(20);
    let mut shape = shape;
    if draw_world {
        let closes = h.clock.now_ms() + draw_rng.between(1_000, 4_000);
        // Fewer units than users, on two shards or more: winners homed on
        // a shard with too few units borrow from the others.
        def.total_stock = draw_rng.between(1, shape.users as i64 - 1) as u64;
        def.shards = draw_rng.between(2, 4).min(def.total_stock as i64).max(1) as u32;
        shape.stock = def.total_stock;
        shape.shards = def.shards;
        def.mode = coupon_domain::coupon::Mode::Lottery;
        def.per_user_limit = 1;
        def.waves.clear();
        def.rollover = true;
        def.grab_end_ms = closes;
        def.draw_at_ms = Some(closes + coupon_domain::lottery::DRAW_SETTLE_MS);
        shape.per_user_limit = 1;
        shape.presses = vec![1; shape.users];
        shape.waves.clear();
        shape.entrants.clear();
    }
    h.create(&def).await;
    let nodes = Arc::new(Nodes::new(h.redis.clone(), def.coupon_id.clone(), def.shards, serverless()).await);
    let lottery = if shape.entrants.is_empty() {
        None
    } else {
        let mut lottery = h.coupon(rng.between(1, 3) as u64);
        lottery.shards = rng.between(1, 2).min(lottery.total_stock as i64) as u32;
        lottery.mode = coupon_domain::coupon::Mode::Lottery;
        lottery.draw_at_ms = Some(lottery.grab_end_ms + coupon_domain::lottery::DRAW_SETTLE_MS);
        h.create(&lottery).await;
        Some(lottery)
    };
    let sched = Arc::new(Scheduler::new());
    let users = (0..shape.users)
        .map(|u| {
            Arc::new(Mutex::new(UserLog {
                to_press: if draw_world {
                    vec!["r1".to_owned()]
                } else {
                    (1..=shape.presses[u]).map(|p| format!("r{p}")).collect()
                },
                ..UserLog::default()
            }))
        })
        .collect();
    let world = Arc::new(World {
        h,
        def,
        sched: sched.clone(),
        users,
        tasks: Mutex::new(HashMap::new()),
        next_actor: Mutex::new(0),
        skip_deletes: Mutex::new(0),
        in_flight: Mutex::new(Vec::new()),
        held_back: Mutex::new(Vec::new()),
        lottery,
        devices: shape.devices.clone(),
        claims_per_device: shape.device_limits.1,
        seen: Mutex::new(Vec::new()),
        nodes,
    });
    let mut outcome = Outcome {
        seed,
        shape: format!("{shape:?}"),
        ..Outcome::default()
    };
    sched.tell(format!(
        "seed {seed}: {shape:?}, coupon {}{}",
        world.def.coupon_id,
        if draw_world {
            format!(
                ", a lottery: registrations until {} ms, the draw at {} ms",
                world.def.grab_end_ms - world.h.clock.now_ms(),
                world.def.draw_at_ms.unwrap_or_default() - world.h.clock.now_ms()
            )
        } else {
            String::new()
        }
    ));

    // The actors.
    let spawn_user = |world: &Arc<World>, rng: &mut Rng, user: usize| {
        let actor = world.new_actor();
        let offset = if rng.chance(30) { rng.between(-2_000, 2_000) } else { 0 };
        if offset != 0 {
            world.sched.tell(format!(
                "{}: a fresh instance whose clock is off by {offset} ms",
                user_name(user)
            ));
        }
        let task = tokio::task::spawn_local(user_actor(world.clone(), actor, user, offset));
        world.tasks.lock().unwrap().insert(actor, (Role::User(user), task));
    };
    for u in 0..shape.users {
        spawn_user(&world, &mut rng, u);
    }
    for &u in &shape.twins {
        let actor = world.new_actor();
        let offset = if rng.chance(50) { rng.between(-2_000, 2_000) } else { 0 };
        world.sched.tell(format!(
            "{}: r1 is sent twice, the copy from an instance whose clock is off by {offset} ms",
            user_name(u)
        ));
        let task = tokio::task::spawn_local(twin_actor(world.clone(), actor, u, "r1".into(), offset));
        world.tasks.lock().unwrap().insert(actor, (Role::Twin(u), task));
    }
    for &u in &shape.entrants {
        let actor = world.new_actor();
        let task = tokio::task::spawn_local(entrant_actor(world.clone(), actor, u));
        world.tasks.lock().unwrap().insert(actor, (Role::Entrant(u), task));
    }
    // A paused issuer (throttled to nothing, or its event source disabled),
    // in a quarter of the seeds, from a stream of its own so the others
    // replay as before: every grant of the schedule stays on the queue
    // through its faults and repairs, and reaches DynamoDB only in healing.
    let rounds = rng.between(2, 8) as u32;
    let paused = Rng::new(seed.rotate_left(41) ^ 0xBAC4_1065).chance(25);
    if paused {
        sched.tell("the issuer is paused: every grant stays on the queue until healing".into());
    }
    let issuer = world.new_actor();
    let issuer_task = tokio::task::spawn_local(issuer_actor(world.clone(), issuer, if paused { 0 } else { rounds }));
    world.tasks.lock().unwrap().insert(issuer, (Role::Issuer, issuer_task));
    let reconciler = world.new_actor();
    let reconciler_task =
        tokio::task::spawn_local(reconciler_actor(world.clone(), reconciler, rng.between(0, 2) as u32, {
            // A draw world's reconciler draws in the schedule, among the
            // faults, in two to four passes (a lost shard waits for its rebuild).
            if draw_world {
                draw_rng.between(2, 4) as u32
            } else {
                0
            }
        }));
    world
        .tasks
        .lock()
        .unwrap()
        .insert(reconciler, (Role::Reconciler, reconciler_task));

    // The nodes' faults (failovers, restarts from snapshots, a message
    // delivered twice) come from a stream of their own, in half the seeds:
    // a seed without them replays the schedule it had before they existed.
    let mut node_rng = Rng::new(seed.rotate_left(17) ^ 0x0DE5_FA17);
    let node_faults = node_rng.chance(50);
    if node_faults {
        sched.tell("the shards' nodes may fail over or restart from a snapshot; SQS may deliver twice".into());
    }

    // Stalled instances come from a stream of their own, in half the seeds.
    let mut stall_rng = Rng::new(seed.rotate_left(29) ^ 0x57A1_1ED5);
    let stalls = stall_rng.chance(50);
    if stalls {
        sched.tell("an instance may stall mid-operation while the others go on".into());
    }

    // A node restarted from a snapshot older than a loss of its data (the
    // loss rewrote no file: a node replaced empty, its disk kept), from a
    // stream of its own in a quarter of the seeds: the state restored was
    // superseded by the rebuild after the loss, which knew nothing of what
    // the snapshot holds and no other.
    let mut stale_rng = Rng::new(seed.rotate_left(37) ^ 0x05A1_E0DE);
    let stale = stale_rng.chance(25);
    if stale {
        sched.tell("a shard's node may restart from a snapshot saved before it lost its data".into());
    }

    // A borrow's home node losing its data while the borrow is at its
    // settle, the borrow's instance paused long enough for the rebuild to
    // come first, from a stream of its own in a quarter of the seeds: the
    // settle then finds the reservation gone on a shard that is whole
    // again (settle.lua's GONE), which a loss at a random step almost
    // never lines up.
    let mut settle_rng = Rng::new(seed.rotate_left(43) ^ 0x5E77_1E05);
    let settle_losses = settle_rng.chance(25);
    if settle_losses {
        sched.tell("a borrow's home node may lose its data while the borrow is at its settle".into());
    }

    // A press sent again after its home's node restarted (a client that
    // never heard the first answer, a request duplicated on the way), from
    // a stream of its own in half the seeds, whose nodes also save
    // snapshots more often (so a restart brings back recent wins): its
    // record may be one the snapshot brought back, which the state may
    // replay before the check only on its grant's claim.
    let mut resend_rng = Rng::new(seed.rotate_left(47) ^ 0x2E5E_4D00);
    let resends = resend_rng.chance(50);

    // The schedule: a step at a time, a fault now and then between two.
    let mut repairing = false;
    while let Some(chosen) = sched.pick(&mut rng).await {
        outcome.steps += 1;
        world.h.clock.advance(rng.between(0, 40));
        if node_faults && node_rng.chance(shape.fault_percent) {
            let (fault, shard) = node_fault(&world, &mut node_rng).await;
            if fault == "restart_from_snapshot" {
                restarted(&world, &mut node_rng, shard, &mut repairing);
                if resends {
                    resend_after_restart(&world, &mut resend_rng, shard);
                }
            }
            *outcome.faults.entry(fault).or_default() += 1;
        }
        if node_faults && resends && resend_rng.chance(shape.fault_percent * 2) {
            let shard = resend_rng.below(world.def.shards as u64) as u32;
            let n = world.nodes.save(shard).await;
            sched.tell(format!("shard {shard}'s node saves a snapshot ({n} keys)"));
            *outcome.faults.entry("snapshot_saved".into()).or_default() += 1;
        }
        if stale && stale_rng.chance(shape.fault_percent) {
            // The stream saves, loses and restarts shards itself, so a
            // snapshot saved before a loss comes back after the rebuild.
            let shard = stale_rng.below(world.def.shards as u64) as u32;
            let fault = if world.nodes.snapshot_predates_a_loss(shard) && stale_rng.chance(60) {
                let (kept, lost) = world.nodes.restart(shard).await;
                sched.tell(format!(
                    "FAULT: shard {shard}'s node restarts from a snapshot saved before it last lost its data \
                     ({kept} keys; {lost} written since are gone; a new replication history)"
                ));
                restarted(&world, &mut stale_rng, shard, &mut repairing);
                if resends {
                    resend_after_restart(&world, &mut resend_rng, shard);
                }
                "restart_from_snapshot_before_loss"
            } else if stale_rng.chance(50) {
                let n = world.nodes.save(shard).await;
                sched.tell(format!("shard {shard}'s node saves a snapshot ({n} keys)"));
                "snapshot_saved"
            } else {
                let n = flush_shard(&world, shard).await;
                sched.tell(format!("FAULT: shard {shard}'s node loses its data ({n} keys)"));
                "shard_lost"
            };
            *outcome.faults.entry(fault.into()).or_default() += 1;
        }
        if let Some(home) = settle_losses
            .then(|| settling_on(&chosen.label))
            .flatten()
            .filter(|_| settle_rng.chance(40))
        {
            // The loss's first claim asks for a repair (an invocation of
            // its own, which lets the send window pass and rebuilds);
            // the pause outlasts it unless the world runs out of steps.
            let n = flush_shard(&world, home).await;
            let picks = settle_rng.between(150, 400) as u32;
            sched.tell(format!(
                "FAULT: shard {home}'s node loses its data ({n} keys) while `{}` pauses for {picks} steps",
                chosen.label
            ));
            let actor = world.new_actor();
            let task = tokio::task::spawn_local(repair_actor(world.clone(), actor, 2));
            world.tasks.lock().unwrap().insert(actor, (Role::Repair, task));
            *outcome.faults.entry("home_lost_at_settle".into()).or_default() += 1;
            sched.stall(chosen, picks);
            continue;
        }
        if stalls && stall_rng.chance(shape.fault_percent) {
            // The chosen step's instance stalls (a pause, a slow network):
            // its call waits at the gate while others go, and lands late.
            let picks = stall_length(&mut stall_rng);
            sched.tell(format!(
                "FAULT: the instance at `{}` stalls for {picks} steps",
                chosen.label
            ));
            *outcome.faults.entry("stall".into()).or_default() += 1;
            sched.stall(chosen, picks);
            continue;
        }
        if rng.chance(shape.fault_percent) {
            let fault = fault(&world, &mut rng, chosen.actor).await;
            *outcome.faults.entry(fault.clone()).or_default() += 1;
            if fault == "crash" {
                // The chosen step's instance dies there: its step never runs.
                let owner = world.tasks.lock().unwrap().remove(&chosen.actor);
                sched.tell(format!(
                    "FAULT: the instance at `{}` dies; its step never runs",
                    chosen.label
                ));
                sched.finish(chosen.actor);
                drop(chosen);
                if let Some((role, task)) = owner {
                    task.abort();
                    // The user's client retries on a fresh instance.
                    if let Role::User(user) = role {
                        spawn_user(&world, &mut rng, user);
                    }
                }
                continue;
            }
        }
        chosen.go();
        if outcome.steps > 2_000 {
            outcome.violations.push("the schedule did not end in 2000 steps".into());
            break;
        }
    }
    for (_, (_, task)) in world.tasks.lock().unwrap().drain() {
        task.abort();
    }

    heal(&world).await;
    outcome.violations.extend(judge(&world).await);
    outcome.story = sched.story();
    outcome.branches = sched.branches();
    outcome
}

/// What a restart of `shard`'s node brings about: the calls waiting on it
/// wait out the restart while the rest of the world goes on, and the first
/// restart starts the repair request's invocation (the presses on the
/// restarted shard ask for one), which follows the coupon through the send
/// window.
fn restarted(world: &Arc<World>, rng: &mut Rng, shard: u32, repairing: &mut bool) {
    let picks = stall_length(rng);
    let on_node = format!("shard {shard}");
    for label in world.sched.stall_parked(|l| l.contains(&on_node), picks) {
        world
            .sched
            .tell(format!("`{label}` waits on the restarting node for {picks} steps"));
    }
    if !*repairing {
        *repairing = true;
        let actor = world.new_actor();
        let passes = rng.between(1, 2) as u32;
        let task = tokio::task::spawn_local(repair_actor(world.clone(), actor, passes));
        world.tasks.lock().unwrap().insert(actor, (Role::Repair, task));
    }
}

/// A press already sent by a user homed on the restarted `shard` is sent
/// again (a copy on an instance of its own), half the time: the retry of
/// a client that never heard the first answer.
fn resend_after_restart(world: &Arc<World>, rng: &mut Rng, shard: u32) {
    if world.draws() || !rng.chance(50) {
        return;
    }
    let mut sent = Vec::new();
    for (u, log) in world.users.iter().enumerate() {
        let user = UserId::parse(&user_name(u)).unwrap();
        if coupon_domain::grab::home_shard(&user, world.def.shards) != shard {
            continue;
        }
        let log = log.lock().unwrap();
        let pressed = log.finals.keys().chain(log.attempting.keys()).cloned();
        sent.extend(pressed.collect::<BTreeSet<_>>().into_iter().map(|r| (u, r)));
    }
    if sent.is_empty() {
        return;
    }
    let (user, request) = sent.swap_remove(rng.below(sent.len() as u64) as usize);
    world
        .sched
        .tell(format!("{} {request} is sent again after the restart", user_name(user)));
    let actor = world.new_actor();
    let task = tokio::task::spawn_local(twin_actor(world.clone(), actor, user, request, 0));
    world.tasks.lock().unwrap().insert(actor, (Role::Twin(user), task));
}

/// The home shard of a settle step (`ledger.settle(.. on shard N)`).
fn settling_on(label: &str) -> Option<u32> {
    label
        .strip_prefix("ledger.settle(")?
        .rsplit_once("on shard ")?
        .1
        .trim_end_matches(')')
        .parse()
        .ok()
}

/// How many other steps a stalled call waits for: mostly a few, now and
/// then long enough for a repair invocation to check or rebuild a shard
/// meanwhile (it lets the send window pass and reads DynamoDB).
fn stall_length(rng: &mut Rng) -> u32 {
    if rng.chance(25) {
        rng.between(40, 200) as u32
    } else {
        rng.between(3, 40) as u32
    }
}
