//! The one table of what a client can see: stable code, HTTP status, and
//! the human message in English and Chinese, chosen by `Accept-Language`.
//! Every response an HTTP function writes goes through [`ErrorCode`], and
//! `docs/api.md` and `docs/openapi.yaml` list it (tests check both).

use std::fmt;

use coupon_domain::outcome::RiskReason;

/// The language of a human message, chosen from `Accept-Language`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Lang {
    /// English (the default).
    #[default]
    En,
    /// Simplified Chinese.
    Zh,
}

impl Lang {
    /// Picks the preferred supported language from an `Accept-Language`
    /// header (RFC 9110 q-values; ties go to the earlier entry). Anything
    /// unparseable falls back to English rather than failing the request.
    pub fn from_accept_language(header: Option<&str>) -> Self {
        let Some(header) = header else {
            return Self::En;
        };
        let mut best: Option<(f32, Lang)> = None;
        for entry in header.split(',').take(16) {
            let mut parts = entry.split(';');
            let tag = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q="))
                .find_map(|v| v.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            let lang = if tag == "zh" || tag.starts_with("zh-") {
                Lang::Zh
            } else if tag == "en" || tag.starts_with("en-") || tag == "*" {
                Lang::En
            } else {
                continue;
            };
            if q > 0.0 && best.is_none_or(|(bq, _)| q > bq) {
                best = Some((q, lang));
            }
        }
        best.map(|(_, l)| l).unwrap_or_default()
    }
}

macro_rules! error_codes {
    ($($variant:ident => $code:literal, $status:literal, $en:literal, $zh:literal;)*) => {
        /// Every code a response can carry. Adding one is an API change:
        /// update `docs/api.md` and `docs/openapi.yaml` (tests check that
        /// both agree with this table).
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode { $(
            #[doc = $en]
            $variant,
        )* }

        impl ErrorCode {
            /// All codes, in table order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$variant),*];

            /// The stable machine-readable code.
            pub fn as_str(self) -> &'static str {
                match self { $(ErrorCode::$variant => $code,)* }
            }

            /// The HTTP status that goes with the code.
            pub fn http_status(self) -> u16 {
                match self { $(ErrorCode::$variant => $status,)* }
            }

            /// The human message in the caller's language.
            pub fn message(self, lang: Lang) -> &'static str {
                match (self, lang) { $(
                    (ErrorCode::$variant, Lang::En) => $en,
                    (ErrorCode::$variant, Lang::Zh) => $zh,
                )* }
            }
        }
    };
}

error_codes! {
    Success => "SUCCESS", 200, "Success.", "成功。";
    InvalidRequest => "INVALID_REQUEST", 400, "The request is malformed.", "请求格式不正确。";
    Unauthorized => "UNAUTHORIZED", 401, "Sign in first.", "请先登录。";
    Forbidden => "FORBIDDEN", 403, "Operators only: this route needs an admin identity.", "仅限运营人员：该接口需要管理员身份。";
    RiskRejected => "RISK_REJECTED", 403, "This request was refused by risk control.", "该请求被风控拒绝。";
    NotEligible => "NOT_ELIGIBLE", 403, "Your member level is too low for this coupon.", "您的会员等级不满足领取条件。";
    CouponNotFound => "COUPON_NOT_FOUND", 404, "No such coupon.", "优惠券不存在。";
    GrantNotFound => "GRANT_NOT_FOUND", 404, "No such grant for you.", "未找到您的该条领取记录。";
    ReportNotFound => "REPORT_NOT_FOUND", 404, "No reconciliation report for this coupon yet.", "该优惠券尚无对账报告。";
    RouteNotFound => "ROUTE_NOT_FOUND", 404, "No such route.", "接口不存在。";
    MethodNotAllowed => "METHOD_NOT_ALLOWED", 405, "This method is not allowed here.", "不支持该请求方法。";
    AlreadyClaimed => "ALREADY_CLAIMED", 409, "You already have this coupon.", "您已领取过该优惠券。";
    CouponNotActive => "COUPON_NOT_ACTIVE", 409, "This coupon cannot be grabbed now.", "该优惠券当前不可领取。";
    CouponConflict => "COUPON_CONFLICT", 409, "A different coupon exists under this id.", "该编号下已有不同定义的优惠券。";
    ConcurrentChange => "CONCURRENT_CHANGE", 409, "The coupon kept changing; read it again and retry.", "优惠券正被他人修改，请刷新后重试。";
    CouponUsed => "COUPON_USED", 409, "This coupon has already been used by another order.", "该优惠券已被其他订单使用。";
    CouponNotUsable => "COUPON_NOT_USABLE", 409, "This coupon cannot be used now.", "该优惠券当前不可使用。";
    NotUsedByOrder => "NOT_USED_BY_ORDER", 409, "This order did not use this coupon.", "该订单未使用此优惠券。";
    NothingToRemind => "NOTHING_TO_REMIND", 409, "This coupon will not open again: there is nothing to remind you of.", "该优惠券不会再开抢，无需提醒。";
    TooManyReminders => "TOO_MANY_REMINDERS", 409, "You have as many reminders as allowed; cancel one first.", "提醒数量已达上限，请先取消一个。";
    SoldOut => "SOLD_OUT", 410, "All coupons are gone.", "优惠券已抢完。";
    PayloadTooLarge => "PAYLOAD_TOO_LARGE", 413, "The request body is too large.", "请求体过大。";
    UnsupportedMediaType => "UNSUPPORTED_MEDIA_TYPE", 415, "Send the body as application/json.", "请求体必须是 application/json。";
    RateLimited => "RATE_LIMITED", 429, "Too many people are grabbing; try again shortly.", "当前人数过多，请稍后再试。";
    Internal => "INTERNAL", 500, "Something went wrong on our side.", "服务内部错误。";
    Busy => "BUSY", 503, "The service is busy; try again shortly.", "服务繁忙，请稍后再试。";
}

/// The human message of a `RISK_REJECTED` answer by its `reason`, in
/// English and Chinese (in that order): the one rule refused the user tells them what it
/// was (the generic message of the code says only "risk control"). The
/// reason itself is the stable, machine-readable part (`data.reason`).
pub fn risk_message(reason: RiskReason) -> (&'static str, &'static str) {
    use RiskReason::*;
    match reason {
        Blacklisted => ("This account cannot grab coupons.", "该账号暂时无法领取优惠券。"),
        DailyLimit => (
            "You have grabbed as many coupons as allowed today.",
            "您今日领取优惠券的次数已达上限。",
        ),
        IpLimit => (
            "Too many accounts have grabbed from this network today.",
            "该网络今日领取优惠券的账号过多。",
        ),
        DeviceRequired => (
            "This coupon can only be grabbed in the app on a verified device.",
            "该优惠券仅限在已认证设备上的App内领取。",
        ),
        DeviceUserLimit => (
            "Too many accounts have grabbed from this device today.",
            "该设备今日领取优惠券的账号过多。",
        ),
        DeviceClaimLimit => (
            "This device has grabbed as many coupons as allowed today.",
            "该设备今日领取优惠券的次数已达上限。",
        ),
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accept_language_prefers_the_highest_q() {
        assert_eq!(Lang::from_accept_language(Some("zh-CN,zh;q=0.9,en;q=0.8")), Lang::Zh);
        assert_eq!(Lang::from_accept_language(Some("en;q=0.5, zh-TW;q=0.9")), Lang::Zh);
        assert_eq!(Lang::from_accept_language(Some("fr, en;q=0.1")), Lang::En);
        assert_eq!(Lang::from_accept_language(Some("zh;q=0")), Lang::En);
        assert_eq!(Lang::from_accept_language(Some(";;;,,q=x")), Lang::En);
        assert_eq!(Lang::from_accept_language(None), Lang::En);
    }

    #[test]
    fn every_code_has_a_4xx_or_5xx_status_except_success_and_both_messages() {
        for code in ErrorCode::ALL {
            let status = code.http_status();
            if *code == ErrorCode::Success {
                assert_eq!(status, 200);
            } else {
                assert!((400..600).contains(&status), "{code}");
            }
            assert!(!code.message(Lang::En).is_empty());
            assert!(!code.message(Lang::Zh).is_empty());
        }
    }

    #[test]
    fn docs_api_md_lists_every_code_with_its_status() {
        let doc = include_str!("../../../docs/api.md");
        let rows: Vec<(String, u16)> = doc
            .lines()
            .filter_map(|l| {
                let cells: Vec<&str> = l.split('|').map(str::trim).collect();
                let code = cells.get(1)?.strip_prefix('`')?.strip_suffix('`')?;
                Some((code.to_owned(), cells.get(2)?.parse().ok()?))
            })
            .collect();
        let expected: Vec<(String, u16)> = ErrorCode::ALL
            .iter()
            .map(|c| (c.as_str().to_owned(), c.http_status()))
            .collect();
        assert_eq!(
            rows, expected,
            "docs/api.md's code table must match ErrorCode, in order"
        );
    }

    #[test]
    fn docs_api_md_gives_every_risk_refusal_its_message_in_both_languages() {
        use coupon_domain::outcome::RiskReason::*;
        let doc = include_str!("../../../docs/api.md");
        for reason in [
            Blacklisted,
            DailyLimit,
            IpLimit,
            DeviceRequired,
            DeviceUserLimit,
            DeviceClaimLimit,
        ] {
            let (en, zh) = risk_message(reason);
            let row = format!("| `{}` | {en} | {zh} |", reason.as_str());
            assert!(doc.contains(&row), "docs/api.md lacks the row {row}");
        }
    }

    #[test]
    fn the_openapi_document_lists_every_error_code_in_table_order() {
        let doc = include_str!("../../../docs/openapi.yaml");
        let start = doc
            .find("    ErrorCode:\n")
            .expect("docs/openapi.yaml has components.schemas.ErrorCode");
        let listed: Vec<&str> = doc[start..]
            .lines()
            .skip_while(|l| l.trim() != "enum:")
            .skip(1)
            .map_while(|l| l.trim().strip_prefix("- "))
            .collect();
        let expected: Vec<&str> = ErrorCode::ALL
            .iter()
            .filter(|c| **c != ErrorCode::Success)
            .map(|c| c.as_str())
            .collect();
        assert_eq!(
            listed, expected,
            "docs/openapi.yaml's ErrorCode enum must match ErrorCode"
        );
    }

    #[test]
    fn codes_are_unique() {
        let mut seen = std::collections::HashSet::new();
        assert!(ErrorCode::ALL.iter().all(|c| seen.insert(c.as_str())));
    }
}
