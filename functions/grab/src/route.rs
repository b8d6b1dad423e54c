//! Routing: which operation a method and path ask for (segments matched as
//! in every function, by `coupon_edge::path`).

use coupon_edge::{by_method, Matched, Segments};
use lambda_http::http::Method;

/// What the request asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `POST /coupons/{couponId}/grab`, with the decoded, unparsed coupon id.
    Grab(String),
    /// `GET /coupons/{couponId}/eligibility`: the dry run of a press.
    Eligibility(String),
    /// `GET /coupons`: the coupon center.
    Center,
    /// `POST /coupons/{couponId}/entries`: register for a lottery.
    Enter(String),
    /// `GET /coupons/{couponId}/entries/me`: the caller's standing in it.
    MyEntry(String),
}

/// Routes `method` and `path`.
pub fn route(method: &Method, path: &str) -> Matched<Route> {
    let Some(segments) = Segments::parse(path) else {
        return Matched::BadPath;
    };
    match segments.as_slice().as_slice() {
        ["coupons"] => by_method(method, "GET", [(Method::GET, Route::Center)]),
        ["coupons", coupon, "grab"] => by_method(method, "POST", [(Method::POST, Route::Grab(coupon.to_string()))]),
        ["coupons", coupon, "eligibility"] => {
            by_method(method, "GET", [(Method::GET, Route::Eligibility(coupon.to_string()))])
        }
        ["coupons", coupon, "entries"] => by_method(method, "POST", [(Method::POST, Route::Enter(coupon.to_string()))]),
        ["coupons", coupon, "entries", "me"] => {
            by_method(method, "GET", [(Method::GET, Route::MyEntry(coupon.to_string()))])
        }
        _ => Matched::NotFound,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grab_route_takes_the_coupon_id_from_the_path() {
        let grab = |p| route(&Method::POST, p);
        assert_eq!(grab("/coupons/c1/grab"), Matched::Route(Route::Grab("c1".into())));
        assert_eq!(grab("/coupons/c1/grab/"), Matched::Route(Route::Grab("c1".into())));
        assert_eq!(grab("/coupons/c%2D1/grab"), Matched::Route(Route::Grab("c-1".into())));
    }

    #[test]
    fn the_dry_run_is_a_get_on_the_coupon_s_eligibility() {
        assert_eq!(
            route(&Method::GET, "/coupons/c1/eligibility"),
            Matched::Route(Route::Eligibility("c1".into()))
        );
        assert_eq!(
            route(&Method::POST, "/coupons/c1/eligibility"),
            Matched::MethodNotAllowed("GET")
        );
    }

    #[test]
    fn the_coupon_center_is_a_get_on_the_collection() {
        assert_eq!(route(&Method::GET, "/coupons"), Matched::Route(Route::Center));
        assert_eq!(route(&Method::GET, "/coupons/"), Matched::Route(Route::Center));
        assert_eq!(route(&Method::POST, "/coupons"), Matched::MethodNotAllowed("GET"));
    }

    #[test]
    fn a_lottery_registration_is_a_post_on_its_entries_and_the_result_a_get_on_mine() {
        assert_eq!(
            route(&Method::POST, "/coupons/c1/entries"),
            Matched::Route(Route::Enter("c1".into()))
        );
        assert_eq!(
            route(&Method::GET, "/coupons/c1/entries/me"),
            Matched::Route(Route::MyEntry("c1".into()))
        );
        assert_eq!(
            route(&Method::GET, "/coupons/c1/entries"),
            Matched::MethodNotAllowed("POST")
        );
        assert_eq!(
            route(&Method::POST, "/coupons/c1/entries/me"),
            Matched::MethodNotAllowed("GET")
        );
    }

    #[test]
    fn other_methods_on_the_grab_route_are_not_allowed() {
        assert_eq!(
            route(&Method::GET, "/coupons/c1/grab"),
            Matched::MethodNotAllowed("POST")
        );
    }

    #[test]
    fn unknown_paths_are_not_found_and_broken_escapes_are_bad() {
        for path in ["/", "/coupon", "/coupons/c1", "/coupons/c1/grab/x", "/x/c1/grab"] {
            assert_eq!(route(&Method::POST, path), Matched::NotFound, "{path}");
        }
        assert_eq!(route(&Method::POST, "/coupons/%FF/grab"), Matched::BadPath);
    }
}
