//! Lottery mode (`mode: LOTTERY`): a fair sale for the hottest coupons.
//! During the registration window users register (one entry each, the
//! grab's eligibility and risk rules); at the draw instant the winners are
//! drawn uniformly from the entries, up to the stock, and issued through
//! the same claims, queue and issuer as grabs.
//!
//! The draw is verifiable. The coupon commits to a random seed when it is
//! created and publishes its SHA-256 ([`Seed::commitment`]); a user's rank
//! is HMAC-SHA256 keyed by the seed over their user id ([`rank`]), and the
//! winners are the entries with the smallest ranks ([`draw`]). Nobody can
//! choose a rank without the seed, which stays secret until the draw, and
//! anyone holding the revealed seed and the entry list can recompute the
//! winners (`couponctl verify-draw`). The arithmetic here is pure; the
//! registration is a use case of the grab (`grab/entry.rs`), the draw one
//! of the reconciler (`reconcile/draw.rs`), each over [`ports::Entries`].

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt;

use hmac::{Hmac, KeyInit, Mac};
use sha2::{Digest, Sha256};

use crate::ids::UserId;

pub mod ports;

/// The request id every winner's claim is made under: one per user and
/// coupon, so a draw run again (after a crash, or twice at once) finds each
/// winner's claim and replays its grant instead of taking a second unit.
pub const DRAW_REQUEST: &str = "lottery-draw";

/// How long after the registration window closes the draw may start at the
/// earliest: a registration admitted at the window's last instant has this
/// long to reach DynamoDB (its write is bounded by the SDK's timeouts, far
/// below), and one that comes later is refused by the draw's freeze anyway.
pub const DRAW_SETTLE_MS: i64 = 10_000;

/// How long after its draw instant a lottery coupon's winners are issued
/// (and its Redis state kept, rebuilt and reconciled): the draw's claims
/// are accepted in `[drawAtMs, drawAtMs + this)`.
pub const DRAW_WINDOW_MS: i64 = 3_600_000;

/// A draw's seed: 32 random bytes, committed to at creation.
#[derive(Clone, PartialEq, Eq)]
pub struct Seed([u8; 32]);

impl Seed {
    /// The seed from its bytes (the adapter draws them from the OS).
    pub fn from_bytes(bytes: [u8; 32]) -> Self {
        Self(bytes)
    }

    /// Parses the 64 lowercase or uppercase hex digits the coupon stores
    /// and reveals; `None` for anything else.
    pub fn from_hex(raw: &str) -> Option<Self> {
        let raw = raw.trim().as_bytes();
        if raw.len() != 64 {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (i, pair) in raw.chunks(2).enumerate() {
            let hi = (pair[0] as char).to_digit(16)?;
            let lo = (pair[1] as char).to_digit(16)?;
            bytes[i] = (hi * 16 + lo) as u8;
        }
        Some(Self(bytes))
    }

    /// The seed as 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// What the coupon publishes before registration opens: the SHA-256 of
    /// the seed's bytes, in hex. Revealing a seed whose commitment differs
    /// proves the draw was not the one promised.
    pub fn commitment(&self) -> String {
        hex(&Sha256::digest(self.0))
    }
}

impl fmt::Debug for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // A seed is secret until its draw: logs get its commitment only.
        write!(f, "Seed(commitment {})", self.commitment())
    }
}

/// A user's place in the draw: smaller draws first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Rank([u8; 32]);

impl Rank {
    /// The rank in hex, as `couponctl verify-draw` prints it.
    pub fn to_hex(&self) -> String {
        hex(&self.0)
    }

    /// Parses [`Self::to_hex`].
    pub fn from_hex(raw: &str) -> Option<Self> {
        Seed::from_hex(raw).map(|s| Self(s.0))
    }
}

/// HMAC-SHA256 keyed by the seed over the user id's bytes.
pub fn rank(seed: &Seed, user: &UserId) -> Rank {
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&seed.0).expect("HMAC takes a key of any length");
    mac.update(user.as_str().as_bytes());
    Rank(mac.finalize().into_bytes().into())
}

/// The outcome of a draw, the same for every run over the same entries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drawing {
    /// The winners, smallest rank first.
    pub winners: Vec<UserId>,
    /// The largest winning rank: a user won if their rank is at most this
    /// (`None` when nobody won). Stored with the result, so a user's answer
    /// needs one hash, not the entry list.
    pub threshold: Option<Rank>,
    /// How many distinct entries took part.
    pub entries: u64,
}

/// Draws up to `places` winners from `entries` (duplicates count once):
/// the smallest ranks, ties (which SHA-256 makes as good as impossible)
/// broken by user id. Keeps `places` candidates in memory, whatever the
/// number of entries.
pub fn draw(seed: &Seed, entries: impl IntoIterator<Item = UserId>, places: u64) -> Drawing {
    #[derive(PartialEq, Eq)]
    struct Candidate(Rank, UserId);
    impl Ord for Candidate {
        fn cmp(&self, other: &Self) -> Ordering {
            (self.0, &self.1).cmp(&(other.0, &other.1))
        }
    }
    impl PartialOrd for Candidate {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }
    let places = usize::try_from(places).unwrap_or(usize::MAX);
    let mut best: BinaryHeap<Candidate> = BinaryHeap::new();
    let mut seen = std::collections::HashSet::new();
    for user in entries {
        if !seen.insert(user.clone()) {
            continue;
        }
        let candidate = Candidate(rank(seed, &user), user);
        if best.len() < places {
            best.push(candidate);
        } else if best.peek().is_some_and(|worst| candidate < *worst) {
            best.pop();
            best.push(candidate);
        }
    }
    let winners: Vec<Candidate> = best.into_sorted_vec();
    Drawing {
        threshold: winners.last().map(|c| c.0),
        winners: winners.into_iter().map(|c| c.1).collect(),
        entries: seen.len() as u64,
    }
}

/// Whether `user` won a draw whose largest winning rank was `threshold`.
pub fn won(seed: &Seed, user: &UserId, threshold: Option<&Rank>) -> bool {
    threshold.is_some_and(|t| rank(seed, user) <= *t)
}

/// What a recomputation of a draw found: the winners the revealed seed and
/// the entries give, against the users who hold the coupon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// The seed's commitment, to compare with the one published before
    /// the registration opened.
    pub commitment: String,
    /// The draw recomputed.
    pub drawing: Drawing,
    /// Recomputed winners who hold no coupon (still on their way, or lost).
    pub missing: Vec<UserId>,
    /// Holders the recomputation did not pick.
    pub extra: Vec<UserId>,
}

impl Verdict {
    /// True if the holders are exactly the recomputed winners.
    pub fn agrees(&self) -> bool {
        self.missing.is_empty() && self.extra.is_empty()
    }
}

/// Recomputes a draw from its revealed `seed` and `entries`, for `places`
/// units, and compares the winners with `holders` (who hold the coupon).
pub fn verify(
    seed: &Seed,
    entries: impl IntoIterator<Item = UserId>,
    places: u64,
    holders: impl IntoIterator<Item = UserId>,
) -> Verdict {
    let drawing = draw(seed, entries, places);
    let holders: std::collections::BTreeSet<UserId> = holders.into_iter().collect();
    let winners: std::collections::BTreeSet<UserId> = drawing.winners.iter().cloned().collect();
    Verdict {
        commitment: seed.commitment(),
        missing: winners.difference(&holders).cloned().collect(),
        extra: holders.difference(&winners).cloned().collect(),
        drawing,
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests;
