//! Shadow calls: a candidate version answering the read-only calls beside the active one,
//! fed the same inputs, its answers compared and never acted on.
//!
//! The active version's call starts at once and its answer goes back to the controller
//! unchanged; the candidate's runs in a task of its own, and the comparison waits for both.
//! So a shadow never delays the call it mirrors. A bound on the shadow calls in flight keeps
//! a slow candidate from piling up work: past it, calls are not mirrored (and counted as
//! skipped).

use std::fmt::Debug;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use tokio::sync::{Semaphore, oneshot};

use super::{Provider, ProviderError};
use crate::contract::Function;
use crate::text::ellipsized;

/// The most divergences kept, with their diffs (the rest are counted).
pub const MAX_DIVERGENCES: usize = 5;
/// Longest diff kept of one divergence.
const MAX_DIFF: usize = 1024;
/// Differing fields named in one diff.
const MAX_DIFF_FIELDS: usize = 4;

/// A candidate version shadowing the active one.
pub struct Shadow {
    candidate: Arc<Provider>,
    /// Shadow calls allowed in flight at once.
    in_flight: Arc<Semaphore>,
    agreeing: AtomicU64,
    diverging: AtomicU64,
    skipped: AtomicU64,
    divergences: Mutex<Vec<Divergence>>,
}

/// One call where the candidate answered differently.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Divergence {
    /// The function called.
    pub function: Function,
    /// What differed, e.g. `additionalLabels[1]: absent (active) != ["k","v"] (candidate)`.
    pub diff: String,
}

/// How the candidate compares so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShadowReport {
    /// Calls answered alike.
    pub agreeing: u64,
    /// Calls answered differently.
    pub diverging: u64,
    /// Read-only calls not mirrored because too many shadow calls were in flight.
    pub skipped: u64,
    /// The first divergences (at most [`MAX_DIVERGENCES`]).
    pub divergences: Vec<Divergence>,
}

impl Shadow {
    /// `candidate` shadowing, with at most `max_in_flight` shadow calls at once.
    pub fn new(candidate: Provider, max_in_flight: usize) -> Arc<Shadow> {
        Arc::new(Shadow {
            candidate: Arc::new(candidate),
            in_flight: Arc::new(Semaphore::new(max_in_flight.max(1))),
            agreeing: AtomicU64::new(0),
            diverging: AtomicU64::new(0),
            skipped: AtomicU64::new(0),
            divergences: Mutex::default(),
        })
    }

    /// The candidate version.
    pub fn candidate(&self) -> &Arc<Provider> {
        &self.candidate
    }

    /// The comparison so far.
    pub fn report(&self) -> ShadowReport {
        ShadowReport {
            agreeing: self.agreeing.load(Ordering::Relaxed),
            diverging: self.diverging.load(Ordering::Relaxed),
            skipped: self.skipped.load(Ordering::Relaxed),
            divergences: self
                .divergences
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone(),
        }
    }

    /// Start the candidate's side of `function` (`call` makes it with the same inputs);
    /// the returned sender takes the active version's answer for the comparison. `None`
    /// when too many shadow calls are in flight.
    pub(super) fn mirror<T, F, Fut>(
        self: &Arc<Self>,
        function: Function,
        call: F,
    ) -> Option<oneshot::Sender<Result<T, ProviderError>>>
    where
        T: Serialize + PartialEq + Debug + Send + 'static,
        F: FnOnce(Arc<Provider>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, ProviderError>> + Send + 'static,
    {
        let Ok(permit) = self.in_flight.clone().try_acquire_owned() else {
            self.skipped.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let (active_answer, answered) = oneshot::channel();
        let shadow = self.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let theirs = call(shadow.candidate.clone()).await;
            if let Ok(ours) = answered.await {
                shadow.compare(function, &ours, &theirs);
            }
        });
        Some(active_answer)
    }

    fn compare<T: Serialize + PartialEq + Debug>(
        &self,
        function: Function,
        ours: &Result<T, ProviderError>,
        theirs: &Result<T, ProviderError>,
    ) {
        let agree = match (ours, theirs) {
            (Ok(ours), Ok(theirs)) => ours == theirs,
            (Err(ours), Err(theirs)) => ours.outcome() == theirs.outcome(),
            _ => false,
        };
        if agree {
            self.agreeing.fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.diverging.fetch_add(1, Ordering::Relaxed);
        let mut divergences = self.divergences.lock().unwrap_or_else(|p| p.into_inner());
        if divergences.len() < MAX_DIVERGENCES {
            divergences.push(Divergence {
                function,
                diff: diff(ours, theirs),
            });
        }
    }
}

/// What differs between two answers, short: the differing fields of two values, or the
/// two outcomes.
fn diff<T: Serialize>(
    ours: &Result<T, ProviderError>,
    theirs: &Result<T, ProviderError>,
) -> String {
    let text = match (ours, theirs) {
        (Ok(ours), Ok(theirs)) => {
            let ours = serde_json::to_value(ours).unwrap_or(Value::Null);
            let theirs = serde_json::to_value(theirs).unwrap_or(Value::Null);
            let mut fields = Vec::new();
            differing_fields(&ours, &theirs, &mut String::new(), &mut fields);
            fields.join("; ")
        }
        _ => format!(
            "{} (active) != {} (candidate)",
            outcome(ours),
            outcome(theirs)
        ),
    };
    ellipsized(text, MAX_DIFF)
}

fn outcome<T: Serialize>(result: &Result<T, ProviderError>) -> String {
    match result {
        Ok(value) => ellipsized(
            serde_json::to_string(value).unwrap_or_default(),
            MAX_DIFF / 3,
        ),
        Err(error) => ellipsized(format!("{}: {}", error.outcome(), error.kind), MAX_DIFF / 3),
    }
}

/// The paths where `ours` and `theirs` differ, as `path: ours (active) != theirs
/// (candidate)`, at most [`MAX_DIFF_FIELDS`].
fn differing_fields(ours: &Value, theirs: &Value, path: &mut String, out: &mut Vec<String>) {
    if out.len() >= MAX_DIFF_FIELDS || ours == theirs {
        return;
    }
    let here = path.len();
    match (ours, theirs) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                let absent = Value::Null;
                differing_fields(
                    a.get(key).unwrap_or(&absent),
                    b.get(key).unwrap_or(&absent),
                    path,
                    out,
                );
                path.truncate(here);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for index in 0..a.len().max(b.len()) {
                path.push_str(&format!("[{index}]"));
                let absent = Value::Null;
                differing_fields(
                    a.get(index).unwrap_or(&absent),
                    b.get(index).unwrap_or(&absent),
                    path,
                    out,
                );
                path.truncate(here);
            }
        }
        _ => {
            let show = |value: &Value| match value {
                Value::Null => "absent".to_string(),
                value => ellipsized(value.to_string(), 120),
            };
            let name = if path.is_empty() { "answer" } else { path };
            out.push(format!(
                "{name}: {} (active) != {} (candidate)",
                show(ours),
                show(theirs)
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::InstanceMetadata;

    #[test]
    fn a_diff_names_the_fields_that_differ() {
        let ours = InstanceMetadata {
            provider_id: "sim://1".into(),
            additional_labels: vec![("id".into(), "1".into())],
            ..InstanceMetadata::default()
        };
        let theirs = InstanceMetadata {
            additional_labels: vec![("id".into(), "1".into()), ("build".into(), "v2".into())],
            ..ours.clone()
        };
        assert_eq!(
            diff::<InstanceMetadata>(&Ok(ours), &Ok(theirs)),
            r#"additionalLabels[1]: absent (active) != ["build","v2"] (candidate)"#
        );
    }
}
