//! The wallet use case: what a user holds, and where one of their grants is
//! (still on its way, issued, or rejected).
//!
//! The list is newest first, filtered by state as it reads now (an unused
//! coupon past its validity is EXPIRED), and paged with an opaque cursor
//! that names the last coupon of a page (its issue time and grant id), so
//! a page never repeats or skips a coupon whatever is issued meanwhile.
//!
//! A grant moves from a Redis outbox (pending) to DynamoDB (issued or
//! rejected), and the issuer and the reconciler move it while the wallet
//! reads. [`WalletService::grant_status`] reads in an order that cannot miss
//! a grant in flight: DynamoDB, then the outbox, then DynamoDB again (the
//! issuer may confirm a grant, and the reconciler trim it, between the first
//! two reads).

use std::sync::Arc;

use crate::clock::Clock;
use crate::error::StoreError;
use crate::ids::{GrantId, UserId};
use crate::user_coupon::{CouponState, GrantStatus, UserCoupon};

pub mod ports;
pub use ports::{OutboxLookup, WalletStore};

/// Coupons per page unless the caller asks for another size.
pub const DEFAULT_PAGE: usize = 20;
/// The largest page a caller may ask for.
pub const MAX_PAGE: usize = 100;

/// Where a page ends: the last coupon's issue time and grant id (the list's
/// order), so the next page starts right after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor {
    received_at_ms: i64,
    grant_id: GrantId,
}

impl Cursor {
    fn after(coupon: &UserCoupon) -> Self {
        Self {
            received_at_ms: coupon.received_at_ms,
            grant_id: coupon.grant_id.clone(),
        }
    }

    /// Parses a cursor a previous page returned; `None` for anything else.
    pub fn parse(raw: &str) -> Option<Self> {
        let (received_at_ms, grant) = crate::ids::cursor_parts(raw)?;
        if grant.len() > 200 {
            return None;
        }
        Some(Self {
            received_at_ms,
            grant_id: GrantId::parse(grant).ok()?,
        })
    }

    /// The cursor as the API hands it out (URL-safe as is).
    pub fn encode(&self) -> String {
        format!("{}~{}", self.received_at_ms, self.grant_id)
    }

    /// True if `coupon` comes after this cursor in the list's order
    /// (newest first, then by grant id).
    fn precedes(&self, coupon: &UserCoupon) -> bool {
        (coupon.received_at_ms, std::cmp::Reverse(&coupon.grant_id))
            < (self.received_at_ms, std::cmp::Reverse(&self.grant_id))
    }
}

/// Which coupons, and which page of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CouponQuery {
    /// Only coupons in this state (as they read now); all if `None`.
    pub status: Option<CouponState>,
    /// Coupons per page, 1..=[`MAX_PAGE`].
    pub limit: usize,
    /// Start after this coupon; the first page if `None`.
    pub after: Option<Cursor>,
}

impl Default for CouponQuery {
    fn default() -> Self {
        Self {
            status: None,
            limit: DEFAULT_PAGE,
            after: None,
        }
    }
}

/// One page of a user's coupons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CouponPage {
    /// The coupons, newest first, as they read now.
    pub coupons: Vec<UserCoupon>,
    /// Where the next page starts; `None` on the last page.
    pub next: Option<Cursor>,
}

/// The wallet's reads, built once per instance.
pub struct WalletService {
    store: Arc<dyn WalletStore>,
    outbox: Arc<dyn OutboxLookup>,
    clock: Arc<dyn Clock>,
}

impl WalletService {
    /// Wires the service from its two ports and the clock that decides
    /// what has expired.
    pub fn new(store: Arc<dyn WalletStore>, outbox: Arc<dyn OutboxLookup>, clock: Arc<dyn Clock>) -> Self {
        Self { store, outbox, clock }
    }

    /// One page of the user's coupons, newest first, filtered by the state
    /// they are in now.
    pub async fn coupons(&self, user: &UserId, query: &CouponQuery) -> Result<CouponPage, StoreError> {
        let now = self.clock.now_ms();
        let limit = query.limit.clamp(1, MAX_PAGE);
        let mut all = self.store.coupons(user).await?;
        all.sort_by(|a, b| {
            b.received_at_ms
                .cmp(&a.received_at_ms)
                .then_with(|| a.grant_id.cmp(&b.grant_id))
        });
        let mut matching = all
            .into_iter()
            .filter(|c| query.after.as_ref().is_none_or(|after| after.precedes(c)))
            .map(|c| c.as_of(now))
            .filter(|c| query.status.is_none_or(|s| c.status == s));
        let coupons: Vec<UserCoupon> = matching.by_ref().take(limit).collect();
        let next = match matching.next() {
            Some(_) => coupons.last().map(Cursor::after),
            None => None,
        };
        Ok(CouponPage { coupons, next })
    }

    /// Where the user's grant is, or `None` if it is not theirs (or never
    /// existed): DynamoDB, then the outbox, then DynamoDB again.
    pub async fn grant_status(&self, user: &UserId, grant: &GrantId) -> Result<Option<GrantStatus>, StoreError> {
        if let Some(s) = self.store.grant_status(user, grant).await? {
            return Ok(Some(s));
        }
        if self.outbox.is_pending(user, grant).await? {
            return Ok(Some(GrantStatus::Pending));
        }
        self.store.grant_status(user, grant).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::ids::CouponId;
    use crate::testing::{MemoryOutbox, MemoryWallet};
    use crate::user_coupon::RejectReason;

    fn service(wallet: Arc<MemoryWallet>, outbox: Arc<MemoryOutbox>) -> WalletService {
        WalletService::new(wallet, outbox, Arc::new(ManualClock::new(NOW)))
    }

    const NOW: i64 = 1_000_000;

    fn coupon(grant: &str, received: i64, valid_until: i64) -> UserCoupon {
        UserCoupon {
            coupon_id: CouponId::parse("c").unwrap(),
            ordinal: 1,
            grant_id: GrantId::parse(grant).unwrap(),
            status: CouponState::Unused,
            name: "10 off".into(),
            amount: 1_000,
            received_at_ms: received,
            valid_from_ms: 0,
            valid_until_ms: valid_until,
            order_id: None,
            used_at_ms: None,
            returned_by: Vec::new(),
            returned_at_ms: None,
            revoked_at_ms: None,
        }
    }

    fn holding(user: &UserId, coupons: Vec<UserCoupon>) -> Arc<MemoryWallet> {
        let wallet = MemoryWallet::default();
        wallet.coupons.lock().unwrap().insert(user.clone(), coupons);
        Arc::new(wallet)
    }

    #[tokio::test]
    async fn pages_walk_the_list_newest_first_without_repeating_or_skipping() {
        let user = UserId::parse("u1").unwrap();
        // Two coupons share an issue time: the grant id orders them.
        let all = vec![
            coupon("c-0-1", 100, NOW + 1),
            coupon("c-0-3", 300, NOW + 1),
            coupon("c-1-2", 200, NOW + 1),
            coupon("c-0-2", 200, NOW + 1),
            coupon("c-1-9", 50, NOW + 1),
        ];
        let wallet = service(holding(&user, all), Arc::default());
        let mut seen = Vec::new();
        let mut query = CouponQuery {
            limit: 2,
            ..CouponQuery::default()
        };
        loop {
            let page = wallet.coupons(&user, &query).await.unwrap();
            assert!(page.coupons.len() <= 2);
            seen.extend(page.coupons.iter().map(|c| c.grant_id.clone()));
            match page.next {
                // Through the wire form, as a client sends it back.
                Some(next) => query.after = Some(Cursor::parse(&next.encode()).unwrap()),
                None => break,
            }
        }
        assert_eq!(seen, ["c-0-3", "c-0-2", "c-1-2", "c-0-1", "c-1-9"]);
    }

    #[tokio::test]
    async fn an_unused_coupon_past_its_validity_reads_expired_and_filters_so() {
        let user = UserId::parse("u1").unwrap();
        let all = vec![coupon("c-0-1", 100, NOW), coupon("c-0-2", 200, NOW + 1)];
        let wallet = service(holding(&user, all), Arc::default());
        let expired = CouponQuery {
            status: Some(CouponState::Expired),
            ..CouponQuery::default()
        };
        let page = wallet.coupons(&user, &expired).await.unwrap();
        assert_eq!(page.coupons.len(), 1);
        assert_eq!(
            (page.coupons[0].grant_id.as_str(), page.coupons[0].status),
            ("c-0-1", CouponState::Expired)
        );
        assert_eq!(page.next, None);
        let unused = CouponQuery {
            status: Some(CouponState::Unused),
            ..CouponQuery::default()
        };
        let page = wallet.coupons(&user, &unused).await.unwrap();
        assert_eq!(
            page.coupons.iter().map(|c| c.grant_id.as_str()).collect::<Vec<_>>(),
            ["c-0-2"]
        );
    }

    #[test]
    fn a_cursor_is_only_what_a_page_handed_out() {
        let c = Cursor::parse("1796040000123~cpn-1-0-7").unwrap();
        assert_eq!(c.encode(), "1796040000123~cpn-1-0-7");
        for bad in [
            "",
            "~",
            "12~",
            "~g",
            "x1~g",
            "1~g h",
            "1~g~h",
            "12345678901234567~g",
            "-1~g",
        ] {
            assert!(Cursor::parse(bad).is_none(), "{bad:?}");
        }
    }

    fn grant() -> GrantId {
        GrantId::parse("c-0-7").unwrap()
    }

    #[tokio::test]
    async fn a_grant_confirmed_between_the_first_two_reads_is_still_found() {
        let user = UserId::parse("u1").unwrap();
        let wallet = Arc::new(MemoryWallet::default());
        // The outbox no longer has the grant (trimmed), and the issuer wrote
        // it just after the wallet's first read.
        let outbox = Arc::new(MemoryOutbox::default());
        let store = wallet.clone();
        let service = service(wallet.clone(), outbox.clone());
        *store.on_first_miss.lock().unwrap() = Some((user.clone(), grant(), GrantStatus::Issued));
        assert_eq!(
            service.grant_status(&user, &grant()).await.unwrap(),
            Some(GrantStatus::Issued)
        );
    }

    #[tokio::test]
    async fn a_grant_in_the_outbox_is_pending_and_only_for_its_owner() {
        let (owner, other) = (UserId::parse("u1").unwrap(), UserId::parse("u2").unwrap());
        let outbox = Arc::new(MemoryOutbox::default());
        outbox.add(&owner, grant().as_str());
        let service = service(Arc::new(MemoryWallet::default()), outbox);
        assert_eq!(
            service.grant_status(&owner, &grant()).await.unwrap(),
            Some(GrantStatus::Pending)
        );
        assert_eq!(service.grant_status(&other, &grant()).await.unwrap(), None);
    }

    #[tokio::test]
    async fn the_durable_answer_wins_over_the_outbox() {
        let user = UserId::parse("u1").unwrap();
        let wallet = Arc::new(MemoryWallet::default());
        wallet.set(&user, grant().as_str(), GrantStatus::Rejected(RejectReason::CapReached));
        let outbox = Arc::new(MemoryOutbox::default());
        outbox.add(&user, grant().as_str());
        let service = service(wallet, outbox);
        assert_eq!(
            service.grant_status(&user, &grant()).await.unwrap(),
            Some(GrantStatus::Rejected(RejectReason::CapReached))
        );
    }
}
