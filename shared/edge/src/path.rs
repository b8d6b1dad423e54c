//! Routing, the same way in every HTTP function: the path is split into
//! segments (empty ones ignored, so `//` and a trailing `/` do not matter),
//! each percent-decoded, and a matched path picks its route by method.
//!
//! Matching on segments lets the same code serve API Gateway (which also
//! sends path parameters), function URLs and `cargo lambda watch` (which
//! send only the raw path). Decoding every segment means an id arrives the
//! same whether the client encoded it or not; a segment that does not
//! decode to UTF-8 is a 400, never a lookup.

use lambda_http::http::header::ALLOW;
use lambda_http::http::Method;

use crate::error::ErrorCode;
use crate::render::Reply;

/// A path's percent-decoded, non-empty segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segments(Vec<String>);

impl Segments {
    /// Splits and decodes `path`; `None` if a segment is not valid
    /// percent-encoded UTF-8.
    pub fn parse(path: &str) -> Option<Self> {
        path.split('/')
            .filter(|s| !s.is_empty())
            .map(decode)
            .collect::<Option<Vec<_>>>()
            .map(Self)
    }

    /// The segments, for matching with slice patterns.
    pub fn as_slice(&self) -> Vec<&str> {
        self.0.iter().map(String::as_str).collect()
    }
}

/// Decodes the `%XX` escapes of one segment; `None` if it is not UTF-8.
fn decode(raw: &str) -> Option<String> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            if !hex.iter().all(u8::is_ascii_hexdigit) {
                return None;
            }
            out.push(u8::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// What a request matched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matched<R> {
    /// A route of the function.
    Route(R),
    /// A known path with another method; the value of `Allow`.
    MethodNotAllowed(&'static str),
    /// Nothing here.
    NotFound,
    /// A path segment that is not valid percent-encoded UTF-8.
    BadPath,
}

impl<R> Matched<R> {
    /// The route, or the reply for a request that matched none.
    pub fn into_route(self) -> Result<R, Reply> {
        match self {
            Matched::Route(r) => Ok(r),
            Matched::MethodNotAllowed(allow) => {
                Err(Reply::error(ErrorCode::MethodNotAllowed).with_header(ALLOW, allow))
            }
            Matched::NotFound => Err(Reply::error(ErrorCode::RouteNotFound)),
            Matched::BadPath => Err(Reply::invalid("path segments must be percent-encoded UTF-8")),
        }
    }
}

/// Picks the route for `method` among those a path serves; `allow` lists
/// them for the `Allow` header of a 405.
pub fn by_method<R, const N: usize>(method: &Method, allow: &'static str, routes: [(Method, R); N]) -> Matched<R> {
    routes
        .into_iter()
        .find(|(m, _)| m == method)
        .map(|(_, r)| Matched::Route(r))
        .unwrap_or(Matched::MethodNotAllowed(allow))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_ignore_empty_parts_and_decode_escapes() {
        let s = Segments::parse("//coupons/c%2D1/grab/").unwrap();
        assert_eq!(s.as_slice(), vec!["coupons", "c-1", "grab"]);
        assert_eq!(Segments::parse("/a/%E4%BC%98").unwrap().as_slice(), vec!["a", "优"]);
    }

    #[test]
    fn a_segment_that_is_not_utf8_or_a_broken_escape_is_refused() {
        for path in ["/a/%FF", "/a/%G1", "/a/%2"] {
            assert_eq!(Segments::parse(path), None, "{path}");
        }
    }

    #[test]
    fn a_route_is_picked_by_method_and_others_get_405_with_allow() {
        let pick = |m: Method| by_method(&m, "GET, POST", [(Method::GET, 1), (Method::POST, 2)]);
        assert_eq!(pick(Method::GET), Matched::Route(1));
        assert_eq!(pick(Method::POST), Matched::Route(2));
        let reply = pick(Method::DELETE).into_route().unwrap_err();
        assert_eq!(reply.code(), ErrorCode::MethodNotAllowed);
        assert_eq!(
            Matched::<u8>::BadPath.into_route().unwrap_err().code(),
            ErrorCode::InvalidRequest
        );
    }
}
