//! The response envelope: `{"code", "message", "data"}` with the status that
//! goes with the code, the message in the caller's language, and headers
//! that keep proxies from caching a grab.

use crate::error::{ErrorCode, Lang};
use lambda_http::http::header::{HeaderName, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use lambda_http::http::HeaderValue;
use lambda_http::{Body, Response};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use tracing::error;

/// The envelope as it is written: serialized in place, with no tree built
/// around the data.
#[derive(Serialize)]
struct Envelope<'a> {
    code: &'a str,
    message: &'a str,
    data: &'a Data,
}

/// A reply's data: a tree, or (on hot paths) already written from a typed
/// value, so no tree is built for it.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
enum Data {
    Tree(Value),
    Written(Box<RawValue>),
}

/// A response before the language is known.
#[derive(Debug, Clone)]
pub struct Reply {
    code: ErrorCode,
    data: Data,
    headers: Vec<(HeaderName, HeaderValue)>,
    /// A message more precise than the code's: English, Chinese.
    message: Option<(&'static str, &'static str)>,
}

impl Reply {
    /// SUCCESS with `data`.
    pub fn success(data: Value) -> Self {
        Self {
            code: ErrorCode::Success,
            data: Data::Tree(data),
            headers: Vec::new(),
            message: None,
        }
    }

    /// SUCCESS with `data` written straight from its type: for the grab's
    /// answer, where building a JSON tree first was a measurable part of a
    /// press (docs/performance.md).
    pub fn success_of<T: Serialize>(data: &T) -> Self {
        let data = match serde_json::value::to_raw_value(data) {
            Ok(raw) => Data::Written(raw),
            // Only a type that refuses to serialize gets here; ours do not.
            Err(_) => Data::Tree(Value::Null),
        };
        Self {
            code: ErrorCode::Success,
            data,
            headers: Vec::new(),
            message: None,
        }
    }

    /// A failure with no data.
    pub fn error(code: ErrorCode) -> Self {
        Self {
            code,
            data: Data::Tree(Value::Null),
            headers: Vec::new(),
            message: None,
        }
    }

    /// INVALID_REQUEST with a detail that says what to fix. The detail is
    /// ours (a rule), never the client's input.
    pub fn invalid(detail: impl Into<String>) -> Self {
        Self::error(ErrorCode::InvalidRequest).with_data(json!({"detail": detail.into()}))
    }

    /// BUSY (503) with `Retry-After: 1`: a store did not answer, so the
    /// outcome is unknown and the client retries (with the same request id
    /// or idempotency key, which makes the retry safe). The error and its
    /// source chain are logged here, never put in the response.
    pub fn busy(what: &'static str, e: &(dyn std::error::Error + 'static)) -> Self {
        error!(error = %e, source = ?e.source(), "{what}");
        Self::error(ErrorCode::Busy).with_header(RETRY_AFTER, "1")
    }

    /// Replaces the data.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Data::Tree(data);
        self
    }

    /// A message more precise than the code's (the risk rule that refused,
    /// [`crate::error::risk_message`]): ours, in English and Chinese.
    pub fn with_message(mut self, (en, zh): (&'static str, &'static str)) -> Self {
        self.message = Some((en, zh));
        self
    }

    /// Adds a header (values are ours, so they are always valid).
    pub fn with_header(mut self, name: HeaderName, value: &str) -> Self {
        if let Ok(v) = HeaderValue::from_str(value) {
            self.headers.push((name, v));
        }
        self
    }

    /// The code this reply carries.
    pub fn code(&self) -> ErrorCode {
        self.code
    }

    /// Renders the response in `lang`.
    pub fn into_response(self, lang: Lang) -> Response<Body> {
        let envelope = Envelope {
            code: self.code.as_str(),
            message: match (self.message, lang) {
                (Some((en, _)), Lang::En) => en,
                (Some((_, zh)), Lang::Zh) => zh,
                (None, _) => self.code.message(lang),
            },
            data: &self.data,
        };
        // Serializing strings and a tree of our own cannot fail.
        let body = serde_json::to_string(&envelope).unwrap_or_default();
        let mut resp = Response::new(Body::Text(body));
        *resp.status_mut() = lambda_http::http::StatusCode::from_u16(self.code.http_status())
            .unwrap_or(lambda_http::http::StatusCode::INTERNAL_SERVER_ERROR);
        let headers = resp.headers_mut();
        headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("application/json; charset=utf-8"),
        );
        headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if lang == Lang::Zh {
            headers.insert("content-language", HeaderValue::from_static("zh"));
        }
        for (name, value) in self.headers {
            headers.insert(name, value);
        }
        resp
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_carries_code_message_and_status() {
        let resp = Reply::error(ErrorCode::SoldOut).into_response(Lang::Zh);
        assert_eq!(resp.status(), 410);
        let Body::Text(text) = resp.body() else {
            panic!("text body")
        };
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(v["code"], "SOLD_OUT");
        assert_eq!(v["message"], ErrorCode::SoldOut.message(Lang::Zh));
        assert_eq!(resp.headers()["cache-control"], "no-store");
    }

    #[test]
    fn busy_is_503_with_retry_after_and_no_internal_detail() {
        let e = std::io::Error::other("connection refused to 10.0.0.7:6379");
        let resp = Reply::busy("store down", &e).into_response(Lang::En);
        assert_eq!(resp.status(), 503);
        assert_eq!(resp.headers()["retry-after"], "1");
        let Body::Text(text) = resp.body() else {
            panic!("text body")
        };
        assert!(!text.contains("10.0.0.7"));
    }
}
