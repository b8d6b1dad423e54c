//! A lottery's draw, run by the reconciler's pass once the coupon's draw
//! instant has come (and its shards are all there): the entries frozen in
//! DynamoDB, the winners drawn from them (`crate::lottery::draw`), each
//! winner's unit claimed on their home shard under the draw's request id
//! (`ClaimStep::Draw`, borrowing from the other shards as a press does),
//! the grants sent with the pass's re-drives, and the result recorded,
//! which reveals the seed.
//!
//! Safe to run twice at once and to crash half way: the frozen entries and
//! the seed give the same winners every time, and a winner's claim made
//! before is found under its request id and replayed, never made twice;
//! the stock bounds the winners as it bounds presses.

use tracing::info;

use crate::coupon::{CouponDefinition, Mode};
use crate::error::StoreError;
use crate::grab::finish_borrow;
use crate::grab::home_shard;
use crate::grab::ports::{Claim, ClaimReply, ClaimStep, Recorded};
use crate::grant::{Grant, GrantRecord};
use crate::ids::{RequestId, UserId};
use crate::lottery::ports::Drawn;
use crate::lottery::{draw, DRAW_REQUEST};
use crate::outcome::Rejection;

use super::{CouponReport, Reconciler};

impl Reconciler {
    /// Draws `def`'s winners if it is a lottery whose draw is due and not
    /// recorded yet; their grants are added to `grants` (sent by the pass).
    pub(super) async fn draw_lottery(
        &self,
        def: &CouponDefinition,
        now: i64,
        grants: &mut Vec<Grant>,
        r: &mut CouponReport,
    ) -> Result<(), StoreError> {
        let Some(draw_at) = def.draw_at_ms else {
            return Ok(());
        };
        if def.mode != Mode::Lottery || now < draw_at || now >= def.sells_until_ms() {
            return Ok(());
        }
        let coupon = &def.coupon_id;
        let Some(lottery) = self.ports.entries.lottery(coupon).await? else {
            return Ok(());
        };
        if let Some(drawn) = &lottery.drawn {
            // Drawn, and every winner holds their coupon: done. Until then
            // the winners are claimed again each pass: replays of the
            // claims made, and new ones for units a loss or a rollback took
            // back after the draw was recorded.
            if self.ports.facts.issued(coupon).await? >= drawn.winners {
                return Ok(());
            }
            let drawing = draw(&lottery.seed, self.all_entries(def).await?, drawn.places);
            return self.claim_winners(def, &drawing.winners, now, grants).await;
        }
        let lottery = self.ports.entries.freeze(coupon, def.shards, now).await?;
        let drawing = draw(&lottery.seed, self.all_entries(def).await?, def.total_stock);
        self.claim_winners(def, &drawing.winners, now, grants).await?;
        let drawn = Drawn {
            at_ms: now,
            entries: drawing.entries,
            winners: drawing.winners.len() as u64,
            places: def.total_stock,
            threshold: drawing.threshold,
        };
        self.ports.entries.record_draw(coupon, &drawn).await?;
        info!(coupon = %coupon, entries = drawn.entries, winners = drawn.winners, "lottery drawn");
        r.causes.push(format!(
            "lottery drawn: {} winner(s) of {} entr{}; the seed is revealed",
            drawn.winners,
            drawn.entries,
            if drawn.entries == 1 { "y" } else { "ies" }
        ));
        Ok(())
    }

    /// Every entry of the coupon, every shard's.
    async fn all_entries(&self, def: &CouponDefinition) -> Result<Vec<UserId>, StoreError> {
        let mut entries = Vec::new();
        for shard in 0..def.shards {
            entries.extend(self.ports.entries.entries(&def.coupon_id, shard).await?);
        }
        Ok(entries)
    }

    /// Each winner's unit, claimed (or replayed), its grant added to
    /// `grants` as it is minted, so a failure half way still sends those.
    async fn claim_winners(
        &self,
        def: &CouponDefinition,
        winners: &[UserId],
        now: i64,
        grants: &mut Vec<Grant>,
    ) -> Result<(), StoreError> {
        let request = RequestId::parse(DRAW_REQUEST).map_err(|e| StoreError::Protocol {
            what: "lottery draw",
            detail: e.to_string(),
        })?;
        for user in winners {
            let Some(record) = self.claim_winner(def, user, &request, now).await? else {
                continue;
            };
            grants.push(Grant {
                grant_id: record.grant_id,
                coupon_id: def.coupon_id.clone(),
                user_id: user.clone(),
                ordinal: record.ordinal,
                request_id: request.clone(),
                shard: record.shard,
                granted_at_ms: record.granted_at_ms,
            });
        }
        Ok(())
    }

    /// One winner's unit: claimed on their home shard (or replayed), and
    /// borrowed from the others when it has none left. `None` for a
    /// winner who holds their unit already but whose claim's record has
    /// expired: their grant is in DynamoDB, or in the outbox, which
    /// re-drives it.
    async fn claim_winner(
        &self,
        def: &CouponDefinition,
        user: &UserId,
        request: &RequestId,
        now: i64,
    ) -> Result<Option<GrantRecord>, StoreError> {
        let claim = Claim {
            coupon: &def.coupon_id,
            home_shard: home_shard(user, def.shards),
            user,
            level: 0,
            request,
            device: None,
            now_ms: now,
        };
        let refused = |what: String| StoreError::Protocol {
            what: "lottery draw",
            detail: format!("winner {user}: {what}"),
        };
        match self.ports.ledger.claim(&claim, ClaimStep::Draw).await? {
            ClaimReply::Won(rec) | ClaimReply::Replay(Recorded::Won(rec)) => Ok(Some(rec)),
            ClaimReply::Borrow { ordinal, at_ms } | ClaimReply::Replay(Recorded::Borrowing { ordinal, at_ms }) => {
                finish_borrow(
                    self.ports.ledger.as_ref(),
                    self.ports.metrics.as_ref(),
                    &claim,
                    def.shards,
                    ordinal,
                    at_ms,
                )
                .await?
                .map(Some)
                .map_err(|reason| refused(format!("{reason:?}")))
            }
            ClaimReply::Rejected(Rejection::AlreadyClaimed) => Ok(None),
            other => Err(refused(format!("{other:?}"))),
        }
    }
}
