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
//! - [`identity`]: the caller from the verified JWT claims (or, in the
//!   explicit local mode only, from headers).
//! - [`handle`]: parse, call [`GrabService::grab`], render.
//! - [`render`]: the `{code, message, data}` envelope.

use std::convert::Infallible;

use coupon_shared::config::GrabConfig;
use coupon_shared::error::{ErrorCode, Lang};
use coupon_shared::ids::{ClientIp, CouponId, RequestId, UserId};
use coupon_shared::outcome::{GrabOutcome, Rejection};
use coupon_shared::service::{GrabError, GrabRequest, GrabService};
use lambda_http::http::{header, HeaderMap};
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use serde::Deserialize;
use serde_json::{json, Value};
use tracing::error;

pub mod render;
pub mod route;

use render::Reply;
use route::Route;

/// How the edge reads requests; from [`coupon_shared::config::GrabConfig`].
#[derive(Debug, Clone)]
pub struct EdgeSettings {
    /// Local development only: trust `X-User-Id` / `X-User-Level` (and
    /// `X-Forwarded-For`) when no JWT claims are present.
    pub trust_identity_headers: bool,
    /// The claim holding the user id.
    pub user_id_claim: String,
    /// The claim holding the member level.
    pub member_level_claim: String,
    /// Bodies above this get 413.
    pub max_body_bytes: usize,
}

impl From<&GrabConfig> for EdgeSettings {
    fn from(config: &GrabConfig) -> Self {
        Self {
            trust_identity_headers: config.trust_identity_headers,
            user_id_claim: config.user_id_claim.clone(),
            member_level_claim: config.member_level_claim.clone(),
            max_body_bytes: config.max_body_bytes,
        }
    }
}

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

/// Who is calling, from the verified identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The user.
    pub user: UserId,
    /// The member level (0 when the claim is absent or not a number).
    pub level: u32,
    /// The client address, when known.
    pub ip: Option<ClientIp>,
}

/// Reads the caller. JWT claims (put in the request context by API Gateway's
/// JWT authorizer, which has verified the token) come first; headers only in
/// the explicit local mode. `None` means 401.
pub fn identity(req: &Request, edge: &EdgeSettings) -> Option<Caller> {
    let headers = req.headers();
    let mut source_ip = None;
    let mut claims_user = None;
    let mut claims_level = None;
    if let Some(RequestContext::ApiGatewayV2(ctx)) = req.request_context_ref() {
        source_ip = ctx.http.source_ip.as_deref().and_then(ClientIp::parse);
        if let Some(jwt) = ctx.authorizer.as_ref().and_then(|a| a.jwt.as_ref()) {
            claims_user = jwt.claims.get(&edge.user_id_claim).cloned();
            claims_level = jwt.claims.get(&edge.member_level_claim).cloned();
        }
    }
    let (raw_user, raw_level) = match claims_user {
        Some(user) => (user, claims_level),
        None if edge.trust_identity_headers => {
            if let Some(ip) = header_str(headers, "x-forwarded-for")
                .and_then(|v| v.split(',').next())
                .and_then(ClientIp::parse)
            {
                source_ip = Some(ip);
            }
            (
                header_str(headers, "x-user-id")?.to_owned(),
                header_str(headers, "x-user-level").map(str::to_owned),
            )
        }
        None => return None,
    };
    let user = UserId::parse(&raw_user).ok()?;
    // A level that is not a number gets the least privilege, not an error:
    // the token is valid, only the identity provider's claim is odd.
    let level = raw_level.and_then(|l| l.trim().parse().ok()).unwrap_or(0);
    Some(Caller {
        user,
        level,
        ip: source_ip,
    })
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
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
        let mime = ct
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
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
        return Err(Box::new(Reply::invalid(
            "body must be a JSON object with requestId",
        )));
    }
    let body: GrabBody = serde_json::from_slice(bytes).map_err(|e| {
        // The category, never serde's text: it would echo the input back.
        let detail = match e.classify() {
            serde_json::error::Category::Data => {
                "body must be {\"requestId\": string} and nothing else"
            }
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
                Rejection::NotEligible { min_level } => {
                    (ErrorCode::NotEligible, json!({"minLevel": min_level}))
                }
                Rejection::AlreadyClaimed => (ErrorCode::AlreadyClaimed, json!({})),
                Rejection::SoldOut => (ErrorCode::SoldOut, json!({})),
                Rejection::RateLimited { retry_after_ms } => {
                    let reply = Reply::error(ErrorCode::RateLimited)
                        .with_data(json!({"retryAfterMs": retry_after_ms}))
                        .with_header(
                            header::RETRY_AFTER,
                            &retry_after_ms.div_ceil(1000).max(1).to_string(),
                        );
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
        req.headers_mut()
            .insert("x-user-id", "victim".parse().unwrap());
        assert_eq!(
            identity(&req, &edge(true)).unwrap().user.as_str(),
            "user-7f3a"
        );
    }

    #[test]
    fn the_fixture_body_parses_to_its_request_id() {
        assert_eq!(
            parse_body(&fixture("jwt"), 4096).unwrap().as_str(),
            "req-0001"
        );
        assert_eq!(
            parse_body(&fixture("url"), 4096).unwrap().as_str(),
            "req-0002"
        );
    }

    #[test]
    fn a_body_over_the_limit_is_413() {
        let reply = parse_body(&fixture("jwt"), 8).unwrap_err();
        assert_eq!(reply.code(), ErrorCode::PayloadTooLarge);
    }
}
