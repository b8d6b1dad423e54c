//! The wallet function: what the caller holds, read from DynamoDB.
//!
//! - `GET /me/coupons`: the caller's coupons, newest first.
//! - `GET /me/grants/{grantId}`: where a grant is: `PENDING` (won, still in
//!   the Redis outbox or the queue), `ISSUED` (in the wallet) or `REJECTED`.
//!
//! A separate function from the grab, so the grab's cold start and hot path
//! never load a DynamoDB client. Same identity rules as the grab: the caller
//! is the verified JWT subject and can read nothing of anyone else.

#![warn(missing_docs)]

use std::convert::Infallible;
use std::sync::Arc;

use coupon_edge::render::Reply;
use coupon_edge::{header_str, identity, EdgeSettings};
use coupon_shared::error::{ErrorCode, Lang};
use coupon_shared::ids::UserId;
use coupon_shared::issuance::{GrantRef, GrantStatus};
use coupon_shared::ports::{OutboxLookup, WalletStore};
use lambda_http::http::{header, Method};
use lambda_http::{Body, Request, Response};
use serde_json::json;
use tracing::error;

/// Everything the handler needs, built once per Lambda instance.
pub struct Wallet {
    /// Issued and rejected grants (DynamoDB).
    pub store: Arc<dyn WalletStore>,
    /// Grants not yet issued (Redis outboxes).
    pub outbox: Arc<dyn OutboxLookup>,
    /// Identity rules.
    pub edge: EdgeSettings,
}

enum Route<'a> {
    Coupons,
    Grant(&'a str),
    WrongMethod,
    NotFound,
}

fn route<'a>(method: &Method, path: &'a str) -> Route<'a> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let route = match segments.as_slice() {
        ["me", "coupons"] => Route::Coupons,
        ["me", "grants", id] => Route::Grant(id),
        _ => return Route::NotFound,
    };
    if method == Method::GET {
        route
    } else {
        Route::WrongMethod
    }
}

/// Serves one request; never fails, never panics.
pub async fn handle(wallet: &Wallet, req: Request) -> Result<Response<Body>, Infallible> {
    let lang = Lang::from_accept_language(header_str(req.headers(), "accept-language"));
    let reply = match route(req.method(), req.uri().path()) {
        Route::NotFound => Reply::error(ErrorCode::RouteNotFound),
        Route::WrongMethod => Reply::error(ErrorCode::MethodNotAllowed).with_header(header::ALLOW, "GET"),
        route => match identity(&req, &wallet.edge) {
            None => Reply::error(ErrorCode::Unauthorized),
            Some(caller) => match route {
                Route::Grant(id) => grant(wallet, &caller.user, id).await,
                _ => coupons(wallet, &caller.user).await,
            },
        },
    };
    Ok(reply.into_response(lang))
}

async fn coupons(wallet: &Wallet, user: &UserId) -> Reply {
    match wallet.store.coupons(user).await {
        Ok(coupons) => Reply::success(json!({ "coupons": coupons })),
        Err(e) => {
            error!(error = %e, source = ?std::error::Error::source(&e), "wallet unavailable");
            Reply::error(ErrorCode::Busy).with_header(header::RETRY_AFTER, "1")
        }
    }
}

async fn grant(wallet: &Wallet, user: &UserId, raw: &str) -> Reply {
    if raw.len() > 200 || !raw.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Reply::invalid("grantId may contain only letters, digits, '_' and '-'");
    }
    let Some(grant) = GrantRef::parse(raw) else {
        return Reply::error(ErrorCode::GrantNotFound);
    };
    match status(wallet, user, &grant).await {
        Ok(Some(status)) => {
            let (name, reason) = match status {
                GrantStatus::Pending => ("PENDING", None),
                GrantStatus::Issued => ("ISSUED", None),
                GrantStatus::Rejected(r) => ("REJECTED", Some(r.as_str())),
            };
            let mut data = json!({"grantId": grant.grant_id, "couponId": grant.coupon, "status": name});
            if let Some(reason) = reason {
                data["reason"] = reason.into();
            }
            Reply::success(data)
        }
        Ok(None) => Reply::error(ErrorCode::GrantNotFound),
        Err(e) => {
            error!(error = %e, source = ?std::error::Error::source(&e), "grant status unavailable");
            Reply::error(ErrorCode::Busy).with_header(header::RETRY_AFTER, "1")
        }
    }
}

/// DynamoDB, then the outbox, then DynamoDB again: the issuer may confirm a
/// grant (and the reconciler trim it) between the first two reads.
async fn status(
    wallet: &Wallet,
    user: &UserId,
    grant: &GrantRef,
) -> Result<Option<GrantStatus>, coupon_shared::error::StoreError> {
    if let Some(s) = wallet.store.grant_status(user, grant).await? {
        return Ok(Some(s));
    }
    if wallet.outbox.is_pending(user, grant).await? {
        return Ok(Some(GrantStatus::Pending));
    }
    wallet.store.grant_status(user, grant).await
}
