//! The wallet use case: what a user holds, and where one of their grants is
//! (still on its way, issued, or rejected).
//!
//! A grant moves from a Redis outbox (pending) to DynamoDB (issued or
//! rejected), and the issuer and the reconciler move it while the wallet
//! reads. [`WalletService::grant_status`] reads in an order that cannot miss
//! a grant in flight: DynamoDB, then the outbox, then DynamoDB again (the
//! issuer may confirm a grant, and the reconciler trim it, between the first
//! two reads).

use std::sync::Arc;

use crate::error::StoreError;
use crate::ids::UserId;
use crate::issuance::{GrantRef, GrantStatus, UserCoupon};

pub mod ports;
pub use ports::{OutboxLookup, WalletStore};

/// The wallet's reads, built once per instance.
pub struct WalletService {
    store: Arc<dyn WalletStore>,
    outbox: Arc<dyn OutboxLookup>,
}

impl WalletService {
    /// Wires the service from its two ports.
    pub fn new(store: Arc<dyn WalletStore>, outbox: Arc<dyn OutboxLookup>) -> Self {
        Self { store, outbox }
    }

    /// The user's coupons, newest first.
    pub async fn coupons(&self, user: &UserId) -> Result<Vec<UserCoupon>, StoreError> {
        self.store.coupons(user).await
    }

    /// Where the user's grant is, or `None` if it is not theirs (or never
    /// existed): DynamoDB, then the outbox, then DynamoDB again.
    pub async fn grant_status(&self, user: &UserId, grant: &GrantRef) -> Result<Option<GrantStatus>, StoreError> {
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
    use crate::issuance::RejectReason;
    use crate::testing::{MemoryOutbox, MemoryWallet};

    fn grant() -> GrantRef {
        GrantRef::parse("c-0-7").unwrap()
    }

    #[tokio::test]
    async fn a_grant_confirmed_between_the_first_two_reads_is_still_found() {
        let user = UserId::parse("u1").unwrap();
        let wallet = Arc::new(MemoryWallet::default());
        // The outbox no longer has the grant (trimmed), and the issuer wrote
        // it just after the wallet's first read.
        let outbox = Arc::new(MemoryOutbox::default());
        let store = wallet.clone();
        let service = WalletService::new(wallet.clone(), outbox.clone());
        *store.on_first_miss.lock().unwrap() = Some((user.clone(), grant().grant_id, GrantStatus::Issued));
        assert_eq!(
            service.grant_status(&user, &grant()).await.unwrap(),
            Some(GrantStatus::Issued)
        );
    }

    #[tokio::test]
    async fn a_grant_in_the_outbox_is_pending_and_only_for_its_owner() {
        let (owner, other) = (UserId::parse("u1").unwrap(), UserId::parse("u2").unwrap());
        let outbox = Arc::new(MemoryOutbox::default());
        outbox.add(&owner, &grant().grant_id);
        let service = WalletService::new(Arc::new(MemoryWallet::default()), outbox);
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
        wallet.set(
            &user,
            &grant().grant_id,
            GrantStatus::Rejected(RejectReason::CapReached),
        );
        let outbox = Arc::new(MemoryOutbox::default());
        outbox.add(&user, &grant().grant_id);
        let service = WalletService::new(wallet, outbox);
        assert_eq!(
            service.grant_status(&user, &grant()).await.unwrap(),
            Some(GrantStatus::Rejected(RejectReason::CapReached))
        );
    }
}
