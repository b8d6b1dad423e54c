//! The HTTP edge shared by the HTTP functions (grab, wallet, admin): the
//! one place where HTTP meets the domain.
//!
//! # Layout
//!
//! - [`error`]: the table of client-visible codes ([`ErrorCode`]: status,
//!   English and Chinese messages) and [`Lang`] from `Accept-Language`.
//! - [`identity`]: the caller from the verified JWT claims or, in the
//!   explicit local mode only, from headers.
//! - [`origin`]: with the CloudFront and WAF edge in front, the proof a
//!   request came through it (a header with a shared secret).
//! - [`body`]: the one JSON body reader (media type, size, an object and
//!   nothing else, integers written as `460.0` accepted).
//! - [`path`]: percent-decoded path segments and matching by method.
//! - [`query`]: the query parameters the list routes share (`limit`).
//! - [`render`]: the `{code, message, data}` envelope, and [`Reply::busy`]
//!   for a store that did not answer.
//! - [`settings`]: how identity and bodies are read, from the environment.

#![warn(missing_docs)]

pub mod body;
pub mod error;
pub mod identity;
pub mod origin;
pub mod path;
pub mod query;
pub mod render;
pub mod settings;

pub use body::{json_body, Detail};
pub use error::{risk_message, ErrorCode, Lang};
pub use identity::{header_str, identity, Caller};
pub use origin::{came_through_edge, OriginSecret, AROUND_THE_EDGE};
pub use path::{by_method, Matched, Segments};
pub use query::page_limit;
pub use render::Reply;
pub use settings::{max_body_bytes, EdgeSettings};
