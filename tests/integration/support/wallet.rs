//! The wallet function on the harness's stores.

use coupon_adapters::dynamodb::DynamoWallet;
use coupon_domain::ids::UserId;
use coupon_domain::user_coupon::UserCoupon;
use coupon_domain::wallet::WalletStore;

use super::events::{decode, request, Event, Resp};
use super::harness::Harness;

impl Harness {
    /// The user's coupons in DynamoDB, of this harness's coupons (user names
    /// repeat across test runs; coupon ids never do).
    pub async fn coupons_of(&self, user: &str) -> Vec<UserCoupon> {
        let own = self.own.lock().unwrap().clone();
        DynamoWallet::new(self.tables.clone())
            .coupons(&UserId::parse(user).unwrap())
            .await
            .unwrap()
            .into_iter()
            .filter(|c| own.contains(&c.coupon_id))
            .collect()
    }

    /// The wallet function as deployed.
    pub fn wallet(&self) -> wallet::Wallet {
        let config = wallet::Config {
            redis: self.config.redis.clone(),
            tables: self.stack.tables.clone(),
            dynamodb: self.config.sqs,
            http: self.config.http.clone(),
            reminder_lead_ms: coupon_domain::remind::DEFAULT_LEAD_MS,
        };
        wallet::wire(
            &config,
            wallet::Clients {
                redis: self.redis.clone(),
                dynamodb: self.stack.ddb.clone(),
                clock: std::sync::Arc::new(self.clock.clone()),
                origin: None,
            },
        )
    }

    /// A GET through the wallet handler as `user` (`path` may carry a
    /// query string).
    pub async fn wallet_get(&self, path: &str, user: &str) -> Resp {
        self.wallet_call("GET", path, user).await
    }

    /// A `method` call of `path` through the wallet handler as `user`.
    pub async fn wallet_call(&self, method: &str, path: &str, user: &str) -> Resp {
        let (path, query) = path.split_once('?').unwrap_or((path, ""));
        let event = Event::grab("x", user, "r")
            .method(method)
            .path(path)
            .query(query)
            .body("")
            .build();
        decode(
            wallet::handle(&self.wallet(), request(&event))
                .await
                .expect("infallible"),
        )
    }
}
