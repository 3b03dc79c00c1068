//! Leader election between replicas of wasm-ccm, against the Kubernetes API emulator through a
//! kubeconfig: one leader at a time, a standby that waits out a crashed leader's lease but
//! takes a released one at once, and a leader that stops leading when it cannot renew or
//! another holder shows up. Leases last seconds here, so each test takes a few seconds.

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Api;
use kube::api::PostParams;
use kube_emulator::{Emulator, EmulatorOptions, FailRule};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use wasm_ccm::leader::{LeaderElector, LeaderError, Leadership, LeaseSettings};

const NAMESPACE: &str = "kube-system";
const NAME: &str = "cloud-controller-manager";

/// A 2 s lease, 1.5 s renew deadline, 0.2 s retry period.
fn quick(identity: &str) -> LeaseSettings {
    LeaseSettings {
        namespace: NAMESPACE.to_owned(),
        name: NAME.to_owned(),
        identity: identity.to_owned(),
        lease_duration: Duration::from_secs(2),
        renew_deadline: Duration::from_millis(1500),
        retry_period: Duration::from_millis(200),
    }
}

/// A 4 s lease and 3 s renew deadline, for tests that tell "at once" from "after a lease or
/// a deadline".
fn patient(identity: &str) -> LeaseSettings {
    LeaseSettings {
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        ..quick(identity)
    }
}

/// An emulator and a client that reaches it through its kubeconfig.
struct Cluster {
    emulator: Emulator,
    client: kube::Client,
}

impl Cluster {
    async fn start() -> Cluster {
        let emulator = Emulator::start(
            "127.0.0.1:0".parse().expect("an address"),
            EmulatorOptions::default(),
        )
        .await
        .expect("the emulator starts");
        let config =
            kube::Config::from_custom_kubeconfig(emulator.kubeconfig(), &Default::default())
                .await
                .expect("the kubeconfig loads");
        let client = kube::Client::try_from(config).expect("a client");
        Cluster { emulator, client }
    }

    fn candidate(&self, settings: LeaseSettings) -> LeaderElector {
        LeaderElector::new(self.client.clone(), settings)
    }

    fn leases(&self) -> Api<Lease> {
        Api::namespaced(self.client.clone(), NAMESPACE)
    }

    async fn lease(&self) -> Option<Lease> {
        self.leases().get_opt(NAME).await.expect("the lease reads")
    }

    async fn spec(&self) -> LeaseSpec {
        let lease = self.lease().await.expect("the lease exists");
        lease.spec.expect("the lease has a spec")
    }

    async fn holder(&self) -> String {
        self.spec().await.holder_identity.unwrap_or_default()
    }

    /// Writes `holder` into the lease as another process would, retrying the conflicts that
    /// the leader's renewals cause.
    async fn overwrite_holder(&self, holder: &str) {
        for _ in 0..20 {
            let mut lease = self.lease().await.expect("the lease exists");
            let spec = lease.spec.get_or_insert_default();
            spec.holder_identity = Some(holder.to_owned());
            spec.renew_time = Some(MicroTime(k8s_openapi::jiff::Timestamp::now()));
            match self
                .leases()
                .replace(NAME, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => return,
                Err(kube::Error::Api(status)) if status.is_conflict() => continue,
                Err(error) => panic!("overwriting the lease: {error}"),
            }
        }
        panic!("overwriting the lease kept conflicting");
    }
}

/// Waits for `elector` to lead, at most `limit`.
async fn lead(elector: &LeaderElector, limit: Duration) -> Leadership {
    let shutdown = CancellationToken::new();
    tokio::time::timeout(limit, elector.acquire(&shutdown))
        .await
        .expect("acquired the lease in time")
        .expect("valid settings")
        .expect("not shut down")
}

/// A candidate acquiring in the background; the task ends with its leadership and when it
/// got it.
fn standby(
    elector: &LeaderElector,
    shutdown: &CancellationToken,
) -> JoinHandle<(Option<Leadership>, Instant)> {
    let elector = elector.clone();
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        let leadership = elector.acquire(&shutdown).await.expect("valid settings");
        (leadership, Instant::now())
    })
}

/// Waits at most `limit` for `task`.
async fn within<T>(limit: Duration, what: &str, task: impl Future<Output = T>) -> T {
    match tokio::time::timeout(limit, task).await {
        Ok(value) => value,
        Err(_) => panic!("{what} did not happen within {limit:?}"),
    }
}

/// Milliseconds from `earlier` to `later` by the lease's (wall-clock) timestamps.
fn millis_between(earlier: &Option<MicroTime>, later: &Option<MicroTime>) -> i64 {
    let at = |time: &Option<MicroTime>| time.as_ref().expect("a timestamp").0.as_millisecond();
    at(later) - at(earlier)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_candidate_creates_the_lease_and_keeps_renewing_it() {
    let cluster = Cluster::start().await;
    let elector = cluster.candidate(quick("replica-a"));
    let health = elector.health_check();
    assert!(!elector.is_leading());
    assert_eq!(
        health(),
        Ok(()),
        "a candidate that does not lead is healthy"
    );
    assert!(cluster.lease().await.is_none());

    let leadership = lead(&elector, Duration::from_secs(6)).await;
    assert!(elector.is_leading(), "leader_election_master_status is 1");
    assert_eq!(health(), Ok(()));
    let first = cluster.spec().await;
    assert_eq!(first.holder_identity.as_deref(), Some("replica-a"));
    assert_eq!(first.lease_duration_seconds, Some(2));
    assert_eq!(first.lease_transitions, Some(0));
    assert!(millis_between(&first.acquire_time, &first.renew_time) >= 0);

    tokio::time::sleep(Duration::from_secs(1)).await;
    let later = cluster.spec().await;
    assert_eq!(later.holder_identity.as_deref(), Some("replica-a"));
    assert!(
        millis_between(&first.renew_time, &later.renew_time) > 0,
        "renewed: {first:?} → {later:?}"
    );
    assert_eq!(
        later.acquire_time, first.acquire_time,
        "renewal keeps acquireTime"
    );
    assert_eq!(later.lease_transitions, Some(0));
    let updates = cluster
        .emulator
        .requests()
        .get("update", "leases.coordination.k8s.io");
    assert!(
        updates >= 3,
        "one renewal per retry period, saw {updates} in 1 s"
    );
    assert!(!leadership.lost().is_cancelled());
    assert!(elector.is_leading());
    assert_eq!(health(), Ok(()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_one_candidate_leads_and_a_standby_waits_out_a_crashed_leaders_lease() {
    let cluster = Cluster::start().await;
    let a = cluster.candidate(quick("replica-a"));
    let b = cluster.candidate(quick("replica-b"));
    let shutdown = CancellationToken::new();
    let mut race_a = standby(&a, &shutdown);
    let mut race_b = standby(&b, &shutdown);
    let (a_won, won) = within(Duration::from_secs(6), "a leader elected", async {
        tokio::select! {
            won = &mut race_a => (true, won),
            won = &mut race_b => (false, won),
        }
    })
    .await;
    let leadership = won.expect("task ran").0.expect("not shut down");
    let (leader, standby_elector, mut waiting) = if a_won {
        (&a, &b, race_b)
    } else {
        (&b, &a, race_a)
    };
    let leader_id = cluster.holder().await;

    // Renewals keep the standby out well past the lease duration.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !waiting.is_finished(),
        "the standby took over a lease being renewed"
    );
    assert!(leader.is_leading());
    assert!(!standby_elector.is_leading());
    assert_eq!(cluster.holder().await, leader_id);

    // A crash: renewals stop, nothing is released.
    let lost = leadership.lost();
    drop(leadership);
    let crashed = Instant::now();
    assert!(lost.is_cancelled(), "a dropped leadership is no leadership");
    assert!(!leader.is_leading());
    tokio::time::sleep(Duration::from_millis(300)).await;
    let last = cluster.spec().await;
    assert_eq!(
        last.holder_identity.as_ref(),
        Some(&leader_id),
        "taken over too early"
    );

    let (taken, taken_at) = within(Duration::from_secs(6), "a takeover", &mut waiting)
        .await
        .expect("task ran");
    let _standby_leadership = taken.expect("not shut down");
    assert!(standby_elector.is_leading());
    let now = cluster.spec().await;
    assert_ne!(now.holder_identity.as_ref(), Some(&leader_id));
    assert_eq!(now.lease_transitions, Some(1), "a takeover is a transition");
    // The standby waits a full lease duration after it saw the last renewal, so its
    // acquireTime is at least 2 s after the crashed leader's last renewTime (10 ms of slack
    // for timestamp rounding).
    let waited = millis_between(&last.renew_time, &now.acquire_time);
    assert!(
        waited >= 1990,
        "took over {waited} ms after the last renewal"
    );
    assert!(
        taken_at - crashed < Duration::from_secs(6),
        "took {:?} to take over",
        taken_at - crashed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_released_lease_is_taken_over_at_once() {
    let cluster = Cluster::start().await;
    let a = cluster.candidate(patient("replica-a"));
    let b = cluster.candidate(patient("replica-b"));
    let leadership = lead(&a, Duration::from_secs(6)).await;
    let shutdown = CancellationToken::new();
    let waiting = standby(&b, &shutdown);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!waiting.is_finished());

    let lost = leadership.lost();
    let released = Instant::now();
    leadership.release().await;
    assert!(lost.is_cancelled());
    assert!(!a.is_leading());
    assert_eq!(a.health_check()(), Ok(()));

    // A crashed leader's lease would keep the standby out for at least 3.8 s.
    let (taken, taken_at) = within(Duration::from_secs(2), "a takeover", waiting)
        .await
        .expect("task ran");
    let _leadership = taken.expect("not shut down");
    assert!(taken_at - released < Duration::from_secs(2));
    let spec = cluster.spec().await;
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-b"));
    assert_eq!(spec.lease_transitions, Some(1));
    assert_eq!(spec.lease_duration_seconds, Some(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn release_clears_the_holder_and_keeps_the_transitions() {
    let cluster = Cluster::start().await;
    let a = cluster.candidate(quick("replica-a"));
    lead(&a, Duration::from_secs(6)).await.release().await;
    let spec = cluster.spec().await;
    assert_eq!(spec.holder_identity.as_deref(), Some(""));
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert_eq!(spec.lease_transitions, Some(0));
    assert_eq!(spec.acquire_time, spec.renew_time);

    // Leading again after a release takes over an empty lease: one more transition.
    let again = lead(&a, Duration::from_secs(6)).await;
    let spec = cluster.spec().await;
    assert_eq!(spec.holder_identity.as_deref(), Some("replica-a"));
    assert_eq!(spec.lease_transitions, Some(1));
    assert_eq!(spec.lease_duration_seconds, Some(2));
    drop(again);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standby_stops_waiting_on_shutdown() {
    let cluster = Cluster::start().await;
    let a = cluster.candidate(quick("replica-a"));
    let b = cluster.candidate(quick("replica-b"));
    let _leadership = lead(&a, Duration::from_secs(6)).await;
    let shutdown = CancellationToken::new();
    let waiting = standby(&b, &shutdown);
    tokio::time::sleep(Duration::from_millis(500)).await;
    shutdown.cancel();
    let (leadership, _) = within(Duration::from_secs(1), "the standby's return", waiting)
        .await
        .expect("task ran");
    assert!(leadership.is_none());
    assert!(!b.is_leading());
    assert_eq!(cluster.holder().await, "replica-a");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_gives_up_when_renewals_fail_for_the_renew_deadline() {
    let cluster = Cluster::start().await;
    let a = cluster.candidate(quick("replica-a"));
    let leadership = lead(&a, Duration::from_secs(6)).await;
    let lost = leadership.lost();
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Every lease request fails with 500 (which kube-rs does not retry itself).
    cluster
        .emulator
        .faults()
        .fail_next(FailRule::new(10_000, 500).path_contains("/leases"));
    let broken = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!lost.is_cancelled(), "gave up before the renew deadline");
    assert!(a.is_leading());

    within(Duration::from_secs(5), "losing the lease", lost.cancelled()).await;
    let after = broken.elapsed();
    assert!(
        after >= Duration::from_millis(700),
        "lost {after:?} after renewals began to fail, before the 1.5 s renew deadline"
    );
    assert!(!a.is_leading());
    assert_eq!(
        a.health_check()(),
        Ok(()),
        "the watchdog waits lease duration + 20 s"
    );

    // The lease still names us once the API is back, so a release gives it up.
    cluster.emulator.faults().clear();
    assert_eq!(cluster.holder().await, "replica-a");
    leadership.release().await;
    assert_eq!(cluster.holder().await, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_gives_up_at_once_when_another_holder_takes_the_lease() {
    let cluster = Cluster::start().await;
    let a = cluster.candidate(patient("replica-a"));
    let leadership = lead(&a, Duration::from_secs(6)).await;
    let lost = leadership.lost();
    tokio::time::sleep(Duration::from_millis(300)).await;

    cluster.overwrite_holder("intruder").await;
    // Well before the 3 s renew deadline: the leader reads the new holder and stops.
    within(Duration::from_secs(2), "losing the lease", lost.cancelled()).await;
    assert!(!a.is_leading());
    assert_eq!(a.health_check()(), Ok(()));

    // It neither fights back nor releases someone else's lease.
    tokio::time::sleep(Duration::from_millis(600)).await;
    leadership.release().await;
    let spec = cluster.spec().await;
    assert_eq!(spec.holder_identity.as_deref(), Some("intruder"));
    assert_eq!(spec.lease_duration_seconds, Some(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_durations_are_rejected_naming_the_flag() {
    let defaults = LeaseSettings::default();
    assert_eq!(defaults.validate().ok(), Some(()));
    assert_eq!(
        (
            defaults.namespace.as_str(),
            defaults.name.as_str(),
            defaults.lease_duration,
            defaults.renew_deadline,
            defaults.retry_period
        ),
        (
            "kube-system",
            "cloud-controller-manager",
            Duration::from_secs(15),
            Duration::from_secs(10),
            Duration::from_secs(2)
        )
    );
    assert!(defaults.identity.contains('_'), "{}", defaults.identity);

    let ms = Duration::from_millis;
    let cases = [
        // (lease, renew, retry, flags the message must name)
        (
            ms(10_000),
            ms(10_000),
            ms(2_000),
            &[
                "--leader-elect-lease-duration",
                "--leader-elect-renew-deadline",
            ][..],
        ),
        (
            ms(15_000),
            ms(2_000),
            ms(2_000),
            &[
                "--leader-elect-renew-deadline",
                "--leader-elect-retry-period",
            ][..],
        ),
        (
            ms(15_000),
            ms(2_300),
            ms(2_000),
            &[
                "--leader-elect-renew-deadline",
                "--leader-elect-retry-period",
            ][..],
        ),
        (
            ms(15_000),
            ms(10_000),
            ms(0),
            &["--leader-elect-retry-period"][..],
        ),
        (
            ms(15_000),
            ms(0),
            ms(2_000),
            &["--leader-elect-renew-deadline"][..],
        ),
        (
            ms(500),
            ms(300),
            ms(100),
            &["--leader-elect-lease-duration"][..],
        ),
        // The Lease keeps whole seconds: 2.5 s is 2 s for a standby.
        (
            ms(2_500),
            ms(2_200),
            ms(200),
            &[
                "--leader-elect-lease-duration",
                "--leader-elect-renew-deadline",
            ][..],
        ),
    ];
    for (lease, renew, retry, flags) in cases {
        let settings = LeaseSettings {
            lease_duration: lease,
            renew_deadline: renew,
            retry_period: retry,
            ..quick("replica-a")
        };
        let message = match settings.validate() {
            Err(error) => error.to_string(),
            Ok(()) => panic!("accepted {lease:?}/{renew:?}/{retry:?}"),
        };
        assert!(
            message.contains("kube-system/cloud-controller-manager"),
            "{message}"
        );
        for flag in flags {
            assert!(message.contains(flag), "{message} should name {flag}");
        }
    }

    // An elector with bad settings fails before touching the API.
    let cluster = Cluster::start().await;
    let elector = cluster.candidate(LeaseSettings {
        renew_deadline: Duration::from_secs(2),
        ..quick("replica-a")
    });
    let result = elector.acquire(&CancellationToken::new()).await;
    assert!(matches!(result, Err(LeaderError::InvalidSettings { .. })));
    assert!(cluster.lease().await.is_none());
}
