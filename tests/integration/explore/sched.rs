//! The explorer's scheduler: every port call of every actor (a press, the
//! issuer, a reconciler pass) waits at a gate, and the scheduler lets one
//! through at a time, chosen by a seeded generator once every live actor
//! stands at a gate or has finished. So the order of the steps, and the
//! faults injected between them, are a function of the seed alone: the
//! same seed replays the same schedule.
//!
//! Between two steps the world may also be faulted (the driver in
//! `world.rs` asks [`Scheduler::pick`] for the next step, decides a fault,
//! then releases the step): the scheduler only orders, counts and tells.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;

use tokio::sync::{oneshot, Notify};

/// Who takes a step: an index the world gives each actor it starts.
pub type ActorId = usize;

/// A seeded generator (SplitMix64): small, fast, and the same on every
/// machine, so a seed replays anywhere.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Uniform in `lo..=hi`.
    pub fn between(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }

    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// A step waiting at its gate.
struct Parked {
    label: String,
    go: oneshot::Sender<()>,
}

#[derive(Default)]
struct State {
    live: BTreeSet<ActorId>,
    parked: BTreeMap<ActorId, Parked>,
    /// Actors stalled for the next so many picks (see [`Scheduler::stall`]).
    stalled: BTreeMap<ActorId, u32>,
    story: Vec<String>,
    reached: BTreeMap<String, u64>,
}

/// The gate every wrapped port call passes, and the order of the steps.
pub struct Scheduler {
    state: Mutex<State>,
    changed: Notify,
}

/// The step the scheduler chose: release it with [`Chosen::go`], or drop
/// it (the actor's instance dies at that point: its operation never runs).
pub struct Chosen {
    pub actor: ActorId,
    pub label: String,
    go: oneshot::Sender<()>,
}

impl Chosen {
    pub fn go(self) {
        let _ = self.go.send(());
    }
}

impl Scheduler {
    pub fn new() -> Self {
        Self {
            state: Mutex::new(State::default()),
            changed: Notify::new(),
        }
    }

    /// `actor` is about to run: the scheduler waits for it at its gates.
    pub fn start(&self, actor: ActorId) {
        self.state.lock().unwrap().live.insert(actor);
    }

    /// `actor` is done (or dead): the scheduler no longer waits for it.
    pub fn finish(&self, actor: ActorId) {
        let mut s = self.state.lock().unwrap();
        s.live.remove(&actor);
        s.parked.remove(&actor);
        s.stalled.remove(&actor);
        drop(s);
        self.changed.notify_one();
    }

    /// The gate: waits until the scheduler lets `actor`'s step `label` go.
    /// Never returns for a step whose instance the scheduler killed (its
    /// task is aborted).
    pub async fn step(&self, actor: ActorId, label: String) {
        let (go, wait) = oneshot::channel();
        {
            let mut s = self.state.lock().unwrap();
            s.parked.insert(actor, Parked { label, go });
        }
        self.changed.notify_one();
        if wait.await.is_err() {
            std::future::pending::<()>().await;
        }
    }

    /// Once every live actor stands at a gate: one of them, by `rng`;
    /// `None` when no actor is live.
    pub async fn pick(&self, rng: &mut Rng) -> Option<Chosen> {
        loop {
            let notified = self.changed.notified();
            {
                let mut s = self.state.lock().unwrap();
                if s.live.is_empty() {
                    return None;
                }
                if s.parked.len() == s.live.len() {
                    // A stalled actor waits while another can go.
                    let mut ready: Vec<ActorId> = s
                        .parked
                        .keys()
                        .filter(|a| !s.stalled.contains_key(a))
                        .copied()
                        .collect();
                    if ready.is_empty() {
                        ready = s.parked.keys().copied().collect();
                    }
                    let index = rng.below(ready.len() as u64) as usize;
                    let actor = ready[index];
                    s.stalled.retain(|_, picks| {
                        *picks -= 1;
                        *picks > 0
                    });
                    let parked = s.parked.remove(&actor).expect("parked");
                    return Some(Chosen {
                        actor,
                        label: parked.label,
                        go: parked.go,
                    });
                }
            }
            notified.await;
        }
    }

    /// The chosen step does not go now: its instance stalls (a long pause,
    /// a slow network) and the step waits at its gate while `picks` other
    /// steps go (fewer when nothing else is ready).
    pub fn stall(&self, chosen: Chosen, picks: u32) {
        let mut s = self.state.lock().unwrap();
        s.parked.insert(
            chosen.actor,
            Parked {
                label: chosen.label,
                go: chosen.go,
            },
        );
        s.stalled.insert(chosen.actor, picks);
        drop(s);
        self.changed.notify_one();
    }

    /// The actors parked at a gate whose label `at` matches stall for the
    /// next `picks` picks (their calls wait on a node that is down); the
    /// labels of their steps.
    pub fn stall_parked(&self, at: impl Fn(&str) -> bool, picks: u32) -> Vec<String> {
        let mut s = self.state.lock().unwrap();
        let waiting: Vec<(ActorId, String)> = s
            .parked
            .iter()
            .filter(|(_, p)| at(&p.label))
            .map(|(a, p)| (*a, p.label.clone()))
            .collect();
        for (actor, _) in &waiting {
            s.stalled.insert(*actor, picks);
        }
        waiting.into_iter().map(|(_, label)| label).collect()
    }

    /// One line of the schedule's story.
    pub fn tell(&self, line: String) {
        self.state.lock().unwrap().story.push(line);
    }

    /// Counts a protocol branch as reached.
    pub fn reached(&self, branch: &str) {
        *self.state.lock().unwrap().reached.entry(branch.to_owned()).or_default() += 1;
    }

    pub fn story(&self) -> Vec<String> {
        self.state.lock().unwrap().story.clone()
    }

    pub fn branches(&self) -> BTreeMap<String, u64> {
        self.state.lock().unwrap().reached.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_is_the_same_for_a_seed_and_differs_between_seeds() {
        let a: Vec<u64> = (0..4).scan(Rng::new(7), |r, _| Some(r.next_u64())).collect();
        let b: Vec<u64> = (0..4).scan(Rng::new(7), |r, _| Some(r.next_u64())).collect();
        let c: Vec<u64> = (0..4).scan(Rng::new(8), |r, _| Some(r.next_u64())).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        let mut r = Rng::new(1);
        assert!((0..1000).map(|_| r.between(-2, 2)).all(|v| (-2..=2).contains(&v)));
    }
}
