//! Fault injection: the [`Faults`] knobs and the per-request decision of
//! whether an authorised `/v1` request is delayed, throttled or failed.
//!
//! Checks run in this order, and the first that fires answers the request:
//! `throttle_next` (429), the `rate_limit_per_sec` token bucket (429),
//! `fail_next` (`fail_status`), then `error_rate` (500). `latency_ms` is
//! slept before any of them.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use crate::error::{ApiError, ErrorCode};
use crate::rng::Rng;

/// Fault knobs, read and written at `/_admin/faults`. Omitted fields take
/// their defaults, so `{"fail_next": 2}` is a complete body.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Faults {
    /// Delay before each request is handled.
    pub latency_ms: u64,
    /// Probability in `[0, 1]` that a request fails with 500 `internal`.
    pub error_rate: f64,
    /// The next N requests fail with `fail_status`; counts down.
    pub fail_next: u32,
    /// Status for `fail_next` failures (400–599); default 500.
    pub fail_status: u16,
    /// The next N requests get 429 `rate_limited`; counts down.
    pub throttle_next: u32,
    /// `Retry-After` seconds sent with `throttle_next` 429s; default 1.
    pub retry_after_secs: u64,
    /// Token bucket refilled at this rate, holding one second's worth; requests
    /// finding it empty get 429 with the seconds until the next token.
    pub rate_limit_per_sec: Option<u32>,
}

impl Default for Faults {
    fn default() -> Faults {
        Faults {
            latency_ms: 0,
            error_rate: 0.0,
            fail_next: 0,
            fail_status: 500,
            throttle_next: 0,
            retry_after_secs: 1,
            rate_limit_per_sec: None,
        }
    }
}

impl Faults {
    /// Rejects knob values the simulator cannot act on.
    pub fn validate(&self) -> Result<(), ApiError> {
        if !(0.0..=1.0).contains(&self.error_rate) {
            return Err(ApiError::invalid(
                "error_rate",
                format!("must be between 0 and 1, got {}", self.error_rate),
            ));
        }
        if !(400..=599).contains(&self.fail_status) {
            return Err(ApiError::invalid(
                "fail_status",
                format!("must be between 400 and 599, got {}", self.fail_status),
            ));
        }
        Ok(())
    }

    fn latency(&self) -> Duration {
        Duration::from_millis(self.latency_ms)
    }
}

/// The knobs plus what they need to act: the token bucket and randomness.
#[derive(Debug)]
pub(crate) struct FaultState {
    faults: Faults,
    bucket: Option<TokenBucket>,
    rng: Rng,
}

impl FaultState {
    pub(crate) fn new() -> FaultState {
        FaultState {
            faults: Faults::default(),
            bucket: None,
            rng: Rng::from_entropy(),
        }
    }

    pub(crate) fn faults(&self) -> Faults {
        self.faults.clone()
    }

    /// Replaces the knobs; a new rate limit starts with a full bucket.
    pub(crate) fn set(&mut self, faults: Faults) {
        self.bucket = faults
            .rate_limit_per_sec
            .map(|rate| TokenBucket::full(rate, Instant::now()));
        self.faults = faults;
    }

    pub(crate) fn latency(&self) -> Duration {
        self.faults.latency()
    }

    /// Decides the fate of one request: `Some(error)` answers it instead of
    /// the handler. Consumes counters and tokens.
    pub(crate) fn decide(&mut self, now: Instant) -> Option<ApiError> {
        let faults = &mut self.faults;
        if faults.throttle_next > 0 {
            faults.throttle_next -= 1;
            return Some(throttled(faults.retry_after_secs));
        }
        if let Some(bucket) = &mut self.bucket
            && let Err(wait) = bucket.take(now)
        {
            return Some(throttled(wait.unwrap_or(faults.retry_after_secs)));
        }
        if faults.fail_next > 0 {
            faults.fail_next -= 1;
            return Some(injected(faults.fail_status));
        }
        if faults.error_rate > 0.0 && self.rng.next_f64() < faults.error_rate {
            return Some(injected(500));
        }
        None
    }
}

fn throttled(retry_after_secs: u64) -> ApiError {
    ApiError::rate_limited(
        format!("too many requests; retry after {retry_after_secs}s"),
        retry_after_secs,
    )
}

fn injected(status: u16) -> ApiError {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    ApiError::new(status, ErrorCode::for_status(status), "injected fault")
}

/// Refills `rate` tokens per second, holding at most `rate`.
#[derive(Debug)]
struct TokenBucket {
    rate: f64,
    tokens: f64,
    refilled_at: Instant,
}

impl TokenBucket {
    fn full(rate: u32, now: Instant) -> TokenBucket {
        let rate = f64::from(rate);
        TokenBucket {
            rate,
            tokens: rate,
            refilled_at: now,
        }
    }

    /// Takes a token, or says how many whole seconds until one is available
    /// (`None` when the bucket never refills).
    fn take(&mut self, now: Instant) -> Result<(), Option<u64>> {
        let elapsed = now
            .saturating_duration_since(self.refilled_at)
            .as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.rate);
        self.refilled_at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        if self.rate <= 0.0 {
            return Err(None);
        }
        // Whole seconds, at least one: Retry-After has no fractions.
        let wait = ((1.0 - self.tokens) / self.rate).ceil().max(1.0);
        Err(Some(wait as u64))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state_with(faults: Faults) -> FaultState {
        let mut state = FaultState::new();
        state.set(faults);
        state
    }

    #[test]
    fn counters_count_down_in_order() {
        let mut state = state_with(Faults {
            throttle_next: 1,
            fail_next: 1,
            fail_status: 503,
            ..Faults::default()
        });
        let now = Instant::now();
        assert_eq!(
            state.decide(now).map(|e| e.status),
            Some(StatusCode::TOO_MANY_REQUESTS)
        );
        assert_eq!(
            state.decide(now).map(|e| e.status),
            Some(StatusCode::SERVICE_UNAVAILABLE)
        );
        assert_eq!(state.decide(now), None);
        assert_eq!(state.faults().fail_next, 0);
    }

    #[test]
    fn token_bucket_limits_and_refills() {
        let mut state = state_with(Faults {
            rate_limit_per_sec: Some(2),
            ..Faults::default()
        });
        let start = Instant::now();
        assert!(state.decide(start).is_none());
        assert!(state.decide(start).is_none());
        let limited = state
            .decide(start)
            .expect("third request in the same instant is limited");
        assert_eq!(limited.retry_after_secs, Some(1));
        assert!(state.decide(start + Duration::from_millis(600)).is_none());
    }

    #[test]
    fn zero_rate_always_limits() {
        let mut state = state_with(Faults {
            rate_limit_per_sec: Some(0),
            retry_after_secs: 7,
            ..Faults::default()
        });
        let now = Instant::now();
        assert_eq!(state.decide(now).and_then(|e| e.retry_after_secs), Some(7));
    }

    #[test]
    fn error_rate_one_always_fails() {
        let mut state = state_with(Faults {
            error_rate: 1.0,
            ..Faults::default()
        });
        assert_eq!(
            state.decide(Instant::now()).map(|e| e.code),
            Some(ErrorCode::Internal)
        );
    }

    #[test]
    fn validate_rejects_out_of_range() {
        assert!(
            Faults {
                error_rate: 1.5,
                ..Faults::default()
            }
            .validate()
            .is_err()
        );
        assert!(
            Faults {
                error_rate: f64::NAN,
                ..Faults::default()
            }
            .validate()
            .is_err()
        );
        assert!(
            Faults {
                fail_status: 200,
                ..Faults::default()
            }
            .validate()
            .is_err()
        );
        assert!(Faults::default().validate().is_ok());
    }
}
