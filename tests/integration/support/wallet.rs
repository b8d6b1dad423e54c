//! The wallet function on the harness's stores.

use coupon_adapters::dynamodb::DynamoWallet;
use coupon_domain::ids::UserId;
use coupon_domain::issuance::UserCoupon;
use coupon_domain::wallet::WalletStore;
use lambda_http::Body;

use super::events::{Event, Resp};
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
        };
        wallet::wire(
            &config,
            wallet::Clients {
                redis: self.redis.clone(),
                dynamodb: self.stack.ddb.clone(),
            },
        )
    }

    /// A GET through the wallet handler as `user`.
    pub async fn wallet_get(&self, path: &str, user: &str) -> Resp {
        let event = Event::grab("x", user, "r").method("GET").path(path).body("").build();
        let req = lambda_http::request::from_str(&event.to_string()).expect("event");
        let resp = wallet::handle(&self.wallet(), req).await.expect("infallible");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = match resp.body() {
            Body::Text(t) => serde_json::from_str(t).expect("JSON body"),
            other => panic!("unexpected body {other:?}"),
        };
        Resp { status, body, headers }
    }
}
