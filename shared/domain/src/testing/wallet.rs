//! Fakes of the wallet's ports.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use async_trait::async_trait;

use crate::error::StoreError;
use crate::ids::{GrantId, UserId};
use crate::user_coupon::{GrantStatus, UserCoupon};
use crate::wallet::ports::{OutboxLookup, WalletStore};

/// The durable side: coupons and grant statuses per user.
#[derive(Default)]
pub struct MemoryWallet {
    /// Coupons per user, newest first.
    pub coupons: Mutex<HashMap<UserId, Vec<UserCoupon>>>,
    /// Known grant statuses per (user, grant id).
    pub statuses: Mutex<HashMap<(UserId, GrantId), GrantStatus>>,
    /// A status that appears right after the first read that misses it
    /// (the issuer confirming a grant while the wallet reads).
    pub on_first_miss: Mutex<Option<(UserId, GrantId, GrantStatus)>>,
}

impl MemoryWallet {
    /// Records a grant's status for its owner.
    pub fn set(&self, user: &UserId, grant_id: &str, status: GrantStatus) {
        self.statuses
            .lock()
            .unwrap()
            .insert((user.clone(), GrantId::parse(grant_id).expect("a grant id")), status);
    }
}

#[async_trait]
impl WalletStore for MemoryWallet {
    async fn coupons(&self, user: &UserId) -> Result<Vec<UserCoupon>, StoreError> {
        Ok(self.coupons.lock().unwrap().get(user).cloned().unwrap_or_default())
    }

    async fn grant_status(&self, user: &UserId, grant: &GrantId) -> Result<Option<GrantStatus>, StoreError> {
        let key = (user.clone(), grant.clone());
        let found = self.statuses.lock().unwrap().get(&key).copied();
        if found.is_none() {
            if let Some((u, g, s)) = self.on_first_miss.lock().unwrap().take() {
                self.set(&u, g.as_str(), s);
            }
        }
        Ok(found)
    }
}

/// Grants still in an outbox, per (user, grant id).
#[derive(Default)]
pub struct MemoryOutbox {
    /// What is pending.
    pub pending: Mutex<HashSet<(UserId, GrantId)>>,
}

impl MemoryOutbox {
    /// Puts a grant of `user` in the outbox.
    pub fn add(&self, user: &UserId, grant_id: &str) {
        self.pending
            .lock()
            .unwrap()
            .insert((user.clone(), GrantId::parse(grant_id).expect("a grant id")));
    }
}

#[async_trait]
impl OutboxLookup for MemoryOutbox {
    async fn is_pending(&self, user: &UserId, grant: &GrantId) -> Result<bool, StoreError> {
        Ok(self.pending.lock().unwrap().contains(&(user.clone(), grant.clone())))
    }
}
