//! The order service's two routes, which share this IAM-authorized function
//! with the operators' (each caller's policy grants only its own prefix):
//! `PUT /redemptions/{orderId}` spends a user's coupon, `POST
//! /redemptions/{orderId}/return` gives it back; and the one mapping of a
//! redemption refusal to the envelope.

use coupon_domain::ids::OrderId;
use coupon_domain::redemption::{RedemptionError, Settled};
use coupon_edge::{ErrorCode, Reply};
use lambda_http::Request;
use serde::Deserialize;
use serde_json::json;

use crate::input::{body, grant_id, user_id};
use crate::AdminApp;

/// The body of both order routes.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RedemptionBody {
    user_id: String,
    grant_id: String,
}

/// `PUT /redemptions/{orderId}` (spend) or `POST .../return` (give back).
pub(crate) async fn redemption(app: &AdminApp, req: &Request, order: &str, give_back: bool) -> Reply {
    let order = match OrderId::parse(order) {
        Ok(o) => o,
        Err(e) => return Reply::invalid(e.to_string()),
    };
    let b = match body::<RedemptionBody>(req, app.edge.max_body_bytes) {
        Ok(b) => b,
        Err(r) => return *r,
    };
    let (user, grant) = match (user_id(&b.user_id), grant_id(&b.grant_id)) {
        (Err(r), _) | (_, Err(r)) => return *r,
        (Ok(u), Ok(g)) => (u, g),
    };
    let result = if give_back {
        app.redemptions.give_back(&user, &grant, &order).await
    } else {
        app.redemptions.redeem(&user, &grant, &order).await
    };
    match result {
        Ok(Settled { coupon, replayed }) => Reply::success(json!({
            "orderId": order,
            "userId": user,
            "coupon": coupon,
            "replayed": replayed,
        })),
        Err(e) => redemption_error(e),
    }
}

/// The one mapping of a redemption refusal to the envelope.
pub fn redemption_error(e: RedemptionError) -> Reply {
    match e {
        RedemptionError::NotFound => Reply::error(ErrorCode::GrantNotFound),
        RedemptionError::UsedByAnotherOrder => Reply::error(ErrorCode::CouponUsed),
        RedemptionError::NotYetValid { valid_from_ms } => Reply::error(ErrorCode::CouponNotUsable)
            .with_data(json!({"reason": "NOT_YET_VALID", "validFromMs": valid_from_ms})),
        RedemptionError::Expired => Reply::error(ErrorCode::CouponNotUsable).with_data(json!({"reason": "EXPIRED"})),
        RedemptionError::Revoked => Reply::error(ErrorCode::CouponNotUsable).with_data(json!({"reason": "REVOKED"})),
        RedemptionError::NotUsedByThisOrder => Reply::error(ErrorCode::NotUsedByOrder),
        RedemptionError::ReturnedByThisOrder => {
            Reply::error(ErrorCode::CouponNotUsable).with_data(json!({"reason": "RETURNED_BY_ORDER"}))
        }
        RedemptionError::Contended => Reply::error(ErrorCode::ConcurrentChange),
        RedemptionError::Unavailable(e) => Reply::busy("redemption undecided", &e),
    }
}
