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
//! | POST | `/admin/coupons/{couponId}/waves` | `{"atMs": t, "units": n}`: a release wave, with `Idempotency-Key` |
//! | PUT | `/admin/coupons/{couponId}/rate` | `{"ratePerSec": r, "burst": b}` |
//! | GET | `/admin/coupons/{couponId}/audit` | who changed what, when (`?limit=`, newest first) |
//! | POST, GET | `/admin/coupons/{couponId}/reconcile` | run one pass now / read the last report |
//! | PUT, DELETE, GET | `/admin/blacklist/{userId}` | blacklist a user, lift it, read it |
//! | PUT | `/admin/users/{userId}/coupons/{grantId}/revoked` | `{"reason": "..."}`: revoke one user's coupon (audited on the coupon) |
//! | PUT | `/redemptions/{orderId}` | the order service spends a user's coupon (`{"userId", "grantId"}`), exactly once |
//! | POST | `/redemptions/{orderId}/return` | the order gives it back (cancelled, refunded) |
//!
//! The order routes share this IAM-authorized function with the operators'
//! (the same signed-principal identity, no user token); each caller's IAM
//! policy grants only its own prefix (`CampaignOperatorPolicy`: `/admin/*`,
//! `OrderServicePolicy`: `/redemptions/*`).
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
use std::sync::Arc;

use coupon_adapters::assemble::reconcile_ports;
use coupon_adapters::dynamodb::{
    self, DynamoAdminStore, DynamoBlacklist, DynamoCouponRepository, DynamoFacts, DynamoRedemptions, DynamoRevocations,
    Tables,
};
use coupon_adapters::redis::{Redis, RedisBlacklistFlags, RedisLive, RedisPreheater, RedisRepair};
use coupon_adapters::sqs::{self, SqsRedrive};
use coupon_adapters::{aws, secrets};
use coupon_domain::admin::{AdminContext, AdminError, AdminPorts, AdminService, RateChange};
use coupon_domain::catalog::Created;
use coupon_domain::clock::{Clock, SystemClock};
use coupon_domain::coupon::{CouponDefinition, CouponStatus, Wave};
use coupon_domain::metrics::{EmfMetrics, Metrics};
use coupon_domain::reconcile::ports::DurableFacts;
use coupon_domain::reconcile::{ReconcileSettings, Reconciler};
use coupon_domain::redemption::RedemptionService;
use coupon_edge::{header_str, ErrorCode, Lang, Reply};
use lambda_http::{Body, Request, Response};
use serde::Deserialize;
use serde_json::json;

pub mod actor;
pub mod config;
mod input;
mod orders;
pub mod route;

pub use actor::{actor, context};
pub use config::Config;
pub use orders::redemption_error;
pub use route::{route, CouponRoute, Route, UserRoute};

use input::{audit_limit, body, coupon_id, grant_id, user_id};
use orders::redemption;

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
    /// The order service's use cases (redeem, give back).
    pub redemptions: RedemptionService,
    /// Request rules.
    pub edge: AdminEdge,
}

/// Serves one request; never fails, never panics.
pub async fn handle(app: &AdminApp, req: Request) -> Result<Response<Body>, Infallible> {
    let lang = Lang::from_accept_language(header_str(req.headers(), "accept-language"));
    let reply = match route(req.method(), req.uri().path()).into_route() {
        Err(reply) => reply,
        Ok(route) => match actor(&req, &app.edge) {
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

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct RevokeBody {
    reason: String,
}

/// The longest revocation reason kept in the audit log.
const MAX_REASON_CHARS: usize = 200;

/// Sends a request to its route's handler: the order service's routes,
/// an operator's routes on users, and those on coupons.
async fn dispatch(app: &AdminApp, req: &Request, ctx: &AdminContext, route: Route) -> Reply {
    match route {
        Route::Redeem(order) => redemption(app, req, &order, false).await,
        Route::GiveBack(order) => redemption(app, req, &order, true).await,
        Route::User(route) => user_route(app, req, ctx, route).await,
        Route::Coupon(route) => coupon_route(app, req, ctx, route).await,
    }
}

/// The routes on one coupon (and creating one).
async fn coupon_route(app: &AdminApp, req: &Request, ctx: &AdminContext, route: CouponRoute) -> Reply {
    let s = &app.service;
    let max = app.edge.max_body_bytes;
    let result = match route {
        CouponRoute::Create => match body::<CouponDefinition>(req, max) {
            Err(reply) => return *reply,
            Ok(def) => s.create(ctx, &def).await.map(|(created, view)| {
                json!({"created": created == Created::New, "coupon": view.coupon, "version": view.version, "figures": view.figures})
            }),
        },
        CouponRoute::View(id) => match coupon_id(&id) {
            Err(r) => return *r,
            Ok(id) => s.view(&id).await.map(|v| json!(v)),
        },
        CouponRoute::Status(id) => match (coupon_id(&id), body::<StatusBody>(req, max)) {
            (Err(r), _) | (_, Err(r)) => return *r,
            (Ok(id), Ok(b)) => s.set_status(ctx, &id, b.status).await.map(|v| json!(v)),
        },
        CouponRoute::Stock(id) => match (coupon_id(&id), body::<StockBody>(req, max)) {
            (Err(r), _) | (_, Err(r)) => return *r,
            (Ok(id), Ok(b)) => s.add_stock(ctx, &id, b.add).await.map(|v| json!(v)),
        },
        CouponRoute::Waves(id) => match (coupon_id(&id), body::<Wave>(req, max)) {
            (Err(r), _) | (_, Err(r)) => return *r,
            (Ok(id), Ok(w)) => s.add_wave(ctx, &id, w).await.map(|v| json!(v)),
        },
        CouponRoute::Rate(id) => match (coupon_id(&id), body::<RateChange>(req, max)) {
            (Err(r), _) | (_, Err(r)) => return *r,
            (Ok(id), Ok(b)) => s.set_rate(ctx, &id, b).await.map(|v| json!(v)),
        },
        CouponRoute::Audit(id) => match (coupon_id(&id), audit_limit(req)) {
            (Err(r), _) | (_, Err(r)) => return *r,
            (Ok(id), Ok(limit)) => s
                .audit(&id, limit)
                .await
                .map(|(entries, more)| json!({"entries": entries, "more": more})),
        },
        CouponRoute::Reconcile(id) => match coupon_id(&id) {
            Err(r) => return *r,
            Ok(id) => s.reconcile(ctx, &id).await,
        },
        CouponRoute::Report(id) => match coupon_id(&id) {
            Err(r) => return *r,
            Ok(id) => s.last_report(&id).await,
        },
    };
    respond(result)
}

/// The routes on one user: the blacklist and revoking a coupon.
async fn user_route(app: &AdminApp, req: &Request, ctx: &AdminContext, route: UserRoute) -> Reply {
    let s = &app.service;
    let max = app.edge.max_body_bytes;
    let result = match route {
        UserRoute::Blacklist(user, on) => match user_id(&user) {
            Err(r) => return *r,
            Ok(user) => s
                .set_blacklisted(ctx, &user, on)
                .await
                .map(|()| json!({"userId": user, "blacklisted": on})),
        },
        UserRoute::Revoke(user, grant) => match (user_id(&user), grant_id(&grant), body::<RevokeBody>(req, max)) {
            (Err(r), _, _) | (_, Err(r), _) | (_, _, Err(r)) => return *r,
            (Ok(_), Ok(_), Ok(b)) if b.reason.trim().is_empty() || b.reason.chars().count() > MAX_REASON_CHARS => {
                return Reply::error(ErrorCode::InvalidRequest).with_data(
                    json!({"field": "reason", "detail": format!("reason must be 1 to {MAX_REASON_CHARS} characters")}),
                )
            }
            (Ok(user), Ok(grant), Ok(b)) => s
                .revoke(ctx, &user, &grant, b.reason.trim())
                .await
                .map(|coupon| json!({"userId": user, "coupon": coupon})),
        },
        UserRoute::BlacklistEntry(user) => match user_id(&user) {
            Err(r) => return *r,
            Ok(user) => s
                .blacklist_entry(&user)
                .await
                .map(|(on, audit)| json!({"userId": user, "blacklisted": on, "audit": audit})),
        },
    };
    respond(result)
}

fn respond(result: Result<serde_json::Value, AdminError>) -> Reply {
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
        AdminError::GrantNotFound => Reply::error(ErrorCode::GrantNotFound),
        AdminError::CouponUsed => Reply::error(ErrorCode::CouponUsed),
        AdminError::CouponConflict => Reply::error(ErrorCode::CouponConflict),
        AdminError::ConcurrentChange => Reply::error(ErrorCode::ConcurrentChange),
        AdminError::Unavailable(e) => Reply::busy("admin operation undecided", &e),
    }
}

/// What an admin instance is built from, made once at cold start.
pub struct Clients {
    /// The one Redis connection of the instance, shared by every adapter.
    pub redis: Redis,
    /// The DynamoDB client, built once per instance.
    pub dynamodb: dynamodb::Client,
    /// SQS, for re-drives of an on-demand reconciliation.
    pub sqs: sqs::Client,
    /// The clock every decision reads (a test sets it by hand).
    pub clock: Arc<dyn Clock>,
    /// Where the function's metrics go (EMF lines in Lambda, a recorder in
    /// tests).
    pub metrics: Arc<dyn Metrics>,
}

impl Clients {
    /// The real clients.
    pub async fn connect(config: &Config) -> Result<Self, coupon_adapters::redis::StartError> {
        let sdk = aws::load(config.aws).await;
        Ok(Self {
            redis: secrets::connect_redis(&config.redis, &sdk).await?,
            dynamodb: dynamodb::Client::new(&sdk),
            sqs: sqs::Client::new(&sdk),
            clock: Arc::new(SystemClock),
            metrics: Arc::new(EmfMetrics::new(config.metrics_namespace.clone(), "admin")),
        })
    }
}

/// The admin use cases' ports over `clients`, reading durable facts
/// through `facts`. [`wire`] builds the service from them; tests swap one
/// port (to interleave a grab between two shards' applies, say).
pub fn ports(config: &Config, clients: Clients, facts: Arc<dyn DurableFacts>) -> AdminPorts {
    let tables = Tables::new(clients.dynamodb, &config.tables);
    let redis = clients.redis;
    let reconciler = Reconciler::new(
        reconcile_ports(
            &redis,
            &tables,
            SqsRedrive::new(clients.sqs, &config.queue_url, config.dlq_url.clone()),
            facts.clone(),
            clients.clock.clone(),
            clients.metrics,
        ),
        ReconcileSettings {
            grace_ms: config.grace_ms,
            send_window_ms: config.send_window_ms,
            ..ReconcileSettings::default()
        },
    );
    AdminPorts {
        store: Arc::new(DynamoAdminStore::new(tables.clone())),
        repo: Arc::new(DynamoCouponRepository::new(tables.clone())),
        preheater: Arc::new(RedisPreheater::new(redis.clone())),
        live: Arc::new(RedisLive::new(redis.clone())),
        repair: Arc::new(RedisRepair::new(redis.clone())),
        blacklist: Arc::new(DynamoBlacklist::new(tables.clone())),
        revocations: Arc::new(DynamoRevocations::new(tables.clone())),
        redemptions: Arc::new(DynamoRedemptions::new(tables.clone())),
        flags: Arc::new(RedisBlacklistFlags::new(redis)),
        facts,
        reconciler,
        clock: clients.clock,
        max_total_stock: config.max_total_stock,
    }
}

/// The admin function over `clients`: the one wiring `main.rs`, the
/// integration tests and `couponctl` share.
pub fn wire(config: &Config, clients: Clients) -> AdminApp {
    let facts = Arc::new(DynamoFacts::new(Tables::new(clients.dynamodb.clone(), &config.tables)));
    wire_ports(config, ports(config, clients, facts))
}

/// The admin function over `ports`, with the edge rules of `config`.
pub fn wire_ports(config: &Config, ports: AdminPorts) -> AdminApp {
    AdminApp {
        redemptions: RedemptionService::new(ports.redemptions.clone(), ports.clock.clone()),
        service: AdminService::new(ports),
        edge: AdminEdge {
            local_mode: config.local_mode,
            max_body_bytes: config.max_body_bytes,
        },
    }
}

#[cfg(test)]
mod tests;
