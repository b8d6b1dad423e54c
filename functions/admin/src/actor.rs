//! Who is calling the admin API, and under which operation id.
//!
//! In AWS the routes use IAM authorization and the operator is the signed
//! principal. A user JWT is FORBIDDEN even if a route were misconfigured to
//! accept it; the local mode (`ADMIN_LOCAL_MODE`) reads `X-Admin-Actor` and
//! still refuses a request carrying a user identity.

use std::hash::{BuildHasher, Hasher};

use coupon_domain::admin::AdminContext;
use coupon_domain::audit::Actor;
use coupon_domain::ids::RequestId;
use coupon_edge::{header_str, ErrorCode, Reply};
use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};

use crate::AdminEdge;

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
pub fn context(req: &Request, actor: Actor) -> Result<AdminContext, Box<Reply>> {
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
