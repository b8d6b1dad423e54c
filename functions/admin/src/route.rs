//! The admin routes: method and path (segments percent-decoded, as in every
//! function) to an operation.

use coupon_edge::{by_method, Matched, Segments};
use lambda_http::http::Method;

/// What a request asks for; ids are raw (parsed by the operation). The
/// operator's routes come in two families, on coupons and on users; the
/// order service's two are its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `/admin/coupons...`.
    Coupon(CouponRoute),
    /// `/admin/blacklist/...` and `/admin/users/...`.
    User(UserRoute),
    /// `PUT /redemptions/{orderId}`: the order service spends a coupon.
    Redeem(String),
    /// `POST /redemptions/{orderId}/return`: the order gives it back.
    GiveBack(String),
}

/// An operator's routes on coupons.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CouponRoute {
    /// `POST /admin/coupons`.
    Create,
    /// `GET /admin/coupons/{id}`.
    View(String),
    /// `PUT /admin/coupons/{id}/status`.
    Status(String),
    /// `POST /admin/coupons/{id}/stock`.
    Stock(String),
    /// `POST /admin/coupons/{id}/waves`.
    Waves(String),
    /// `PUT /admin/coupons/{id}/rate`.
    Rate(String),
    /// `GET /admin/coupons/{id}/audit`.
    Audit(String),
    /// `POST /admin/coupons/{id}/reconcile`.
    Reconcile(String),
    /// `GET /admin/coupons/{id}/reconcile`.
    Report(String),
}

/// An operator's routes on users.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UserRoute {
    /// `PUT` (true) or `DELETE` (false) `/admin/blacklist/{userId}`.
    Blacklist(String, bool),
    /// `GET /admin/blacklist/{userId}`.
    BlacklistEntry(String),
    /// `PUT /admin/users/{userId}/coupons/{grantId}/revoked`.
    Revoke(String, String),
}

/// Routes `method` and `path`.
pub fn route(method: &Method, path: &str) -> Matched<Route> {
    let Some(segments) = Segments::parse(path) else {
        return Matched::BadPath;
    };
    let id = |s: &str| s.to_owned();
    match segments.as_slice().as_slice() {
        ["admin", "coupons"] => by_method(method, "POST", [(Method::POST, Route::Coupon(CouponRoute::Create))]),
        ["admin", "coupons", c] => by_method(method, "GET", [(Method::GET, Route::Coupon(CouponRoute::View(id(c))))]),
        ["admin", "coupons", c, "status"] => by_method(
            method,
            "PUT",
            [(Method::PUT, Route::Coupon(CouponRoute::Status(id(c))))],
        ),
        ["admin", "coupons", c, "stock"] => by_method(
            method,
            "POST",
            [(Method::POST, Route::Coupon(CouponRoute::Stock(id(c))))],
        ),
        ["admin", "coupons", c, "waves"] => by_method(
            method,
            "POST",
            [(Method::POST, Route::Coupon(CouponRoute::Waves(id(c))))],
        ),
        ["admin", "coupons", c, "rate"] => {
            by_method(method, "PUT", [(Method::PUT, Route::Coupon(CouponRoute::Rate(id(c))))])
        }
        ["admin", "coupons", c, "audit"] => {
            by_method(method, "GET", [(Method::GET, Route::Coupon(CouponRoute::Audit(id(c))))])
        }
        ["admin", "coupons", c, "reconcile"] => by_method(
            method,
            "GET, POST",
            [
                (Method::POST, Route::Coupon(CouponRoute::Reconcile(id(c)))),
                (Method::GET, Route::Coupon(CouponRoute::Report(id(c)))),
            ],
        ),
        ["admin", "blacklist", u] => by_method(
            method,
            "DELETE, GET, PUT",
            [
                (Method::PUT, Route::User(UserRoute::Blacklist(id(u), true))),
                (Method::DELETE, Route::User(UserRoute::Blacklist(id(u), false))),
                (Method::GET, Route::User(UserRoute::BlacklistEntry(id(u)))),
            ],
        ),
        ["admin", "users", u, "coupons", g, "revoked"] => by_method(
            method,
            "PUT",
            [(Method::PUT, Route::User(UserRoute::Revoke(id(u), id(g))))],
        ),
        ["redemptions", o] => by_method(method, "PUT", [(Method::PUT, Route::Redeem(id(o)))]),
        ["redemptions", o, "return"] => by_method(method, "POST", [(Method::POST, Route::GiveBack(id(o)))]),
        _ => Matched::NotFound,
    }
}
