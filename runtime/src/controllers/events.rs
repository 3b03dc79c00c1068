//! Kubernetes Events about nodes, services and the `CloudProvider`, with upstream's reasons
//! where upstream has them, recorded as client-go's event broadcaster does, so that no state
//! write of a Node, Service or `CloudProvider` ever waits behind an event:
//!
//! - Recording never blocks and never awaits: an event goes into its component's bounded
//!   queue ([`QUEUE_LENGTH`] events, client-go's `maxQueuedEvents`) or, when that queue is
//!   full, is dropped, counted in `wasm_ccm_events_dropped_total{component}` and told in a
//!   warning at most once a minute per component (client-go logs every drop).
//! - Each component (a controller, or the rollout's `wasm-ccm`) has its own queue and one
//!   worker writing its events one at a time, as upstream gives each controller its own
//!   broadcaster; so a flood of one controller's events never drops another's.
//! - The workers publish through the event recorder's own API client
//!   ([`crate::cluster::EVENT_RECORDER`]), with its own `--kube-api-qps`/`--kube-api-burst`
//!   token bucket: no controller's writes, no `CloudProvider` status write and no
//!   service-account token request spends that budget or waits for an event's request.
//! - Repeats of one event become a series, as client-go's and `kube-runtime`'s recorders
//!   make them ([`SeriesLog`]), remembering at most 4,096 events (kube-runtime's recorder
//!   remembered every event of the last six minutes, each by value: 15,000 nodes joining
//!   left 49 MB of table behind); a new Event is named once, so a create sent again after
//!   its answer was lost does not write a second one. As client-go's spam filter does, each
//!   object gets at most 25 events at once and one more every 5 minutes after that, so a
//!   sync retried in a loop cannot flood the API server. The filter is applied before the
//!   queue, so a filtered event takes no place in it.
//! - A write that may pass is tried again, as client-go's `recordToSink`: up to
//!   [`TRIES_PER_EVENT`] tries, the first retry after a random part of the retry interval
//!   (10 s, [`RETRY_INTERVAL`]) so that replicas do not retry in step, the others a whole
//!   interval apart. What may pass: no answer (a connection refused or cut, a timeout) or an
//!   API server too busy or unavailable (429, 503, 504); an event the API server refused
//!   (400, 403, 404, 409, 422…) is not sent again. The queue waits meanwhile, filling and then
//!   dropping as above.
//!
//! Only the leader writes events: when leadership is lost, each worker drops the events
//! still queued or being tried (logged with their number), as the upstream manager, which
//! exits then, loses them. The queues last as long as the manager; its shutdown ends the
//! workers and drops the events still queued (as client-go's `Shutdown`).

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use wasm_ccm_host::text::ellipsized;

/// Events each component may have waiting to be written: client-go's `maxQueuedEvents`.
pub const QUEUE_LENGTH: usize = 1000;
/// Tries to write one event before it is given up: client-go's `maxTriesPerEvent`.
pub const TRIES_PER_EVENT: u32 = 12;
/// Time between two tries of one event: client-go's broadcaster's `sleepDuration`.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ComponentLabels {
    component: String,
}

/// `wasm_ccm_events_dropped_total`: events dropped because their component's queue was full.
#[derive(Debug, Clone, Default)]
pub struct EventMetrics {
    dropped: Family<ComponentLabels, Counter>,
}

impl EventMetrics {
    /// Register the metric under the `wasm_ccm` prefix.
    pub fn register(&self, registry: &mut Registry) {
        registry.sub_registry_with_prefix("wasm_ccm").register(
            "events_dropped",
            "Events not recorded because the queue of the component that made them was full, by component",
            self.dropped.clone(),
        );
    }

    fn of(&self, component: &'static str) -> Counter {
        self.dropped
            .get_or_create(&ComponentLabels {
                component: component.to_string(),
            })
            .clone()
    }
}

/// The manager's event recording: one queue and worker per component, made on first use,
/// publishing through one client. Cheap to clone.
#[derive(Clone)]
pub struct EventBroadcaster {
    shared: Arc<Broadcast>,
}

struct Broadcast {
    client: kube::Client,
    instance: String,
    queue_length: usize,
    retry_interval: Duration,
    metrics: EventMetrics,
    leading: watch::Receiver<bool>,
    stop: CancellationToken,
    sinks: Mutex<HashMap<&'static str, EventSink>>,
}

impl EventBroadcaster {
    /// Events written with `client` (the event recorder's own), reported by `instance` (this
    /// process), while `leading` says this replica leads; each component queues at most
    /// `queue_length` ([`QUEUE_LENGTH`] but in tests) and tries a write again after
    /// `retry_interval` ([`RETRY_INTERVAL`] but in tests); the workers end when `stop` is
    /// cancelled.
    pub fn new(
        client: kube::Client,
        instance: &str,
        (queue_length, retry_interval): (usize, Duration),
        metrics: EventMetrics,
        leading: watch::Receiver<bool>,
        stop: CancellationToken,
    ) -> EventBroadcaster {
        EventBroadcaster {
            shared: Arc::new(Broadcast {
                client,
                instance: instance.to_string(),
                queue_length: queue_length.max(1),
                retry_interval,
                metrics,
                leading,
                stop,
                sinks: Mutex::default(),
            }),
        }
    }

    /// The sink of `component` (upstream's event source, e.g. `cloud-node-controller`): the
    /// same queue, worker and spam filter however often it is asked for. Starts the worker
    /// on first use, so it must be called within the runtime.
    pub fn sink(&self, component: &'static str) -> EventSink {
        let shared = &self.shared;
        let mut sinks = shared.sinks.lock().unwrap_or_else(PoisonError::into_inner);
        sinks
            .entry(component)
            .or_insert_with(|| {
                let (sink, queue) =
                    EventSink::queue(component, shared.queue_length, shared.metrics.of(component));
                tokio::spawn(publish(
                    Writer {
                        client: shared.client.clone(),
                        instance: shared.instance.clone(),
                        series: Mutex::new(SeriesLog::default()),
                        component,
                        retry_interval: shared.retry_interval,
                    },
                    queue,
                    shared.leading.clone(),
                    shared.stop.clone(),
                ));
                sink
            })
            .clone()
    }
}

/// An event waiting in a queue.
struct Pending {
    regarding: ObjectReference,
    event: Event,
}

/// Write the events of `queue` one at a time while this replica leads, until `stop` (or
/// until every sink is gone).
async fn publish(
    writer: Writer,
    mut queue: mpsc::Receiver<Pending>,
    mut leading: watch::Receiver<bool>,
    stop: CancellationToken,
) {
    loop {
        let pending = tokio::select! {
            () = stop.cancelled() => return,
            next = queue.recv() => match next {
                Some(pending) => pending,
                None => return,
            },
        };
        let lost = async {
            if leading.wait_for(|leads| !leads).await.is_err() {
                // The manager is gone: `stop` ends the worker.
                std::future::pending::<()>().await;
            }
        };
        tokio::select! {
            () = stop.cancelled() => return,
            () = lost => {
                let dropped = 1 + std::iter::from_fn(|| queue.try_recv().ok()).count();
                tracing::info!(
                    component = writer.component,
                    dropped,
                    "leadership lost: events queued and not yet written are dropped (only the leader writes events)"
                );
            }
            () = writer.write(&pending) => {}
        }
    }
}

/// Writes one component's events.
struct Writer {
    client: kube::Client,
    /// The reporting instance (this process); the component is the reporting controller.
    instance: String,
    series: Mutex<SeriesLog>,
    component: &'static str,
    retry_interval: Duration,
}

impl Writer {
    /// Write `pending`, trying again while the failure may pass, at most
    /// [`TRIES_PER_EVENT`] times. A new Event is named once, before the first try, as
    /// client-go does: a create whose answer was lost and that is sent again finds its Event
    /// there (409) instead of writing a second one.
    async fn write(&self, pending: &Pending) {
        let new = self.new_event(pending, Timestamp::now());
        for tries in 1..=TRIES_PER_EVENT {
            let Err(error) = self.write_once(pending, &new).await else {
                return;
            };
            let object = pending.regarding.name.as_deref().unwrap_or_default();
            let reason = &pending.event.reason;
            if !may_pass(&error) {
                tracing::warn!(component = self.component, reason, object, %error, "could not record event: the API server refused it (not tried again)");
                return;
            }
            if tries == TRIES_PER_EVENT {
                tracing::warn!(component = self.component, reason, object, %error, "could not record event after {TRIES_PER_EVENT} tries; given up");
                return;
            }
            // The first retry after a random part of the interval, so that replicas and
            // components do not all retry in step after an outage.
            let wait = if tries == 1 {
                self.retry_interval.mul_f64(rand::random::<f64>())
            } else {
                self.retry_interval
            };
            tracing::debug!(component = self.component, reason, object, %error, tries, "could not record event; trying again in {wait:?}");
            tokio::time::sleep(wait).await;
        }
    }

    /// Create `pending`'s event as `new`, or, when it repeats one written less than
    /// [`SeriesLog::TTL`] ago, count it in that one's series (a merge patch of `series`), as
    /// kube-runtime's recorder does; a series whose Event is gone (deleted, expired) starts
    /// anew, as client-go's does. Cluster-scoped objects' events go to `default`.
    async fn write_once(&self, pending: &Pending, new: &K8sEvent) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = SeriesKey::of(&pending.event, &pending.regarding);
        let namespace = pending.regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let earlier = self.series().repeated(&key, now);
        if let Some(Written { name, count, .. }) = earlier {
            let count = count.saturating_add(1);
            let series = EventSeries {
                count,
                last_observed_time: MicroTime(now),
            };
            let patch = serde_json::json!({ "series": series });
            match events
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => {
                    self.series().counted(&key, count, now);
                    return Ok(());
                }
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        match events.create(&PostParams::default(), new).await {
            Ok(_) => {}
            // Created by an earlier try whose answer was lost.
            Err(kube::Error::Api(status)) if status.code == 409 => {}
            Err(error) => return Err(error),
        }
        let name = new.metadata.name.clone().unwrap_or_default();
        self.series().created(key, name, now);
        Ok(())
    }

    fn series(&self) -> std::sync::MutexGuard<'_, SeriesLog> {
        self.series.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `pending` as an `events.k8s.io/v1` Event, as kube-runtime's recorder makes it.
    fn new_event(&self, pending: &Pending, now: Timestamp) -> K8sEvent {
        let Pending { regarding, event } = pending;
        K8sEvent {
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            note: event.note.clone(),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(self.component),
                    now.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            reporting_controller: Some(self.component.to_string()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(
                match event.type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .to_string(),
            ),
            ..K8sEvent::default()
        }
    }
}

/// Whether a failed event write may succeed if sent again: no answer came (a connection
/// refused or cut, a timeout), or the API server said it was too busy or unavailable.
fn may_pass(error: &kube::Error) -> bool {
    match error {
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        kube::Error::Api(status) => matches!(status.code, 429 | 503 | 504),
        _ => false,
    }
}

/// Records the events of one component into its queue. Cheap to clone.
#[derive(Clone)]
pub struct EventSink {
    queue: Arc<Queue>,
}

struct Queue {
    component: &'static str,
    sender: mpsc::Sender<Pending>,
    length: usize,
    budget: Mutex<EventBudget>,
    drops: Mutex<DropLog>,
    dropped: Counter,
}

impl EventSink {
    /// A sink of `component` holding at most `length` events, and the queue's other end.
    fn queue(
        component: &'static str,
        length: usize,
        dropped: Counter,
    ) -> (EventSink, mpsc::Receiver<Pending>) {
        let (sender, receiver) = mpsc::channel(length);
        let sink = EventSink {
            queue: Arc::new(Queue {
                component,
                sender,
                length,
                budget: Mutex::default(),
                drops: Mutex::default(),
                dropped,
            }),
        };
        (sink, receiver)
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
    /// note, so an action naming the subject (a provider version) keeps each note. Never
    /// waits: the event is queued, or dropped (and counted) if the queue is full.
    pub fn record(
        &self,
        regarding: ObjectReference,
        type_: EventType,
        reason: &'static str,
        action: String,
        note: String,
    ) {
        let queue = &self.queue;
        let allowed = queue
            .budget
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take(&regarding, Instant::now());
        if !allowed {
            tracing::debug!(
                component = queue.component,
                reason,
                object = regarding.name.as_deref().unwrap_or_default(),
                "event dropped: the object had 25 events recently (one more every 5 minutes)"
            );
            return;
        }
        let event = Event {
            type_,
            reason: reason.to_string(),
            // The API server rejects notes over 1 KiB.
            note: Some(ellipsized(note, 1024)),
            // The API server rejects actions over 128 bytes.
            action: ellipsized(action, 128),
            secondary: None,
        };
        match queue.sender.try_send(Pending { regarding, event }) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(pending)) => {
                queue.dropped.inc();
                let due = queue
                    .drops
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .dropped(Instant::now());
                if let Some(dropped) = due {
                    tracing::warn!(
                        component = queue.component,
                        dropped,
                        reason,
                        object = pending.regarding.name.as_deref().unwrap_or_default(),
                        "events dropped: {} events of {} are waiting for the API server already (the queue is full); counted in wasm_ccm_events_dropped_total, one warning a minute at most",
                        queue.length,
                        queue.component,
                    );
                }
            }
            Err(mpsc::error::TrySendError::Closed(pending)) => {
                tracing::debug!(
                    component = queue.component,
                    reason,
                    object = pending.regarding.name.as_deref().unwrap_or_default(),
                    "event dropped: the manager is stopping"
                );
            }
        }
    }
}

/// When a full queue's drops are told: at most one warning per [`DropLog::EVERY`], saying how
/// many were dropped since the last one.
#[derive(Debug, Default)]
struct DropLog {
    since_warning: u64,
    warned_at: Option<Instant>,
}

impl DropLog {
    const EVERY: Duration = Duration::from_secs(60);

    /// Count an event dropped at `now`; if a warning is due, how many it tells of.
    fn dropped(&mut self, now: Instant) -> Option<u64> {
        self.since_warning += 1;
        if self
            .warned_at
            .is_some_and(|at| now.duration_since(at) < Self::EVERY)
        {
            return None;
        }
        self.warned_at = Some(now);
        Some(std::mem::take(&mut self.since_warning))
    }
}

/// A map of at most `capacity` entries that forgets the one used least recently first, as
/// client-go's LRU caches do. A use costs a hash lookup and a move in the recency order,
/// whatever the number held.
#[derive(Debug)]
struct Recent<K, V> {
    entries: HashMap<K, (V, u64)>,
    /// The keys by when each was last used (a counter), oldest first.
    recency: BTreeMap<u64, K>,
    used: u64,
    capacity: usize,
}

impl<K: Hash + Eq + Clone, V> Recent<K, V> {
    fn new(capacity: usize) -> Recent<K, V> {
        Recent {
            entries: HashMap::new(),
            recency: BTreeMap::new(),
            used: 0,
            capacity,
        }
    }

    /// The entry of `key`, now the most recently used, if there is one.
    fn get_mut(&mut self, key: &K) -> Option<&mut V> {
        self.used += 1;
        let (value, used) = self.entries.get_mut(key)?;
        self.recency.remove(used);
        *used = self.used;
        self.recency.insert(self.used, key.clone());
        Some(value)
    }

    /// Hold `value` under `key`, as the most recently used entry; when full, the least
    /// recently used entry is forgotten first.
    fn insert(&mut self, key: K, value: V) -> &mut V {
        self.remove(&key);
        if self.entries.len() >= self.capacity
            && let Some((_, oldest)) = self.recency.pop_first()
        {
            self.entries.remove(&oldest);
        }
        self.used += 1;
        self.recency.insert(self.used, key.clone());
        &mut self.entries.entry(key).or_insert((value, self.used)).0
    }

    fn remove(&mut self, key: &K) {
        if let Some((_, used)) = self.entries.remove(key) {
            self.recency.remove(&used);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        debug_assert_eq!(self.entries.len(), self.recency.len());
        self.entries.len()
    }
}

/// client-go's `EventSourceObjectSpamFilter`: a token bucket per object, holding
/// [`EventBudget::BURST`] events and refilled with one every [`EventBudget::REFILL`]; at most
/// [`EventBudget::OBJECTS`] objects are tracked, the one seen least recently forgotten first
/// (client-go's LRU cache; a forgotten object starts again with a full bucket).
#[derive(Debug)]
struct EventBudget {
    buckets: Recent<ObjectKey, Bucket>,
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

impl ObjectKey {
    fn of(object: &ObjectReference) -> ObjectKey {
        ObjectKey {
            kind: object.kind.clone(),
            namespace: object.namespace.clone(),
            name: object.name.clone(),
            uid: object.uid.clone(),
            api_version: object.api_version.clone(),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Default for EventBudget {
    fn default() -> EventBudget {
        EventBudget {
            buckets: Recent::new(Self::OBJECTS),
        }
    }
}

impl EventBudget {
    const BURST: f64 = 25.0;
    const REFILL: Duration = Duration::from_secs(300);
    const OBJECTS: usize = 4096;

    /// Whether an event about `object` may be written at `now`, spending a token if so.
    fn take(&mut self, object: &ObjectReference, now: Instant) -> bool {
        let key = ObjectKey::of(object);
        let bucket = match self.buckets.get_mut(&key) {
            Some(bucket) => bucket,
            None => self.buckets.insert(
                key,
                Bucket {
                    tokens: Self::BURST,
                    at: now,
                },
            ),
        };
        let refilled = now.duration_since(bucket.at).as_secs_f64() / Self::REFILL.as_secs_f64();
        bucket.tokens = (bucket.tokens + refilled).min(Self::BURST);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return false;
        }
        bucket.tokens -= 1.0;
        true
    }
}

/// The events one component wrote recently, so that a repeat counts in the first one's
/// series instead of making another Event: what kube-runtime's recorder and client-go's
/// broadcaster key an event by (type, action, reason, object; not the note), each
/// remembered for [`SeriesLog::TTL`] after it was last seen and at most
/// [`SeriesLog::EVENTS`] of them, the least recently seen forgotten first (client-go's
/// correlator keeps as many). Only what a repeat needs is kept: the Event's name and count.
#[derive(Debug)]
struct SeriesLog {
    written: Recent<SeriesKey, Written>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    warning: bool,
    action: String,
    reason: String,
    regarding: ObjectKey,
}

impl SeriesKey {
    fn of(event: &Event, regarding: &ObjectReference) -> SeriesKey {
        SeriesKey {
            warning: event.type_ == EventType::Warning,
            action: event.action.clone(),
            reason: event.reason.clone(),
            regarding: ObjectKey::of(regarding),
        }
    }
}

/// An Event written: its name, how many times it was seen (1 until it repeats), and when
/// last.
#[derive(Debug, Clone)]
struct Written {
    name: String,
    count: i32,
    at: Timestamp,
}

impl Default for SeriesLog {
    fn default() -> SeriesLog {
        SeriesLog {
            written: Recent::new(Self::EVENTS),
        }
    }
}

impl SeriesLog {
    /// How long a repeat joins the series: kube-runtime's and client-go's six minutes.
    const TTL: SignedDuration = SignedDuration::from_mins(6);
    /// client-go's `maxLruCacheEntries`.
    const EVENTS: usize = 4096;

    /// The Event `key` repeats, if one was seen less than [`SeriesLog::TTL`] before `now`.
    fn repeated(&mut self, key: &SeriesKey, now: Timestamp) -> Option<Written> {
        let written = self.written.get_mut(key)?.clone();
        if written.at + Self::TTL > now {
            return Some(written);
        }
        self.written.remove(key);
        None
    }

    /// `key`'s Event was created as `name` at `now`.
    fn created(&mut self, key: SeriesKey, name: String, now: Timestamp) {
        self.written.insert(
            key,
            Written {
                name,
                count: 1,
                at: now,
            },
        );
    }

    /// `key`'s Event was seen `count` times, the last at `now`.
    fn counted(&mut self, key: &SeriesKey, count: i32, now: Timestamp) {
        if let Some(written) = self.written.get_mut(key) {
            written.count = count;
            written.at = now;
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

    fn node(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Node".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            api_version: Some("v1".into()),
            ..ObjectReference::default()
        }
    }

    fn exposition(metrics: &EventMetrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    #[test]
    fn a_full_queue_drops_and_counts_without_waiting() {
        let metrics = EventMetrics::default();
        let component = "cloud-node-controller";
        let (sink, mut queue) = EventSink::queue(component, 3, metrics.of(component));
        for i in 0..10 {
            sink.normal(node(&format!("node-{i}")), "Synced", "Node synced".into());
        }
        assert_eq!(metrics.of(component).get(), 7);
        let queued: Vec<String> = std::iter::from_fn(|| queue.try_recv().ok())
            .filter_map(|pending| pending.regarding.name)
            .collect();
        assert_eq!(
            queued,
            ["node-0", "node-1", "node-2"],
            "the first ones wait"
        );
        sink.normal(node("node-10"), "Synced", "Node synced".into());
        assert_eq!(
            queue
                .try_recv()
                .ok()
                .and_then(|p| p.regarding.name)
                .as_deref(),
            Some("node-10"),
            "a drained queue takes events again"
        );
        assert_eq!(metrics.of(component).get(), 7);
        assert!(
            exposition(&metrics)
                .contains("wasm_ccm_events_dropped_total{component=\"cloud-node-controller\"} 7\n"),
            "{}",
            exposition(&metrics)
        );
    }

    #[test]
    fn the_spam_filter_comes_before_the_queue() {
        let metrics = EventMetrics::default();
        let (sink, mut queue) = EventSink::queue("service-controller", 100, metrics.of("x"));
        for _ in 0..40 {
            sink.warning(service("web"), "SyncLoadBalancerFailed", "failed".into());
        }
        assert_eq!(std::iter::from_fn(|| queue.try_recv().ok()).count(), 25);
        assert_eq!(
            metrics.of("x").get(),
            0,
            "filtered events are not queue drops"
        );
    }

    #[test]
    fn drops_are_told_at_most_once_a_minute_with_their_number() {
        let mut log = DropLog::default();
        let start = Instant::now();
        let at = |secs| start + Duration::from_secs(secs);
        assert_eq!(log.dropped(start), Some(1));
        assert_eq!(log.dropped(at(1)), None);
        assert_eq!(log.dropped(at(59)), None);
        assert_eq!(
            log.dropped(at(60)),
            Some(3),
            "one warning for the three since"
        );
        assert_eq!(log.dropped(at(61)), None);
        assert_eq!(log.dropped(at(300)), Some(2));
    }

    #[tokio::test]
    async fn a_component_has_one_queue_however_often_its_sink_is_asked_for() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let metrics = EventMetrics::default();
        let stop = CancellationToken::new();
        let events = EventBroadcaster::new(
            client,
            "test",
            (2, RETRY_INTERVAL),
            metrics.clone(),
            watch::channel(true).1,
            stop.clone(),
        );
        let first = events.sink("cloud-node-controller");
        let again = events.sink("cloud-node-controller");
        let other = events.sink("service-controller");
        assert!(Arc::ptr_eq(&first.queue, &again.queue));
        assert!(!Arc::ptr_eq(&first.queue, &other.queue));
        let text = exposition(&metrics);
        for component in ["cloud-node-controller", "service-controller"] {
            assert!(
                text.contains(&format!(
                    "wasm_ccm_events_dropped_total{{component=\"{component}\"}} 0\n"
                )),
                "each component's counter shows from its start: {text}"
            );
        }
        stop.cancel();
    }

    /// A fresh API emulator, a client of it, and a broadcaster retrying after 50 ms, leading as
    /// `leading` says, writing through a proxy that cuts its first `cut` connections without
    /// an answer.
    async fn against_an_emulator(
        cut: usize,
        leading: watch::Receiver<bool>,
        stop: &CancellationToken,
    ) -> (kube_emulator::Emulator, kube::Client, EventBroadcaster) {
        let emulator = kube_emulator::Emulator::start(
            "127.0.0.1:0".parse().unwrap(),
            kube_emulator::EmulatorOptions::default(),
        )
        .await
        .expect("emulator starts");
        let proxy = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let proxy_url = format!("https://{}", proxy.local_addr().unwrap());
        let upstream = emulator.addr();
        tokio::spawn(async move {
            for accepted in 0.. {
                let Ok((mut incoming, _)) = proxy.accept().await else {
                    return;
                };
                if accepted < cut {
                    drop(incoming);
                    continue;
                }
                tokio::spawn(async move {
                    let mut outgoing = tokio::net::TcpStream::connect(upstream).await?;
                    tokio::io::copy_bidirectional(&mut incoming, &mut outgoing).await
                });
            }
        });
        let client = |kubeconfig| async {
            let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
                .await
                .unwrap();
            kube::Client::try_from(config).unwrap()
        };
        let mut proxied = emulator.kubeconfig();
        proxied.clusters[0].cluster.as_mut().unwrap().server = Some(proxy_url);
        let events = EventBroadcaster::new(
            client(proxied).await,
            "test",
            (QUEUE_LENGTH, Duration::from_millis(50)),
            EventMetrics::default(),
            leading,
            stop.clone(),
        );
        let direct = client(emulator.kubeconfig()).await;
        (emulator, direct, events)
    }

    /// The names of the nodes the stored events are about, once `expected` is among them.
    async fn events_about(client: &kube::Client, expected: &str) -> Vec<String> {
        let api: kube::Api<k8s_openapi::api::events::v1::Event> = kube::Api::all(client.clone());
        for _ in 0..200 {
            let names: Vec<String> = api
                .list(&Default::default())
                .await
                .expect("list events")
                .items
                .into_iter()
                .filter_map(|event| event.regarding.and_then(|regarding| regarding.name))
                .collect();
            if names.iter().any(|name| name == expected) {
                return names;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("no event about {expected} was written");
    }

    #[tokio::test]
    async fn a_write_with_no_answer_is_tried_again_and_a_refused_one_is_not() {
        let stop = CancellationToken::new();
        // The first three connections are cut: three writes get no answer.
        let (emulator, client, events) =
            against_an_emulator(3, watch::channel(true).1, &stop).await;
        let sink = events.sink("cloud-node-controller");
        let creates = || emulator.requests().get("create", "events.events.k8s.io");

        sink.normal(node("node-a"), "Synced", "Node synced".into());
        assert_eq!(events_about(&client, "node-a").await, ["node-a"]);
        assert_eq!(
            creates(),
            1,
            "written at the fourth try, the first to arrive"
        );

        // Refused: never sent again, and the queue goes on (one writer, in order).
        emulator.faults().fail_next(
            kube_emulator::FailRule::new(1, 422)
                .method("POST")
                .path_contains("/events"),
        );
        sink.normal(node("node-b"), "Synced", "Node synced".into());
        sink.normal(node("node-c"), "Synced", "Node synced".into());
        assert_eq!(events_about(&client, "node-c").await, ["node-a", "node-c"]);
        assert_eq!(creates(), 3, "node-b's refused write was not tried again");
        stop.cancel();
    }

    /// Repeats of one event patch it into a series; a series whose Event was deleted starts
    /// again with a new Event.
    #[tokio::test]
    async fn repeats_become_a_series_and_a_deleted_one_starts_anew() {
        let stop = CancellationToken::new();
        let (_emulator, client, events) =
            against_an_emulator(0, watch::channel(true).1, &stop).await;
        let sink = events.sink("cloud-node-controller");
        let api: kube::Api<K8sEvent> = kube::Api::namespaced(client.clone(), "default");
        let counts = || async {
            let mut counts: Vec<i32> = api
                .list(&Default::default())
                .await
                .expect("list events")
                .items
                .into_iter()
                .map(|event| event.series.map_or(1, |series| series.count))
                .collect();
            counts.sort_unstable();
            counts
        };
        let until = |wanted: Vec<i32>| async move {
            for _ in 0..200 {
                if counts().await == wanted {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            panic!("events' counts {:?}, not {wanted:?}", counts().await);
        };
        for note in ["first", "second", "third"] {
            sink.warning(node("node-a"), "SyncFailed", note.into());
        }
        until(vec![3]).await;
        let written = api.list(&Default::default()).await.unwrap().items;
        assert_eq!(
            written[0].note.as_deref(),
            Some("first"),
            "the first note kept"
        );

        api.delete(
            written[0].metadata.name.as_deref().unwrap(),
            &Default::default(),
        )
        .await
        .expect("delete the event");
        sink.warning(node("node-a"), "SyncFailed", "fourth".into());
        until(vec![1]).await;
        sink.warning(node("node-a"), "SyncFailed", "fifth".into());
        until(vec![2]).await;
        stop.cancel();
    }

    #[tokio::test]
    async fn no_answer_may_pass_and_a_refusal_may_not() {
        // Nothing listens on the discard port: the connection is refused.
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let api: kube::Api<k8s_openapi::api::events::v1::Event> = kube::Api::all(client);
        let refused = api.list(&Default::default()).await.unwrap_err();
        assert!(may_pass(&refused), "{refused:?}");
        let answered = |code| {
            kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..Default::default()
            }))
        };
        for code in [429, 503, 504] {
            assert!(may_pass(&answered(code)), "{code}");
        }
        for code in [400, 403, 404, 409, 422, 500] {
            assert!(!may_pass(&answered(code)), "{code}");
        }
    }

    #[tokio::test]
    async fn events_queued_when_leadership_is_lost_are_never_written() {
        let stop = CancellationToken::new();
        let (leading, led) = watch::channel(true);
        let (emulator, client, events) = against_an_emulator(0, led, &stop).await;
        let sink = events.sink("cloud-node-controller");
        let held = kube_emulator::DelayRule::new(Duration::from_secs(30))
            .method("POST")
            .path_contains("/events");
        emulator.faults().delay(held.clone());
        for name in ["old-1", "old-2", "old-3"] {
            sink.normal(node(name), "Synced", "Node synced".into());
        }
        // old-1's write is held by the API server, the others queued behind it.
        for _ in 0..100 {
            if emulator.requests().get("create", "events.events.k8s.io") > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        leading.send_replace(false);
        // The worker drops them as soon as it sees the change; give it that time before the
        // next term starts.
        tokio::time::sleep(Duration::from_millis(300)).await;
        emulator
            .faults()
            .delay(kube_emulator::DelayRule { ms: 0, ..held });
        leading.send_replace(true);
        sink.normal(node("new"), "Synced", "Node synced".into());
        assert_eq!(
            events_about(&client, "new").await,
            ["new"],
            "the lost term's events are not written by the next one"
        );
        stop.cancel();
    }

    fn synced(name: &str) -> SeriesKey {
        let event = Event {
            type_: EventType::Normal,
            reason: "Synced".into(),
            note: Some("a note that does not tell events apart".into()),
            action: "Synced".into(),
            secondary: None,
        };
        SeriesKey::of(&event, &node(name))
    }

    #[test]
    fn a_recent_map_forgets_the_least_recently_used_and_holds_a_key_once() {
        let mut recent = Recent::new(3);
        recent.insert("a", 1);
        recent.insert("b", 2);
        recent.insert("a", 3);
        assert_eq!((recent.len(), recent.get_mut(&"a").copied()), (2, Some(3)));
        recent.insert("c", 4);
        recent.get_mut(&"b");
        recent.insert("d", 5);
        assert_eq!(recent.get_mut(&"a"), None, "a was used least recently");
        assert_eq!(recent.len(), 3);
        recent.insert("e", 6);
        assert_eq!(recent.get_mut(&"c"), None, "then c");
        assert!(recent.get_mut(&"b").is_some() && recent.get_mut(&"d").is_some());
        recent.remove(&"b");
        assert_eq!(recent.len(), 2);
    }

    #[test]
    fn a_repeat_within_six_minutes_joins_the_series_and_a_later_one_starts_anew() {
        let mut log = SeriesLog::default();
        let start = Timestamp::now();
        let key = synced("node-1");
        assert!(log.repeated(&key, start).is_none());
        log.created(key.clone(), "node-1.abc".into(), start);
        let at = |minutes: i64| start + SignedDuration::from_mins(minutes);
        let repeat = log
            .repeated(&key, at(5))
            .expect("a repeat within six minutes");
        assert_eq!((repeat.name.as_str(), repeat.count), ("node-1.abc", 1));
        log.counted(&key, 2, at(5));
        let repeat = log
            .repeated(&key, at(10))
            .expect("six minutes from the last repeat");
        assert_eq!(repeat.count, 2);
        assert!(
            log.repeated(&key, at(17)).is_none(),
            "over six minutes after the last: a new Event"
        );
        assert!(log.repeated(&synced("node-2"), at(5)).is_none());
    }

    #[test]
    fn the_series_log_remembers_a_bounded_number_of_events_forgetting_the_least_recent() {
        let mut log = SeriesLog::default();
        let now = Timestamp::now();
        log.created(synced("kept"), "kept.1".into(), now);
        log.created(synced("forgotten"), "forgotten.1".into(), now);
        for i in 0..SeriesLog::EVENTS * 2 {
            log.created(synced(&format!("node-{i}")), format!("node-{i}.1"), now);
            if i % 1000 == 0 {
                assert!(log.repeated(&synced("kept"), now).is_some());
            }
        }
        assert_eq!(log.written.len(), SeriesLog::EVENTS);
        assert!(log.repeated(&synced("kept"), now).is_some());
        assert!(log.repeated(&synced("forgotten"), now).is_none());
    }

    #[test]
    fn the_budget_tracks_a_bounded_number_of_objects_forgetting_the_least_recent() {
        let mut budget = EventBudget::default();
        let start = Instant::now();
        let (spamming, quiet) = (service("spamming"), service("quiet"));
        while budget.take(&spamming, start) {}
        while budget.take(&quiet, start) {}
        for i in 0..EventBudget::OBJECTS * 2 {
            budget.take(&service(&format!("svc-{i}")), start);
            if i % 1000 == 0 {
                assert!(
                    !budget.take(&spamming, start),
                    "an object still sending stays throttled"
                );
            }
        }
        assert_eq!(budget.buckets.len(), EventBudget::OBJECTS);
        assert!(!budget.take(&spamming, start));
        assert!(
            budget.take(&quiet, start),
            "the object seen least recently was forgotten: a full bucket again"
        );
    }
}
