//! The grab function's HTTP edge: API Gateway HTTP API (payload v2) and
//! Lambda function URL requests in, JSON responses out.
//!
//! [`handle`] is a plain async function: `main.rs` hands it to the Lambda
//! runtime, and tests and benchmarks call it directly with events built from
//! `tests/fixtures/*.json`. It never panics and never answers 5xx for
//! anything a client sent: every failure maps to one [`ErrorCode`].
//!
//! # Layout
//!
//! - [`route`]: method and path to a route.
//! - [`handle`]: identity (from `coupon_edge`), parse, call
//!   [`GrabService::grab`], render the `{code, message, data}` envelope.

#![warn(missing_docs)]

use std::convert::Infallible;

use coupon_shared::error::{ErrorCode, Lang};
use coupon_shared::ids::{CouponId, RequestId};
use coupon_shared::outcome::{GrabOutcome, Rejection};
use coupon_shared::service::{GrabError, GrabRequest, GrabService};
use lambda_http::http::header;
use lambda_http::{Body, Request, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tracing::error;

pub mod route;

use coupon_edge::header_str;
use coupon_edge::render::Reply;
pub use coupon_edge::{identity, Caller, EdgeSettings};
use route::Route;

/// Everything the handler needs, built once per Lambda instance.
pub struct GrabApp {
    /// The use case.
    pub service: GrabService,
    /// How to read requests.
    pub edge: EdgeSettings,
}

/// The body of `POST /coupons/{couponId}/grab`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GrabBody {
    request_id: String,
}

/// Serves one request. Infallible: every outcome, including internal
/// failures, is rendered as a response with a stable code.
pub async fn handle(app: &GrabApp, req: Request) -> Result<Response<Body>, Infallible> {
    let lang = Lang::from_accept_language(header_str(req.headers(), "accept-language"));
    let reply = match route::route(req.method(), req.uri().path()) {
        Route::Grab(raw_coupon) => {
            let raw_coupon = raw_coupon.to_owned();
            grab(app, &req, &raw_coupon).await
        }
        Route::MethodNotAllowed { allow } => {
            Reply::error(ErrorCode::MethodNotAllowed).with_header(header::ALLOW, allow)
        }
        Route::NotFound => Reply::error(ErrorCode::RouteNotFound),
    };
    Ok(reply.into_response(lang))
}

async fn grab(app: &GrabApp, req: &Request, raw_coupon: &str) -> Reply {
    let Some(caller) = identity(req, &app.edge) else {
        return Reply::error(ErrorCode::Unauthorized);
    };
    let coupon = match CouponId::parse(raw_coupon) {
        Ok(c) => c,
        Err(e) => return Reply::invalid(e.to_string()),
    };
    let request = match parse_body(req, app.edge.max_body_bytes) {
        Ok(r) => r,
        Err(reply) => return *reply,
    };
    let grab = GrabRequest {
        coupon,
        user: caller.user,
        level: caller.level,
        request,
        ip: caller.ip,
    };
    match app.service.grab(&grab).await {
        Ok(outcome) => outcome_reply(&outcome),
        Err(GrabError::Unavailable(e)) => {
            error!(error = %e, source = ?std::error::Error::source(&e), "grab undecided");
            Reply::error(ErrorCode::Busy).with_header(header::RETRY_AFTER, "1")
        }
    }
}

fn parse_body(req: &Request, max: usize) -> Result<RequestId, Box<Reply>> {
    if let Some(ct) = header_str(req.headers(), "content-type") {
        let mime = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        if mime != "application/json" && !mime.ends_with("+json") {
            return Err(Box::new(Reply::error(ErrorCode::UnsupportedMediaType)));
        }
    }
    let bytes: &[u8] = match req.body() {
        Body::Empty => &[],
        Body::Text(s) => s.as_bytes(),
        Body::Binary(b) => b,
        _ => &[],
    };
    if bytes.len() > max {
        return Err(Box::new(
            Reply::error(ErrorCode::PayloadTooLarge).with_data(json!({"maxBytes": max})),
        ));
    }
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(Box::new(Reply::invalid("body must be a JSON object with requestId")));
    }
    let body: GrabBody = serde_json::from_slice(bytes).map_err(|e| {
        // The category, never serde's text: it would echo the input back.
        let detail = match e.classify() {
            serde_json::error::Category::Data => "body must be {\"requestId\": string} and nothing else",
            _ => "body is not valid JSON",
        };
        Box::new(Reply::invalid(detail))
    })?;
    RequestId::parse(&body.request_id).map_err(|e| Box::new(Reply::invalid(e.to_string())))
}

/// Maps a domain outcome to the response envelope.
pub fn outcome_reply(outcome: &GrabOutcome) -> Reply {
    match outcome {
        GrabOutcome::Won {
            grant,
            queued,
            replayed,
        } => Reply::success(json!({
            "grantId": grant.grant_id,
            "couponId": grant.coupon_id,
            "ordinal": grant.ordinal,
            "status": "PENDING",
            "queued": queued,
            "replayed": replayed,
            "grantedAtMs": grant.granted_at_ms,
        })),
        GrabOutcome::Rejected { reason, replayed } => {
            let (code, mut data) = match reason {
                Rejection::NotFound => (ErrorCode::CouponNotFound, json!({})),
                Rejection::Offline => (ErrorCode::CouponNotActive, json!({"reason": "OFFLINE"})),
                Rejection::NotStarted { starts_at_ms } => (
                    ErrorCode::CouponNotActive,
                    json!({"reason": "NOT_STARTED", "startsAtMs": starts_at_ms}),
                ),
                Rejection::Ended => (ErrorCode::CouponNotActive, json!({"reason": "ENDED"})),
                Rejection::NotEligible { min_level } => (ErrorCode::NotEligible, json!({"minLevel": min_level})),
                Rejection::AlreadyClaimed => (ErrorCode::AlreadyClaimed, json!({})),
                Rejection::SoldOut => (ErrorCode::SoldOut, json!({})),
                Rejection::RateLimited { retry_after_ms } => {
                    let reply = Reply::error(ErrorCode::RateLimited)
                        .with_data(json!({"retryAfterMs": retry_after_ms}))
                        .with_header(header::RETRY_AFTER, &retry_after_ms.div_ceil(1000).max(1).to_string());
                    return reply;
                }
                Rejection::Risk(r) => (ErrorCode::RiskRejected, json!({"reason": r.as_str()})),
            };
            if *replayed {
                data["replayed"] = Value::Bool(true);
            }
            Reply::error(code).with_data(data)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge(trust: bool) -> EdgeSettings {
        EdgeSettings {
            trust_identity_headers: trust,
            user_id_claim: "sub".into(),
            member_level_claim: "member_level".into(),
            max_body_bytes: 4096,
        }
    }

    fn fixture(name: &str) -> Request {
        let json = match name {
            "jwt" => include_str!("../../../tests/fixtures/grab_jwt.json"),
            _ => include_str!("../../../tests/fixtures/grab_function_url.json"),
        };
        lambda_http::request::from_str(json).expect("fixture is a valid event")
    }

    #[test]
    fn the_caller_comes_from_the_verified_jwt_claims() {
        let caller = identity(&fixture("jwt"), &edge(false)).unwrap();
        assert_eq!(caller.user.as_str(), "user-7f3a");
        assert_eq!(caller.level, 2);
        assert_eq!(caller.ip.unwrap().to_string(), "203.0.113.7");
    }

    #[test]
    fn identity_headers_count_for_nothing_outside_the_local_mode() {
        assert_eq!(identity(&fixture("url"), &edge(false)), None);
    }

    #[test]
    fn the_local_mode_reads_identity_headers_when_there_is_no_token() {
        let caller = identity(&fixture("url"), &edge(true)).unwrap();
        assert_eq!(caller.user.as_str(), "someone-else");
        assert_eq!(caller.level, 9);
    }

    #[test]
    fn claims_win_over_headers_even_in_the_local_mode() {
        let mut req = fixture("jwt");
        req.headers_mut().insert("x-user-id", "victim".parse().unwrap());
        assert_eq!(identity(&req, &edge(true)).unwrap().user.as_str(), "user-7f3a");
    }

    #[test]
    fn the_fixture_body_parses_to_its_request_id() {
        assert_eq!(parse_body(&fixture("jwt"), 4096).unwrap().as_str(), "req-0001");
        assert_eq!(parse_body(&fixture("url"), 4096).unwrap().as_str(), "req-0002");
    }

    #[test]
    fn a_body_over_the_limit_is_413() {
        let reply = parse_body(&fixture("jwt"), 8).unwrap_err();
        assert_eq!(reply.code(), ErrorCode::PayloadTooLarge);
    }
}
