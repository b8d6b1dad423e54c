//! A lottery's routes on the grab function: `POST /coupons/{couponId}/entries`
//! (register; idempotent per user) and `GET /coupons/{couponId}/entries/me`
//! (the caller's standing, and the draw's seed commitment, revealed seed
//! once drawn).

use coupon_domain::grab::{EntryOutcome, EntryRequest, EntryStanding, EntryView};
use coupon_edge::{json_body, Detail, Reply};
use lambda_http::Request;
use serde::Deserialize;
use serde_json::{json, Value};

use super::{caller_and_coupon, rejection_reply, GrabApp};

/// The registration's body: an empty object (the user comes from the
/// token, and one registration per user needs no request id).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryBody {}

/// `POST /coupons/{couponId}/entries`.
pub(super) async fn enter(app: &GrabApp, req: &Request, raw_coupon: &str) -> Reply {
    let (caller, coupon) = match caller_and_coupon(app, req, raw_coupon) {
        Ok(found) => found,
        Err(reply) => return reply,
    };
    if let Err(reply) = json_body::<EntryBody>(req, app.edge.max_body_bytes, Detail::Fixed("body must be {}")) {
        return *reply;
    }
    let entry = EntryRequest {
        coupon,
        user: caller.user,
        level: caller.level,
        ip: caller.ip,
        device: caller.device,
    };
    match app.service.enter(&entry).await {
        Ok(EntryOutcome::Registered { at_ms, replayed }) => Reply::success(json!({
            "couponId": entry.coupon.as_str(),
            "status": "REGISTERED",
            "registeredAtMs": at_ms,
            "replayed": replayed,
        })),
        Ok(EntryOutcome::Rejected(reason)) => rejection_reply(&reason, false),
        Err(e) => Reply::busy("registration undecided", &e),
    }
}

/// `GET /coupons/{couponId}/entries/me`.
pub(super) async fn my_entry(app: &GrabApp, req: &Request, raw_coupon: &str) -> Reply {
    let (caller, coupon) = match caller_and_coupon(app, req, raw_coupon) {
        Ok(found) => found,
        Err(reply) => return reply,
    };
    match app.service.entry_standing(&coupon, &caller.user).await {
        Ok(Ok(view)) => Reply::success(view_json(coupon.as_str(), &view)),
        Ok(Err(reason)) => rejection_reply(&reason, false),
        Err(e) => Reply::busy("lottery standing unread", &e),
    }
}

fn view_json(coupon: &str, view: &EntryView) -> Value {
    let (status, at_ms, grant) = match &view.standing {
        EntryStanding::NotRegistered => ("NOT_REGISTERED", None, None),
        EntryStanding::Registered { at_ms } => ("REGISTERED", Some(*at_ms), None),
        EntryStanding::Won { at_ms, grant_id } => ("WON", Some(*at_ms), grant_id.as_ref()),
        EntryStanding::NotDrawn { at_ms } => ("NOT_DRAWN", Some(*at_ms), None),
    };
    let mut v = json!({"couponId": coupon, "status": status, "seedHash": view.seed_hash});
    if let Some(at) = at_ms {
        v["registeredAtMs"] = at.into();
    }
    if let Some(g) = grant {
        v["grantId"] = g.to_string().into();
    }
    if let Some(seed) = &view.seed {
        v["seed"] = seed.clone().into();
    }
    if let Some(at) = view.drawn_at_ms {
        v["drawnAtMs"] = at.into();
    }
    v
}
