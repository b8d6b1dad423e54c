//! The admin function: the operators' HTTP API for running a campaign.
//!
//! Routes (all under `/admin`, all answering the `{code, message, data}`
//! envelope of the public API, described in `docs/openapi.yaml`):
//!
//! | method | path | what |
//! | --- | --- | --- |
//! | POST | `/admin/coupons` | create (idempotent per `couponId` and definition) |
//! | GET | `/admin/coupons/{couponId}` | definition, version, live figures |
//! | PUT | `/admin/coupons/{couponId}/status` | `{"status": "ONLINE" \| "OFFLINE"}` |
//! | POST | `/admin/coupons/{couponId}/stock` | `{"add": n}`, with `Idempotency-Key` |
//! | PUT | `/admin/coupons/{couponId}/rate` | `{"ratePerSec": r, "burst": b}` |
//! | GET | `/admin/coupons/{couponId}/audit` | who changed what, when (`?limit=`, newest first) |
//! | POST, GET | `/admin/coupons/{couponId}/reconcile` | run one pass now / read the last report |
//! | PUT, DELETE, GET | `/admin/blacklist/{userId}` | blacklist a user, lift it, read it |
//!
//! Who is calling: in AWS the routes use IAM authorization, and the operator
//! is the signed principal (`requestContext.authorizer.iam.userArn`). A user
//! JWT is refused with 403 even if a route were misconfigured to accept it.
//! The local mode (`ADMIN_LOCAL_MODE=true`, never in the template) reads
//! the operator from `X-Admin-Actor` and still refuses requests that carry a
//! user identity.
//!
//! [`handle`] is a plain async function: `main.rs` hands it to the Lambda
//! runtime; tests call it with fixture events and in-memory ports. It never
//! panics and never answers 5xx for anything a client sent.

#![warn(missing_docs)]

use std::convert::Infallible;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use coupon_edge::header_str;
use coupon_edge::render::Reply;
use coupon_shared::adapters::dynamodb::{self, DynamoCouponRepository, DynamoLedger};
use coupon_shared::adapters::redis::RedisStore;
use coupon_shared::adapters::sqs::{self, SqsRedrive};
use coupon_shared::admin::{Actor, AdminContext, AdminError, AdminPorts, AdminService, RateChange, MAX_AUDIT_PAGE};
use coupon_shared::clock::Clock;
use coupon_shared::config::AdminConfig;
use coupon_shared::coupon::{CouponDefinition, CouponStatus};
use coupon_shared::error::{ErrorCode, Lang};
use coupon_shared::ids::{CouponId, RequestId, UserId};
use coupon_shared::metrics::EmfMetrics;
use coupon_shared::preheat::Created;
use coupon_shared::reconcile::{ReconcileSettings, Reconciler};
use lambda_http::http::{header, Method};
use lambda_http::request::RequestContext;
use lambda_http::{Body, Request, RequestExt, Response};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::json;
use tracing::error;

/// How the edge reads requests.
#[derive(Debug, Clone)]
pub struct AdminEdge {
    /// Trust `X-Admin-Actor` when there is no IAM identity (local only).
    pub local_mode: bool,
    /// Larger bodies get 413.
    pub max_body_bytes: usize,
}

/// Everything the handler needs, built once per Lambda instance.
pub struct AdminApp {
    /// The use cases.
    pub service: AdminService,
    /// Request rules.
    pub edge: AdminEdge,
}

/// What a request asks for; ids are raw (parsed by the operation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `POST /admin/coupons`.
    Create,
    /// `GET /admin/coupons/{id}`.
    View(String),
    /// `PUT /admin/coupons/{id}/status`.
    Status(String),
    /// `POST /admin/coupons/{id}/stock`.
    Stock(String),
    /// `PUT /admin/coupons/{id}/rate`.
    Rate(String),
    /// `GET /admin/coupons/{id}/audit`.
    Audit(String),
    /// `POST /admin/coupons/{id}/reconcile`.
    Reconcile(String),
    /// `GET /admin/coupons/{id}/reconcile`.
    Report(String),
    /// `PUT` (true) or `DELETE` (false) `/admin/blacklist/{userId}`.
    Blacklist(String, bool),
    /// `GET /admin/blacklist/{userId}`.
    BlacklistEntry(String),
    /// A known path with another method; the value of `Allow`.
    MethodNotAllowed(&'static str),
    /// Nothing here.
    NotFound,
    /// A path segment that is not valid percent-encoded UTF-8.
    BadPath,
}

/// Decodes `%XX` escapes of one path segment; `None` if it is not UTF-8.
fn decode_segment(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Routes `method` and `path` (segments are percent-decoded; empty ones are
/// ignored, as in the other functions).
pub fn route(method: &Method, path: &str) -> Route {
    let raw: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let mut segments = Vec::with_capacity(raw.len());
    for s in raw {
        match decode_segment(s) {
            Some(s) => segments.push(s),
            None => return Route::BadPath,
        }
    }
    let seg: Vec<&str> = segments.iter().map(String::as_str).collect();
    let m = method.clone();
    let pick = |allowed: &'static str, routes: &[(Method, Route)]| -> Route {
        routes
            .iter()
            .find(|(mm, _)| *mm == m)
            .map(|(_, r)| r.clone())
            .unwrap_or(Route::MethodNotAllowed(allowed))
    };
    match seg.as_slice() {
        ["admin", "coupons"] => pick("POST", &[(Method::POST, Route::Create)]),
        ["admin", "coupons", id] => pick("GET", &[(Method::GET, Route::View(id.to_string()))]),
        ["admin", "coupons", id, "status"] => pick("PUT", &[(Method::PUT, Route::Status(id.to_string()))]),
        ["admin", "coupons", id, "stock"] => pick("POST", &[(Method::POST, Route::Stock(id.to_string()))]),
        ["admin", "coupons", id, "rate"] => pick("PUT", &[(Method::PUT, Route::Rate(id.to_string()))]),
        ["admin", "coupons", id, "audit"] => pick("GET", &[(Method::GET, Route::Audit(id.to_string()))]),
        ["admin", "coupons", id, "reconcile"] => pick(
            "GET, POST",
            &[
                (Method::POST, Route::Reconcile(id.to_string())),
                (Method::GET, Route::Report(id.to_string())),
            ],
        ),
        ["admin", "blacklist", user] => pick(
            "DELETE, GET, PUT",
            &[
                (Method::PUT, Route::Blacklist(user.to_string(), true)),
                (Method::DELETE, Route::Blacklist(user.to_string(), false)),
                (Method::GET, Route::BlacklistEntry(user.to_string())),
            ],
        ),
        _ => Route::NotFound,
    }
}

/// The operator, from the verified IAM identity or (local mode) the
/// `X-Admin-Actor` header. A user identity is FORBIDDEN, none at all is
/// UNAUTHORIZED.
pub fn actor(req: &Request, edge: &AdminEdge) -> Result<Actor, ErrorCode> {
    if let Some(RequestContext::ApiGatewayV2(ctx)) = req.request_context_ref() {
        if let Some(auth) = &ctx.authorizer {
            if let Some(iam) = &auth.iam {
                let principal = iam.user_arn.as_deref().or(iam.caller_id.as_deref()).unwrap_or("");
                return Actor::parse(principal).map_err(|_| ErrorCode::Unauthorized);
            }
            if auth.jwt.is_some() || !auth.fields.is_empty() {
                return Err(ErrorCode::Forbidden);
            }
        }
    }
    let headers = req.headers();
    if edge.local_mode {
        if let Some(raw) = header_str(headers, "x-admin-actor") {
            return Actor::parse(raw).map_err(|_| ErrorCode::Unauthorized);
        }
    }
    if header_str(headers, "authorization").is_some() || header_str(headers, "x-user-id").is_some() {
        return Err(ErrorCode::Forbidden);
    }
    Err(ErrorCode::Unauthorized)
}

/// The operation id: the caller's `Idempotency-Key` (which makes a repeat a
/// replay), else a fresh random one.
fn context(req: &Request, actor: Actor) -> Result<AdminContext, Box<Reply>> {
    if let Some(key) = header_str(req.headers(), "idempotency-key") {
        let key = RequestId::parse(key).map_err(|e| Box::new(Reply::invalid(format!("Idempotency-Key: {e}"))))?;
        return Ok(AdminContext {
            actor,
            operation_id: key.as_str().to_owned(),
            idempotent: true,
        });
    }
    // Unique per call: a random 64-bit value from the standard library's
    // per-process random keys, and the time, so ids never repeat across
    // Lambda instances in practice.
    let random = std::collections::hash_map::RandomState::new().build_hasher().finish();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let operation_id = format!("op-{nanos:x}-{random:016x}");
    Ok(AdminContext {
        actor,
        operation_id,
        idempotent: false,
    })
}

/// Serves one request; never fails, never panics.
pub async fn handle(app: &AdminApp, req: Request) -> Result<Response<Body>, Infallible> {
    let lang = Lang::from_accept_language(header_str(req.headers(), "accept-language"));
    let reply = match route(req.method(), req.uri().path()) {
        Route::NotFound => Reply::error(ErrorCode::RouteNotFound),
        Route::BadPath => Reply::invalid("path segments must be percent-encoded UTF-8"),
        Route::MethodNotAllowed(allow) => Reply::error(ErrorCode::MethodNotAllowed).with_header(header::ALLOW, allow),
        route => match actor(&req, &app.edge) {
            Err(code) => Reply::error(code),
            Ok(actor) => match context(&req, actor) {
                Err(reply) => *reply,
                Ok(ctx) => dispatch(app, &req, &ctx, route).await,
            },
        },
    };
    Ok(reply.into_response(lang))
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StatusBody {
    status: CouponStatus,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct StockBody {
    add: u64,
}

async fn dispatch(app: &AdminApp, req: &Request, ctx: &AdminContext, route: Route) -> Reply {
    let s = &app.service;
    let max = app.edge.max_body_bytes;
    let result = match route {
        Route::Create => match body::<CouponDefinition>(req, max) {
            Err(reply) => return *reply,
            Ok(def) => s.create(ctx, &def).await.map(|(created, view)| {
                json!({"created": created == Created::New, "coupon": view.coupon, "version": view.version, "figures": view.figures})
            }),
        },
        Route::View(id) => match coupon_id(&id) {
            Err(r) => return *r,
            Ok(id) => s.view(&id).await.map(|v| json!(v)),
        },
        Route::Status(id) => match (coupon_id(&id), body::<StatusBody>(req, max)) {
            (Err(r), _) | (_, Err(r)) => return *r,
            (Ok(id), Ok(b)) => s.set_status(ctx, &id, b.status).await.map(|v| json!(v)),
        },
        Route::Stock(id) => match (coupon_id(&id), body::<StockBody>(req, max)) {
            (Err(r), _) | (_, Err(r)) => return *r,
            (Ok(id), Ok(b)) => s.add_stock(ctx, &id, b.add).await.map(|v| json!(v)),
        },
        Route::Rate(id) => match (coupon_id(&id), body::<RateChange>(req, max)) {
            (Err(r), _) | (_, Err(r)) => return *r,
            (Ok(id), Ok(b)) => s.set_rate(ctx, &id, b).await.map(|v| json!(v)),
        },
        Route::Audit(id) => match (coupon_id(&id), audit_limit(req)) {
            (Err(r), _) | (_, Err(r)) => return *r,
            (Ok(id), Ok(limit)) => s
                .audit(&id, limit)
                .await
                .map(|(entries, more)| json!({"entries": entries, "more": more})),
        },
        Route::Reconcile(id) => match coupon_id(&id) {
            Err(r) => return *r,
            Ok(id) => s.reconcile(ctx, &id).await,
        },
        Route::Report(id) => match coupon_id(&id) {
            Err(r) => return *r,
            Ok(id) => s.last_report(&id).await,
        },
        Route::Blacklist(user, on) => match user_id(&user) {
            Err(r) => return *r,
            Ok(user) => s
                .set_blacklisted(ctx, &user, on)
                .await
                .map(|()| json!({"userId": user, "blacklisted": on})),
        },
        Route::BlacklistEntry(user) => match user_id(&user) {
            Err(r) => return *r,
            Ok(user) => s
                .blacklist_entry(&user)
                .await
                .map(|(on, audit)| json!({"userId": user, "blacklisted": on, "audit": audit})),
        },
        Route::MethodNotAllowed(_) | Route::NotFound | Route::BadPath => {
            return Reply::error(ErrorCode::RouteNotFound);
        }
    };
    match result {
        Ok(data) => Reply::success(data),
        Err(e) => error_reply(e),
    }
}

/// Maps a domain error to the envelope (the one mapping for the admin API).
pub fn error_reply(e: AdminError) -> Reply {
    match e {
        AdminError::Invalid { field, problem } => {
            Reply::error(ErrorCode::InvalidRequest).with_data(json!({"field": field, "detail": problem}))
        }
        AdminError::NotFound => Reply::error(ErrorCode::CouponNotFound),
        AdminError::ReportNotFound => Reply::error(ErrorCode::ReportNotFound),
        AdminError::CouponConflict => Reply::error(ErrorCode::CouponConflict),
        AdminError::ConcurrentChange => Reply::error(ErrorCode::ConcurrentChange),
        AdminError::Unavailable(e) => {
            error!(error = %e, source = ?std::error::Error::source(&e), "admin operation undecided");
            Reply::error(ErrorCode::Busy).with_header(header::RETRY_AFTER, "1")
        }
    }
}

/// `?limit=` of the audit route: 1 to 1000, 100 when absent.
fn audit_limit(req: &Request) -> Result<usize, Box<Reply>> {
    let raw = req
        .uri()
        .query()
        .unwrap_or("")
        .split('&')
        .find_map(|kv| kv.strip_prefix("limit="));
    match raw {
        None => Ok(100),
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_AUDIT_PAGE).contains(n))
            .ok_or_else(|| Box::new(Reply::invalid(format!("limit must be between 1 and {MAX_AUDIT_PAGE}")))),
    }
}

fn coupon_id(raw: &str) -> Result<CouponId, Box<Reply>> {
    CouponId::parse(raw).map_err(|e| Box::new(Reply::invalid(e.to_string())))
}

fn user_id(raw: &str) -> Result<UserId, Box<Reply>> {
    UserId::parse(raw).map_err(|e| Box::new(Reply::invalid(e.to_string())))
}

/// Reads a JSON body: media type, size, then strict deserialization. The
/// detail names what is wrong (operators need "unknown field `x`"), cut
/// short so a hostile body cannot make the answer large.
fn body<T: DeserializeOwned>(req: &Request, max: usize) -> Result<T, Box<Reply>> {
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
        return Err(Box::new(Reply::invalid("the body must be a JSON object")));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        let mut detail = e.to_string();
        if detail.len() > 200 {
            let mut cut = 200;
            while !detail.is_char_boundary(cut) {
                cut -= 1;
            }
            detail.truncate(cut);
            detail.push('…');
        }
        Box::new(Reply::invalid(detail))
    })
}

/// Wires the service to the real adapters: one place for `main.rs` and the
/// integration tests.
pub fn wire(
    config: &AdminConfig,
    redis: Arc<RedisStore>,
    dynamodb: dynamodb::Client,
    sqs: sqs::Client,
    clock: Arc<dyn Clock>,
) -> AdminApp {
    let ledger = Arc::new(DynamoLedger::new(
        dynamodb.clone(),
        &config.coupons_table,
        &config.user_coupons_table,
    ));
    let metrics = Arc::new(EmfMetrics::new(config.metrics_namespace.clone(), "admin"));
    let reconciler = Reconciler::new(
        ledger.clone(),
        redis.clone(),
        redis.clone(),
        Arc::new(SqsRedrive::new(sqs, &config.queue_url, config.dlq_url.clone())),
        clock.clone(),
        metrics,
        ReconcileSettings {
            grace_ms: config.grace_ms,
            ..ReconcileSettings::default()
        },
    );
    AdminApp {
        service: AdminService::new(AdminPorts {
            store: ledger.clone(),
            repo: Arc::new(DynamoCouponRepository::new(dynamodb, &config.coupons_table)),
            preheater: redis.clone(),
            live: redis.clone(),
            repair: redis,
            facts: ledger,
            reconciler,
            clock,
            max_total_stock: config.max_total_stock,
        }),
        edge: AdminEdge {
            local_mode: config.local_mode,
            max_body_bytes: config.max_body_bytes,
        },
    }
}

#[cfg(test)]
mod tests;
