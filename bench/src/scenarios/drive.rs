//! Driving grab handlers as Lambda's runtime would: API Gateway events (or
//! requests built from one, before the clock starts) through
//! `grab::handle`, from one task per instance, with fresh or returning
//! users, counted by HTTP status.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use grab::GrabApp;
use serde_json::Value;

/// The API Gateway event of a grab, as a template with four holes.
pub(crate) fn template() -> String {
    let mut v: Value = serde_json::from_str(include_str!("../../../tests/fixtures/grab_jwt.json")).expect("fixture");
    v["requestContext"]["authorizer"]["jwt"]["claims"]["sub"] = "@USER@".into();
    v["rawPath"] = "/coupons/@COUPON@/grab".into();
    v["requestContext"]["http"]["path"] = "/coupons/@COUPON@/grab".into();
    v["requestContext"]["http"]["sourceIp"] = "@IP@".into();
    v["pathParameters"]["couponId"] = "@COUPON@".into();
    v["body"] = "{\"requestId\":\"@REQ@\"}".into();
    v.to_string()
}

/// Unique client addresses over the whole run (the per-IP risk rule would
/// otherwise refuse the benchmark's own callers).
static IPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

fn next_ip() -> String {
    let n = IPS.fetch_add(1, Ordering::Relaxed);
    format!("10.{}.{}.{}", (n >> 16) & 0xff, (n >> 8) & 0xff, n & 0xff)
}

/// How requests reach the handler.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Feed {
    /// As the runtime does: the event's bytes parsed by `lambda_http`.
    Events,
    /// An already-parsed request (what the runtime hands `grab::handle`).
    Requests,
    /// Already-parsed dry runs (`GET /coupons/{couponId}/eligibility`):
    /// what a press would get, changing nothing.
    DryRuns,
}

fn event(tpl: &str, coupon: &str, user: &str, request: &str, _n: u64) -> String {
    let ip = next_ip();
    tpl.replace("@COUPON@", coupon)
        .replace("@USER@", user)
        .replace("@REQ@", request)
        .replace("@IP@", &ip)
}

/// Who presses in a run: a fresh user per request, or each caller's users
/// in turn from `cycle` of them.
#[derive(Clone)]
struct Names {
    label: String,
    cycle: Option<u64>,
}

impl Names {
    fn user(&self, caller: usize, i: u64) -> String {
        match self.cycle {
            Some(n) => format!("held-{caller}-{}", i % n),
            None => format!("{}-{caller}-{i}", self.label),
        }
    }

    /// Cycling users are the same in every run (they hold the coupon from
    /// an earlier one), so their request ids carry the run's label.
    fn request(&self, i: u64) -> String {
        match self.cycle {
            Some(_) => format!("{}-{i}", self.label),
            None => format!("r{i}"),
        }
    }
}

/// What a handler run did.
#[derive(Debug, Default)]
pub(crate) struct Drive {
    pub elapsed: Duration,
    pub by_status: BTreeMap<u16, u64>,
    pub total: u64,
}

impl Drive {
    pub fn per_sec(&self) -> f64 {
        self.total as f64 / self.elapsed.as_secs_f64()
    }
    pub fn status(&self, s: u16) -> u64 {
        self.by_status.get(&s).copied().unwrap_or(0)
    }
}

/// Drives each app from its own task, with fresh users, until `run` passes
/// or `limit` requests were made in all. Every request goes through
/// `lambda_http::request::from_str` (what the runtime does with the bytes
/// API Gateway sends) and `grab::handle`.
pub(crate) async fn drive(apps: &[Arc<GrabApp>], coupon: &str, label: &str, run: Duration, limit: u64) -> Drive {
    drive_fed(apps, coupon, label, run, limit, Feed::Events).await
}

/// A request built directly, as `lambda_http` would hand it over: the
/// template's parsed parts, with this caller's claims, address and body.
pub(crate) fn built(
    base: &lambda_http::http::request::Parts,
    coupon: &str,
    user: &str,
    request: &str,
) -> lambda_http::Request {
    built_as(base, coupon, user, request, false)
}

/// [`built`], or with `dry_run` the dry run of that press (a GET, no body).
fn built_as(
    base: &lambda_http::http::request::Parts,
    coupon: &str,
    user: &str,
    request: &str,
    dry_run: bool,
) -> lambda_http::Request {
    use lambda_http::request::RequestContext;
    let host = "https://abc123.execute-api.us-east-1.amazonaws.com";
    let builder = lambda_http::http::Request::builder();
    let mut req = if dry_run {
        builder
            .method(lambda_http::http::Method::GET)
            .uri(format!("{host}/coupons/{coupon}/eligibility"))
            .body(lambda_http::Body::Empty)
    } else {
        builder
            .method(base.method.clone())
            .uri(format!("{host}/coupons/{coupon}/grab"))
            .body(lambda_http::Body::Text(format!("{{\"requestId\":\"{request}\"}}")))
    }
    .expect("request");
    *req.headers_mut() = base.headers.clone();
    *req.extensions_mut() = base.extensions.clone();
    if let Some(RequestContext::ApiGatewayV2(ctx)) = req.extensions_mut().get_mut::<RequestContext>() {
        ctx.http.source_ip = Some(next_ip());
        if let Some(jwt) = ctx.authorizer.as_mut().and_then(|a| a.jwt.as_mut()) {
            jwt.claims.insert("sub".into(), user.into());
        }
    }
    req
}

pub(crate) async fn drive_fed(
    apps: &[Arc<GrabApp>],
    coupon: &str,
    label: &str,
    run: Duration,
    limit: u64,
    feed: Feed,
) -> Drive {
    drive_as(apps, coupon, label, run, limit, feed, None).await
}

/// Each caller's requests, built before the clock starts (the runtime's
/// work, not the handler's); with `Feed::Events`, none: events are built
/// and parsed inside the timed loop.
fn request_pools(
    parts: &lambda_http::http::request::Parts,
    coupon: &str,
    names: &Names,
    callers: usize,
    limit: u64,
    feed: Feed,
) -> Vec<Vec<lambda_http::Request>> {
    let per_task = (150_000 / callers.max(1)).clamp(1_000, 40_000).min(limit as usize);
    (0..callers)
        .map(|t| match feed {
            Feed::Requests | Feed::DryRuns => (1..=per_task)
                .rev()
                .map(|i| {
                    let (user, request) = (names.user(t, i as u64), names.request(i as u64));
                    built_as(parts, coupon, &user, &request, feed == Feed::DryRuns)
                })
                .collect(),
            Feed::Events => Vec::new(),
        })
        .collect()
}

/// [`drive_fed`] with each caller's users taken in turn from `cycle` of
/// them (`None`: a fresh user per request), every request with its own id:
/// users who press again, as those already holding the coupon do.
pub(crate) async fn drive_as(
    apps: &[Arc<GrabApp>],
    coupon: &str,
    label: &str,
    run: Duration,
    limit: u64,
    feed: Feed,
    cycle: Option<u64>,
) -> Drive {
    let names = Names {
        label: label.to_owned(),
        cycle,
    };
    let tpl = Arc::new(template());
    let (parts, _) = lambda_http::request::from_str(&tpl).expect("template").into_parts();
    let made = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let pools = request_pools(&parts, coupon, &names, apps.len(), limit, feed);
    let start = Instant::now();
    let deadline = start + run;
    let mut tasks = Vec::new();
    for ((t, app), mut pool) in apps.iter().enumerate().zip(pools) {
        let (app, tpl, made, parts) = (app.clone(), tpl.clone(), made.clone(), parts.clone());
        let coupon = coupon.to_owned();
        let names = names.clone();
        tasks.push(tokio::spawn(async move {
            let mut by_status: BTreeMap<u16, u64> = BTreeMap::new();
            let mut i = 0u64;
            loop {
                let n = made.fetch_add(1, Ordering::Relaxed);
                if n >= limit || Instant::now() >= deadline {
                    break;
                }
                i += 1;
                let req = match feed {
                    Feed::Events => {
                        let raw = event(&tpl, &coupon, &names.user(t, i), &names.request(i), n);
                        lambda_http::request::from_str(&raw).expect("a valid event")
                    }
                    // A machine faster than the pool was sized for: build
                    // the rest as it goes (timed, so the figure is lower,
                    // never a crash).
                    Feed::Requests | Feed::DryRuns => match pool.pop() {
                        Some(r) => r,
                        None => built_as(
                            &parts,
                            &coupon,
                            &names.user(t, i),
                            &format!("x{i}"),
                            feed == Feed::DryRuns,
                        ),
                    },
                };
                let resp = grab::handle(&app, req).await.expect("infallible");
                *by_status.entry(resp.status().as_u16()).or_default() += 1;
            }
            by_status
        }));
    }
    let mut out = Drive::default();
    for t in tasks {
        for (s, c) in t.await.expect("task") {
            *out.by_status.entry(s).or_default() += c;
            out.total += c;
        }
    }
    out.elapsed = start.elapsed();
    out
}
