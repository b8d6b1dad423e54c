//! The admin use cases that act on users and on the books rather than on
//! a coupon's definition: the blacklist, a coupon revoked, a
//! reconciliation pass on demand with its report, and the audit log.

use serde_json::{json, Value};
use tracing::instrument;

use crate::audit::{AdminAction, AuditEntry, AuditTarget};
use crate::ids::{CouponId, GrantId, UserId};
use crate::reconcile::CouponReport;
use crate::user_coupon::UserCoupon;

use super::{AdminContext, AdminError, AdminService, Revoked, MAX_AUDIT_PAGE};

impl AdminService {
    /// Puts a user on (`on`) or off the blacklist: durable first, then the
    /// Redis flag the grab checks.
    #[instrument(skip_all, fields(actor = ctx.actor.as_str(), on))]
    pub async fn set_blacklisted(&self, ctx: &AdminContext, user: &UserId, on: bool) -> Result<(), AdminError> {
        let action = if on {
            AdminAction::BlacklistAdd
        } else {
            AdminAction::BlacklistRemove
        };
        let entry = self.entry(ctx, action, json!({"userId": user}));
        self.ports.blacklist.set(user, on, &entry).await?;
        self.ports.flags.set_flag(user, on).await?;
        Ok(())
    }

    /// Revokes one user's coupon (fraud, a mistake): the coupon reads
    /// REVOKED in the wallet, still counts against the user's limit (no
    /// second grab), and its unit stays issued. Audited on the coupon in the
    /// same write. Idempotent: revoking it again changes nothing and
    /// answers the same.
    #[instrument(skip_all, fields(actor = ctx.actor.as_str(), grant = %grant))]
    pub async fn revoke(
        &self,
        ctx: &AdminContext,
        user: &UserId,
        grant: &GrantId,
        reason: &str,
    ) -> Result<UserCoupon, AdminError> {
        let entry = self.entry(
            ctx,
            AdminAction::RevokeCoupon,
            json!({"userId": user, "grantId": grant.as_str(), "reason": reason}),
        );
        match self.ports.revocations.revoke(user, grant, &entry).await? {
            Revoked::Now(coupon) | Revoked::Already(coupon) => Ok(coupon),
            Revoked::NotFound => Err(AdminError::GrantNotFound),
            Revoked::Used => Err(AdminError::CouponUsed),
        }
    }

    /// Whether the user is blacklisted, and the user's latest audit entries
    /// (newest first, at most [`MAX_AUDIT_PAGE`]).
    pub async fn blacklist_entry(&self, user: &UserId) -> Result<(bool, Vec<AuditEntry>), AdminError> {
        let on = self.ports.blacklist.contains(user).await?;
        let (audit, _) = self
            .ports
            .store
            .audit(&AuditTarget::User(user.clone()), MAX_AUDIT_PAGE)
            .await?;
        Ok((on, audit))
    }

    /// Runs one reconciliation pass over the coupon now, keeps the report
    /// and records who asked.
    #[instrument(skip_all, fields(coupon = %coupon, actor = ctx.actor.as_str()))]
    pub async fn reconcile(&self, ctx: &AdminContext, coupon: &CouponId) -> Result<Value, AdminError> {
        let p = &self.ports;
        let stored = p.store.stored(coupon).await?.ok_or(AdminError::NotFound)?;
        let now = p.clock.now_ms();
        let report: CouponReport = p.reconciler.coupon(&stored.definition, now).await?;
        let report = json!({"ranAtMs": now, "ranBy": ctx.actor, "report": report});
        p.store.save_report(coupon, &report).await?;
        let entry = self.entry(
            ctx,
            AdminAction::Reconcile,
            json!({"drift": report["report"]["drift"], "redriven": report["report"]["redriven"]}),
        );
        p.store.record(&AuditTarget::Coupon(coupon.clone()), &entry).await?;
        Ok(report)
    }

    /// The coupon's latest reconciliation report.
    pub async fn last_report(&self, coupon: &CouponId) -> Result<Value, AdminError> {
        self.ports.store.stored(coupon).await?.ok_or(AdminError::NotFound)?;
        self.ports
            .store
            .last_report(coupon)
            .await?
            .ok_or(AdminError::ReportNotFound)
    }

    /// The coupon's latest `limit` audit entries, newest first, and whether
    /// there are older ones. Bounded, so a long-running campaign's log never
    /// makes an answer too large for API Gateway and Lambda.
    pub async fn audit(&self, coupon: &CouponId, limit: usize) -> Result<(Vec<AuditEntry>, bool), AdminError> {
        self.ports.store.stored(coupon).await?.ok_or(AdminError::NotFound)?;
        Ok(self
            .ports
            .store
            .audit(&AuditTarget::Coupon(coupon.clone()), limit)
            .await?)
    }
}
