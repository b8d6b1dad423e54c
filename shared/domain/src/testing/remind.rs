//! Fakes of the reminders' ports: a store in memory with the conditional
//! mark, and definitions to judge against (the bus is
//! [`super::MemoryReminderBus`]).

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;

use crate::catalog::{CouponRepository, Stored};
use crate::coupon::CouponDefinition;
use crate::error::StoreError;
use crate::ids::{CouponId, UserId};
use crate::remind::{Reminder, ReminderStore};

/// Reminders by (user, coupon), in memory.
#[derive(Debug, Default)]
pub struct MemoryReminders {
    /// Every reminder.
    pub items: Mutex<BTreeMap<(String, String), Reminder>>,
    /// Refuse every read and write (the table does not answer).
    pub down: std::sync::atomic::AtomicBool,
}

impl MemoryReminders {
    fn check(&self) -> Result<(), StoreError> {
        if self.down.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(StoreError::Unavailable("reminders down".into()));
        }
        Ok(())
    }
}

fn key(user: &UserId, coupon: &CouponId) -> (String, String) {
    (user.as_str().to_owned(), coupon.as_str().to_owned())
}

#[async_trait]
impl ReminderStore for MemoryReminders {
    async fn put(&self, reminder: &Reminder) -> Result<bool, StoreError> {
        self.check()?;
        let mut items = self.items.lock().unwrap();
        let k = key(&reminder.user, &reminder.coupon);
        if items.contains_key(&k) {
            return Ok(false);
        }
        items.insert(k, reminder.clone());
        Ok(true)
    }
    async fn delete(&self, user: &UserId, coupon: &CouponId) -> Result<bool, StoreError> {
        self.check()?;
        Ok(self.items.lock().unwrap().remove(&key(user, coupon)).is_some())
    }
    async fn of_user(&self, user: &UserId) -> Result<Vec<Reminder>, StoreError> {
        self.check()?;
        let mut mine: Vec<Reminder> = self
            .items
            .lock()
            .unwrap()
            .values()
            .filter(|r| &r.user == user)
            .cloned()
            .collect();
        mine.sort_by_key(|r| r.created_ms);
        Ok(mine)
    }
    async fn of_coupon(&self, coupon: &CouponId) -> Result<Vec<Reminder>, StoreError> {
        self.check()?;
        Ok(self
            .items
            .lock()
            .unwrap()
            .values()
            .filter(|r| &r.coupon == coupon)
            .cloned()
            .collect())
    }
    async fn mark_sent(&self, user: &UserId, coupon: &CouponId, opens_at_ms: i64) -> Result<bool, StoreError> {
        self.check()?;
        let mut items = self.items.lock().unwrap();
        match items.get_mut(&key(user, coupon)) {
            Some(r) if r.sent_for_ms.is_none_or(|at| at < opens_at_ms) => {
                r.sent_for_ms = Some(opens_at_ms);
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// Definitions by coupon id, for use cases that only read them.
#[derive(Debug, Default)]
pub struct MemoryDefinitions {
    /// Every definition.
    pub defs: Mutex<BTreeMap<String, CouponDefinition>>,
}

impl MemoryDefinitions {
    /// Holding `defs`.
    pub fn with(defs: &[CouponDefinition]) -> Self {
        let store = Self::default();
        for def in defs {
            store
                .defs
                .lock()
                .unwrap()
                .insert(def.coupon_id.as_str().to_owned(), def.clone());
        }
        store
    }
}

#[async_trait]
impl CouponRepository for MemoryDefinitions {
    async fn put_definition(&self, def: &CouponDefinition) -> Result<Stored, StoreError> {
        let mut defs = self.defs.lock().unwrap();
        match defs.get(def.coupon_id.as_str()) {
            Some(held) if held == def => Ok(Stored::Same { preheated: true }),
            Some(_) => Err(StoreError::Conflict("another definition".into())),
            None => {
                defs.insert(def.coupon_id.as_str().to_owned(), def.clone());
                Ok(Stored::New)
            }
        }
    }
    async fn mark_preheated(&self, _coupon: &CouponId) -> Result<(), StoreError> {
        Ok(())
    }
    async fn get_definition(&self, coupon: &CouponId) -> Result<Option<CouponDefinition>, StoreError> {
        Ok(self.defs.lock().unwrap().get(coupon.as_str()).cloned())
    }
}
