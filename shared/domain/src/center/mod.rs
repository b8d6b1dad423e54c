//! The coupon center (领券中心, `GET /coupons`): the coupons on sale now
//! and coming up, each with the state of the caller's button ("grab now",
//! "claimed", "sold out", "starts at 10:00") and a coarse stock level, so
//! an app draws the page without pressing anything.
//!
//! A listing is two parts with different owners:
//!
//! - **What every caller sees alike**: the live coupons (the durable
//!   catalogue: ONLINE, window not over) and each one's stock level. An
//!   instance keeps them for [`CenterSettings::cache_ms`] and serves every
//!   caller from that copy, so a page view costs the catalogue nothing and
//!   the stock is read once per coupon per window, however many users
//!   browse. The level is coarse (`PLENTY`, `FEW`, `NONE`) and up to a
//!   window old on purpose: an exact, live count is what a script watches
//!   to time the last unit.
//! - **What only the caller sees**: one read on the caller's home shard of
//!   each listed coupon that is in its window and open to their level
//!   (`lua/standing.lua`: the grab admission's own checks, in
//!   `refusal()`, with the rate limit passed, plus the claims they hold).
//!   Never a write, never a token taken. A coupon not started yet, or above
//!   the caller's level, is decided from the definition with no read.
//!
//! The state is what a press now would hear, with one difference: a caller
//! who holds their limit sees `CLAIMED` even once the coupon sold out
//! (a press hears SOLD_OUT first; the page shows what they have). A coupon
//! the operator took offline drops out of the listing at once (the shard
//! says so) rather than after the window.
//!
//! When a shard cannot answer (Redis lost the coupon's state, or is down)
//! the coupon is still listed, with the state its definition alone gives
//! and `stock` UNKNOWN: the page stays up while the grab answers BUSY and
//! heals. When the catalogue cannot answer, the last copy is served for up
//! to [`STALE_LIMIT_MS`]; after that the listing is BUSY.
//!
//! Layout: this file holds the service, the page and the cursor; `state.rs`
//! the state rules; `ports.rs` the two ports.

use std::sync::{Arc, RwLock};

use serde::Serialize;
use tracing::{instrument, warn};

use crate::clock::Clock;
use crate::coupon::CouponDefinition;
use crate::error::StoreError;
use crate::grab::home_shard;
use crate::grab::ports::Peek;
use crate::ids::{CouponId, UserId};

pub mod ports;
mod state;
pub use ports::{LiveCoupons, Standing, Standings};
use state::{from_definition, offer, Asker};

/// Coupons per page unless the caller asks for another size.
pub const DEFAULT_PAGE: usize = 10;
/// The largest page: each listed coupon in its window costs one Redis read.
pub const MAX_PAGE: usize = 50;
/// How long a catalogue the store cannot refresh is still served.
pub const STALE_LIMIT_MS: i64 = 60_000;

/// How the center caches and grades stock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CenterSettings {
    /// `CENTER_CACHE_MS` (2000): how long an instance serves one copy of
    /// the live coupons and their stock levels.
    pub cache_ms: u64,
    /// `CENTER_FEW_PERCENT` (10): at or below this share of the total
    /// stock left, the level reads FEW.
    pub few_percent: u32,
}

impl Default for CenterSettings {
    fn default() -> Self {
        Self {
            cache_ms: 2_000,
            few_percent: 10,
        }
    }
}

/// A coarse stock level: enough to draw a bar, too coarse to time the
/// last unit by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum StockLevel {
    /// More than the FEW share left.
    Plenty,
    /// Some left, at most the FEW share.
    Few,
    /// Nothing left.
    None,
    /// The shards could not be read.
    Unknown,
}

impl StockLevel {
    /// The level of `remaining` units out of `total`.
    pub fn of(remaining: u64, total: u64, few_percent: u32) -> Self {
        if remaining == 0 {
            Self::None
        } else if u128::from(remaining) * 100 <= u128::from(total) * u128::from(few_percent) {
            Self::Few
        } else {
            Self::Plenty
        }
    }
}

/// The caller's button on one coupon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OfferState {
    /// A press now would be decided (and, stock and risk rules allowing,
    /// win).
    CanGrab,
    /// The caller holds their limit.
    Claimed,
    /// Nothing left on any shard.
    SoldOut,
    /// The window has not opened (`startsAtMs`).
    NotStarted,
    /// In the window, nothing released is left, and a wave is still to
    /// come (`nextWaveAtMs`).
    BetweenWaves,
    /// The caller's member level is below the coupon's minimum.
    NotEligible,
    /// The window closed since the listing was read.
    Ended,
    /// A lottery in its registration window: the caller registers
    /// (`POST /coupons/{couponId}/entries`) and the draw is at `drawAtMs`.
    Lottery,
}

/// One coupon of a page, as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Offer {
    /// The coupon.
    pub coupon_id: CouponId,
    /// Its name, for the page.
    pub name: String,
    /// Face value in minor units.
    pub amount: u64,
    /// The grab window, ms since the epoch (start inclusive)...
    pub grab_start_ms: i64,
    /// ...end exclusive.
    pub grab_end_ms: i64,
    /// The issued coupon's validity.
    pub valid_from_ms: i64,
    /// See [`Self::valid_from_ms`].
    pub valid_until_ms: i64,
    /// The lowest member level that may grab.
    pub min_member_level: u32,
    /// The caller's button.
    pub state: OfferState,
    /// For [`OfferState::NotStarted`]: when the window opens.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub starts_at_ms: Option<i64>,
    /// For [`OfferState::BetweenWaves`]: when the next wave is released.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_wave_at_ms: Option<i64>,
    /// For [`OfferState::Lottery`]: the draw's instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draw_at_ms: Option<i64>,
    /// Claims of this coupon the caller holds; `None` when not read (not
    /// started, not eligible, or the shard did not answer).
    pub held: Option<u32>,
    /// How many one user may hold.
    pub limit: u32,
    /// The coarse stock level.
    pub stock: StockLevel,
}

/// Where a page ends: the last coupon's window start and id (the list's
/// order), so the next page starts right after it, whatever was added or
/// removed meanwhile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CenterCursor {
    grab_start_ms: i64,
    coupon: CouponId,
}

impl CenterCursor {
    /// Parses a cursor a previous page returned; `None` for anything else.
    pub fn parse(raw: &str) -> Option<Self> {
        let (grab_start_ms, coupon) = crate::ids::cursor_parts(raw)?;
        Some(Self {
            grab_start_ms,
            coupon: CouponId::parse(coupon).ok()?,
        })
    }

    /// The cursor as the API hands it out (URL-safe as is).
    pub fn encode(&self) -> String {
        format!("{}~{}", self.grab_start_ms, self.coupon)
    }

    fn after(def: &CouponDefinition) -> Self {
        Self {
            grab_start_ms: def.grab_start_ms,
            coupon: def.coupon_id.clone(),
        }
    }

    fn precedes(&self, def: &CouponDefinition) -> bool {
        (self.grab_start_ms, &self.coupon) < (def.grab_start_ms, &def.coupon_id)
    }
}

/// Who asks, and which page.
#[derive(Debug, Clone)]
pub struct CenterQuery {
    /// From the verified identity.
    pub user: UserId,
    /// From the verified identity; 0 if the claim is absent.
    pub level: u32,
    /// Whether the verified identity carries a device id: a coupon that
    /// requires one is NOT_ELIGIBLE without it.
    pub device: bool,
    /// Coupons per page, 1..=[`MAX_PAGE`].
    pub limit: usize,
    /// Start after this coupon; the first page if `None`.
    pub after: Option<CenterCursor>,
}

/// One page of the center.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CenterPage {
    /// Soonest window first (then by id).
    pub offers: Vec<Offer>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<CenterCursor>,
}

/// The center could not be listed; the client retries.
#[derive(Debug, thiserror::Error)]
#[error("coupon catalogue unavailable")]
pub struct CenterUnavailable(#[source] pub StoreError);

/// One live coupon as the instance's copy holds it.
#[derive(Debug, Clone)]
struct Listed {
    def: CouponDefinition,
    /// `None` if its shards could not be read.
    remaining: Option<u64>,
    /// When `remaining` was read: a release wave since makes it stale.
    read_at_ms: i64,
}

#[derive(Debug)]
struct Snapshot {
    read_at_ms: i64,
    coupons: Arc<Vec<Listed>>,
}

/// The coupon center, built once per instance.
pub struct CouponCenter {
    live: Arc<dyn LiveCoupons>,
    standings: Arc<dyn Standings>,
    clock: Arc<dyn Clock>,
    settings: CenterSettings,
    copy: RwLock<Option<Snapshot>>,
}

impl CouponCenter {
    /// The center over its two ports.
    pub fn new(
        live: Arc<dyn LiveCoupons>,
        standings: Arc<dyn Standings>,
        clock: Arc<dyn Clock>,
        settings: CenterSettings,
    ) -> Self {
        Self {
            live,
            standings,
            clock,
            settings,
            copy: RwLock::new(None),
        }
    }

    /// One page of the coupons on sale and coming up, as `query.user`
    /// would find each one now.
    #[instrument(skip_all, fields(user = %query.user))]
    pub async fn page(&self, query: &CenterQuery) -> Result<CenterPage, CenterUnavailable> {
        let now_ms = self.clock.now_ms();
        let coupons = self.listing(now_ms).await?;
        let limit = query.limit.clamp(1, MAX_PAGE);
        let asker = Asker {
            level: query.level,
            device: query.device,
        };
        let mut after = coupons
            .iter()
            .filter(|c| query.after.as_ref().is_none_or(|cursor| cursor.precedes(&c.def)));
        let page: Vec<&Listed> = after.by_ref().take(limit).collect();
        let next = match after.next() {
            Some(_) => page.last().map(|c| CenterCursor::after(&c.def)),
            None => None,
        };
        // Only a coupon in its window and open to the caller's level needs
        // the shard: the rest is decided by the definition.
        let asks: Vec<Peek<'_>> = page
            .iter()
            .filter(|c| from_definition(&c.def, asker, now_ms) == OfferState::CanGrab)
            .map(|c| Peek {
                coupon: &c.def.coupon_id,
                home_shard: home_shard(&query.user, c.def.shards),
                user: &query.user,
                level: query.level,
                device: query.device,
                now_ms,
            })
            .collect();
        let mut answers = self.standings.standings(&asks).await.into_iter();
        let mut offers = Vec::with_capacity(page.len());
        for listed in page {
            let standing = if from_definition(&listed.def, asker, now_ms) == OfferState::CanGrab {
                match answers.next() {
                    Some(Ok(standing)) => Some(standing),
                    Some(Err(e)) => {
                        warn!(coupon = %listed.def.coupon_id, error = %e, "standing unread; listed from its definition");
                        None
                    }
                    None => None,
                }
            } else {
                None
            };
            if let Some(offer) = offer(listed, standing, asker, now_ms, self.settings.few_percent) {
                offers.push(offer);
            }
        }
        Ok(CenterPage { offers, next })
    }

    /// The instance's copy of the live coupons, sorted, read again once it
    /// is older than the cache window.
    async fn listing(&self, now_ms: i64) -> Result<Arc<Vec<Listed>>, CenterUnavailable> {
        let cached = {
            let copy = self.copy.read().unwrap_or_else(|e| e.into_inner());
            copy.as_ref().map(|s| (s.read_at_ms, s.coupons.clone()))
        };
        if let Some((read_at, coupons)) = &cached {
            if now_ms.saturating_sub(*read_at) < self.settings.cache_ms as i64 && now_ms >= *read_at {
                return Ok(coupons.clone());
            }
        }
        match self.read_listing(now_ms).await {
            Ok(coupons) => {
                let coupons = Arc::new(coupons);
                *self.copy.write().unwrap_or_else(|e| e.into_inner()) = Some(Snapshot {
                    read_at_ms: now_ms,
                    coupons: coupons.clone(),
                });
                Ok(coupons)
            }
            Err(e) => match cached {
                Some((read_at, coupons)) if now_ms.saturating_sub(read_at) < STALE_LIMIT_MS => {
                    warn!(error = %e, age_ms = now_ms - read_at, "catalogue unread; serving the last copy");
                    Ok(coupons)
                }
                _ => Err(CenterUnavailable(e)),
            },
        }
    }

    async fn read_listing(&self, now_ms: i64) -> Result<Vec<Listed>, StoreError> {
        let mut defs = self.live.live(now_ms).await?;
        defs.retain(|d| d.grab_end_ms > now_ms);
        defs.sort_by(|a, b| (a.grab_start_ms, &a.coupon_id).cmp(&(b.grab_start_ms, &b.coupon_id)));
        let mut coupons = Vec::with_capacity(defs.len());
        for def in defs {
            let remaining = match self.standings.remaining(&def.coupon_id, def.shards, now_ms).await {
                Ok(units) => Some(units),
                Err(e) => {
                    warn!(coupon = %def.coupon_id, error = %e, "stock unread; level UNKNOWN");
                    None
                }
            };
            coupons.push(Listed {
                def,
                remaining,
                read_at_ms: now_ms,
            });
        }
        Ok(coupons)
    }
}

#[cfg(test)]
mod tests;
