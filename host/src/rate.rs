//! Token buckets keyed by name: the egress gate keeps one per destination a provider calls,
//! so a runaway provider cannot flood a cloud API (and get the whole account throttled), and
//! each of the manager's API clients one of its own (`--kube-api-qps`/`--kube-api-burst`).
//!
//! The names are the provider's choice under a wildcard grant, so the gate's buckets are
//! bounded ([`Budgets::bounded`]). A bucket that has refilled is the same as none, so it is
//! forgotten to make room: exact, whatever the bound. Only when every bucket is still
//! refilling is a new name refused ([`Refusal::Crowded`]), until the first one is full
//! again. Evicting a refilling bucket instead would hand its destination a fresh burst:
//! a provider could then reset a throttled destination's budget by naming others.

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
    /// Most buckets held at once.
    capacity: usize,
    buckets: Mutex<Buckets>,
}

#[derive(Debug, Default)]
struct Buckets {
    by_name: HashMap<String, Bucket>,
    /// When the first of the held buckets is full again, as of the last sweep: a sweep
    /// before then would free nothing.
    first_full: Option<Instant>,
}

/// Why no token was taken.
#[derive(Debug, Clone, Copy, PartialEq, thiserror::Error)]
pub enum Refusal {
    /// The name's bucket is empty; a token comes after the wait.
    #[error("rate budget exhausted; retry in {0:?}")]
    Exhausted(Duration),
    /// `capacity` other names hold buckets still refilling; one is full after `retry`.
    #[error(
        "{capacity} destinations already hold a rate budget that is still refilling; retry in {retry:?}"
    )]
    Crowded {
        /// The bound on buckets.
        capacity: usize,
        /// Until the first bucket is full again and can be forgotten.
        retry: Duration,
    },
}

impl Refusal {
    /// How long until a token may be taken.
    pub fn retry_after(&self) -> Duration {
        match *self {
            Refusal::Exhausted(wait) => wait,
            Refusal::Crowded { retry, .. } => retry,
        }
    }
}

#[derive(Debug)]
struct Bucket {
    tokens: f64,
    updated: Instant,
}

impl Budgets {
    /// Buckets for `budget`, for a fixed set of names; each name starts with a full one on
    /// first use.
    pub fn new(budget: RateBudget) -> Self {
        Budgets::bounded(budget, usize::MAX)
    }

    /// Buckets for `budget`, at most `capacity` of them at once (0 counts as 1).
    pub fn bounded(budget: RateBudget, capacity: usize) -> Self {
        Budgets {
            budget,
            capacity: capacity.max(1),
            buckets: Mutex::default(),
        }
    }

    /// Take a token for `destination`, or say why not and how long until one is available.
    pub fn take(&self, destination: &str) -> Result<(), Refusal> {
        self.take_at(destination, Instant::now())
    }

    fn take_at(&self, destination: &str, now: Instant) -> Result<(), Refusal> {
        let burst = f64::from(self.budget.burst.max(1));
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if !buckets.by_name.contains_key(destination) {
            if buckets.by_name.len() >= self.capacity {
                self.forget_full(&mut buckets, now);
            }
            if buckets.by_name.len() >= self.capacity {
                let first_full = buckets.first_full.unwrap_or(now);
                return Err(Refusal::Crowded {
                    capacity: self.capacity,
                    retry: first_full.saturating_duration_since(now),
                });
            }
            let full = Bucket {
                tokens: burst,
                updated: now,
            };
            buckets.by_name.insert(destination.to_string(), full);
        }
        let Some(bucket) = buckets.by_name.get_mut(destination) else {
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
        Err(Refusal::Exhausted(self.refill_time(missing)))
    }

    /// Forget the buckets that are full again at `now`, unless the last sweep said none is
    /// yet; note when the first of those left will be.
    fn forget_full(&self, buckets: &mut Buckets, now: Instant) {
        if buckets.first_full.is_some_and(|first| first > now) {
            return;
        }
        let burst = f64::from(self.budget.burst.max(1));
        let mut first_full: Option<Instant> = None;
        buckets.by_name.retain(|_, bucket| {
            let elapsed = now.saturating_duration_since(bucket.updated).as_secs_f64();
            let tokens = bucket.tokens + elapsed * self.budget.per_second;
            if tokens >= burst {
                return false;
            }
            let full = now + self.refill_time(burst - tokens);
            first_full = Some(first_full.map_or(full, |first| first.min(full)));
            true
        });
        buckets.first_full = first_full;
    }

    fn refill_time(&self, tokens: f64) -> Duration {
        Duration::from_secs_f64(tokens / self.budget.per_second.max(f64::MIN_POSITIVE))
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
        let Refusal::Exhausted(wait) = wait else {
            panic!("expected an exhausted budget, got {wait:?}");
        };
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

    #[test]
    fn past_its_bound_a_full_bucket_is_forgotten_and_else_a_new_name_waits() {
        let budgets = Budgets::bounded(
            RateBudget {
                per_second: 10.0,
                burst: 2,
            },
            3,
        );
        let start = Instant::now();
        for name in ["a", "b", "c"] {
            budgets.take_at(name, start).unwrap();
        }
        budgets.take_at("a", start).unwrap();
        let crowded = budgets.take_at("d", start).unwrap_err();
        assert_eq!(
            crowded,
            Refusal::Crowded {
                capacity: 3,
                retry: Duration::from_millis(100)
            },
            "b and c refill their one token in 100 ms"
        );
        assert!(crowded.to_string().contains("3 destinations"), "{crowded}");
        assert!(budgets.take_at("a", start).is_err(), "a is still empty");
        let later = start + Duration::from_millis(100);
        budgets
            .take_at("d", later)
            .expect("b and c were full: forgotten");
        budgets.take_at("e", later).expect("room for one more");
        assert!(
            budgets.take_at("f", later).is_err(),
            "a, d and e are refilling"
        );
        assert_eq!(budgets.buckets.lock().unwrap().by_name.len(), 3);
        let refilled = start + Duration::from_secs(1);
        for index in 0..1000 {
            budgets
                .take_at(
                    &format!("name-{index}"),
                    refilled + Duration::from_secs(index),
                )
                .expect("each earlier bucket is full again by the next second");
        }
        assert!(budgets.buckets.lock().unwrap().by_name.len() <= 3);
    }
}
