//! The wallet function: what the caller holds, read from DynamoDB.
//!
//! - `GET /me/coupons`: the caller's coupons, newest first.
//! - `GET /me/grants/{grantId}`: where a grant is: `PENDING` (won, still in
//!   the Redis outbox or the queue), `ISSUED` (in the wallet) or `REJECTED`.
//! - `PUT` / `DELETE /me/reminders/{couponId}`, `GET /me/reminders`: be told
//!   before a coupon opens, or its next wave (the domain's [`Reminders`];
//!   the reconciler's schedule sends them).
//!
//! A separate function from the grab, so the grab's cold start and hot path
//! never load a DynamoDB client. Same identity rules as the grab: the caller
//! is the verified JWT subject and can read nothing of anyone else. The
//! reads themselves are the domain's ([`WalletService`]); this crate is the
//! HTTP edge and the wiring ([`wire`]).

#![warn(missing_docs)]

use std::convert::Infallible;
use std::sync::Arc;

use coupon_adapters::dynamodb::{self, DynamoCouponRepository, DynamoReminders, DynamoWallet, Tables};
use coupon_adapters::redis::{Redis, RedisOutbox};
use coupon_adapters::{aws, secrets};
use coupon_domain::clock::{Clock, SystemClock};
use coupon_domain::ids::{CouponId, GrantId, UserId};
use coupon_domain::remind::{RemindError, Reminders};
use coupon_domain::user_coupon::{CouponState, GrantStatus};
use coupon_domain::wallet::{CouponQuery, Cursor, WalletService, MAX_PAGE};
use coupon_edge::{
    by_method, came_through_edge, header_str, identity, page_limit, EdgeSettings, ErrorCode, Lang, Matched,
    OriginSecret, Reply, Segments, AROUND_THE_EDGE,
};
use lambda_http::http::Method;
use lambda_http::{Body, Request, RequestExt, Response};
use serde_json::json;

pub mod config;

pub use config::Config;

/// Everything the handler needs, built once per Lambda instance.
pub struct Wallet {
    /// The reads.
    pub service: WalletService,
    /// The caller's reminders.
    pub reminders: Reminders,
    /// Identity rules.
    pub edge: EdgeSettings,
    /// With the CloudFront and WAF edge in front: the secret its requests
    /// carry; a request without it is refused (403).
    pub origin: Option<OriginSecret>,
}

/// What a request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /me/coupons`.
    Coupons,
    /// `GET /me/grants/{grantId}`, with the decoded, unparsed id.
    Grant(String),
    /// `GET /me/reminders`.
    Reminders,
    /// `PUT /me/reminders/{couponId}`: remind me.
    Remind(String),
    /// `DELETE /me/reminders/{couponId}`: don't.
    Unremind(String),
}

/// Routes `method` and `path`.
pub fn route(method: &Method, path: &str) -> Matched<Route> {
    let Some(segments) = Segments::parse(path) else {
        return Matched::BadPath;
    };
    match segments.as_slice().as_slice() {
        ["me", "coupons"] => by_method(method, "GET", [(Method::GET, Route::Coupons)]),
        ["me", "grants", id] => by_method(method, "GET", [(Method::GET, Route::Grant(id.to_string()))]),
        ["me", "reminders"] => by_method(method, "GET", [(Method::GET, Route::Reminders)]),
        ["me", "reminders", id] => by_method(
            method,
            "PUT, DELETE",
            [
                (Method::PUT, Route::Remind(id.to_string())),
                (Method::DELETE, Route::Unremind(id.to_string())),
            ],
        ),
        _ => Matched::NotFound,
    }
}

/// Serves one request; never fails, never panics.
pub async fn handle(wallet: &Wallet, req: Request) -> Result<Response<Body>, Infallible> {
    let lang = Lang::from_accept_language(header_str(req.headers(), "accept-language"));
    if !came_through_edge(&req, wallet.origin.as_ref()) {
        let reply = Reply::error(ErrorCode::Forbidden).with_message(AROUND_THE_EDGE);
        return Ok(reply.into_response(lang));
    }
    let reply = match route(req.method(), req.uri().path()).into_route() {
        Err(reply) => reply,
        Ok(route) => match identity(&req, &wallet.edge) {
            None => Reply::error(ErrorCode::Unauthorized),
            Some(caller) => match route {
                Route::Grant(id) => grant(wallet, &caller.user, &id).await,
                Route::Reminders => match wallet.reminders.list(&caller.user).await {
                    Ok(list) => Reply::success(json!({ "reminders": list })),
                    Err(e) => remind_error(&e),
                },
                Route::Remind(id) => match coupon_id(&id) {
                    Ok(coupon) => match wallet.reminders.subscribe(&caller.user, &coupon).await {
                        Ok(view) => Reply::success_of(&view),
                        Err(e) => remind_error(&e),
                    },
                    Err(reply) => reply,
                },
                Route::Unremind(id) => match coupon_id(&id) {
                    Ok(coupon) => match wallet.reminders.cancel(&caller.user, &coupon).await {
                        Ok(removed) => Reply::success(json!({ "couponId": coupon.as_str(), "removed": removed })),
                        Err(e) => remind_error(&e),
                    },
                    Err(reply) => reply,
                },
                Route::Coupons => match coupon_query(&req) {
                    Ok(query) => coupons(wallet, &caller.user, &query).await,
                    Err(reply) => reply,
                },
            },
        },
    };
    Ok(reply.into_response(lang))
}

/// `?status=unused|used|expired|revoked&limit=1..100&cursor=<from the last page>`; any
/// other parameter is ignored, a malformed one is a 400 that names it.
fn coupon_query(req: &Request) -> Result<CouponQuery, Reply> {
    let params = req.query_string_parameters();
    let mut query = CouponQuery::default();
    if let Some(raw) = params.first("status") {
        query.status = Some(
            CouponState::parse_query(raw)
                .ok_or_else(|| Reply::invalid("status must be unused, used, expired or revoked"))?,
        );
    }
    query.limit = page_limit(params.first("limit"), query.limit, MAX_PAGE)?;
    if let Some(raw) = params.first("cursor") {
        query.after =
            Some(Cursor::parse(raw).ok_or_else(|| Reply::invalid("cursor must be a nextCursor from a previous page"))?);
    }
    Ok(query)
}

/// A coupon id from the path; a malformed one is a 400 that says why.
fn coupon_id(raw: &str) -> Result<CouponId, Reply> {
    CouponId::parse(raw).map_err(|e| Reply::invalid(format!("couponId: {e}")))
}

/// The one mapping of a reminder's refusal to its answer.
fn remind_error(e: &RemindError) -> Reply {
    match e {
        RemindError::NotFound => Reply::error(ErrorCode::CouponNotFound),
        RemindError::Ended => Reply::error(ErrorCode::NothingToRemind).with_data(json!({"reason": "ENDED"})),
        RemindError::NothingAhead => Reply::error(ErrorCode::NothingToRemind).with_data(json!({"reason": "OPEN_NOW"})),
        RemindError::TooMany { max } => Reply::error(ErrorCode::TooManyReminders).with_data(json!({"max": max})),
        RemindError::Unavailable(source) => Reply::busy("reminders unavailable", source),
    }
}

async fn coupons(wallet: &Wallet, user: &UserId, query: &CouponQuery) -> Reply {
    match wallet.service.coupons(user, query).await {
        Ok(page) => Reply::success(json!({
            "coupons": page.coupons,
            "nextCursor": page.next.map(|c| c.encode()),
        })),
        Err(e) => Reply::busy("wallet unavailable", &e),
    }
}

async fn grant(wallet: &Wallet, user: &UserId, raw: &str) -> Reply {
    if raw.len() > 200 || !raw.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Reply::invalid("grantId may contain only letters, digits, '_' and '-'");
    }
    let Ok(grant) = GrantId::parse(raw) else {
        return Reply::error(ErrorCode::GrantNotFound);
    };
    match wallet.service.grant_status(user, &grant).await {
        Ok(Some(status)) => {
            let (name, reason) = match status {
                GrantStatus::Pending => ("PENDING", None),
                GrantStatus::Issued => ("ISSUED", None),
                GrantStatus::Rejected(r) => ("REJECTED", Some(r.as_str())),
            };
            let mut data = json!({"grantId": grant.as_str(), "couponId": grant.coupon().as_str(), "status": name});
            if let Some(reason) = reason {
                data["reason"] = reason.into();
            }
            Reply::success(data)
        }
        Ok(None) => Reply::error(ErrorCode::GrantNotFound),
        Err(e) => Reply::busy("grant status unavailable", &e),
    }
}

/// What a wallet instance is built from, made once at cold start.
pub struct Clients {
    /// Redis, for grants still in an outbox.
    pub redis: Redis,
    /// The DynamoDB client, built once per instance.
    pub dynamodb: dynamodb::Client,
    /// Time: what has expired.
    pub clock: Arc<dyn Clock>,
    /// The edge's origin secret, if one is configured.
    pub origin: Option<OriginSecret>,
}

impl Clients {
    /// The real clients.
    pub async fn connect(config: &Config) -> Result<Self, coupon_adapters::redis::StartError> {
        let sdk = aws::load(config.dynamodb).await;
        Ok(Self {
            redis: secrets::connect_redis(&config.redis, &sdk).await?,
            dynamodb: dynamodb::Client::new(&sdk),
            clock: Arc::new(SystemClock),
            origin: secrets::origin_secret(config.http.origin_secret_arn.as_deref(), &sdk)
                .await?
                .and_then(|(current, previous)| OriginSecret::from_stored(&current, previous.as_deref())),
        })
    }
}

/// The wallet function over `clients`: the one wiring `main.rs` and the
/// integration tests share.
pub fn wire(config: &Config, clients: Clients) -> Wallet {
    let tables = Tables::new(clients.dynamodb, &config.tables);
    Wallet {
        reminders: Reminders::new(
            Arc::new(DynamoReminders::new(tables.clone())),
            Arc::new(DynamoCouponRepository::new(tables.clone())),
            clients.clock.clone(),
            config.reminder_lead_ms,
        ),
        service: WalletService::new(
            Arc::new(DynamoWallet::new(tables)),
            Arc::new(RedisOutbox::new(clients.redis)),
            clients.clock,
        ),
        // The viewer's address is trusted only with the edge's secret to
        // check (coupon_edge::identity).
        edge: EdgeSettings {
            origin_secret_arn: clients.origin.as_ref().and(config.http.origin_secret_arn.clone()),
            ..config.http.clone()
        },
        origin: clients.origin,
    }
}

#[cfg(test)]
mod tests {
    use coupon_domain::testing::{MemoryDefinitions, MemoryOutbox, MemoryReminders, MemoryWallet};

    use super::*;

    fn wallet(outbox: Arc<MemoryOutbox>) -> Wallet {
        let clock = Arc::new(coupon_domain::clock::ManualClock::new(1_000));
        Wallet {
            reminders: Reminders::new(
                Arc::new(MemoryReminders::default()),
                Arc::new(MemoryDefinitions::default()),
                clock,
                coupon_domain::remind::DEFAULT_LEAD_MS,
            ),
            service: WalletService::new(
                Arc::new(MemoryWallet::default()),
                outbox,
                Arc::new(coupon_domain::clock::ManualClock::new(1_000)),
            ),
            edge: EdgeSettings {
                trust_identity_headers: false,
                user_id_claim: "sub".into(),
                member_level_claim: "member_level".into(),
                device_id_claim: None,
                max_body_bytes: 4096,
                origin_secret_arn: None,
            },
            origin: None,
        }
    }

    /// The JWT fixture as a GET of `path`.
    fn get(path: &str) -> Request {
        let mut req = lambda_http::request::from_str(include_str!("../../../tests/fixtures/grab_jwt.json")).unwrap();
        *req.method_mut() = Method::GET;
        *req.uri_mut() = format!("https://example.com{path}").parse().unwrap();
        req
    }

    async fn code(w: &Wallet, req: Request) -> (u16, String) {
        let resp = handle(w, req).await.unwrap();
        let Body::Text(text) = resp.body() else { panic!("text") };
        let v: serde_json::Value = serde_json::from_str(text).unwrap();
        (resp.status().as_u16(), v["code"].as_str().unwrap_or("").to_owned())
    }

    #[tokio::test]
    async fn a_grant_still_in_the_outbox_is_pending_for_its_owner_only() {
        let outbox = Arc::new(MemoryOutbox::default());
        outbox.add(&UserId::parse("user-7f3a").unwrap(), "c1-0-1");
        let w = wallet(outbox);
        assert_eq!(code(&w, get("/me/grants/c1-0-1")).await, (200, "SUCCESS".into()));
        assert_eq!(
            code(&w, get("/me/grants/c1-0-2")).await,
            (404, "GRANT_NOT_FOUND".into())
        );
        assert_eq!(code(&w, get("/me/grants/a%20b")).await, (400, "INVALID_REQUEST".into()));
    }

    #[tokio::test]
    async fn behind_the_edge_a_request_without_its_secret_is_403() {
        let outbox = Arc::new(MemoryOutbox::default());
        outbox.add(&UserId::parse("user-7f3a").unwrap(), "c1-0-1");
        let mut w = wallet(outbox);
        w.origin = OriginSecret::new("edge-secret-2");
        assert_eq!(code(&w, get("/me/grants/c1-0-1")).await, (403, "FORBIDDEN".into()));
        let mut through = get("/me/grants/c1-0-1");
        through
            .headers_mut()
            .insert("x-origin-verify", "edge-secret-2".parse().unwrap());
        assert_eq!(code(&w, through).await, (200, "SUCCESS".into()));
    }

    fn with_query(req: Request, pairs: &[(&str, &str)]) -> Request {
        let params: std::collections::HashMap<String, String> =
            pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        req.with_query_string_parameters(params)
    }

    #[tokio::test]
    async fn a_malformed_list_parameter_is_400_and_a_good_one_lists() {
        let w = wallet(Arc::default());
        for bad in [
            ("status", "used-up"),
            ("limit", "0"),
            ("limit", "101"),
            ("limit", "ten"),
            ("cursor", "not a cursor"),
        ] {
            let req = with_query(get("/me/coupons"), &[bad]);
            assert_eq!(code(&w, req).await, (400, "INVALID_REQUEST".into()), "{bad:?}");
        }
        let req = with_query(
            get("/me/coupons"),
            &[
                ("status", "expired"),
                ("limit", "100"),
                ("cursor", "1~c-0-1"),
                ("other", "x"),
            ],
        );
        assert_eq!(code(&w, req).await, (200, "SUCCESS".into()));
    }

    #[tokio::test]
    async fn no_identity_is_401_and_a_write_is_405() {
        let w = wallet(Arc::default());
        let mut req = get("/me/coupons");
        if let Some(lambda_http::request::RequestContext::ApiGatewayV2(ctx)) =
            req.extensions_mut().get_mut::<lambda_http::request::RequestContext>()
        {
            ctx.authorizer = None;
        }
        assert_eq!(code(&w, req).await, (401, "UNAUTHORIZED".into()));
        let mut post = get("/me/coupons");
        *post.method_mut() = Method::POST;
        assert_eq!(code(&w, post).await, (405, "METHOD_NOT_ALLOWED".into()));
        assert_eq!(code(&w, get("/me/coupons")).await, (200, "SUCCESS".into()));
    }

    #[test]
    fn the_wallet_routes_are_reads() {
        assert_eq!(route(&Method::GET, "/me/coupons"), Matched::Route(Route::Coupons));
        assert_eq!(
            route(&Method::GET, "/me/grants/c-0-1"),
            Matched::Route(Route::Grant("c-0-1".into()))
        );
        assert_eq!(route(&Method::POST, "/me/coupons"), Matched::MethodNotAllowed("GET"));
        assert_eq!(route(&Method::GET, "/me"), Matched::NotFound);
        assert_eq!(route(&Method::GET, "/me/grants/%FF"), Matched::BadPath);
    }

    #[test]
    fn a_reminder_is_put_or_deleted_and_the_list_is_read() {
        assert_eq!(route(&Method::GET, "/me/reminders"), Matched::Route(Route::Reminders));
        assert_eq!(
            route(&Method::PUT, "/me/reminders/spring-20"),
            Matched::Route(Route::Remind("spring-20".into()))
        );
        assert_eq!(
            route(&Method::DELETE, "/me/reminders/spring-20"),
            Matched::Route(Route::Unremind("spring-20".into()))
        );
        assert_eq!(
            route(&Method::POST, "/me/reminders/spring-20"),
            Matched::MethodNotAllowed("PUT, DELETE")
        );
    }

    #[tokio::test]
    async fn a_reminder_for_no_coupon_is_not_found_and_a_malformed_id_is_invalid() {
        let w = wallet(Arc::new(MemoryOutbox::default()));
        let mut put = get("/me/reminders/spring-20");
        *put.method_mut() = Method::PUT;
        assert_eq!(code(&w, put).await, (404, "COUPON_NOT_FOUND".into()));
        let mut bad = get("/me/reminders/spring%2020");
        *bad.method_mut() = Method::PUT;
        assert_eq!(code(&w, bad).await, (400, "INVALID_REQUEST".into()));
        assert_eq!(code(&w, get("/me/reminders")).await, (200, "SUCCESS".into()));
    }
}
