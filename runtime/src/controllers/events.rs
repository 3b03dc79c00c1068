//! Kubernetes Events about nodes, services and the `CloudProvider`, with upstream's reasons
//! where upstream has them, published in the background so a slow or failing API server
//! never holds up a reconcile (as client-go's broadcaster). Repeats of one event become a
//! series (`kube-runtime`'s recorder).

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Publishes the events of one controller, as the component upstream names.
#[derive(Clone)]
pub struct EventSink {
    recorder: Recorder,
    component: &'static str,
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
        let recorder = self.recorder.clone();
        let component = self.component;
        tokio::spawn(async move {
            let event = Event {
                type_,
                reason: reason.to_string(),
                // The API server rejects notes over 1 KiB.
                note: Some(truncate(note, 1024)),
                // The API server rejects actions over 128 bytes.
                action: truncate(action, 128),
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

fn truncate(mut text: String, max: usize) -> String {
    if text.len() > max {
        let mut end = max - 3;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        text.push_str("...");
    }
    text
}
