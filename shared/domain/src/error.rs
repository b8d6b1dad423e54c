//! The errors adapters return through the ports.
//!
//! [`StoreError`] and [`PublishError`] keep their `#[source]` for logs and
//! never reach a response body: the edge maps them to BUSY (503) and the
//! issuer to "retry this message".

/// A boxed error source, kept for logs and never shown to clients.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A store (Redis, DynamoDB) could not answer.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The store did not answer in time or refused the connection. The edge
    /// answers BUSY (503) and the client retries with the same request id,
    /// which is safe because every write is idempotent per request id.
    #[error("store unavailable")]
    Unavailable(#[source] BoxError),
    /// The store answered something the code does not understand: a bug or a
    /// version skew between scripts and code. Also BUSY to the client, but
    /// logged at error level.
    #[error("unexpected reply from {what}: {detail}")]
    Protocol {
        /// Which call.
        what: &'static str,
        /// What came back (never user data).
        detail: String,
    },
    /// A write was refused because a different value is there already.
    #[error("conflict: {0}")]
    Conflict(String),
}

/// The queue did not take a grant.
#[derive(Debug, thiserror::Error)]
#[error("grant not queued")]
pub struct PublishError(#[source] pub BoxError);
