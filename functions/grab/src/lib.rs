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
//! - [`config`]: the settings, read once at cold start.
//! - [`route`]: method and path to a route.
//! - [`handle`]: identity (from `coupon_edge`), parse, call
//!   [`GrabService::grab`] (`POST /coupons/{couponId}/grab`), its dry
//!   run [`GrabService::eligibility`] (`GET /coupons/{couponId}/eligibility`)
//!   or the coupon center [`CouponCenter::page`] (`GET /coupons`), render
//!   the `{code, message, data}` envelope.
//! - `entries`: a lottery's registration (`POST /coupons/{couponId}/entries`,
//!   [`GrabService::enter`]) and the caller's result
//!   (`GET /coupons/{couponId}/entries/me`).
//! - [`wire`]: the service over real clients, shared by `main.rs`, the
//!   integration tests and the benchmark; [`Clients::connect`] builds the
//!   clients at cold start.

#![warn(missing_docs)]

use std::convert::Infallible;
use std::sync::Arc;

use coupon_adapters::dynamodb::{DynamoCatalog, DynamoClaims, DynamoEntries, DynamoLiveCoupons};
use coupon_adapters::redis::{Redis, RedisLedger, RedisRisk, RedisStandings};
use coupon_adapters::sqs::{SqsPublisher, SqsRepairs};
use coupon_adapters::{aws, secrets};
use coupon_domain::center::{CenterCursor, CenterQuery, CouponCenter, LiveCoupons, Standings, DEFAULT_PAGE, MAX_PAGE};
use coupon_domain::clock::{Clock, SystemClock};
pub use coupon_domain::grab::GrabPorts;
use coupon_domain::grab::{DryRun, Eligibility, GrabError, GrabRequest, GrabService};
use coupon_domain::ids::{CouponId, RequestId};
use coupon_domain::metrics::{EmfMetrics, Metrics};
use coupon_domain::outcome::{GrabOutcome, Rejection};
use coupon_edge::{
    came_through_edge, header_str, json_body, page_limit, risk_message, Detail, ErrorCode, Lang, OriginSecret, Reply,
    AROUND_THE_EDGE,
};
pub use coupon_edge::{identity, Caller, EdgeSettings};
use lambda_http::http::header;
use lambda_http::{Body, Request, RequestExt, Response};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

pub mod config;
mod entries;
pub mod route;

pub use config::Config;
use route::Route;

/// Everything the handler needs, built once per Lambda instance.
pub struct GrabApp {
    /// The use case the handler drives, over the instance's ports.
    pub service: GrabService,
    /// The coupon center, with the instance's copy of the live coupons.
    pub center: CouponCenter,
    /// How to read requests.
    pub edge: EdgeSettings,
    /// With the CloudFront and WAF edge in front: the secret its requests
    /// carry; a request without it is refused (403).
    pub origin: Option<OriginSecret>,
}

/// The body of `POST /coupons/{couponId}/grab`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct GrabBody {
    request_id: String,
}

/// Serves one request. Infallible: every outcome, including internal
/// failures, is rendered as a response with a stable code.
///
/// Every response carries `Server-Timing: app;dur=<ms>`, the handler's own
/// time (its Redis and AWS calls included): what a client measures beyond
/// it is the network, API Gateway, or locally the Lambda emulator's queue,
/// so a slow press can be placed without a trace.
pub async fn handle(app: &GrabApp, req: Request) -> Result<Response<Body>, Infallible> {
    let started = std::time::Instant::now();
    let lang = Lang::from_accept_language(header_str(req.headers(), "accept-language"));
    let reply = if !came_through_edge(&req, app.origin.as_ref()) {
        Reply::error(ErrorCode::Forbidden).with_message(AROUND_THE_EDGE)
    } else {
        match route::route(req.method(), req.uri().path()).into_route() {
            Ok(Route::Grab(raw_coupon)) => grab(app, &req, &raw_coupon).await,
            Ok(Route::Eligibility(raw_coupon)) => eligibility(app, &req, &raw_coupon).await,
            Ok(Route::Center) => center(app, &req).await,
            Ok(Route::Enter(raw_coupon)) => entries::enter(app, &req, &raw_coupon).await,
            Ok(Route::MyEntry(raw_coupon)) => entries::my_entry(app, &req, &raw_coupon).await,
            Err(reply) => reply,
        }
    };
    let mut response = reply.into_response(lang);
    let timing = format!("app;dur={:.1}", started.elapsed().as_secs_f64() * 1000.0);
    if let Ok(value) = header::HeaderValue::from_str(&timing) {
        response.headers_mut().insert(SERVER_TIMING, value);
    }
    Ok(response)
}

/// The W3C Server-Timing header (not among `http`'s constants).
const SERVER_TIMING: &str = "server-timing";

/// Who asks about which coupon: the verified caller (401 without one) and
/// the coupon id from the path (400 if malformed), for both routes.
fn caller_and_coupon(app: &GrabApp, req: &Request, raw_coupon: &str) -> Result<(Caller, CouponId), Reply> {
    let caller = identity(req, &app.edge).ok_or_else(|| Reply::error(ErrorCode::Unauthorized))?;
    let coupon = CouponId::parse(raw_coupon).map_err(|e| Reply::invalid(e.to_string()))?;
    Ok((caller, coupon))
}

async fn grab(app: &GrabApp, req: &Request, raw_coupon: &str) -> Reply {
    let (caller, coupon) = match caller_and_coupon(app, req, raw_coupon) {
        Ok(found) => found,
        Err(reply) => return reply,
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
        device: caller.device,
    };
    match app.service.grab(&grab).await {
        Ok(outcome) => outcome_reply(&outcome),
        Err(GrabError::Unavailable(e)) => Reply::busy("grab undecided", &e),
        Err(GrabError::NotQueued(e)) => Reply::busy("grant won but not queued; the retry sends it", &e),
        Err(e @ GrabError::NotReplicated) => {
            Reply::busy("grant won but not yet on a replica; the retry waits again", &e)
        }
    }
}

/// `GET /coupons/{couponId}/eligibility`: the answer a press would get
/// now (SUCCESS: it would win), changing nothing.
async fn eligibility(app: &GrabApp, req: &Request, raw_coupon: &str) -> Reply {
    let (caller, coupon) = match caller_and_coupon(app, req, raw_coupon) {
        Ok(found) => found,
        Err(reply) => return reply,
    };
    let ask = DryRun {
        coupon,
        user: caller.user,
        level: caller.level,
        ip: caller.ip,
        device: caller.device,
    };
    match app.service.eligibility(&ask).await {
        Ok(Eligibility::WouldWin) => Reply::success(json!({"couponId": ask.coupon, "wouldWin": true})),
        Ok(Eligibility::Refused(reason)) => rejection_reply(&reason, false),
        Err(e) => Reply::busy("dry run undecided", &e),
    }
}

/// `GET /coupons?limit=1..50&cursor=<from the last page>`: the coupons on
/// sale and coming up, each with the caller's state. Other parameters are
/// ignored; a malformed one is a 400 that names it.
async fn center(app: &GrabApp, req: &Request) -> Reply {
    let Some(caller) = identity(req, &app.edge) else {
        return Reply::error(ErrorCode::Unauthorized);
    };
    let query = match center_query(req, caller) {
        Ok(query) => query,
        Err(reply) => return reply,
    };
    match app.center.page(&query).await {
        Ok(page) => Reply::success(json!({
            "coupons": page.offers,
            "nextCursor": page.next.map(|c| c.encode()),
        })),
        Err(e) => Reply::busy("coupon center unavailable", &e),
    }
}

fn center_query(req: &Request, caller: Caller) -> Result<CenterQuery, Reply> {
    let params = req.query_string_parameters();
    let mut query = CenterQuery {
        user: caller.user,
        level: caller.level,
        device: caller.device.is_some(),
        limit: page_limit(params.first("limit"), DEFAULT_PAGE, MAX_PAGE)?,
        after: None,
    };
    if let Some(raw) = params.first("cursor") {
        query.after = Some(
            CenterCursor::parse(raw)
                .ok_or_else(|| Reply::invalid("cursor must be a nextCursor from a previous page"))?,
        );
    }
    Ok(query)
}

fn parse_body(req: &Request, max: usize) -> Result<RequestId, Box<Reply>> {
    let body: GrabBody = json_body(
        req,
        max,
        Detail::Fixed("body must be {\"requestId\": string} and nothing else"),
    )?;
    RequestId::parse(&body.request_id).map_err(|e| Box::new(Reply::invalid(e.to_string())))
}

/// A win's data, as the contract (docs/openapi.yaml, `Granted`) names it.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Granted<'a> {
    grant_id: &'a str,
    coupon_id: &'a str,
    ordinal: u32,
    status: &'static str,
    /// Always true: SUCCESS is answered only once the queue took the grant.
    /// Kept in the contract for clients written against it.
    queued: bool,
    replayed: bool,
    granted_at_ms: i64,
}

/// Maps a domain outcome to the response envelope.
pub fn outcome_reply(outcome: &GrabOutcome) -> Reply {
    match outcome {
        GrabOutcome::Won { grant, replayed } => Reply::success_of(&Granted {
            grant_id: grant.grant_id.as_str(),
            coupon_id: grant.coupon_id.as_str(),
            ordinal: grant.ordinal,
            status: "PENDING",
            queued: true,
            replayed: *replayed,
            granted_at_ms: grant.granted_at_ms,
        }),
        GrabOutcome::Rejected { reason, replayed } => rejection_reply(reason, *replayed),
    }
}

/// Maps a refusal to the envelope: the one mapping, for a press and for
/// its dry run alike (same codes, same data).
pub fn rejection_reply(reason: &Rejection, replayed: bool) -> Reply {
    let (code, mut data) = match reason {
        Rejection::NotFound => (ErrorCode::CouponNotFound, json!({})),
        Rejection::Offline => (ErrorCode::CouponNotActive, json!({"reason": "OFFLINE"})),
        Rejection::NotStarted { starts_at_ms } => (
            ErrorCode::CouponNotActive,
            json!({"reason": "NOT_STARTED", "startsAtMs": starts_at_ms}),
        ),
        Rejection::Ended => (ErrorCode::CouponNotActive, json!({"reason": "ENDED"})),
        Rejection::Lottery => (ErrorCode::CouponNotActive, json!({"reason": "LOTTERY"})),
        Rejection::FirstCome => (ErrorCode::CouponNotActive, json!({"reason": "FIRST_COME"})),
        Rejection::BetweenWaves { next_wave_at_ms } => (
            ErrorCode::CouponNotActive,
            json!({"reason": "BETWEEN_WAVES", "nextWaveAtMs": next_wave_at_ms}),
        ),
        Rejection::NotEligible { min_level } => (ErrorCode::NotEligible, json!({"minLevel": min_level})),
        Rejection::AlreadyClaimed => (ErrorCode::AlreadyClaimed, json!({})),
        Rejection::SoldOut => (ErrorCode::SoldOut, json!({})),
        Rejection::RateLimited { retry_after_ms } => {
            return Reply::error(ErrorCode::RateLimited)
                .with_data(json!({"retryAfterMs": retry_after_ms}))
                .with_header(header::RETRY_AFTER, &retry_after_ms.div_ceil(1000).max(1).to_string());
        }
        Rejection::Risk(r) => {
            let data = match replayed {
                true => json!({"reason": r.as_str(), "replayed": true}),
                false => json!({"reason": r.as_str()}),
            };
            return Reply::error(ErrorCode::RiskRejected)
                .with_data(data)
                .with_message(risk_message(*r));
        }
    };
    if replayed {
        data["replayed"] = Value::Bool(true);
    }
    Reply::error(code).with_data(data)
}

/// What a grab instance is built from, made once at cold start.
pub struct Clients {
    /// Redis (the ledger and the risk guard share its connection).
    pub redis: Redis,
    /// SQS, for winners and repair requests.
    pub sqs: coupon_adapters::sqs::Client,
    /// DynamoDB, for the one catalogue read a lost coupon needs.
    pub dynamodb: coupon_adapters::dynamodb::Client,
    /// The clock every decision reads (a test sets it by hand).
    pub clock: Arc<dyn Clock>,
    /// Where the function's metrics go (EMF lines in Lambda, a recorder in
    /// tests).
    pub metrics: Arc<dyn Metrics>,
    /// The edge's origin secret, if one is configured.
    pub origin: Option<OriginSecret>,
}

impl Clients {
    /// The real clients: the AWS SDK configuration, the Redis auth token
    /// from Secrets Manager (if configured), one Redis connection.
    pub async fn connect(config: &Config) -> Result<Self, coupon_adapters::redis::StartError> {
        let sdk = aws::load(config.sqs).await;
        Ok(Self {
            redis: secrets::connect_redis(&config.redis, &sdk).await?,
            sqs: coupon_adapters::sqs::Client::new(&sdk),
            dynamodb: coupon_adapters::dynamodb::Client::new(&sdk),
            clock: Arc::new(SystemClock),
            metrics: Arc::new(EmfMetrics::new(config.metrics_namespace.clone(), "grab")),
            origin: secrets::origin_secret(config.http.origin_secret_arn.as_deref(), &sdk)
                .await?
                .and_then(|(current, previous)| OriginSecret::from_stored(&current, previous.as_deref())),
        })
    }
}

/// The coupon center's ports: the catalogue's listing and the shards'
/// read-only answers.
pub struct CenterPorts {
    /// The live coupons (the coupons table's `live` index).
    pub live: Arc<dyn LiveCoupons>,
    /// The callers' standings and the coupons' stock (Redis, read only).
    pub standings: Arc<dyn Standings>,
}

/// Every port of the function, as [`wire`] builds them.
pub struct Ports {
    /// The press and its dry run.
    pub grab: GrabPorts,
    /// The coupon center.
    pub center: CenterPorts,
}

/// The function's ports over real clients, as [`wire`] builds them. The
/// benchmark swaps single ports (an in-memory queue; no risk checks for its
/// script-only comparison) and keeps the rest of the wiring.
pub fn ports(config: &Config, clients: Clients) -> Ports {
    let guard_ordinals = clients.redis.loses_acknowledged_writes();
    let center = CenterPorts {
        live: Arc::new(DynamoLiveCoupons::new(
            clients.dynamodb.clone(),
            config.coupons_table.clone(),
        )),
        standings: Arc::new(RedisStandings::new(clients.redis.clone())),
    };
    let grab = GrabPorts {
        ledger: Arc::new(RedisLedger::new(clients.redis.clone())),
        risk: Arc::new(RedisRisk::new(clients.redis, config.risk)),
        publisher: Arc::new(SqsPublisher::new(clients.sqs.clone(), config.queue_url.clone())),
        claims: Arc::new(
            DynamoClaims::in_tables(
                clients.dynamodb.clone(),
                config.claims_table.clone(),
                config.coupons_table.clone(),
            )
            .guarding_ordinals(guard_ordinals),
        ),
        catalog: Arc::new(DynamoCatalog::new(
            clients.dynamodb.clone(),
            config.coupons_table.clone(),
        )),
        repairs: Arc::new(SqsRepairs::new(clients.sqs, config.repair_queue_url.clone())),
        entries: Arc::new(DynamoEntries::in_coupons_table(
            clients.dynamodb,
            config.coupons_table.clone(),
        )),
        clock: clients.clock,
        metrics: clients.metrics,
    };
    Ports { grab, center }
}

/// The grab function over `clients`: the one wiring `main.rs`, the
/// integration tests and the benchmark share.
pub fn wire(config: &Config, clients: Clients) -> GrabApp {
    let origin = clients.origin.clone();
    let mut app = wire_ports(config, ports(config, clients));
    if origin.is_some() {
        app.edge.origin_secret_arn.clone_from(&config.http.origin_secret_arn);
        app.origin = origin;
    }
    app
}

/// The grab function over `ports`, with the settings of `config`.
pub fn wire_ports(config: &Config, ports: Ports) -> GrabApp {
    let center = CouponCenter::new(
        ports.center.live,
        ports.center.standings,
        ports.grab.clock.clone(),
        config.center,
    );
    GrabApp {
        service: GrabService::new(ports.grab, config.sold_out_memory_ms).with_send_budget(config.send_budget_ms),
        center,
        // Behind the edge only with its secret to check (wire): the
        // viewer's address is trusted only on a request that showed it.
        edge: EdgeSettings {
            origin_secret_arn: None,
            ..config.http.clone()
        },
        origin: None,
    }
}

#[cfg(test)]
mod tests;
