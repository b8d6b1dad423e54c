//! The grab handler: identity, bodies and answers, over in-memory ports.

use std::sync::Arc;

use coupon_domain::clock::ManualClock;
use coupon_domain::grab::ports::{ClaimReply, PeekReply, Recorded};
use coupon_domain::grant::GrantRecord;
use coupon_domain::metrics::RecordingMetrics;
use coupon_domain::testing::{
    FakeQueue, FakeRepairs, FakeRisk, MemoryCatalog, MemoryLiveCoupons, ScriptedLedger, ScriptedStandings,
};

use super::*;

fn edge(trust: bool) -> EdgeSettings {
    EdgeSettings {
        trust_identity_headers: trust,
        user_id_claim: "sub".into(),
        member_level_claim: "member_level".into(),
        device_id_claim: None,
        max_body_bytes: 4096,
        origin_secret_arn: None,
    }
}

fn fixture(name: &str) -> Request {
    let json = match name {
        "jwt" => include_str!("../../../tests/fixtures/grab_jwt.json"),
        "eligibility" => include_str!("../../../tests/fixtures/eligibility_jwt.json"),
        "center" => include_str!("../../../tests/fixtures/center_jwt.json"),
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

fn with_device_claim(mut edge: EdgeSettings) -> EdgeSettings {
    edge.device_id_claim = Some("device_id".into());
    edge
}

#[test]
fn the_device_comes_from_the_configured_claim_and_from_nothing_else() {
    let device = |req: &Request, edge: &EdgeSettings| identity(req, edge).unwrap().device;
    let jwt = fixture("jwt");
    assert_eq!(
        device(&jwt, &with_device_claim(edge(false))).unwrap().as_str(),
        "ios-3b9c"
    );
    assert_eq!(device(&jwt, &edge(false)), None, "no claim configured: no device");
    // A header beside a token names no device, even in the local mode.
    let mut req = fixture("jwt");
    req.headers_mut().insert("x-device-id", "forged".parse().unwrap());
    assert_eq!(device(&req, &edge(true)), None);
    assert_eq!(
        device(&req, &with_device_claim(edge(true))).unwrap().as_str(),
        "ios-3b9c"
    );
}

#[test]
fn behind_the_edge_the_address_is_the_viewer_s_as_cloudfront_reports_it() {
    let mut behind = edge(false);
    behind.origin_secret_arn = Some("arn:aws:secretsmanager:us-east-1:1:secret:edge".into());
    let mut req = fixture("jwt");
    req.headers_mut()
        .insert("x-viewer-ip", "198.51.100.77".parse().unwrap());
    assert_eq!(
        identity(&req, &behind).unwrap().ip.unwrap().to_string(),
        "198.51.100.77"
    );
    assert_eq!(
        identity(&fixture("jwt"), &behind).unwrap().ip,
        None,
        "CloudFront's own address is no client's"
    );
    assert_eq!(
        identity(&req, &edge(false)).unwrap().ip.unwrap().to_string(),
        "203.0.113.7"
    );
}

#[test]
fn the_local_mode_reads_the_device_header_when_there_is_no_token() {
    let caller = identity(&fixture("url"), &edge(true)).unwrap();
    assert_eq!(caller.device.unwrap().as_str(), "local-phone");
}

#[test]
fn a_device_claim_that_cannot_be_a_key_is_no_device() {
    let json = include_str!("../../../tests/fixtures/grab_jwt.json").replace("ios-3b9c", "{slot}");
    let req = lambda_http::request::from_str(&json).unwrap();
    let caller = identity(&req, &with_device_claim(edge(false))).unwrap();
    assert_eq!(caller.device, None);
    assert_eq!(
        caller.user.as_str(),
        "user-7f3a",
        "the press still counts as the user's"
    );
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

/// The handler over in-memory ports, with the fixture's caller.
fn app(ledger: ScriptedLedger, queue: Arc<FakeQueue>) -> GrabApp {
    app_with(ledger, queue, MemoryCatalog::default())
}

fn app_with(ledger: ScriptedLedger, queue: Arc<FakeQueue>, catalog: MemoryCatalog) -> GrabApp {
    let center = CenterPorts {
        live: Arc::new(MemoryLiveCoupons::default()),
        standings: Arc::new(ScriptedStandings::default()),
    };
    app_over(ledger, queue, catalog, center)
}

fn app_over(ledger: ScriptedLedger, queue: Arc<FakeQueue>, catalog: MemoryCatalog, center: CenterPorts) -> GrabApp {
    let config = Config::read(&coupon_domain::config::Env::from_pairs(&[
        ("REDIS_URL", "redis://127.0.0.1:1"),
        ("GRANT_QUEUE_URL", "http://127.0.0.1:1/q"),
        ("REPAIR_QUEUE_URL", "http://127.0.0.1:1/repairs"),
        ("COUPONS_TABLE", "coupons"),
        ("CLAIMS_TABLE", "claims"),
    ]))
    .unwrap();
    let grab = GrabPorts {
        ledger: Arc::new(ledger),
        risk: Arc::new(FakeRisk::allowing()),
        publisher: queue,
        claims: Arc::new(coupon_domain::testing::FakeClaims::default()),
        catalog: Arc::new(catalog),
        repairs: Arc::new(FakeRepairs::default()),
        entries: Arc::new(coupon_domain::testing::MemoryEntries::default()),
        clock: Arc::new(ManualClock::new(1_000)),
        metrics: Arc::new(RecordingMetrics::default()),
    };
    wire_ports(&config, Ports { grab, center })
}

#[tokio::test]
async fn a_coupon_redis_lost_is_503_busy_and_one_never_created_is_404() {
    // Redis knows neither (no shard count): the catalogue tells them apart.
    let lost = app_with(
        ScriptedLedger::default(),
        Arc::default(),
        MemoryCatalog::with("spring-20", 2),
    );
    let (status, body) = answer(&lost, fixture("jwt")).await;
    assert_eq!((status, body["code"].as_str()), (503, Some("BUSY")), "{body}");

    let never = app(ScriptedLedger::default(), Arc::default());
    let (status, body) = answer(&never, fixture("jwt")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("COUPON_NOT_FOUND")),
        "{body}"
    );
}

fn won() -> ScriptedLedger {
    ScriptedLedger {
        shards: 1,
        claim: Some(ClaimReply::Won(GrantRecord {
            grant_id: coupon_domain::ids::GrantId::parse("c1-0-1").unwrap(),
            ordinal: 1,
            shard: 0,
            granted_at_ms: 1_000,
        })),
        ..ScriptedLedger::default()
    }
}

async fn answer(app: &GrabApp, req: Request) -> (u16, Value) {
    let resp = handle(app, req).await.expect("infallible");
    let Body::Text(text) = resp.body() else {
        panic!("a text body")
    };
    (resp.status().as_u16(), serde_json::from_str(text).expect("JSON"))
}

#[tokio::test]
async fn a_winning_press_is_200_success_and_its_grant_is_queued() {
    let queue = Arc::new(FakeQueue::default());
    let (status, body) = answer(&app(won(), queue.clone()), fixture("jwt")).await;
    assert_eq!((status, body["code"].as_str()), (200, Some("SUCCESS")));
    assert_eq!(body["data"]["grantId"], "c1-0-1");
    let sent = queue.sent.lock().unwrap();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].user_id.as_str(), "user-7f3a", "the user is the token's subject");
}

/// With the CloudFront and WAF edge in front, a request that did not come
/// through it (the API's own endpoint called directly) is refused before
/// anything is read, and one with the edge's header is served.
#[tokio::test]
async fn behind_the_edge_a_request_without_its_secret_is_403_and_touches_no_store() {
    let queue = Arc::new(FakeQueue::default());
    let mut guarded = app(won(), queue.clone());
    guarded.origin = OriginSecret::new("edge-secret-1");
    let (status, body) = answer(&guarded, fixture("jwt")).await;
    assert_eq!((status, body["code"].as_str()), (403, Some("FORBIDDEN")), "{body}");
    assert_eq!(body["message"], "Call the API through its public address.");
    let mut forged = fixture("jwt");
    forged.headers_mut().insert("x-origin-verify", "guess".parse().unwrap());
    assert_eq!(answer(&guarded, forged).await.0, 403);
    assert!(queue.sent.lock().unwrap().is_empty());
    let mut through = fixture("jwt");
    through
        .headers_mut()
        .insert("x-origin-verify", "edge-secret-1".parse().unwrap());
    let (status, body) = answer(&guarded, through).await;
    assert_eq!((status, body["code"].as_str()), (200, Some("SUCCESS")), "{body}");
}

/// A client places a slow press without a trace: the handler's own time
/// comes with every answer, success or refusal.
#[tokio::test]
async fn every_answer_says_how_long_the_handler_took_in_server_timing() {
    let win = handle(&app(won(), Arc::default()), fixture("jwt")).await.unwrap();
    let mut no_user = fixture("jwt");
    *no_user.uri_mut() = "/nowhere".parse().unwrap();
    let refused = handle(&app(won(), Arc::default()), no_user).await.unwrap();
    for resp in [win, refused] {
        let timing = resp.headers()["server-timing"].to_str().unwrap().to_owned();
        let ms: f64 = timing
            .strip_prefix("app;dur=")
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{timing}"));
        assert!(ms >= 0.0, "{timing}");
    }
}

#[tokio::test]
async fn redis_that_does_not_answer_is_503_busy_with_retry_after() {
    let ledger = ScriptedLedger {
        fail_claim: true,
        ..won()
    };
    let resp = handle(&app(ledger, Arc::default()), fixture("jwt")).await.unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
}

#[tokio::test]
async fn a_positional_array_body_is_400_and_touches_no_store() {
    let ledger = won();
    let mut req = fixture("jwt");
    *req.body_mut() = Body::Text(r#"["press-1"]"#.into());
    let app = app(ledger, Arc::default());
    let (status, body) = answer(&app, req).await;
    assert_eq!((status, body["code"].as_str()), (400, Some("INVALID_REQUEST")));
    assert_eq!(body["data"]["detail"], "the body must be a JSON object");
}

#[tokio::test]
async fn a_replayed_win_answers_the_original_grant_and_sends_it_again() {
    let ledger = ScriptedLedger {
        claim: Some(ClaimReply::Replay(Recorded::Won(GrantRecord {
            grant_id: coupon_domain::ids::GrantId::parse("c1-0-9").unwrap(),
            ordinal: 1,
            shard: 0,
            granted_at_ms: 900,
        }))),
        ..won()
    };
    let queue = Arc::new(FakeQueue::default());
    let (status, body) = answer(&app(ledger, queue.clone()), fixture("jwt")).await;
    assert_eq!(status, 200);
    assert_eq!(
        (body["data"]["grantId"].as_str(), body["data"]["replayed"].as_bool()),
        (Some("c1-0-9"), Some(true))
    );
    assert_eq!(
        queue.sent.lock().unwrap().len(),
        1,
        "sent again: the issuer absorbs repeats"
    );
}

#[tokio::test]
async fn a_win_the_queue_refused_is_503_busy_not_success() {
    let queue = Arc::new(FakeQueue {
        fail: true,
        ..FakeQueue::default()
    });
    let resp = handle(&app(won(), queue), fixture("jwt")).await.unwrap();
    assert_eq!(resp.status(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
}

#[tokio::test]
async fn a_dry_run_that_would_win_is_success_with_the_coupon_and_claims_nothing() {
    let queue = Arc::new(FakeQueue::default());
    let app = app(
        ScriptedLedger {
            shards: 1,
            ..Default::default()
        },
        queue.clone(),
    );
    let (status, body) = answer(&app, fixture("eligibility")).await;
    assert_eq!((status, body["code"].as_str()), (200, Some("SUCCESS")), "{body}");
    assert_eq!(body["data"], json!({"couponId": "spring-20", "wouldWin": true}));
    assert!(queue.sent.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_dry_run_answers_a_refusal_with_the_code_and_data_a_press_would_get() {
    let app = app(
        ScriptedLedger {
            shards: 1,
            peek: Some(PeekReply::Rejected(Rejection::NotStarted { starts_at_ms: 7_000 })),
            ..Default::default()
        },
        Arc::default(),
    );
    let (status, body) = answer(&app, fixture("eligibility")).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (409, Some("COUPON_NOT_ACTIVE")),
        "{body}"
    );
    assert_eq!(body["data"], json!({"reason": "NOT_STARTED", "startsAtMs": 7_000}));
}

#[tokio::test]
async fn a_dry_run_without_a_verified_identity_is_401() {
    let app = app(ScriptedLedger::default(), Arc::default());
    let mut event: Value = serde_json::from_str(include_str!("../../../tests/fixtures/eligibility_jwt.json")).unwrap();
    event["requestContext"].as_object_mut().unwrap().remove("authorizer");
    let req = lambda_http::request::from_str(&event.to_string()).unwrap();
    let (status, body) = answer(&app, req).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("UNAUTHORIZED")), "{body}");
}

/// The center over a catalogue of `ids` (windows 500..10_000, open at the
/// handler's clock of 1_000), every shard open to the caller.
fn center_app(ids: &[&str]) -> GrabApp {
    use coupon_domain::center::Standing;
    use coupon_domain::coupon::{CouponDefinition, CouponStatus};
    let live = MemoryLiveCoupons::default();
    let standings = ScriptedStandings::default();
    for id in ids {
        let coupon = CouponId::parse(id).unwrap();
        live.coupons.lock().unwrap().push(CouponDefinition {
            coupon_id: coupon.clone(),
            name: format!("{id} off"),
            amount: 500,
            total_stock: 100,
            per_user_limit: 1,
            min_member_level: 0,
            grab_start_ms: 500,
            grab_end_ms: 10_000,
            valid_from_ms: 500,
            valid_until_ms: 20_000,
            shards: 2,
            rate_per_sec: 0,
            burst: 0,
            status: CouponStatus::Online,
            waves: Vec::new(),
            rollover: true,
            device_required: false,
            mode: Default::default(),
            draw_at_ms: None,
        });
        standings.remaining.lock().unwrap().insert(coupon.clone(), 80);
        standings.answers.lock().unwrap().insert(
            coupon,
            Standing {
                shard: PeekReply::Open,
                held: 0,
            },
        );
    }
    let center = CenterPorts {
        live: Arc::new(live),
        standings: Arc::new(standings),
    };
    app_over(
        ScriptedLedger::default(),
        Arc::default(),
        MemoryCatalog::default(),
        center,
    )
}

#[tokio::test]
async fn the_coupon_center_lists_a_page_with_each_button_and_a_cursor_to_the_next() {
    let app = center_app(&["c-a", "c-b", "c-c"]);
    let (status, body) = answer(&app, fixture("center")).await;
    assert_eq!((status, body["code"].as_str()), (200, Some("SUCCESS")), "{body}");
    let coupons = body["data"]["coupons"].as_array().unwrap();
    assert_eq!(coupons.len(), 2, "the fixture asks for limit=2");
    assert_eq!(
        coupons[0],
        json!({
            "couponId": "c-a", "name": "c-a off", "amount": 500,
            "grabStartMs": 500, "grabEndMs": 10_000, "validFromMs": 500, "validUntilMs": 20_000,
            "minMemberLevel": 0, "state": "CAN_GRAB", "held": 0, "limit": 1, "stock": "PLENTY"
        })
    );
    assert_eq!(body["data"]["nextCursor"], json!("500~c-b"));
}

#[tokio::test]
async fn a_malformed_center_query_is_400_naming_the_parameter() {
    let app = center_app(&["c-a"]);
    for (name, value, says) in [
        ("limit", "0", "limit"),
        ("limit", "51", "limit"),
        ("limit", "ten", "limit"),
        ("cursor", "not-a-cursor", "cursor"),
    ] {
        let req = fixture("center")
            .with_query_string_parameters(std::collections::HashMap::from([(name.to_string(), value.to_string())]));
        let (status, body) = answer(&app, req).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (400, Some("INVALID_REQUEST")),
            "{name}={value}: {body}"
        );
        assert!(body["data"]["detail"].as_str().unwrap().contains(says), "{body}");
    }
}

#[tokio::test]
async fn the_coupon_center_without_a_verified_identity_is_401() {
    let app = center_app(&["c-a"]);
    let mut event: Value = serde_json::from_str(include_str!("../../../tests/fixtures/center_jwt.json")).unwrap();
    event["requestContext"].as_object_mut().unwrap().remove("authorizer");
    let req = lambda_http::request::from_str(&event.to_string()).unwrap();
    let (status, body) = answer(&app, req).await;
    assert_eq!((status, body["code"].as_str()), (401, Some("UNAUTHORIZED")), "{body}");
}
