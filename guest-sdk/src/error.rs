//! Constructors for the contract's error variants and conversions from the SDK's own errors.

use std::time::Duration;

use crate::{Error, Retry};

impl Error {
    /// The thing asked about definitely does not exist in the cloud.
    pub fn not_found(message: impl Into<String>) -> Self {
        Error::NotFound(message.into())
    }

    /// Anything else that went wrong.
    pub fn other(message: impl Into<String>) -> Self {
        Error::Other(message.into())
    }

    /// Not done yet: the host calls again after `delay` instead of backing off.
    pub fn retry_after(delay: Duration, message: impl Into<String>) -> Self {
        Error::RetryAfter(Retry {
            delay_ms: u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
            message: message.into(),
        })
    }
}

impl From<crate::http::HttpError> for Error {
    /// Throttling (429, or 503 with `Retry-After`) becomes `retry-after`; everything else
    /// `other`. A 404 is *not* turned into `not-found`: only the provider knows whether a 404
    /// means definite absence.
    fn from(err: crate::http::HttpError) -> Self {
        match err.retry_after() {
            Some(delay) => Error::retry_after(delay, err.to_string()),
            None => Error::Other(err.to_string()),
        }
    }
}

impl From<serde_json::Error> for Error {
    fn from(err: serde_json::Error) -> Self {
        Error::Other(format!("invalid JSON: {err}"))
    }
}
