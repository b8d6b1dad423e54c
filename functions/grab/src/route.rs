//! Routing: which operation a method and path ask for.
//!
//! Matching is on path segments, so the same code serves API Gateway (which
//! also sends path parameters) and function URLs or `cargo lambda watch`
//! (which send only the raw path).

use lambda_http::http::Method;

/// What the request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route<'a> {
    /// `POST /coupons/{couponId}/grab`, with the raw (unparsed) coupon id.
    Grab(&'a str),
    /// A known path with the wrong method; `allow` lists the right ones.
    MethodNotAllowed {
        /// The value of the `Allow` header.
        allow: &'static str,
    },
    /// Nothing here.
    NotFound,
}

/// Routes `method` and `path`. Empty segments (`//`, a trailing `/`) are
/// ignored.
pub fn route<'a>(method: &Method, path: &'a str) -> Route<'a> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        ["coupons", coupon, "grab"] => {
            if method == Method::POST {
                Route::Grab(coupon)
            } else {
                Route::MethodNotAllowed { allow: "POST" }
            }
        }
        _ => Route::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grab_route_takes_the_coupon_id_from_the_path() {
        assert_eq!(route(&Method::POST, "/coupons/c1/grab"), Route::Grab("c1"));
        assert_eq!(route(&Method::POST, "/coupons/c1/grab/"), Route::Grab("c1"));
    }

    #[test]
    fn other_methods_on_the_grab_route_are_not_allowed() {
        assert_eq!(
            route(&Method::GET, "/coupons/c1/grab"),
            Route::MethodNotAllowed { allow: "POST" }
        );
    }

    #[test]
    fn unknown_paths_are_not_found() {
        for path in ["/", "/coupons", "/coupons/c1", "/coupons/c1/grab/x", "/x/c1/grab"] {
            assert_eq!(route(&Method::POST, path), Route::NotFound, "{path}");
        }
    }
}
