//! Who is calling: the user from API Gateway's verified JWT claims or, in
//! the explicit local mode only, from headers. Never from the body.

use coupon_domain::ids::{ClientIp, DeviceId, UserId};
use lambda_http::http::HeaderMap;
use lambda_http::request::RequestContext;
use lambda_http::{Request, RequestExt};

use crate::settings::EdgeSettings;

/// Who is calling, from the verified identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Caller {
    /// The user.
    pub user: UserId,
    /// The member level (0 when the claim is absent or not a number).
    pub level: u32,
    /// The client address, when known.
    pub ip: Option<ClientIp>,
    /// The attested device, when the token carries the configured claim
    /// (`DEVICE_ID_CLAIM`); in the local mode, `X-Device-Id`.
    pub device: Option<DeviceId>,
}

/// Reads the caller. JWT claims (put in the request context by API Gateway's
/// JWT authorizer, which has verified the token) come first; headers only in
/// the explicit local mode. `None` means 401. Behind the edge, the address
/// is the viewer's, as CloudFront reports it.
pub fn identity(req: &Request, edge: &EdgeSettings) -> Option<Caller> {
    let headers = req.headers();
    let mut source_ip = None;
    let mut claims_user = None;
    let mut claims_level = None;
    let mut claims_device = None;
    if let Some(RequestContext::ApiGatewayV2(ctx)) = req.request_context_ref() {
        source_ip = ctx.http.source_ip.as_deref().and_then(ClientIp::parse);
        if let Some(jwt) = ctx.authorizer.as_ref().and_then(|a| a.jwt.as_ref()) {
            claims_user = jwt.claims.get(&edge.user_id_claim).cloned();
            claims_level = jwt.claims.get(&edge.member_level_claim).cloned();
            claims_device = edge.device_id_claim.as_ref().and_then(|c| jwt.claims.get(c)).cloned();
        }
    }
    if edge.origin_secret_arn.is_some() {
        // Behind the CloudFront edge (whose secret the handler checked
        // before this), API Gateway's source is CloudFront: the viewer's
        // address is what the edge's viewer-request function wrote, over
        // anything the client sent under that name (template.yaml,
        // EdgeViewerAddress).
        source_ip = header_str(headers, "x-viewer-ip").and_then(ClientIp::parse);
    }
    let (raw_user, raw_level, raw_device) = match claims_user {
        Some(user) => (user, claims_level, claims_device),
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
                header_str(headers, "x-device-id").map(str::to_owned),
            )
        }
        None => return None,
    };
    let user = UserId::parse(&raw_user).ok()?;
    // A level that is not a number gets the least privilege, not an error:
    // the token is valid, only the identity provider's claim is odd.
    let level = raw_level.and_then(|l| l.trim().parse().ok()).unwrap_or(0);
    // A device claim that cannot be a key is no device: a coupon that
    // requires one refuses the press, and no rule counts it.
    let device = raw_device.as_deref().and_then(DeviceId::parse);
    Some(Caller {
        user,
        level,
        ip: source_ip,
        device,
    })
}

/// A trimmed, non-empty header value.
pub fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
}
