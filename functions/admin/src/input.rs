//! A request's parts parsed into the domain's types, each refusal a reply
//! that names what is wrong: path ids, the audit page size, JSON bodies.

use coupon_domain::admin::MAX_AUDIT_PAGE;
use coupon_domain::ids::{CouponId, GrantId, UserId};
use coupon_edge::{json_body, Detail, ErrorCode, Reply};
use lambda_http::Request;
use serde::de::DeserializeOwned;

/// `?limit=` of the audit route: 1 to 1000, 100 when absent.
pub(crate) fn audit_limit(req: &Request) -> Result<usize, Box<Reply>> {
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

pub(crate) fn grant_id(raw: &str) -> Result<GrantId, Box<Reply>> {
    if raw.len() > 200 || !raw.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
        return Err(Box::new(Reply::invalid(
            "grantId may contain only letters, digits, '_' and '-'",
        )));
    }
    GrantId::parse(raw).map_err(|_| Box::new(Reply::error(ErrorCode::GrantNotFound)))
}

pub(crate) fn coupon_id(raw: &str) -> Result<CouponId, Box<Reply>> {
    CouponId::parse(raw).map_err(|e| Box::new(Reply::invalid(e.to_string())))
}

pub(crate) fn user_id(raw: &str) -> Result<UserId, Box<Reply>> {
    UserId::parse(raw).map_err(|e| Box::new(Reply::invalid(e.to_string())))
}

/// Reads a JSON body with the shared reader; the detail names what is
/// wrong (operators need "unknown field `x`").
pub(crate) fn body<T: DeserializeOwned>(req: &Request, max: usize) -> Result<T, Box<Reply>> {
    json_body(req, max, Detail::Serde)
}
