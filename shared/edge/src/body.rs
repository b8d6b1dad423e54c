//! The one JSON body reader of every HTTP function.
//!
//! In order: the media type (`application/json` or `*+json`, or none), the
//! size limit, then the JSON itself, which must be an object: serde's
//! positional form of a struct (`["press-1"]`) is refused, as the contract
//! says object. Integers may be written as integral numbers (`460.0`,
//! `4.6e2`), as JSON Schema counts them as integers; `460.5` stays an error.
//! Unknown fields are refused by the body types themselves
//! (`deny_unknown_fields`). An object that names a key twice is refused
//! too, at any depth: RFC 8259 leaves duplicates undefined and parsers
//! disagree on which one wins, so a gateway, a WAF or a log reader could
//! act on another value than this function (`{"totalStock": 10,
//! "totalStock": 999999}`).

use std::cell::RefCell;
use std::fmt;

use lambda_http::{Body, Request};
use serde::de::{DeserializeOwned, DeserializeSeed, Error as _, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserializer;
use serde_json::{json, Number, Value};

use crate::error::ErrorCode;
use crate::identity::header_str;
use crate::render::Reply;

/// How a body that is JSON but the wrong shape is explained.
#[derive(Debug, Clone, Copy)]
pub enum Detail {
    /// Always this text: for public routes, where serde's message could
    /// echo the client's input back.
    Fixed(&'static str),
    /// serde's message (which names the field), cut to 200 bytes: for
    /// operators, who need "unknown field `x`".
    Serde,
}

/// Reads a JSON object body into `T`, or the reply that says what is wrong.
pub fn json_body<T: DeserializeOwned>(req: &Request, max: usize, detail: Detail) -> Result<T, Box<Reply>> {
    if let Some(ct) = header_str(req.headers(), "content-type") {
        let mime = ct.split(';').next().unwrap_or("").trim().to_ascii_lowercase();
        if mime != "application/json" && !mime.ends_with("+json") {
            return Err(Box::new(Reply::error(ErrorCode::UnsupportedMediaType)));
        }
    }
    let bytes: &[u8] = match req.body() {
        Body::Empty => &[],
        Body::Text(s) => s.as_bytes(),
        Body::Binary(b) => b,
        _ => &[],
    };
    if bytes.len() > max {
        return Err(Box::new(
            Reply::error(ErrorCode::PayloadTooLarge).with_data(json!({"maxBytes": max})),
        ));
    }
    parse_object(bytes, detail).map_err(Box::new)
}

/// The body's bytes into `T`: an object, with integral numbers as integers.
pub fn parse_object<T: DeserializeOwned>(bytes: &[u8], detail: Detail) -> Result<T, Reply> {
    let Some(first) = bytes.iter().find(|b| !b.is_ascii_whitespace()) else {
        return Err(Reply::invalid("the body must be a JSON object"));
    };
    if let Some(key) = repeated_key(bytes) {
        return Err(Reply::invalid(format!(
            "the body names {} more than once",
            shown_key(&key)
        )));
    }
    // The common case straight into `T` (no intermediate tree): an object
    // that is `T` as written. Anything else (a refusal, or a number such
    // as `460.0` that only the rewrite below makes an integer) takes the
    // general path below, which decides and explains every refusal.
    if *first == b'{' {
        if let Ok(parsed) = serde_json::from_slice(bytes) {
            return Ok(parsed);
        }
    }
    let mut value: Value = serde_json::from_slice(bytes).map_err(|_| Reply::invalid("the body is not valid JSON"))?;
    if !value.is_object() {
        return Err(Reply::invalid("the body must be a JSON object"));
    }
    integral_to_integer(&mut value);
    serde_path_to_error::deserialize(value).map_err(|e| {
        Reply::invalid(match detail {
            Detail::Fixed(text) => text.to_owned(),
            Detail::Serde => cut(explain(&e), 200),
        })
    })
}

/// serde's refusal with the field it concerns; a number outside what the
/// field's integer type holds is told as that type's range (serde alone
/// says `invalid type: floating point ..., expected u32`).
fn explain(e: &serde_path_to_error::Error<serde_json::Error>) -> String {
    let inner = e.inner().to_string();
    let path = e.path().to_string();
    if path == "." {
        return inner;
    }
    let number = inner.starts_with("invalid value: integer") || inner.starts_with("invalid type: floating point");
    let range = INTEGER_RANGES
        .iter()
        .find(|(ty, _)| inner.ends_with(&format!("expected {ty}")))
        .map(|(_, range)| *range);
    match range {
        Some(range) if number => format!("`{path}` must be an integer from {range}"),
        _ => format!("`{path}`: {inner}"),
    }
}

/// The integer types of the bodies, and what each holds.
const INTEGER_RANGES: [(&str, &str); 4] = [
    ("u32", "0 to 4294967295"),
    ("u64", "0 to 18446744073709551615"),
    ("i64", "-9223372036854775808 to 9223372036854775807"),
    ("u16", "0 to 65535"),
];

/// The first key an object of `bytes` names twice, at any depth; `None`
/// when there is none or `bytes` is not JSON (the parse that follows says
/// so). Walks the document without building it: the keys of the object
/// being read are all it keeps.
fn repeated_key(bytes: &[u8]) -> Option<String> {
    let found = RefCell::new(None);
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let _ = UniqueKeys(&found).deserialize(&mut de);
    found.into_inner()
}

/// A key as a refusal may name it: a plain identifier (every field of the
/// contract is one) in backticks; anything else only as "a key", so a
/// public route never echoes arbitrary input.
fn shown_key(key: &str) -> String {
    let plain = !key.is_empty() && key.len() <= 64 && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if plain {
        format!("`{key}`")
    } else {
        "a key".to_owned()
    }
}

/// Visits any JSON value, failing at the first object key seen twice in one
/// object (recorded in the cell, so the caller can tell it from a syntax
/// error).
struct UniqueKeys<'a>(&'a RefCell<Option<String>>);

impl<'de> DeserializeSeed<'de> for UniqueKeys<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, de: D) -> Result<(), D::Error> {
        de.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for UniqueKeys<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }
    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }
    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }
    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }
    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }
    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(UniqueKeys(self.0))?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen: Vec<String> = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            if seen.contains(&key) {
                *self.0.borrow_mut() = Some(key);
                // Stop here: the rest of the document is not read.
                let _ = map.next_value::<IgnoredAny>();
                return Err(A::Error::custom("repeated key"));
            }
            map.next_value_seed(UniqueKeys(self.0))?;
            seen.push(key);
        }
        Ok(())
    }
}

/// Rewrites every number with no fractional part (`460.0`) as an integer,
/// so integer fields accept it; other numbers stay as they are.
fn integral_to_integer(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            // Exactly representable integers only (|f| < 2^63), never a
            // rounding of a larger or fractional value.
            if f.fract() == 0.0 && f.abs() < 9.223_372_036_854_775e18 {
                let i = f as i64;
                *n = if i >= 0 {
                    Number::from(i as u64)
                } else {
                    Number::from(i)
                };
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_to_integer),
        Value::Object(map) => map.values_mut().for_each(integral_to_integer),
        _ => {}
    }
}

fn cut(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut at = max;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        text.truncate(at);
        text.push('…');
    }
    text
}

#[cfg(test)]
mod tests {
    use serde::Deserialize;

    use super::*;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Stock {
        add: u64,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Press {
        request_id: String,
    }

    fn detail_of(reply: Reply) -> String {
        let resp = reply.into_response(crate::Lang::En);
        let Body::Text(text) = resp.body() else { panic!("text") };
        let v: Value = serde_json::from_str(text).unwrap();
        assert_eq!(v["code"], "INVALID_REQUEST");
        v["data"]["detail"].as_str().unwrap().to_owned()
    }

    #[test]
    fn a_positional_array_is_refused_where_an_object_is_expected() {
        for body in [r#"["press-1"]"#, "[1]", r#"["ONLINE"]"#, "17", r#""x""#, "null", "true"] {
            let err = parse_object::<Press>(body.as_bytes(), Detail::Serde).unwrap_err();
            assert_eq!(detail_of(err), "the body must be a JSON object", "{body}");
        }
        assert_eq!(
            parse_object::<Press>(br#"{"requestId": "press-1"}"#, Detail::Serde).unwrap(),
            Press {
                request_id: "press-1".into()
            }
        );
    }

    #[test]
    fn integral_numbers_are_integers_and_fractions_are_not() {
        for body in [r#"{"add": 460}"#, r#"{"add": 460.0}"#, r#"{"add": 4.6e2}"#] {
            assert_eq!(
                parse_object::<Stock>(body.as_bytes(), Detail::Serde).unwrap(),
                Stock { add: 460 }
            );
        }
        for body in [r#"{"add": 460.5}"#, r#"{"add": -1.0}"#, r#"{"add": 1e300}"#] {
            assert!(parse_object::<Stock>(body.as_bytes(), Detail::Serde).is_err(), "{body}");
        }
    }

    #[test]
    fn a_public_route_never_echoes_the_input() {
        let err = parse_object::<Press>(br#"{"requestId": "a", "<script>": 1}"#, Detail::Fixed("fixed")).unwrap_err();
        assert_eq!(detail_of(err), "fixed");
        let err = parse_object::<Press>(b"{not json", Detail::Fixed("fixed")).unwrap_err();
        assert_eq!(detail_of(err), "the body is not valid JSON");
    }

    #[test]
    fn an_operator_is_told_which_field_is_wrong_in_bounded_text() {
        let err = parse_object::<Stock>(br#"{"add": 1, "oops": 2}"#, Detail::Serde).unwrap_err();
        assert!(detail_of(err).contains("unknown field `oops`"));
        let long = format!(r#"{{"add": 1, "{}": 2}}"#, "x".repeat(500));
        let err = parse_object::<Stock>(long.as_bytes(), Detail::Serde).unwrap_err();
        assert!(detail_of(err).len() <= 204);
    }

    #[test]
    fn a_key_named_twice_is_refused_at_any_depth_and_named_only_if_plain() {
        for (body, named) in [
            (r#"{"requestId": "a", "requestId": "b"}"#, "`requestId`"),
            (r#"{"add": 1, "add": 2}"#, "`add`"),
            (r#"{"add": 1, "x": {"k": 1, "k": 2}}"#, "`k`"),
            (r#"{"add": 1, "x": [{"k": 1}, {"k": 2, "k": 3}]}"#, "`k`"),
            (r#"{"<b>": 1, "<b>": 2}"#, "a key"),
        ] {
            for detail in [Detail::Serde, Detail::Fixed("fixed")] {
                let err = parse_object::<Value>(body.as_bytes(), detail).unwrap_err();
                assert_eq!(
                    detail_of(err),
                    format!("the body names {named} more than once"),
                    "{body}"
                );
            }
        }
        // The same key in two objects is two keys; an escaped spelling of
        // one is the same key.
        assert!(parse_object::<Value>(br#"{"a": {"k": 1}, "b": {"k": 2}}"#, Detail::Serde).is_ok());
        assert!(parse_object::<Value>(br#"{"add": 1, "\u0061dd": 2}"#, Detail::Serde).is_err());
        assert_eq!(
            parse_object::<Stock>(br#"{"add": 7}"#, Detail::Serde).unwrap(),
            Stock { add: 7 }
        );
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(rename_all = "camelCase", deny_unknown_fields)]
    struct Rate {
        rate_per_sec: u32,
        #[serde(default)]
        burst: u32,
    }

    #[test]
    fn a_number_beyond_its_fields_type_is_refused_with_the_field_and_the_range() {
        for body in [
            r#"{"ratePerSec": 5, "burst": 6869465605437298966505390918491701248}"#,
            r#"{"ratePerSec": 5, "burst": 4294967296}"#,
            r#"{"ratePerSec": 5, "burst": -1}"#,
        ] {
            let err = parse_object::<Rate>(body.as_bytes(), Detail::Serde).unwrap_err();
            assert_eq!(
                detail_of(err),
                "`burst` must be an integer from 0 to 4294967295",
                "{body}"
            );
        }
        let err = parse_object::<Stock>(br#"{"add": 1.5}"#, Detail::Serde).unwrap_err();
        assert_eq!(
            detail_of(err),
            "`add` must be an integer from 0 to 18446744073709551615"
        );
        let err = parse_object::<Rate>(br#"{"ratePerSec": "five"}"#, Detail::Serde).unwrap_err();
        assert!(detail_of(err).starts_with("`ratePerSec`: invalid type: string"));
        assert_eq!(
            parse_object::<Rate>(br#"{"ratePerSec": 5, "burst": 4294967295}"#, Detail::Serde).unwrap(),
            Rate {
                rate_per_sec: 5,
                burst: u32::MAX
            }
        );
    }

    #[test]
    fn an_empty_body_and_another_media_type_are_refused() {
        assert_eq!(
            detail_of(parse_object::<Stock>(b"  ", Detail::Serde).unwrap_err()),
            "the body must be a JSON object"
        );
        let mut req = Request::new(Body::Text(r#"{"add": 1}"#.into()));
        req.headers_mut().insert("content-type", "text/plain".parse().unwrap());
        let err = json_body::<Stock>(&req, 4096, Detail::Serde).unwrap_err();
        assert_eq!(err.code(), ErrorCode::UnsupportedMediaType);
        let req = Request::new(Body::Text(r#"{"add": 1}"#.into()));
        assert_eq!(
            json_body::<Stock>(&req, 4, Detail::Serde).unwrap_err().code(),
            ErrorCode::PayloadTooLarge
        );
        assert_eq!(json_body::<Stock>(&req, 4096, Detail::Serde).unwrap(), Stock { add: 1 });
    }
}
