//! Kubernetes Events about nodes, services and the `CloudProvider`, with upstream's reasons
//! where upstream has them, published in the background so a slow or failing API server
//! never holds up a reconcile (as client-go's broadcaster). Repeats of one event become a
//! series (`kube-runtime`'s recorder), and, as client-go's spam filter does, each object gets
//! at most 25 events at once and one more every 5 minutes after that, so a sync retried in a
//! loop cannot flood the API server with event writes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::time::Instant;
use wasm_ccm_host::text::ellipsized;

/// Publishes the events of one controller, as the component upstream names.
#[derive(Clone)]
pub struct EventSink {
    recorder: Recorder,
    component: &'static str,
    budget: Arc<Mutex<EventBudget>>,
}

impl EventSink {
    /// `component` is upstream's event source, e.g. `cloud-node-controller`.
    pub fn new(client: kube::Client, component: &'static str, instance: &str) -> EventSink {
        let reporter = Reporter {
            controller: component.to_string(),
            instance: Some(instance.to_string()),
        };
        EventSink {
            recorder: Recorder::new(client, reporter),
            component,
            budget: Arc::default(),
        }
    }

    /// Record a `Normal` event about `regarding`.
    pub fn normal(&self, regarding: ObjectReference, reason: &'static str, note: String) {
        self.record(
            regarding,
            EventType::Normal,
            reason,
            reason.to_string(),
            note,
        );
    }

    /// Record a `Warning` event about `regarding`.
    pub fn warning(&self, regarding: ObjectReference, reason: &'static str, note: String) {
        self.record(
            regarding,
            EventType::Warning,
            reason,
            reason.to_string(),
            note,
        );
    }

    /// Record an event whose `action` tells it apart from others with the same reason:
    /// repeats of one (type, reason, action, object) become a series, keeping the first
    /// note, so an action naming the subject (a provider version) keeps each note.
    pub fn record(
        &self,
        regarding: ObjectReference,
        type_: EventType,
        reason: &'static str,
        action: String,
        note: String,
    ) {
        let allowed = self
            .budget
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(&regarding, Instant::now());
        if !allowed {
            tracing::debug!(
                component = self.component,
                reason,
                object = regarding.name.as_deref().unwrap_or_default(),
                "event dropped: the object had 25 events recently (one more every 5 minutes)"
            );
            return;
        }
        let recorder = self.recorder.clone();
        let component = self.component;
        tokio::spawn(async move {
            let event = Event {
                type_,
                reason: reason.to_string(),
                // The API server rejects notes over 1 KiB.
                note: Some(ellipsized(note, 1024)),
                // The API server rejects actions over 128 bytes.
                action: ellipsized(action, 128),
                secondary: None,
            };
            if let Err(error) = recorder.publish(&event, &regarding).await {
                tracing::warn!(
                    component,
                    reason,
                    object = regarding.name.as_deref().unwrap_or_default(),
                    %error,
                    "could not record event"
                );
            }
        });
    }
}

/// client-go's `EventSourceObjectSpamFilter`: a token bucket per object, holding
/// [`EventBudget::BURST`] events and refilled with one every [`EventBudget::REFILL`]; at most
/// [`EventBudget::OBJECTS`] objects are tracked (an object whose bucket is full again is as if
/// untracked, so it goes first).
#[derive(Debug, Default)]
struct EventBudget {
    buckets: HashMap<ObjectKey, Bucket>,
}

/// An object as client-go's spam filter tells objects apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct ObjectKey {
    kind: Option<String>,
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    api_version: Option<String>,
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl EventBudget {
    const BURST: f64 = 25.0;
    const REFILL: Duration = Duration::from_secs(300);
    const OBJECTS: usize = 4096;

    /// Whether an event about `object` may be written at `now`, spending a token if so.
    fn take(&mut self, object: &ObjectReference, now: Instant) -> bool {
        let key = ObjectKey {
            kind: object.kind.clone(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
            uid: object.uid.clone(),
            api_version: object.api_version.clone(),
        };
        if !self.buckets.contains_key(&key) && self.buckets.len() >= Self::OBJECTS {
            self.forget_refilled(now);
        }
        let bucket = self.buckets.entry(key).or_insert(Bucket {
            tokens: Self::BURST,
            at: now,
        });
        let refilled = now.duration_since(bucket.at).as_secs_f64() / Self::REFILL.as_secs_f64();
        bucket.tokens = (bucket.tokens + refilled).min(Self::BURST);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }

    /// Drop the buckets that are full again; if none is, the one idle longest.
    fn forget_refilled(&mut self, now: Instant) {
        let full_after = Self::REFILL.mul_f64(Self::BURST);
        self.buckets.retain(|_, bucket| {
            let refilled = now.duration_since(bucket.at).as_secs_f64() / Self::REFILL.as_secs_f64();
            bucket.tokens + refilled < Self::BURST && now.duration_since(bucket.at) < full_after
        });
        if self.buckets.len() >= Self::OBJECTS {
            let oldest = self
                .buckets
                .iter()
                .min_by_key(|(_, bucket)| bucket.at)
                .map(|(key, _)| key.clone());
            if let Some(oldest) = oldest {
                self.buckets.remove(&oldest);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Service".into()),
            namespace: Some("default".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            api_version: Some("v1".into()),
            ..ObjectReference::default()
        }
    }

    #[test]
    fn an_object_gets_25_events_at_once_then_one_every_5_minutes() {
        let mut budget = EventBudget::default();
        let start = Instant::now();
        let web = service("web");
        let allowed = (0..40).filter(|_| budget.take(&web, start)).count();
        assert_eq!(allowed, 25);
        assert!(
            budget.take(&service("api"), start),
            "other objects have their own budget"
        );
        assert!(!budget.take(&web, start + Duration::from_secs(299)));
        assert!(budget.take(&web, start + Duration::from_secs(301)));
        assert!(!budget.take(&web, start + Duration::from_secs(302)));
        // Fifty minutes refill ten.
        let later = start + Duration::from_secs(302 + 3001);
        let allowed = (0..40).filter(|_| budget.take(&web, later)).count();
        assert_eq!(allowed, 10);
    }

    #[test]
    fn the_budget_tracks_a_bounded_number_of_objects() {
        let mut budget = EventBudget::default();
        let start = Instant::now();
        let flooded = service("flooded");
        while budget.take(&flooded, start) {}
        for i in 0..EventBudget::OBJECTS * 2 {
            budget.take(&service(&format!("svc-{i}")), start);
        }
        assert!(budget.buckets.len() <= EventBudget::OBJECTS);
    }
}
