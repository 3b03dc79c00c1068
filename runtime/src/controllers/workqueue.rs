//! A work queue with client-go's semantics, which the controllers' behaviour depends on:
//!
//! - a key queued twice is processed once (dedupe while waiting);
//! - a key is never processed by two workers at once: added while processing, it runs again
//!   once the worker's [`Processing`] guard is dropped;
//! - `add_after` for a provider's `retry-after` (the earliest pending time wins);
//! - `add_rate_limited`: per-key exponential backoff between `base` and `max`, reset by
//!   `forget` after a success.
//!
//! It also keeps upstream's `workqueue_*` metrics, labelled by queue name; the two about
//! work in progress (a stuck worker shows there) are refreshed every 500 ms, as client-go.
//!
//! ```ignore
//! while let Some(item) = queue.next().await {
//!     match sync(item.key()).await {
//!         Ok(()) => queue.forget(item.key()),
//!         Err(_) => queue.add_rate_limited(item.key().clone()),
//!     }
//! } // `item` dropped: the key is done, and runs again if it was added meanwhile
//! ```
//!
//! Why not kube-runtime's queue (kube 5.0): `kube::runtime::scheduler` delays and dedupes
//! (earliest time wins) and can hold a key back with `hold_unless`, but it is a stream with
//! one consumer that knows nothing of processing, failures or depth. The part that runs one
//! reconciliation per key and defers a re-add until it ends is `controller::Runner`, private
//! to kube-runtime and reachable only through `Controller`/`applier`, which:
//!
//! - hand the reconciler an object from the store and skip keys whose object is gone
//!   (`Error::ObjectNotFound`), where service-lb must sync a Service deleted without its
//!   finalizer to delete its load balancer;
//! - retry by `error_policy` returning `Action::requeue(delay)`: no per-key failure count to
//!   back off from and no `forget`;
//! - poll every reconciliation inside the one task driving the stream, so concurrent syncs
//!   share that task instead of spreading over the runtime's threads;
//! - expose no queue depth, adds, retries, waiting or processing times, so none of the
//!   `workqueue_*` metrics with client-go's names could be reported.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tokio::sync::Notify;

/// Per-key exponential backoff: `base * 2^failures`, capped at `max`.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Backoff {
    fn delay(&self, failures: u32) -> Duration {
        let factor = 2u32.checked_pow(failures).unwrap_or(u32::MAX);
        self.base
            .checked_mul(factor)
            .unwrap_or(self.max)
            .min(self.max)
    }
}

/// A cloneable handle to one queue.
pub struct WorkQueue<K> {
    shared: Arc<Shared<K>>,
}

impl<K> Clone for WorkQueue<K> {
    fn clone(&self) -> Self {
        WorkQueue {
            shared: self.shared.clone(),
        }
    }
}

struct Shared<K> {
    name: String,
    backoff: Backoff,
    state: Mutex<State<K>>,
    ready: Notify,
    metrics: QueueMetrics,
}

struct State<K> {
    queue: VecDeque<K>,
    /// Keys waiting to be processed, with when they were added.
    dirty: HashMap<K, Instant>,
    /// Keys being processed, with when processing started (tokio's clock, for tests).
    processing: HashMap<K, tokio::time::Instant>,
    /// Keys waiting for `add_after`, with the time they become due.
    delayed: HashMap<K, Instant>,
    failures: HashMap<K, u32>,
    shut_down: bool,
}

impl<K> WorkQueue<K>
where
    K: Clone + Eq + Hash + Debug + Send + Sync + 'static,
{
    /// A queue named `name` in the metrics. Must be created inside a tokio runtime.
    pub fn new(name: &str, backoff: Backoff, metrics: &QueueMetrics) -> Self {
        let queue = WorkQueue {
            shared: Arc::new(Shared {
                name: name.to_string(),
                backoff,
                state: Mutex::new(State {
                    queue: VecDeque::new(),
                    dirty: HashMap::new(),
                    processing: HashMap::new(),
                    delayed: HashMap::new(),
                    failures: HashMap::new(),
                    shut_down: false,
                }),
                ready: Notify::new(),
                metrics: metrics.clone(),
            }),
        };
        queue.shared.metrics.create_series(&queue.labels());
        tokio::spawn(report_work_in_progress(Arc::downgrade(&queue.shared)));
        queue
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State<K>> {
        self.shared
            .state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn labels(&self) -> QueueLabels {
        QueueLabels {
            name: self.shared.name.clone(),
        }
    }

    /// Queue `key` unless it is already waiting.
    pub fn add(&self, key: K) {
        let mut state = self.state();
        if state.shut_down || state.dirty.contains_key(&key) {
            return;
        }
        self.shared.metrics.adds.get_or_create(&self.labels()).inc();
        state.dirty.insert(key.clone(), Instant::now());
        if state.processing.contains_key(&key) {
            // Runs again once the current processing is done.
            return;
        }
        state.queue.push_back(key);
        self.shared
            .metrics
            .depth
            .get_or_create(&self.labels())
            .set(state.queue.len() as i64);
        drop(state);
        self.shared.ready.notify_one();
    }

    /// Queue `key` after `delay`; an earlier pending time for the same key wins.
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            self.add(key);
            return;
        }
        // A delay no clock can reach is as good as never, not a panic.
        let now = Instant::now();
        let due = now
            .checked_add(delay)
            .unwrap_or_else(|| now + Duration::from_secs(u64::from(u32::MAX)));
        {
            let mut state = self.state();
            if state.shut_down {
                return;
            }
            match state.delayed.entry(key.clone()) {
                Entry::Occupied(mut pending) if *pending.get() > due => {
                    pending.insert(due);
                }
                Entry::Occupied(_) => return,
                Entry::Vacant(slot) => {
                    slot.insert(due);
                }
            }
        }
        let queue = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep_until(due.into()).await;
            let still_due = {
                let mut state = queue.state();
                match state.delayed.get(&key) {
                    Some(pending) if *pending == due => {
                        state.delayed.remove(&key);
                        true
                    }
                    _ => false,
                }
            };
            if still_due {
                queue.add(key);
            }
        });
    }

    /// Queue `key` again after its next backoff delay.
    pub fn add_rate_limited(&self, key: K) {
        self.add_rate_limited_after(key, Duration::ZERO);
    }

    /// Queue `key` again after its next backoff delay, or after `at_least` if that is
    /// longer (a provider's `retry-after` that outlasted its grace).
    pub fn add_rate_limited_after(&self, key: K, at_least: Duration) {
        let failures = {
            let mut state = self.state();
            let failures = state.failures.entry(key.clone()).or_insert(0);
            let seen = *failures;
            *failures = failures.saturating_add(1);
            seen
        };
        self.shared
            .metrics
            .retries
            .get_or_create(&self.labels())
            .inc();
        self.add_after(key, self.shared.backoff.delay(failures).max(at_least));
    }

    /// Forget `key`'s failures (after a success).
    pub fn forget(&self, key: &K) {
        self.state().failures.remove(key);
    }

    /// How many times `key` failed in a row.
    pub fn failures(&self, key: &K) -> u32 {
        self.state().failures.get(key).copied().unwrap_or(0)
    }

    /// The next key to process, or `None` once the queue is shut down. The key is the
    /// worker's until the returned [`Processing`] is dropped, however the worker ends: by
    /// finishing, returning early, failing, panicking or being cancelled.
    pub async fn next(&self) -> Option<Processing<K>> {
        loop {
            let notified = self.shared.ready.notified();
            {
                let mut state = self.state();
                if state.shut_down {
                    return None;
                }
                if let Some(key) = state.queue.pop_front() {
                    let added = state.dirty.remove(&key);
                    let started = tokio::time::Instant::now();
                    state.processing.insert(key.clone(), started);
                    let labels = self.labels();
                    self.shared
                        .metrics
                        .depth
                        .get_or_create(&labels)
                        .set(state.queue.len() as i64);
                    if let Some(added) = added {
                        self.shared
                            .metrics
                            .queue_duration
                            .get_or_create(&labels)
                            .observe(added.elapsed().as_secs_f64());
                    }
                    return Some(Processing {
                        queue: self.clone(),
                        key,
                        started,
                    });
                }
            }
            notified.await;
        }
    }

    /// Processing of `key` finished after `took`; if it was added meanwhile, queue it again.
    fn done(&self, key: &K, took: Duration) {
        let mut state = self.state();
        state.processing.remove(key);
        self.shared
            .metrics
            .work_duration
            .get_or_create(&self.labels())
            .observe(took.as_secs_f64());
        if state.dirty.contains_key(key) && !state.shut_down {
            state.queue.push_back(key.clone());
            drop(state);
            self.shared.ready.notify_one();
        }
    }

    /// Stop handing out keys; waiting workers get `None`.
    pub fn shut_down(&self) {
        self.state().shut_down = true;
        self.shared.ready.notify_waiters();
    }

    /// Keys waiting to be processed now.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.state().queue.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A key handed to one worker by [`WorkQueue::next`]. Dropping it marks the key done
/// (client-go's `Done`): a re-add that came while it was processed is queued then, and the
/// time it took is observed. Tying `done` to the drop means no path out of a worker, early
/// return, `?`, panic or cancellation, can leave a key processing forever, which would
/// stop it from ever being handed out again.
pub struct Processing<K>
where
    K: Clone + Eq + Hash + Debug + Send + Sync + 'static,
{
    queue: WorkQueue<K>,
    key: K,
    started: tokio::time::Instant,
}

impl<K> Processing<K>
where
    K: Clone + Eq + Hash + Debug + Send + Sync + 'static,
{
    /// The key being processed.
    pub fn key(&self) -> &K {
        &self.key
    }
}

impl<K> Debug for Processing<K>
where
    K: Clone + Eq + Hash + Debug + Send + Sync + 'static,
{
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processing")
            .field("queue", &self.queue.shared.name)
            .field("key", &self.key)
            .finish()
    }
}

impl<K> Drop for Processing<K>
where
    K: Clone + Eq + Hash + Debug + Send + Sync + 'static,
{
    fn drop(&mut self) {
        self.queue.done(&self.key, self.started.elapsed());
    }
}

/// client-go's `updateUnfinishedWorkLoop`: every 500 ms, how long the keys in processing
/// have been at it, in total and the longest, until the queue shuts down or is dropped.
async fn report_work_in_progress<K>(shared: Weak<Shared<K>>) {
    let mut ticks = tokio::time::interval(Duration::from_millis(500));
    loop {
        ticks.tick().await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let (total, longest) = {
            let state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            if state.shut_down {
                return;
            }
            let running = state.processing.values().map(|started| started.elapsed());
            running.fold((0.0, 0.0), |(total, longest): (f64, f64), took| {
                let took = took.as_secs_f64();
                (total + took, longest.max(took))
            })
        };
        let labels = QueueLabels {
            name: shared.name.clone(),
        };
        let metrics = &shared.metrics;
        metrics.unfinished_work.get_or_create(&labels).set(total);
        metrics.longest_running.get_or_create(&labels).set(longest);
    }
}

/// `workqueue_*` metric labels.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub name: String,
}

type HistogramFamily = Family<QueueLabels, Histogram, fn() -> Histogram>;

fn queue_histogram() -> Histogram {
    // 10 ns .. 100 s in powers of ten, client-go's workqueue buckets, written out so that
    // each bound reads `le="1e-7"` rather than a product's rounding error.
    Histogram::new([
        1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0, 100.0,
    ])
}

/// Upstream's workqueue metrics for every queue of the process.
#[derive(Debug, Clone)]
pub struct QueueMetrics {
    depth: Family<QueueLabels, Gauge>,
    adds: Family<QueueLabels, Counter>,
    retries: Family<QueueLabels, Counter>,
    queue_duration: HistogramFamily,
    work_duration: HistogramFamily,
    unfinished_work: Family<QueueLabels, Gauge<f64, AtomicU64>>,
    longest_running: Family<QueueLabels, Gauge<f64, AtomicU64>>,
}

impl QueueMetrics {
    /// Every series of a queue, at 0, as client-go makes them with the queue: a dashboard
    /// or alert over them reads 0 rather than no data until the queue is first used.
    fn create_series(&self, labels: &QueueLabels) {
        let _ = self.depth.get_or_create(labels);
        let _ = self.adds.get_or_create(labels);
        let _ = self.retries.get_or_create(labels);
        let _ = self.queue_duration.get_or_create(labels);
        let _ = self.work_duration.get_or_create(labels);
        let _ = self.unfinished_work.get_or_create(labels);
        let _ = self.longest_running.get_or_create(labels);
    }
}

impl Default for QueueMetrics {
    fn default() -> Self {
        QueueMetrics {
            depth: Family::default(),
            adds: Family::default(),
            retries: Family::default(),
            queue_duration: Family::new_with_constructor(queue_histogram),
            work_duration: Family::new_with_constructor(queue_histogram),
            unfinished_work: Family::default(),
            longest_running: Family::default(),
        }
    }
}

impl QueueMetrics {
    /// Register the `workqueue_*` families in `registry`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "workqueue_depth",
            "Current depth of workqueue",
            self.depth.clone(),
        );
        registry.register(
            "workqueue_adds",
            "Total number of adds handled by workqueue",
            self.adds.clone(),
        );
        registry.register(
            "workqueue_retries",
            "Total number of retries handled by workqueue",
            self.retries.clone(),
        );
        registry.register(
            "workqueue_queue_duration_seconds",
            "How long in seconds an item stays in workqueue before being requested",
            self.queue_duration.clone(),
        );
        registry.register(
            "workqueue_work_duration_seconds",
            "How long in seconds processing an item from workqueue takes",
            self.work_duration.clone(),
        );
        registry.register(
            "workqueue_unfinished_work_seconds",
            "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads",
            self.unfinished_work.clone(),
        );
        registry.register(
            "workqueue_longest_running_processor_seconds",
            "How many seconds has the longest running processor for workqueue been running",
            self.longest_running.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn queue() -> WorkQueue<String> {
        let backoff = Backoff {
            base: Duration::from_millis(10),
            max: Duration::from_millis(40),
        };
        WorkQueue::new("test", backoff, &QueueMetrics::default())
    }

    /// The next key, processed at once (its guard dropped).
    async fn next_key(queue: &WorkQueue<String>) -> Option<String> {
        queue
            .next()
            .await
            .map(|processing| processing.key().clone())
    }

    #[tokio::test]
    async fn a_key_added_twice_while_waiting_is_processed_once() {
        let queue = queue();
        queue.add("a".to_string());
        queue.add("a".to_string());
        queue.add("b".to_string());
        assert_eq!(queue.len(), 2);
        assert_eq!(next_key(&queue).await.as_deref(), Some("a"));
        assert_eq!(next_key(&queue).await.as_deref(), Some("b"));
    }

    #[tokio::test]
    async fn a_key_re_added_while_processing_is_handed_out_again_after_the_guard_drops() {
        let queue = queue();
        queue.add("a".to_string());
        let processing = queue.next().await.expect("key");
        queue.add("a".to_string());
        assert!(
            queue.is_empty(),
            "not handed to a second worker while processing"
        );
        drop(processing);
        assert_eq!(queue.len(), 1, "queued again once done");
        let again = queue.next().await.expect("key");
        assert_eq!(again.key(), "a");
        drop(again);
        assert!(queue.is_empty(), "one re-add, one more run");
    }

    #[tokio::test]
    async fn a_worker_returning_early_or_failing_releases_its_key() {
        let queue = queue();
        // A worker that bails out with `?` before doing anything with its key.
        async fn worker(queue: &WorkQueue<String>, fail: bool) -> Result<String, String> {
            let processing = queue.next().await.ok_or("shut down")?;
            if fail {
                return Err(format!("{} failed", processing.key()));
            }
            Ok(processing.key().clone())
        }
        queue.add("a".to_string());
        assert_eq!(worker(&queue, true).await, Err("a failed".to_string()));
        queue.add("a".to_string());
        assert_eq!(queue.len(), 1, "not left processing by the early return");
        assert_eq!(worker(&queue, false).await, Ok("a".to_string()));
        queue.add("a".to_string());
        assert_eq!(queue.len(), 1);
    }

    #[tokio::test]
    async fn a_panicking_or_cancelled_worker_releases_its_key() {
        let queue = queue();
        queue.add("a".to_string());
        let panicking = tokio::spawn({
            let queue = queue.clone();
            async move {
                let processing = queue.next().await.expect("key");
                queue.add(processing.key().clone());
                panic!("worker bug while syncing {}", processing.key());
            }
        });
        assert!(panicking.await.expect_err("worker panicked").is_panic());
        assert_eq!(
            next_key(&queue).await.as_deref(),
            Some("a"),
            "re-added during the panicking run, handed out again"
        );

        queue.add("b".to_string());
        let (started, taken) = tokio::sync::oneshot::channel();
        let cancelled = tokio::spawn({
            let queue = queue.clone();
            async move {
                let _processing = queue.next().await.expect("key");
                let _ = started.send(());
                std::future::pending::<()>().await;
            }
        });
        taken.await.expect("the worker took b");
        cancelled.abort();
        assert!(cancelled.await.expect_err("aborted").is_cancelled());
        queue.add("b".to_string());
        assert_eq!(
            queue.len(),
            1,
            "not left processing by the cancelled worker"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn add_after_keeps_the_earliest_time() {
        let queue = queue();
        queue.add_after("a".to_string(), Duration::from_secs(10));
        queue.add_after("a".to_string(), Duration::from_secs(2));
        queue.add_after("a".to_string(), Duration::from_secs(5));
        tokio::time::sleep(Duration::from_millis(2100)).await;
        assert_eq!(queue.len(), 1);
        assert_eq!(next_key(&queue).await.as_deref(), Some("a"));
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert!(
            queue.is_empty(),
            "later times were superseded, not queued again"
        );
    }

    #[tokio::test]
    async fn a_delay_past_any_clock_parks_the_key_without_a_panic() {
        let queue = queue();
        queue.add_after("a".to_string(), Duration::MAX);
        queue.add_after("b".to_string(), Duration::from_secs(u64::MAX / 2));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(queue.is_empty());
    }

    #[tokio::test]
    async fn a_rate_limited_retry_waits_the_longer_of_its_backoff_and_the_asked_delay() {
        let queue = queue();
        // The backoff (10 ms, then 20 ms) is shorter than the 300 ms asked.
        queue.add_rate_limited_after("a".to_string(), Duration::from_millis(300));
        tokio::time::sleep(Duration::from_millis(150)).await;
        assert!(queue.is_empty(), "not before the asked delay");
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(queue.len(), 1);
        assert_eq!(queue.failures(&"a".to_string()), 1, "counted as a failure");
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let backoff = Backoff {
            base: Duration::from_secs(5),
            max: Duration::from_secs(300),
        };
        let delays: Vec<u64> = (0..8).map(|n| backoff.delay(n).as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(backoff.delay(60).as_secs(), 300);
    }

    #[tokio::test(start_paused = true)]
    async fn rate_limited_retries_back_off_until_forgotten() {
        let queue = queue();
        let key = "a".to_string();
        queue.add_rate_limited(key.clone());
        queue.add_rate_limited(key.clone());
        assert_eq!(queue.failures(&key), 2);
        queue.forget(&key);
        assert_eq!(queue.failures(&key), 0);
        tokio::time::sleep(Duration::from_millis(11)).await;
        assert_eq!(next_key(&queue).await.as_deref(), Some("a"));
    }

    #[tokio::test(start_paused = true)]
    async fn work_in_progress_is_reported_until_done() {
        let metrics = QueueMetrics::default();
        let backoff = Backoff {
            base: Duration::from_millis(10),
            max: Duration::from_millis(40),
        };
        let queue = WorkQueue::new("test", backoff, &metrics);
        let labels = QueueLabels {
            name: "test".into(),
        };
        let reported = || {
            (
                metrics.unfinished_work.get_or_create(&labels).get(),
                metrics.longest_running.get_or_create(&labels).get(),
            )
        };
        queue.add("stuck".to_string());
        queue.add("slow".to_string());
        let stuck = queue.next().await.expect("key");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let slow = queue.next().await.expect("key");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let (total, longest) = reported();
        assert!((4.0..4.3).contains(&total), "3.1 s + 1.1 s, got {total}");
        assert!((3.0..3.2).contains(&longest), "{longest}");
        drop((stuck, slow));
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(reported(), (0.0, 0.0));
    }

    #[tokio::test]
    async fn shut_down_wakes_waiting_workers() {
        let queue = queue();
        let waiting = tokio::spawn({
            let queue = queue.clone();
            async move { queue.next().await }
        });
        tokio::task::yield_now().await;
        queue.shut_down();
        assert!(waiting.await.expect("worker").is_none());
    }
}
