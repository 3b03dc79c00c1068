//! Token buckets keyed by name: the egress gate keeps one per destination a provider calls,
//! so a runaway provider cannot flood a cloud API (and get the whole account throttled), and
//! each of the manager's API clients one of its own (`--kube-api-qps`/`--kube-api-burst`).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Requests per second and burst allowed to each destination host.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateBudget {
    /// Sustained rate: tokens added to a bucket per second (default 50).
    pub per_second: f64,
    /// Tokens a full bucket holds: how many may go at once after a quiet spell
    /// (default 100; 0 counts as 1).
    pub burst: u32,
}

impl Default for RateBudget {
    fn default() -> Self {
        RateBudget {
            per_second: 50.0,
            burst: 100,
        }
    }
}

/// Token buckets keyed by name (the egress gate uses `scheme://host:port`).
#[derive(Debug)]
pub struct Budgets {
    budget: RateBudget,
    buckets: Mutex<HashMap<String, Bucket>>,
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

impl Budgets {
    /// Buckets for `budget`; each name starts with a full one on first use.
    pub fn new(budget: RateBudget) -> Self {
        Budgets {
            budget,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Take a token for `destination`, or say how long until one is available.
    pub fn take(&self, destination: &str) -> Result<(), Duration> {
        self.take_at(destination, Instant::now())
    }

    fn take_at(&self, destination: &str, now: Instant) -> Result<(), Duration> {
        let burst = f64::from(self.budget.burst.max(1));
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if !buckets.contains_key(destination) {
            let full = Bucket {
                tokens: burst,
                updated: now,
            };
            buckets.insert(destination.to_string(), full);
        }
        let Some(bucket) = buckets.get_mut(destination) else {
            return Ok(());
        };
        let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.budget.per_second).min(burst);
        bucket.updated = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(());
        }
        let missing = 1.0 - bucket.tokens;
        Err(Duration::from_secs_f64(
            missing / self.budget.per_second.max(f64::MIN_POSITIVE),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn burst_then_refill_per_destination() {
        let budgets = Budgets::new(RateBudget {
            per_second: 2.0,
            burst: 3,
        });
        let start = Instant::now();
        for _ in 0..3 {
            assert!(budgets.take_at("https://a:443", start).is_ok());
        }
        let wait = budgets.take_at("https://a:443", start).unwrap_err();
        assert!(wait > Duration::from_millis(400) && wait <= Duration::from_millis(500));
        assert!(
            budgets.take_at("https://b:443", start).is_ok(),
            "buckets are per destination"
        );
        assert!(
            budgets
                .take_at("https://a:443", start + Duration::from_millis(500))
                .is_ok()
        );
    }
}
