//! The edge's proof that a request came through the CloudFront distribution
//! in front of the API (template parameter `EdgeProtection`), where the AWS
//! WAF web ACL ran: CloudFront adds a header with a secret only it and the
//! functions know, and a user route answers a request without it 403. An
//! HTTP API has no resource policy, so without this check its own
//! `execute-api` endpoint would be a way around the bot shield.

use std::fmt;

use lambda_http::Request;

/// The header CloudFront adds to every request it forwards to the API.
pub const ORIGIN_HEADER: &str = "x-origin-verify";

/// The shared secret, read from Secrets Manager at cold start: its current
/// value and, during a rotation, the previous one (CloudFront moves to the
/// new value when the stack is updated, instances started before read the
/// old one: both are accepted, so nothing is refused in between). Never
/// printed (its `Debug` is redacted).
#[derive(Clone, PartialEq, Eq)]
pub struct OriginSecret(Vec<String>);

impl OriginSecret {
    /// The secret's current value; `None` if it is empty (a
    /// misconfiguration the caller reports).
    pub fn new(value: &str) -> Option<Self> {
        let value = value.trim();
        (!value.is_empty()).then(|| Self(vec![value.to_owned()]))
    }

    /// The secret as Secrets Manager holds it: its current value and the
    /// one before the last rotation, if any.
    pub fn from_stored(current: &str, previous: Option<&str>) -> Option<Self> {
        Some(Self::new(current)?.with_previous(previous.unwrap_or_default()))
    }

    /// Also accepts `previous` (the secret's value before the last
    /// rotation), if it is not empty.
    pub fn with_previous(mut self, previous: &str) -> Self {
        let previous = previous.trim();
        if !previous.is_empty() && !self.0.iter().any(|v| v == previous) {
            self.0.push(previous.to_owned());
        }
        self
    }

    /// True if `presented` is one of the values, each compared in time
    /// independent of where the first difference is.
    fn matches(&self, presented: &str) -> bool {
        self.0.iter().any(|value| {
            let (a, b) = (value.as_bytes(), presented.as_bytes());
            a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
        })
    }
}

impl fmt::Debug for OriginSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OriginSecret(..)")
    }
}

/// True if the request may be served: no edge is configured (`None`), or
/// it carries the edge's secret.
pub fn came_through_edge(req: &Request, secret: Option<&OriginSecret>) -> bool {
    let Some(secret) = secret else {
        return true;
    };
    req.headers()
        .get(ORIGIN_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| secret.matches(v))
}

/// The message of the 403 a request around the edge gets: English, Chinese.
pub const AROUND_THE_EDGE: (&str, &str) = ("Call the API through its public address.", "请通过公开地址调用接口。");

#[cfg(test)]
mod tests {
    use super::*;

    fn request(header: Option<&str>) -> Request {
        let mut req = Request::default();
        if let Some(v) = header {
            req.headers_mut().insert(ORIGIN_HEADER, v.parse().unwrap());
        }
        req
    }

    #[test]
    fn without_an_edge_every_request_is_served() {
        assert!(came_through_edge(&request(None), None));
    }

    #[test]
    fn with_an_edge_only_the_secret_header_is_served() {
        let secret = OriginSecret::new("s3cret-value").unwrap();
        assert!(came_through_edge(&request(Some("s3cret-value")), Some(&secret)));
        assert!(!came_through_edge(&request(None), Some(&secret)));
        assert!(!came_through_edge(&request(Some("s3cret-valuE")), Some(&secret)));
        assert!(!came_through_edge(&request(Some("s3cret")), Some(&secret)));
    }

    #[test]
    fn during_a_rotation_the_previous_value_is_accepted_too() {
        let secret = OriginSecret::new("new-value").unwrap().with_previous("old-value");
        assert!(came_through_edge(&request(Some("new-value")), Some(&secret)));
        assert!(came_through_edge(&request(Some("old-value")), Some(&secret)));
        assert!(!came_through_edge(&request(Some("other")), Some(&secret)));
    }

    #[test]
    fn the_secret_is_never_printed_and_never_empty() {
        let secret = OriginSecret::new("s3cret-value").unwrap();
        assert!(!format!("{secret:?}").contains("s3cret"));
        assert_eq!(OriginSecret::new("  "), None);
    }
}
