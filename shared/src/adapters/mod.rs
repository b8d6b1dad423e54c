//! Adapters: the ports of [`crate::ports`] implemented on real services.
//! SDK and `redis` types stay inside these modules.

pub mod redis;

#[cfg(feature = "sqs")]
pub mod sqs;

#[cfg(feature = "dynamodb")]
pub mod dynamodb;

#[cfg(feature = "elasticache")]
pub mod elasticache;

#[cfg(feature = "secrets")]
pub mod secrets;

#[cfg(any(feature = "sqs", feature = "dynamodb", feature = "elasticache", feature = "secrets"))]
pub mod aws;
