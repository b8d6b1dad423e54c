//! Remind me (提醒我): a user asks to be told before a coupon's sale opens,
//! or before its next release wave; at a set lead before that instant
//! (`REMINDER_LEAD_MS`, 5 minutes) each subscriber gets one
//! `CouponSaleStarting` event on the coupon event bus, which the push
//! service's rule delivers as it delivers `CouponIssued`.
//!
//! # Who sends them, and why not a schedule per coupon
//!
//! The reconciler's schedule already runs every minute over every live
//! coupon ([`ReminderSender::send_due`] is one step of its pass). An
//! EventBridge Scheduler schedule per coupon and wave would fire at the
//! exact lead, but it is state of its own to create, move (an added wave,
//! a changed window) and delete, in a second service, and one that fails
//! to be created loses every reminder of that wave silently. The pass
//! instead derives what is due from the definitions each time: a wave added
//! while the sale runs is reminded of with nothing to update, and a pass
//! that failed is followed by the next one a minute later. The price is
//! precision: a reminder arrives between the lead and the lead less one
//! schedule period before the opening (4 to 5 minutes with the defaults).
//!
//! # Exactly once per subscriber and opening
//!
//! Each event's id is `<coupon>/<user>/starting/<opensAtMs>`: the same on
//! every retry and from any pass, so the bus's consumers drop a repeat, as
//! they do for the transitions' events. A reminder remembers the opening it
//! was last sent for, marked after the bus took the event, on the condition
//! that the mark is older: two passes at once may both publish (under the
//! same id) but only one marks, and no later pass sends it again. An
//! opening already past is not reminded of (a pass that ran late past it):
//! the reminder waits for the next wave, if any.

pub mod ports;

#[cfg(test)]
mod tests;

use std::sync::Arc;

use serde::Serialize;
use tracing::{instrument, warn};

use crate::catalog::CouponRepository;
use crate::clock::Clock;
use crate::coupon::{CouponDefinition, CouponStatus};
use crate::error::StoreError;
use crate::ids::{CouponId, UserId};
use crate::notify::{yuan, Message};
pub use ports::{ReminderBus, ReminderStore};

/// How long before an opening reminders go out, by default: 5 minutes.
pub const DEFAULT_LEAD_MS: i64 = 300_000;

/// The most reminders one user may keep: a bound on what `GET
/// /me/reminders` reads (one definition per reminder).
pub const MAX_PER_USER: usize = 50;

/// A user's wish to be told before `coupon` opens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reminder {
    /// Who to tell.
    pub user: UserId,
    /// Which coupon.
    pub coupon: CouponId,
    /// When they asked.
    pub created_ms: i64,
    /// The opening (ms) it was last sent for, if any.
    pub sent_for_ms: Option<i64>,
}

/// The next instant `def` opens after `now_ms`: its window's start (or its
/// first wave, if later) while that has not come, else its next wave;
/// `None` if nothing opens again before its window ends.
pub fn next_opening(def: &CouponDefinition, now_ms: i64) -> Option<i64> {
    let first = def
        .waves
        .first()
        .map_or(def.grab_start_ms, |w| w.at_ms.max(def.grab_start_ms));
    std::iter::once(first)
        .chain(def.waves.iter().map(|w| w.at_ms))
        .filter(|&at| at > now_ms && at < def.grab_end_ms)
        .min()
}

/// A reminder as its user reads it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ReminderView {
    /// Which coupon.
    pub coupon_id: CouponId,
    /// Its name.
    pub coupon_name: String,
    /// The next opening it will be sent for (`None`: nothing opens again,
    /// or the coupon is gone or offline).
    pub opens_at_ms: Option<i64>,
    /// When the event goes out for it, at the earliest.
    pub remind_at_ms: Option<i64>,
    /// When the user asked.
    pub created_ms: i64,
}

/// Why a reminder was refused; each is a 4xx the edge maps, except
/// `Unavailable`.
#[derive(Debug, thiserror::Error)]
pub enum RemindError {
    /// No coupon of that id.
    #[error("no such coupon")]
    NotFound,
    /// Its window is over, or it is offline: nothing will open.
    #[error("the coupon's sale is over")]
    Ended,
    /// The sale is on and no wave is to come: there is nothing to remind
    /// of (a press can grab now).
    #[error("the sale is on and no release is to come")]
    NothingAhead,
    /// The user keeps [`MAX_PER_USER`] reminders already.
    #[error("at most {max} reminders")]
    TooMany {
        /// The bound.
        max: usize,
    },
    /// A store did not answer.
    #[error("store unavailable")]
    Unavailable(#[source] StoreError),
}

impl From<StoreError> for RemindError {
    fn from(e: StoreError) -> Self {
        Self::Unavailable(e)
    }
}

/// `CouponSaleStarting`: the `detail` of one reminder's event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SaleStarting {
    /// `<coupon>/<user>/starting/<opensAtMs>`: stable, so consumers drop
    /// a repeat.
    pub event_id: String,
    /// Always `CouponSaleStarting`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Who to tell.
    pub user_id: UserId,
    /// Which coupon.
    pub coupon_id: CouponId,
    /// Its name.
    pub coupon_name: String,
    /// Face value in minor units.
    pub amount: u64,
    /// The instant it opens.
    pub opens_at_ms: i64,
    /// Which release wave opens then (1-based), or `None` for a coupon
    /// without waves.
    pub wave: Option<usize>,
    /// What the push shows.
    pub message: Message,
    /// When the reminder was sent (the event's time on the bus).
    pub sent_at_ms: i64,
}

/// The event's type on the bus (EventBridge `detail-type`).
pub const SALE_STARTING: &str = "CouponSaleStarting";

impl SaleStarting {
    /// The event for `user`'s reminder of `def` opening at `opens_at_ms`,
    /// sent at `now_ms`.
    pub fn of(def: &CouponDefinition, user: &UserId, opens_at_ms: i64, now_ms: i64) -> Self {
        let minutes = ((opens_at_ms - now_ms).max(0) as u64).div_ceil(60_000).max(1);
        let name = &def.name;
        let y = yuan(def.amount);
        Self {
            event_id: format!("{}/{}/starting/{opens_at_ms}", def.coupon_id, user.as_str()),
            kind: SALE_STARTING,
            user_id: user.clone(),
            coupon_id: def.coupon_id.clone(),
            coupon_name: name.clone(),
            amount: def.amount,
            opens_at_ms,
            wave: def.waves.iter().position(|w| w.at_ms == opens_at_ms).map(|i| i + 1),
            message: Message {
                zh: format!("您关注的{name}（{y}元）{minutes}分钟后开抢，请准时参与"),
                en: format!("{name} ({y} yuan) opens in {minutes} min. Be ready!"),
            },
            sent_at_ms: now_ms,
        }
    }
}

/// What users do with their reminders.
pub struct Reminders {
    store: Arc<dyn ReminderStore>,
    coupons: Arc<dyn CouponRepository>,
    clock: Arc<dyn Clock>,
    lead_ms: i64,
}

impl Reminders {
    /// Reminders kept in `store`, judged against the definitions in
    /// `coupons`, sent `lead_ms` before each opening.
    pub fn new(
        store: Arc<dyn ReminderStore>,
        coupons: Arc<dyn CouponRepository>,
        clock: Arc<dyn Clock>,
        lead_ms: i64,
    ) -> Self {
        Self {
            store,
            coupons,
            clock,
            lead_ms,
        }
    }

    /// Asks to be told before `coupon` next opens. Idempotent: asking again
    /// answers the same reminder.
    #[instrument(skip(self), fields(user = user.as_str(), coupon = coupon.as_str()))]
    pub async fn subscribe(&self, user: &UserId, coupon: &CouponId) -> Result<ReminderView, RemindError> {
        let def = self
            .coupons
            .get_definition(coupon)
            .await?
            .ok_or(RemindError::NotFound)?;
        let now = self.clock.now_ms();
        if def.status != CouponStatus::Online || now >= def.grab_end_ms {
            return Err(RemindError::Ended);
        }
        let Some(opens) = next_opening(&def, now) else {
            return Err(RemindError::NothingAhead);
        };
        let mine = self.store.of_user(user).await?;
        if let Some(held) = mine.iter().find(|r| &r.coupon == coupon) {
            return Ok(self.view(&def, held.created_ms, Some(opens)));
        }
        if mine.len() >= MAX_PER_USER {
            return Err(RemindError::TooMany { max: MAX_PER_USER });
        }
        let reminder = Reminder {
            user: user.clone(),
            coupon: coupon.clone(),
            created_ms: now,
            sent_for_ms: None,
        };
        self.store.put(&reminder).await?;
        Ok(self.view(&def, now, Some(opens)))
    }

    /// Cancels the user's reminder for `coupon`; `Ok(false)` if there was
    /// none (a repeated cancel is not an error).
    #[instrument(skip(self), fields(user = user.as_str(), coupon = coupon.as_str()))]
    pub async fn cancel(&self, user: &UserId, coupon: &CouponId) -> Result<bool, RemindError> {
        Ok(self.store.delete(user, coupon).await?)
    }

    /// The user's reminders with the next opening of each (one definition
    /// read per reminder, at most [`MAX_PER_USER`]).
    #[instrument(skip(self), fields(user = user.as_str()))]
    pub async fn list(&self, user: &UserId) -> Result<Vec<ReminderView>, RemindError> {
        let now = self.clock.now_ms();
        let mut out = Vec::new();
        for reminder in self.store.of_user(user).await? {
            let Some(def) = self.coupons.get_definition(&reminder.coupon).await? else {
                continue;
            };
            let opens = (def.status == CouponStatus::Online)
                .then(|| next_opening(&def, now))
                .flatten();
            out.push(self.view(&def, reminder.created_ms, opens));
        }
        Ok(out)
    }

    fn view(&self, def: &CouponDefinition, created_ms: i64, opens: Option<i64>) -> ReminderView {
        ReminderView {
            coupon_id: def.coupon_id.clone(),
            coupon_name: def.name.clone(),
            opens_at_ms: opens,
            remind_at_ms: opens.map(|at| at - self.lead_ms),
            created_ms,
        }
    }
}

/// What one pass of [`ReminderSender::send_due`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SendReport {
    /// Events the bus took and whose reminder was marked.
    pub sent: u64,
    /// Taken by the bus, but another pass (or a cancel) got to the mark
    /// first: a repeat under the same id, which consumers drop.
    pub raced: u64,
    /// Refused by the bus; the next pass sends them again, if the opening
    /// has not come.
    pub failed: u64,
}

/// Sends the reminders that are due, one pass at a time (the reconciler's
/// schedule).
pub struct ReminderSender {
    store: Arc<dyn ReminderStore>,
    bus: Arc<dyn ReminderBus>,
    clock: Arc<dyn Clock>,
    lead_ms: i64,
}

impl ReminderSender {
    /// Reminders of `store` to `bus`, `lead_ms` before each opening.
    pub fn new(store: Arc<dyn ReminderStore>, bus: Arc<dyn ReminderBus>, clock: Arc<dyn Clock>, lead_ms: i64) -> Self {
        Self {
            store,
            bus,
            clock,
            lead_ms,
        }
    }

    /// For each online coupon of `defs` whose next opening is within the
    /// lead: an event for every reminder not yet sent for that opening,
    /// then its mark. A coupon whose store read fails is left to the next
    /// pass (the others go on).
    #[instrument(skip_all, fields(coupons = defs.len()))]
    pub async fn send_due(&self, defs: &[CouponDefinition]) -> SendReport {
        let mut report = SendReport::default();
        let now = self.clock.now_ms();
        for def in defs.iter().filter(|d| d.status == CouponStatus::Online) {
            let Some(opens) = next_opening(def, now).filter(|&at| at - now <= self.lead_ms) else {
                continue;
            };
            let due: Vec<Reminder> = match self.store.of_coupon(&def.coupon_id).await {
                Ok(all) => all
                    .into_iter()
                    .filter(|r| r.sent_for_ms.is_none_or(|at| at < opens))
                    .collect(),
                Err(error) => {
                    warn!(coupon = def.coupon_id.as_str(), %error, "reminders not read; the next pass sends them");
                    continue;
                }
            };
            for chunk in due.chunks(10) {
                let events: Vec<SaleStarting> = chunk
                    .iter()
                    .map(|r| SaleStarting::of(def, &r.user, opens, now))
                    .collect();
                let results = self.bus.publish(&events).await;
                for (reminder, published) in chunk.iter().zip(results) {
                    if let Err(error) = published {
                        warn!(coupon = def.coupon_id.as_str(), %error, "reminder not published; the next pass sends it");
                        report.failed += 1;
                        continue;
                    }
                    match self.store.mark_sent(&reminder.user, &def.coupon_id, opens).await {
                        Ok(true) => report.sent += 1,
                        Ok(false) => report.raced += 1,
                        Err(error) => {
                            // Published but not marked: the next pass sends
                            // it again under the same id.
                            warn!(coupon = def.coupon_id.as_str(), %error, "reminder sent but not marked");
                            report.failed += 1;
                        }
                    }
                }
            }
        }
        report
    }
}
