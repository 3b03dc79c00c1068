//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection` does
//! it, so that a wasm-ccm and an upstream cloud-controller-manager can share one lease.
//!
//! Only one replica runs the controllers: the one whose identity is the Lease's
//! `holderIdentity`. Every other replica polls, and takes a lease over only once it has seen
//! the same record (holder, times, transitions) unchanged for the record's
//! `leaseDurationSeconds` of its *own* monotonic clock. The remote `renewTime` is never
//! compared with the local clock, so clock skew between nodes cannot cause a double leader.
//!
//! The leader renews every retry period and gives up (cancels [`Leadership::lost`]) when no
//! renewal has succeeded for the renew deadline, or at once when it reads another holder
//! (client-go would retry until the deadline while another process already leads). The
//! deadline runs from the start of the last successful renewal, which is up to one retry
//! period stricter than client-go and keeps the leader's stop strictly before any standby's
//! takeover whenever the renew deadline is shorter than the lease.
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), wasm_ccm::leader::LeaderError> {
//! use tokio_util::sync::CancellationToken;
//! use wasm_ccm::leader::{LeaderElector, LeaseSettings};
//! let shutdown = CancellationToken::new();
//! let elector = LeaderElector::new(client, LeaseSettings::default());
//! if let Some(leadership) = elector.acquire(&shutdown).await? {
//!     let controllers = leadership.lost().child_token();
//!     // … run the controllers until `controllers` is cancelled or shutdown …
//!     # drop(controllers);
//!     leadership.release().await;
//! }
//! # Ok(()) }
//! ```

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

const LEASE_DURATION_FLAG: &str = "--leader-elect-lease-duration";
const RENEW_DEADLINE_FLAG: &str = "--leader-elect-renew-deadline";
const RETRY_PERIOD_FLAG: &str = "--leader-elect-retry-period";

/// client-go's `JitterFactor`: acquisition attempts wait a retry period plus up to 1.2 more,
/// and the renew deadline must exceed `1.2 × retry period`.
const JITTER_FACTOR: f64 = 1.2;

/// How long past the lease duration the `/healthz` watchdog tolerates a leader that has not
/// renewed (upstream's `leaderElection` check): it should have exited long before.
const HEALTH_TOLERANCE: Duration = Duration::from_secs(20);

/// The leader election settings of `--leader-elect-*`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseSettings {
    /// `--leader-elect-resource-namespace`.
    pub namespace: String,
    /// `--leader-elect-resource-name`.
    pub name: String,
    /// This process's `holderIdentity`; unique per process.
    pub identity: String,
    /// `--leader-elect-lease-duration`: how long a standby waits after the last change it saw
    /// before taking the lease over. The Lease stores whole seconds.
    pub lease_duration: Duration,
    /// `--leader-elect-renew-deadline`: how long the leader keeps trying to renew before it
    /// gives up leading.
    pub renew_deadline: Duration,
    /// `--leader-elect-retry-period`: the pause between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl Default for LeaseSettings {
    /// The component-base defaults, with a fresh [`default_identity`].
    fn default() -> LeaseSettings {
        LeaseSettings {
            namespace: "kube-system".to_owned(),
            name: "cloud-controller-manager".to_owned(),
            identity: default_identity(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl LeaseSettings {
    /// Checks what client-go and component-base check, plus what the API server would reject
    /// later: `lease duration > renew deadline > 1.2 × retry period > 0`, a lease of at least
    /// one whole second, valid lease and namespace names, a non-empty identity.
    pub fn validate(&self) -> Result<(), LeaderError> {
        match self.problem() {
            None => Ok(()),
            Some(problem) => Err(LeaderError::InvalidSettings {
                lease: self.lease_ref(),
                problem,
            }),
        }
    }

    fn problem(&self) -> Option<String> {
        if !is_dns1123_label(&self.namespace) {
            return Some(format!(
                "--leader-elect-resource-namespace {:?} is not a namespace name \
                 (lowercase letters, digits and '-', at most 63 characters)",
                self.namespace
            ));
        }
        if !is_dns1123_subdomain(&self.name) {
            return Some(format!(
                "--leader-elect-resource-name {:?} is not a lease name \
                 (lowercase letters, digits, '-' and '.', at most 253 characters)",
                self.name
            ));
        }
        if self.identity.is_empty() {
            return Some("the holder identity is empty".to_owned());
        }
        for (flag, value) in [
            (LEASE_DURATION_FLAG, self.lease_duration),
            (RENEW_DEADLINE_FLAG, self.renew_deadline),
            (RETRY_PERIOD_FLAG, self.retry_period),
        ] {
            if value.is_zero() {
                return Some(format!("{flag} must be greater than zero"));
            }
        }
        let lease = self.lease_duration;
        if lease < Duration::from_secs(1) || i32::try_from(lease.as_secs()).is_err() {
            return Some(format!(
                "{LEASE_DURATION_FLAG} ({lease:?}) must be between 1s and {}s: \
                 the Lease stores whole seconds",
                i32::MAX
            ));
        }
        // Standbys wait for the whole seconds the Lease carries, so compare with those.
        let stored = Duration::from_secs(lease.as_secs());
        if stored <= self.renew_deadline {
            let truncated = if stored == lease {
                String::new()
            } else {
                format!(", {stored:?} in the Lease")
            };
            return Some(format!(
                "{LEASE_DURATION_FLAG} ({lease:?}{truncated}) must be greater than \
                 {RENEW_DEADLINE_FLAG} ({:?})",
                self.renew_deadline
            ));
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return Some(format!(
                "{RENEW_DEADLINE_FLAG} ({:?}) must be greater than {JITTER_FACTOR} × \
                 {RETRY_PERIOD_FLAG} ({:?})",
                self.renew_deadline, self.retry_period
            ));
        }
        None
    }

    /// `namespace/name`, for messages.
    fn lease_ref(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// The `leaseDurationSeconds` to write; in range once [`LeaseSettings::validate`] passed.
    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// `hostname + "_" + uuid`, as the upstream cloud-controller-manager builds its identity.
pub fn default_identity() -> String {
    let host = hostname::get()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown-host".to_owned());
    // A random (version 4) UUID.
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    format!(
        "{host}_{}-{}-{}-{}-{}",
        hex::encode(&bytes[..4]),
        hex::encode(&bytes[4..6]),
        hex::encode(&bytes[6..8]),
        hex::encode(&bytes[8..10]),
        hex::encode(&bytes[10..])
    )
}

/// Why leader election cannot run.
#[derive(Debug, thiserror::Error)]
pub enum LeaderError {
    /// The lease settings fail [`LeaseSettings::validate`].
    #[error("leader election on lease {lease}: {problem}")]
    InvalidSettings {
        /// The lease, as `namespace/name`.
        lease: String,
        /// Which setting is wrong and what it must be.
        problem: String,
    },
}

/// `leader_election_master_status` labels, as client-go.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct LeaseLabels {
    name: String,
}

/// One candidate for one lease. Cheap to clone; clones are the same candidate.
#[derive(Debug, Clone)]
pub struct LeaderElector {
    shared: Arc<Shared>,
}

impl LeaderElector {
    /// A candidate for `settings`' lease; nothing is sent before [`LeaderElector::acquire`].
    pub fn new(client: kube::Client, settings: LeaseSettings) -> LeaderElector {
        let status = Family::<LeaseLabels, Gauge>::default();
        let labels = LeaseLabels {
            name: settings.name.clone(),
        };
        // A standby shows 0 from the start rather than no series at all.
        status.get_or_create(&labels).set(0);
        LeaderElector {
            shared: Arc::new(Shared {
                api: Api::namespaced(client, &settings.namespace),
                lease: settings.lease_ref(),
                observed: Mutex::new(Observation {
                    lease: None,
                    since: Instant::now(),
                }),
                status,
                labels,
                settings,
            }),
        }
    }

    /// Registers `leader_election_master_status{name="<lease name>"}` (gauge 1 while leading,
    /// else 0) in the registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "leader_election_master_status",
            "Gauge of if the reporting system is master of the relevant lease, 0 indicates \
             backup, 1 indicates master. 'name' is the string used to identify the lease",
            self.shared.status.clone(),
        );
    }

    /// Whether this process leads now: the value of `leader_election_master_status`.
    pub fn is_leading(&self) -> bool {
        self.shared.status.get_or_create(&self.shared.labels).get() == 1
    }

    /// Waits until this process holds the lease, creating it if missing and taking it over
    /// once it has expired by the local clock. Returns `Ok(None)` if `shutdown` is cancelled
    /// first. API errors are logged and retried, never returned.
    pub async fn acquire(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<Option<Leadership>, LeaderError> {
        let shared = &self.shared;
        let settings = &shared.settings;
        settings.validate()?;
        tracing::info!(lease = %shared.lease, identity = %settings.identity, "attempting to acquire the leader lease");
        loop {
            let started = Instant::now();
            let outcome = tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(None),
                outcome = shared.attempt(settings.renew_deadline) => outcome,
            };
            match outcome {
                Outcome::Held => {
                    shared.set_leading(true);
                    tracing::info!(lease = %shared.lease, identity = %settings.identity, "acquired the leader lease");
                    return Ok(Some(Leadership::start(shared.clone(), started)));
                }
                Outcome::HeldBy(holder) => tracing::debug!(
                    lease = %shared.lease, %holder,
                    "the lease is held by another candidate and has not expired"
                ),
                Outcome::Failed => {}
            }
            let pause = settings
                .retry_period
                .mul_f64(1.0 + rand::random::<f64>() * JITTER_FACTOR);
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(None),
                () = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// The `/healthz` `leaderElection` check: `Err(reason)` if this process leads but has not
    /// renewed the lease within lease duration + 20 s; `Ok` when not leading or renewing fine.
    pub fn health_check(&self) -> impl Fn() -> Result<(), String> + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || shared.health()
    }
}

/// This process holds the lease. While alive, a background task renews it every retry
/// period. Dropping it stops the renewal without giving the lease up, as a killed process
/// would: standbys take over once the lease expires.
#[derive(Debug)]
pub struct Leadership {
    shared: Arc<Shared>,
    lost: CancellationToken,
    renewal: JoinHandle<()>,
}

impl Leadership {
    fn start(shared: Arc<Shared>, renewed: Instant) -> Leadership {
        let lost = CancellationToken::new();
        let renewal = tokio::spawn(renew(shared.clone(), lost.clone(), renewed));
        Leadership {
            shared,
            lost,
            renewal,
        }
    }

    /// Cancelled the moment leadership is lost (no renewal for the renew deadline, or another
    /// holder observed), released or dropped. Controllers run under child tokens of it.
    pub fn lost(&self) -> CancellationToken {
        self.lost.clone()
    }

    /// Clean shutdown, once the controllers have stopped: stops renewing and, if the lease
    /// still names this process, gives it up as client-go's `release()` does (no holder,
    /// `leaseDurationSeconds` 1, acquire and renew time now, transitions kept) so that a
    /// standby takes over at once. Failures are logged; the lease then expires normally.
    pub async fn release(mut self) {
        self.renewal.abort();
        // Let an in-flight renewal end before the release, so it cannot overwrite it.
        let _ = (&mut self.renewal).await;
        let shared = &self.shared;
        shared.set_leading(false);
        self.lost.cancel();
        let identity = &shared.settings.identity;
        match tokio::time::timeout(shared.settings.renew_deadline, shared.release()).await {
            Ok(Ok(true)) => {
                tracing::info!(lease = %shared.lease, %identity, "released the leader lease");
            }
            Ok(Ok(false)) => tracing::info!(
                lease = %shared.lease, %identity,
                "stopped leading; the lease no longer names this process, nothing to release"
            ),
            Ok(Err(error)) => tracing::warn!(
                lease = %shared.lease, %identity, %error,
                "could not release the leader lease; standbys take over when it expires"
            ),
            Err(_) => tracing::warn!(
                lease = %shared.lease, %identity,
                "releasing the leader lease timed out; standbys take over when it expires"
            ),
        }
    }
}

impl Drop for Leadership {
    fn drop(&mut self) {
        self.renewal.abort();
        self.shared.set_leading(false);
        self.lost.cancel();
    }
}

/// Renews every retry period until the renew deadline passes without success or another
/// holder shows up. `renewed` is when the last successful attempt started.
async fn renew(shared: Arc<Shared>, lost: CancellationToken, mut renewed: Instant) {
    let settings = &shared.settings;
    let mut next = Instant::now() + settings.retry_period;
    loop {
        let deadline = renewed + settings.renew_deadline;
        tokio::time::sleep_until(next.min(deadline)).await;
        let started = Instant::now();
        if started >= deadline {
            shared.lose(
                &lost,
                &format!(
                    "not renewed for {:?} ({RENEW_DEADLINE_FLAG})",
                    settings.renew_deadline
                ),
            );
            return;
        }
        match shared.attempt(deadline - started).await {
            Outcome::Held => renewed = started,
            Outcome::HeldBy(holder) => {
                shared.lose(&lost, &format!("the lease is now held by {holder}"));
                return;
            }
            Outcome::Failed => {}
        }
        next = Instant::now() + settings.retry_period;
    }
}

/// What one attempt to acquire or renew found.
enum Outcome {
    /// This process holds the lease (created, taken over or renewed).
    Held,
    /// Another identity holds it and, by the local clock, it has not expired.
    HeldBy(String),
    /// The API failed or the attempt timed out; logged already.
    Failed,
}

/// The elector's state, shared with the renewal task and the health check.
#[derive(Debug)]
struct Shared {
    api: Api<Lease>,
    settings: LeaseSettings,
    /// `namespace/name`, for logs.
    lease: String,
    observed: Mutex<Observation>,
    status: Family<LeaseLabels, Gauge>,
    labels: LeaseLabels,
}

/// The Lease as last read or written, and when its record last changed by the local clock.
#[derive(Debug)]
struct Observation {
    /// Its spec is the record; its resourceVersion the precondition of the next update.
    lease: Option<Lease>,
    /// Local time the spec was last seen to change (client-go's `observedTime`).
    since: Instant,
}

impl Observation {
    fn spec(&self) -> Option<&LeaseSpec> {
        self.lease.as_ref().and_then(|lease| lease.spec.as_ref())
    }

    fn holder(&self) -> &str {
        self.spec()
            .and_then(|spec| spec.holder_identity.as_deref())
            .unwrap_or("")
    }

    /// When the observed record expires by the local clock.
    fn expiry(&self) -> Instant {
        let seconds = self
            .spec()
            .and_then(|spec| spec.lease_duration_seconds)
            .and_then(|seconds| u64::try_from(seconds).ok())
            .unwrap_or(0);
        self.since + Duration::from_secs(seconds)
    }
}

impl Shared {
    fn observed(&self) -> MutexGuard<'_, Observation> {
        self.observed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn set_leading(&self, leading: bool) {
        self.status
            .get_or_create(&self.labels)
            .set(i64::from(leading));
    }

    /// Records `lease` as read (or, with `wrote`, as just written by this process). The
    /// observation time moves only when the record changed, or on our own writes.
    fn observe(&self, lease: Lease, wrote: bool) {
        let mut observed = self.observed();
        let changed = observed.spec() != lease.spec.as_ref();
        let previous = observed.holder().to_owned();
        if wrote || changed {
            observed.since = Instant::now();
        }
        observed.lease = Some(lease);
        let holder = observed.holder();
        if !wrote && holder != previous && !holder.is_empty() {
            tracing::info!(lease = %self.lease, %holder, "new leader observed");
        }
    }

    /// One bounded attempt; logs failures.
    async fn attempt(&self, limit: Duration) -> Outcome {
        match tokio::time::timeout(limit, self.try_acquire_or_renew()).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(kube::Error::Api(status)))
                if status.is_conflict() || status.is_already_exists() =>
            {
                tracing::debug!(lease = %self.lease, reason = %status.reason, "lost a race for the lease; retrying");
                Outcome::Failed
            }
            Ok(Err(error)) => {
                tracing::warn!(lease = %self.lease, %error, "cannot acquire or renew the leader lease; retrying");
                Outcome::Failed
            }
            Err(_) => {
                tracing::warn!(lease = %self.lease, "acquiring or renewing the leader lease timed out after {limit:?}; retrying");
                Outcome::Failed
            }
        }
    }

    /// client-go's `tryAcquireOrRenew`.
    async fn try_acquire_or_renew(&self) -> Result<Outcome, kube::Error> {
        let identity = &self.settings.identity;
        let params = PostParams::default();
        // 1. Fast path: we lead and our lease is valid, so the last object we wrote is
        //    probably current. A conflict falls through to a fresh read.
        let optimistic = {
            let observed = self.observed();
            (observed.holder() == identity && observed.expiry() > Instant::now())
                .then(|| observed.lease.clone())
                .flatten()
        };
        if let Some(mut lease) = optimistic {
            let old = lease.spec.take().unwrap_or_default();
            lease.spec = Some(self.record(old.acquire_time, old.lease_transitions.unwrap_or(0)));
            match self.api.replace(&self.settings.name, &params, &lease).await {
                Ok(written) => {
                    self.observe(written, true);
                    return Ok(Outcome::Held);
                }
                Err(error) => {
                    tracing::debug!(lease = %self.lease, %error, "optimistic renewal failed; reading the lease")
                }
            }
        }
        // 2. Read the lease, or create it.
        let Some(current) = self.api.get_opt(&self.settings.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.settings.name.clone()),
                    namespace: Some(self.settings.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.record(None, 0)),
            };
            let created = self.api.create(&params, &lease).await?;
            self.observe(created, true);
            return Ok(Outcome::Held);
        };
        // 3. Held by someone else, unexpired by our clock since we saw it change?
        self.observe(current.clone(), false);
        {
            let observed = self.observed();
            let holder = observed.holder();
            if !holder.is_empty() && holder != identity && observed.expiry() > Instant::now() {
                return Ok(Outcome::HeldBy(holder.to_owned()));
            }
        }
        // 4. Ours to renew, or expired or free to take over.
        let mut lease = current;
        let old = lease.spec.take().unwrap_or_default();
        let transitions = old.lease_transitions.unwrap_or(0);
        let record = if old.holder_identity.as_deref() == Some(identity.as_str()) {
            self.record(old.acquire_time, transitions)
        } else {
            self.record(None, transitions.saturating_add(1))
        };
        lease.spec = Some(record);
        let written = self
            .api
            .replace(&self.settings.name, &params, &lease)
            .await?;
        self.observe(written, true);
        Ok(Outcome::Held)
    }

    /// The record naming this process, renewed now: `acquired` is kept when renewing (a
    /// new holder is acquiring now), `transitions` counts the holder changes so far.
    fn record(&self, acquired: Option<MicroTime>, transitions: i32) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        LeaseSpec {
            holder_identity: Some(self.settings.identity.clone()),
            lease_duration_seconds: Some(self.settings.lease_seconds()),
            acquire_time: Some(acquired.unwrap_or_else(|| now.clone())),
            renew_time: Some(now),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// client-go's `release()`; `Ok(false)` when the lease no longer names this process.
    async fn release(&self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.settings.name).await? else {
            return Ok(false);
        };
        let old = lease.spec.take().unwrap_or_default();
        if old.holder_identity.as_deref() != Some(self.settings.identity.as_str()) {
            return Ok(false);
        }
        let now = MicroTime(Timestamp::now());
        lease.spec = Some(LeaseSpec {
            holder_identity: Some(String::new()),
            lease_duration_seconds: Some(1),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(old.lease_transitions.unwrap_or(0)),
            ..LeaseSpec::default()
        });
        let written = self
            .api
            .replace(&self.settings.name, &PostParams::default(), &lease)
            .await?;
        self.observe(written, true);
        Ok(true)
    }

    /// Stops leading: zeroes the gauge, then cancels `lost` (so what wakes on it sees 0).
    fn lose(&self, lost: &CancellationToken, reason: &str) {
        self.set_leading(false);
        lost.cancel();
        tracing::info!(lease = %self.lease, identity = %self.settings.identity, %reason, "lost the leader lease");
    }

    /// Upstream's `Check(maxTolerableExpiredLease)`.
    fn health(&self) -> Result<(), String> {
        let observed = self.observed();
        if observed.holder() != self.settings.identity {
            return Ok(());
        }
        let since = observed.since.elapsed();
        let limit = self.settings.lease_duration + HEALTH_TOLERANCE;
        if since > limit {
            return Err(format!(
                "failed election to renew leadership on lease {}: last renewed {since:.0?} ago, \
                 more than the lease duration + {HEALTH_TOLERANCE:?} ({limit:?})",
                self.lease
            ));
        }
        Ok(())
    }
}

/// A DNS-1123 label: a namespace name.
fn is_dns1123_label(name: &str) -> bool {
    name.len() <= 63 && is_dns1123_part(name)
}

/// A DNS-1123 subdomain: a lease name.
fn is_dns1123_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns1123_part)
}

fn is_dns1123_part(part: &str) -> bool {
    let alphanumeric = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    match (part.bytes().next(), part.bytes().last()) {
        (Some(first), Some(last)) => {
            alphanumeric(first)
                && alphanumeric(last)
                && part.bytes().all(|b| alphanumeric(b) || b == b'-')
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::encoding::text::encode;

    /// An elector whose client points nowhere: these tests never send a request.
    fn elector(settings: LeaseSettings) -> LeaderElector {
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = kube::Client::try_from(config).expect("a client");
        LeaderElector::new(client, settings)
    }

    fn held_by(identity: &str, seconds: i32) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: Some(identity.to_owned()),
                lease_duration_seconds: Some(seconds),
                ..LeaseSpec::default()
            }),
        }
    }

    fn metrics_text(elector: &LeaderElector) -> String {
        let mut registry = Registry::default();
        elector.register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).expect("encodes");
        text
    }

    #[tokio::test]
    async fn master_status_gauge_follows_leading() {
        let elector = elector(LeaseSettings::default());
        let series = "leader_election_master_status{name=\"cloud-controller-manager\"}";
        assert!(metrics_text(&elector).contains(&format!("{series} 0")));
        elector.shared.set_leading(true);
        assert!(metrics_text(&elector).contains(&format!("{series} 1")));
        assert!(elector.is_leading());
    }

    #[tokio::test]
    async fn health_fails_only_for_a_leader_that_stopped_renewing() {
        let settings = LeaseSettings::default();
        let identity = settings.identity.clone();
        let elector = elector(settings);
        let check = elector.health_check();
        assert_eq!(check(), Ok(()), "nothing observed yet");

        let long_ago = Instant::now()
            .checked_sub(Duration::from_secs(36))
            .expect("the monotonic clock is 36s past its origin");
        elector.shared.observe(held_by(&identity, 15), true);
        assert_eq!(check(), Ok(()), "just renewed");
        elector.shared.observed().since = long_ago;
        let error = check().expect_err("15s lease + 20s tolerance passed");
        assert!(
            error.contains("kube-system/cloud-controller-manager"),
            "{error}"
        );

        elector.shared.observe(held_by("someone-else", 15), false);
        elector.shared.observed().since = long_ago;
        assert_eq!(check(), Ok(()), "a standby is healthy");
    }

    #[test]
    fn default_identity_is_hostname_and_uuid() {
        let identity = default_identity();
        let (host, uuid) = identity.rsplit_once('_').expect("hostname_uuid");
        assert!(!host.is_empty());
        let groups: Vec<usize> = uuid.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12], "{uuid}");
        assert!(uuid.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()));
        assert_ne!(identity, default_identity());
    }

    #[test]
    fn names_are_checked_like_the_api_server() {
        assert!(is_dns1123_label("kube-system"));
        assert!(!is_dns1123_label("Kube-System"));
        assert!(!is_dns1123_label("-a"));
        assert!(!is_dns1123_label(&"a".repeat(64)));
        assert!(is_dns1123_subdomain("cloud-controller-manager.example"));
        assert!(!is_dns1123_subdomain("a..b"));
        assert!(!is_dns1123_subdomain(""));
    }
}
