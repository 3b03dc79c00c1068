//! The rollout's state machine: the [`Phase`] a rollout is in, and the rules that take it
//! from one to the next. From the phase, the parsed spec and what this replica observes
//! (its generation, whether it leads, the rollback record), [`next_step`] says what the
//! loop in [`super`] does next ([`Step`]); [`judge_window`] and [`judge_shadow`] say what a
//! tick of the rollback window or of a shadow finds; [`Failure::after`] sets the backoff of
//! a refused version, and [`window_to_restore`] what a restarted manager keeps judging.
//!
//! Everything here is pure: no I/O and no clock (the time comes in), so each rule the
//! operator docs state is tested below. The loop does the steps (fetching, loading,
//! activating, reporting) and moves the phase with what they gave.
//!
//! The phase says what serves and what is under way, so that no impossible mix can be
//! represented: before the first activation nothing serves and at most a failed try is
//! remembered ([`Phase::Starting`]); after it a version serves ([`Phase::Serving`]),
//! possibly with the version it replaced kept loaded for its rollback window, and at most
//! one of a shadowing candidate or a failed try of the spec's version ([`Progress`]). A
//! window and a shadow may overlap: a spec changed during a window rolls out under it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use wasm_ccm_host::provider::{CallCounts, Provider, Shadow};
use wasm_ccm_host::sandbox::CallLimits;
use wasm_ccm_host::source::ProviderRef;

use super::record::RollbackRecord;
use super::spec::{Desired, EgressKey, RollbackPolicy, ShadowPolicy, VersionSpec};
use crate::resource::RolloutStrategy;

/// First pause before a failed rollout that may succeed later is tried again.
const RETRY_BASE: Duration = Duration::from_secs(10);
/// Longest pause between such tries.
const RETRY_MAX: Duration = Duration::from_secs(600);

/// A loaded component, as the rules see it: by its digest.
pub(super) trait Component {
    /// The digest of the component it runs (`sha256:…`).
    fn digest(&self) -> &str;
}

impl Component for Arc<Provider> {
    fn digest(&self) -> &str {
        &self.identity().digest
    }
}

impl Component for Arc<Shadow> {
    fn digest(&self) -> &str {
        &self.candidate().identity().digest
    }
}

/// A version loaded to serve calls (the active one, or the one a window keeps), and what it
/// was made from.
pub(super) struct Loaded<P> {
    pub(super) version: VersionSpec,
    /// `spec.egress` and `spec.credentials` its egress gate was made from.
    pub(super) egress_key: EgressKey,
    pub(super) provider: P,
    /// The limits its calls run under.
    pub(super) call_limits: CallLimits,
    /// Its call counts when it was activated.
    pub(super) counts_at_activation: CallCounts,
    pub(super) since: Time,
}

impl<P> Loaded<P> {
    /// Whether `desired` changes what applies to this version in place: its egress or its
    /// call limits.
    pub(super) fn differs_in_place(&self, desired: &Desired) -> bool {
        self.egress_key != desired.egress_key
            || self.call_limits != desired.version.sandbox.call_limits()
    }
}

/// The rollback window after an activation: the previous version, kept loaded.
pub(super) struct RollbackWindow<P> {
    pub(super) previous: Loaded<P>,
    pub(super) until: Instant,
    pub(super) policy: RollbackPolicy,
}

/// A candidate answering the read-only calls beside the active version (Shadow strategy).
pub(super) struct Shadowing<S> {
    pub(super) desired: Desired,
    pub(super) shadow: S,
    pub(super) generation: Option<i64>,
    pub(super) started: Instant,
    /// Whether its first divergence was reported.
    pub(super) diverged: bool,
}

/// A version the rollout refused, so the same spec is not tried again in a loop.
#[derive(Debug)]
pub(super) enum Failure {
    /// It failed in a way that may pass (a registry down, an `init` that could not reach
    /// the cloud): tried again at `until`, after a pause that doubles with each attempt.
    BackingOff {
        version: VersionSpec,
        attempts: u32,
        until: Instant,
    },
    /// It cannot pass as it is (a digest mismatch, a wrong name): tried again only when
    /// the spec, or what it references, changes.
    Refused { version: VersionSpec, attempts: u32 },
}

impl Failure {
    /// `version` was refused at `now`, after `previous` (the last failure, if any): the
    /// attempts count on from a previous failure of the identical version.
    pub(super) fn after(
        previous: Option<&Failure>,
        version: VersionSpec,
        transient: bool,
        now: Instant,
    ) -> Failure {
        let attempts = previous
            .filter(|failure| failure.version().identical(&version))
            .map_or(1, |failure| failure.attempts() + 1);
        match transient {
            true => Failure::BackingOff {
                version,
                attempts,
                until: now + backoff(attempts),
            },
            false => Failure::Refused { version, attempts },
        }
    }

    fn version(&self) -> &VersionSpec {
        match self {
            Failure::BackingOff { version, .. } | Failure::Refused { version, .. } => version,
        }
    }

    fn attempts(&self) -> u32 {
        match self {
            Failure::BackingOff { attempts, .. } | Failure::Refused { attempts, .. } => *attempts,
        }
    }

    /// When it is tried again without a spec change.
    pub(super) fn retry_at(&self) -> Option<Instant> {
        match self {
            Failure::BackingOff { until, .. } => Some(*until),
            Failure::Refused { .. } => None,
        }
    }

    /// Whether it keeps `version` from being tried at `now`: the same version, under the
    /// same limits and pinned to the same digest, refused for good or still backing off.
    fn holds_back(&self, version: &VersionSpec, now: Instant) -> bool {
        self.version().identical(version) && self.retry_at().is_none_or(|until| until > now)
    }
}

/// The pause before attempt `attempts + 1` of a version that may pass: 10 s, doubling up
/// to 10 minutes.
pub(super) fn backoff(attempts: u32) -> Duration {
    RETRY_BASE
        .saturating_mul(1 << attempts.saturating_sub(1).min(10))
        .min(RETRY_MAX)
}

/// What is under way beside the version serving.
// One per rollout, so its size costs nothing; a box would keep patterns from seeing in.
#[allow(clippy::large_enum_variant)]
pub(super) enum Progress<S> {
    /// Nothing: the active version is the spec's, or the spec's was rolled back, or it is
    /// being rolled out.
    Settled,
    /// The spec's version answers the read-only calls beside the active one.
    Shadowing(Shadowing<S>),
    /// The spec's version was refused.
    Failed(Failure),
}

/// A version serving calls, and what goes on beside it.
pub(super) struct Serving<P, S> {
    pub(super) active: Loaded<P>,
    /// While the active version is judged after its activation: the one it replaced.
    pub(super) window: Option<RollbackWindow<P>>,
    pub(super) progress: Progress<S>,
}

/// Where the rollout stands.
// One per rollout, so its size costs nothing; a box would keep patterns from seeing in.
#[allow(clippy::large_enum_variant)]
pub(super) enum Phase<P, S> {
    /// No version was activated yet: the manager is not ready. `failure`: how the last try
    /// failed.
    Starting { failure: Option<Failure> },
    /// A version serves calls.
    Serving(Serving<P, S>),
}

impl<P, S> Phase<P, S> {
    /// The version serving calls.
    pub(super) fn active(&self) -> Option<&Loaded<P>> {
        match self {
            Phase::Starting { .. } => None,
            Phase::Serving(serving) => Some(&serving.active),
        }
    }

    pub(super) fn active_mut(&mut self) -> Option<&mut Loaded<P>> {
        match self {
            Phase::Starting { .. } => None,
            Phase::Serving(serving) => Some(&mut serving.active),
        }
    }

    /// The rollback window open.
    pub(super) fn window(&self) -> Option<&RollbackWindow<P>> {
        match self {
            Phase::Serving(Serving {
                window: Some(window),
                ..
            }) => Some(window),
            _ => None,
        }
    }

    /// The candidate shadowing.
    pub(super) fn shadowing(&self) -> Option<&Shadowing<S>> {
        match self {
            Phase::Serving(Serving {
                progress: Progress::Shadowing(shadowing),
                ..
            }) => Some(shadowing),
            _ => None,
        }
    }

    pub(super) fn shadowing_mut(&mut self) -> Option<&mut Shadowing<S>> {
        match self {
            Phase::Serving(Serving {
                progress: Progress::Shadowing(shadowing),
                ..
            }) => Some(shadowing),
            _ => None,
        }
    }

    /// The last failed try of the spec's version, while nothing replaced it.
    pub(super) fn failure(&self) -> Option<&Failure> {
        match self {
            Phase::Starting { failure } => failure.as_ref(),
            Phase::Serving(Serving {
                progress: Progress::Failed(failure),
                ..
            }) => Some(failure),
            Phase::Serving(_) => None,
        }
    }

    /// Whether ticks have something to judge: a rollback window or a shadow.
    pub(super) fn judging(&self) -> bool {
        self.window().is_some() || self.shadowing().is_some()
    }

    /// The spec's version was refused: remember how, for [`next_step`].
    pub(super) fn failed(&mut self, failure: Failure) {
        match self {
            Phase::Starting { failure: last } => *last = Some(failure),
            Phase::Serving(serving) => serving.progress = Progress::Failed(failure),
        }
    }

    /// A candidate starts shadowing (only beside a version serving); `None` if none serves.
    pub(super) fn start_shadowing(&mut self, shadowing: Shadowing<S>) -> Option<&mut Loaded<P>> {
        match self {
            Phase::Starting { .. } => None,
            Phase::Serving(serving) => {
                serving.progress = Progress::Shadowing(shadowing);
                Some(&mut serving.active)
            }
        }
    }

    /// The candidate stops shadowing (promoted, or the spec moved on).
    pub(super) fn stop_shadowing(&mut self) -> Option<Shadowing<S>> {
        let Phase::Serving(serving) = self else {
            return None;
        };
        match std::mem::replace(&mut serving.progress, Progress::Settled) {
            Progress::Shadowing(shadowing) => Some(shadowing),
            other => {
                serving.progress = other;
                None
            }
        }
    }

    /// `active` is activated: it serves, and nothing is under way any more. Returns the
    /// version it replaces and the window that closes with it (a version rolled out while
    /// a window is open replaces the window's previous one).
    pub(super) fn activated(
        &mut self,
        active: Loaded<P>,
    ) -> (Option<Loaded<P>>, Option<RollbackWindow<P>>) {
        let serving = Serving {
            active,
            window: None,
            progress: Progress::Settled,
        };
        match std::mem::replace(self, Phase::Serving(serving)) {
            Phase::Starting { .. } => (None, None),
            Phase::Serving(replaced) => (Some(replaced.active), replaced.window),
        }
    }

    /// Open the rollback window of the version just activated.
    pub(super) fn open_window(&mut self, window: RollbackWindow<P>) {
        if let Phase::Serving(serving) = self {
            serving.window = Some(window);
        }
    }

    /// Close the rollback window: the active version stays.
    pub(super) fn close_window(&mut self) -> Option<RollbackWindow<P>> {
        match self {
            Phase::Starting { .. } => None,
            Phase::Serving(serving) => serving.window.take(),
        }
    }

    /// Reactivate the version the window keeps; returns the one rolled back and the policy
    /// it failed, or `None` without a window.
    pub(super) fn roll_back(&mut self) -> Option<(Loaded<P>, RollbackPolicy)> {
        let Phase::Serving(serving) = self else {
            return None;
        };
        let window = serving.window.take()?;
        let rolled_back = std::mem::replace(&mut serving.active, window.previous);
        Some((rolled_back, window.policy))
    }
}

/// What this replica observes besides the spec.
pub(super) struct Observed<'a> {
    /// The spec's generation.
    pub(super) generation: Option<i64>,
    /// Whether this replica leads (a standby follows the leader's rollbacks).
    pub(super) leading: bool,
    /// The rollback record on the resource, as this replica follows it.
    pub(super) record: Option<&'a RollbackRecord>,
}

/// What the loop does next to bring what runs in line with the spec.
#[derive(Debug, PartialEq)]
pub(super) enum Step {
    /// The candidate shadowing is still the spec's: let it go on, and give the active
    /// version the spec's egress and call limits if `reconfigure`.
    KeepShadowing { reconfigure: bool },
    /// The spec moved on from the candidate shadowing: detach it, then take the next step.
    StopShadowing,
    /// As a standby: this replica already runs the version the leader rolled back to; take
    /// up the leader's status (should it take over).
    TakeLeaderStatus,
    /// As a standby: the leader rolled this generation back; reactivate the previous
    /// version the window keeps warm, as it did.
    FollowRollback,
    /// The active version is the spec's, but its engine was built with other memory or
    /// concurrency limits: move it to a new engine, then take the next step; if it cannot
    /// move, roll the version out afresh as `otherwise` says.
    MoveEngine { otherwise: RollOut },
    /// The active version is the spec's: give it the spec's egress and call limits if
    /// `reconfigure` (no `init`, no resync).
    Keep { reconfigure: bool },
    /// This generation was rolled back: nothing runs it until the spec changes.
    StayRolledBack,
    /// The spec's version was refused: wait for the retry, or for the spec to change.
    Wait,
    /// Fetch, verify, compile and `init` a version, then activate or shadow it.
    RollOut(RollOut),
}

/// A version to roll out, and how.
#[derive(Debug, PartialEq)]
pub(super) struct RollOut {
    pub(super) to: Target,
    /// Whether it shadows the active version before it is activated (Shadow strategy, with
    /// a version serving to compare with).
    pub(super) shadow: bool,
}

/// Which version a rollout loads.
#[derive(Debug, PartialEq)]
pub(super) enum Target {
    /// The spec's.
    Spec,
    /// The one the record says this generation was rolled back to (a manager started after
    /// the rollback), by digest, with the cloud config it ran with.
    RolledBackTo {
        reference: ProviderRef,
        digest: String,
    },
}

/// The next step towards `desired` (parsed and pinned to the digest its tag runs) from
/// `phase`, given what this replica observes, at `now`.
pub(super) fn next_step<P: Component, S: Component>(
    phase: &Phase<P, S>,
    observed: &Observed,
    desired: &Desired,
    now: Instant,
) -> Step {
    let runs_pinned = |digest: &str| {
        desired
            .version
            .digest
            .as_deref()
            .is_none_or(|pinned| pinned == digest)
    };
    let shadow = desired.rollout.strategy == RolloutStrategy::Shadow;
    if let Phase::Serving(serving) = phase
        && let Progress::Shadowing(shadowing) = &serving.progress
    {
        let same_candidate = shadowing.desired.version.same_as(&desired.version)
            && runs_pinned(shadowing.shadow.digest())
            && shadowing.desired.rollout == desired.rollout;
        return match same_candidate {
            // The active version follows the spec's egress and limits meanwhile.
            true => Step::KeepShadowing {
                reconfigure: serving.active.differs_in_place(desired),
            },
            false => Step::StopShadowing,
        };
    }
    let rolled_back = observed
        .record
        .filter(|record| record.rolled_back_at(observed.generation));
    if let Phase::Serving(serving) = phase {
        let active = &serving.active;
        if !observed.leading
            && let Some(record) = rolled_back
        {
            if active.provider.digest() == record.previous_digest {
                return Step::TakeLeaderStatus;
            }
            let warm = serving
                .window
                .as_ref()
                .is_some_and(|window| window.previous.provider.digest() == record.previous_digest);
            if warm {
                return Step::FollowRollback;
            }
        }
        // The version a generation was rolled back to runs as it ran, not with the spec's
        // limits (the same component, when new engine limits rolled the generation out).
        if rolled_back.is_some_and(|record| active.provider.digest() == record.previous_digest) {
            return Step::StayRolledBack;
        }
        if active.version.same_as(&desired.version) && runs_pinned(active.provider.digest()) {
            if active.version.engine_limits() != desired.version.engine_limits() {
                return Step::MoveEngine {
                    otherwise: RollOut {
                        to: Target::Spec,
                        shadow,
                    },
                };
            }
            return Step::Keep {
                reconfigure: active.differs_in_place(desired),
            };
        }
        if rolled_back.is_some() {
            return Step::StayRolledBack;
        }
    }
    if phase
        .failure()
        .is_some_and(|failure| failure.holds_back(&desired.version, now))
    {
        return Step::Wait;
    }
    match phase {
        Phase::Starting { .. } => {
            // Started after this generation was rolled back: run the version it was rolled
            // back to, not the one that failed.
            let to = rolled_back
                .and_then(|record| record.rolled_back_to(observed.generation))
                .map_or(Target::Spec, |(reference, digest)| Target::RolledBackTo {
                    reference,
                    digest,
                });
            Step::RollOut(RollOut { to, shadow: false })
        }
        Phase::Serving(_) => Step::RollOut(RollOut {
            to: Target::Spec,
            shadow,
        }),
    }
}

/// What a tick of the rollback window finds.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum WindowVerdict {
    /// Keep judging.
    Watching,
    /// The new version fails too much more than the previous one: reactivate the previous.
    RollBack,
    /// The window is over: unload the previous version.
    Over,
}

/// Percentage points by which `new`'s failure rate exceeds `old`'s.
pub(super) fn excess_points(new: CallCounts, old: CallCounts) -> f64 {
    (new.failure_rate() - old.failure_rate()) * 100.0
}

/// Judge the window `policy` opened, which ends at `until`, at `now`: the new version
/// answered `new` since its activation, the previous one `old` since its own. It is rolled
/// back once it answered `minimum_calls` and its failure rate exceeds the previous one's by
/// more than `threshold` points.
pub(super) fn judge_window(
    new: CallCounts,
    old: CallCounts,
    policy: &RollbackPolicy,
    until: Instant,
    now: Instant,
) -> WindowVerdict {
    if new.calls >= policy.minimum_calls && excess_points(new, old) > policy.threshold {
        return WindowVerdict::RollBack;
    }
    match now >= until {
        true => WindowVerdict::Over,
        false => WindowVerdict::Watching,
    }
}

/// What a tick of a shadow finds.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum ShadowVerdict {
    /// Too few agreeing answers yet.
    Comparing,
    /// An answer differed: promotion waits for a spec change.
    Diverged,
    /// Enough agreeing answers, none diverging: activate the candidate.
    Promote,
}

/// Judge a shadow that gave `agreeing` answers like the active version's and `diverging`
/// unlike them.
pub(super) fn judge_shadow(agreeing: u64, diverging: u64, policy: &ShadowPolicy) -> ShadowVerdict {
    if diverging > 0 {
        ShadowVerdict::Diverged
    } else if agreeing < policy.agreeing_calls {
        ShadowVerdict::Comparing
    } else {
        ShadowVerdict::Promote
    }
}

/// As a manager starts running `active_digest` for `generation`: how long the rollback
/// window `record` names is still open at `now`, at most `window` (the spec's); `None` when
/// there is nothing to restore (another generation's record, a rollback, a window over, or
/// the recorded previous version is the one running).
pub(super) fn window_to_restore(
    record: &RollbackRecord,
    generation: Option<i64>,
    active_digest: &str,
    window: Duration,
    now: Timestamp,
) -> Option<Duration> {
    if !record.is_for(generation) || record.rolled_back {
        return None;
    }
    let left = Duration::try_from(record.window_end.0.duration_since(now))
        .unwrap_or_default()
        .min(window);
    (!left.is_zero() && active_digest != record.previous_digest).then_some(left)
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};
    use wasm_ccm_host::egress::EgressConfig;
    use wasm_ccm_host::sandbox::SandboxConfig;

    use super::super::references::References;
    use super::super::spec::{self, Defaults};
    use super::*;

    const V1: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
    const V2: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

    /// A component known by its digest.
    struct Fake(&'static str);

    impl Component for Fake {
        fn digest(&self) -> &str {
            self.0
        }
    }

    type TestPhase = Phase<Fake, Fake>;

    /// `spec` (JSON, as a user writes it) parsed as the rollout parses it.
    fn desired(spec: Value) -> Desired {
        // The references are never asked: these specs name no Secret or ConfigMap. Their
        // client needs a runtime to be made.
        let runtime = tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("a runtime");
        let _entered = runtime.enter();
        let config = kube::Config::new("http://127.0.0.1:9".parse().expect("a URL"));
        let client = kube::Client::try_from(config).expect("a client");
        let references = References::new(client, "kube-system".into());
        let defaults = Defaults {
            egress: EgressConfig::default(),
            sandbox: SandboxConfig::default(),
        };
        let spec = serde_json::from_value(spec).expect("a spec");
        spec::parse(&spec, &defaults, &references).expect("a usable spec")
    }

    /// The spec running `provider`, with `extra` fields.
    fn spec(provider: &str, extra: Value) -> Desired {
        let mut spec = json!({"provider": provider, "name": "simcloud"});
        if let (Some(spec), Value::Object(extra)) = (spec.as_object_mut(), extra) {
            spec.extend(extra);
        }
        desired(spec)
    }

    fn v1() -> Desired {
        spec("oci://r.example/simcloud:v1", json!({}))
    }

    fn v2() -> Desired {
        spec("oci://r.example/simcloud:v2", json!({}))
    }

    fn loaded(desired: &Desired, digest: &'static str) -> Loaded<Fake> {
        Loaded {
            version: desired.version.clone(),
            egress_key: desired.egress_key.clone(),
            provider: Fake(digest),
            call_limits: desired.version.sandbox.call_limits(),
            counts_at_activation: CallCounts::default(),
            since: Time(Timestamp::UNIX_EPOCH),
        }
    }

    fn serving(desired: &Desired, digest: &'static str) -> TestPhase {
        Phase::Serving(Serving {
            active: loaded(desired, digest),
            window: None,
            progress: Progress::Settled,
        })
    }

    fn leader(generation: i64) -> Observed<'static> {
        Observed {
            generation: Some(generation),
            leading: true,
            record: None,
        }
    }

    fn record(generation: i64, rolled_back: bool, window_end: Timestamp) -> RollbackRecord {
        RollbackRecord {
            generation,
            previous_reference: "oci://r.example/simcloud:v1".into(),
            previous_digest: V1.into(),
            previous_cloud_config: None,
            window_end: Time(window_end),
            rolled_back,
        }
    }

    fn roll_out_spec(shadow: bool) -> Step {
        Step::RollOut(RollOut {
            to: Target::Spec,
            shadow,
        })
    }

    #[test]
    fn the_first_version_is_rolled_out_directly_whatever_the_strategy() {
        let phase = TestPhase::Starting { failure: None };
        let shadowed = spec(
            "oci://r.example/simcloud:v1",
            json!({"rollout": {"strategy": "Shadow"}}),
        );
        let now = Instant::now();
        assert_eq!(
            next_step(&phase, &leader(1), &v1(), now),
            roll_out_spec(false),
        );
        assert_eq!(
            next_step(&phase, &leader(1), &shadowed, now),
            roll_out_spec(false),
        );
    }

    #[test]
    fn a_refusal_that_may_pass_is_retried_after_10s_doubling_to_600s() {
        let pauses: Vec<u64> = (1..=9).map(|attempt| backoff(attempt).as_secs()).collect();
        assert_eq!(pauses, [10, 20, 40, 80, 160, 320, 600, 600, 600]);
        assert_eq!(backoff(u32::MAX), RETRY_MAX);

        let now = Instant::now();
        let first = Failure::after(None, v2().version, true, now);
        assert_eq!(first.retry_at(), Some(now + Duration::from_secs(10)));
        let second = Failure::after(Some(&first), v2().version, true, now);
        assert_eq!(second.retry_at(), Some(now + Duration::from_secs(20)));
        let other = Failure::after(Some(&second), v1().version, true, now);
        assert_eq!(
            other.retry_at(),
            Some(now + Duration::from_secs(10)),
            "another version starts over"
        );

        let mut phase = serving(&v1(), V1);
        phase.failed(second);
        let observed = leader(2);
        assert_eq!(next_step(&phase, &observed, &v2(), now), Step::Wait);
        assert_eq!(
            next_step(&phase, &observed, &v2(), now + Duration::from_secs(20)),
            roll_out_spec(false),
        );
        let mut starting = TestPhase::Starting { failure: None };
        starting.failed(Failure::after(None, v1().version, true, now));
        assert_eq!(next_step(&starting, &observed, &v1(), now), Step::Wait);
        assert_eq!(
            next_step(&starting, &observed, &v1(), now + Duration::from_secs(10)),
            roll_out_spec(false),
        );
    }

    #[test]
    fn a_refusal_that_cannot_pass_waits_for_the_spec_to_change() {
        let now = Instant::now();
        let mut phase = serving(&v1(), V1);
        phase.failed(Failure::after(None, v2().version, false, now));
        assert_eq!(phase.failure().and_then(Failure::retry_at), None);
        let later = now + Duration::from_secs(3600);
        assert_eq!(next_step(&phase, &leader(2), &v2(), later), Step::Wait);
        let pinned = spec("oci://r.example/simcloud:v2", json!({"digest": V2}));
        assert_eq!(
            next_step(&phase, &leader(3), &pinned, later),
            roll_out_spec(false),
        );
        let limited = spec(
            "oci://r.example/simcloud:v2",
            json!({"limits": {"timeout": "5s"}}),
        );
        assert_eq!(
            next_step(&phase, &leader(3), &limited, later),
            roll_out_spec(false),
        );
    }

    #[test]
    fn only_grants_budgets_credentials_or_limits_changed_reconfigure_in_place() {
        let phase = serving(&v1(), V1);
        let now = Instant::now();
        assert_eq!(
            next_step(&phase, &leader(1), &v1(), now),
            Step::Keep { reconfigure: false },
        );
        let changes = [
            json!({"egress": {"allowedHosts": ["https://api.simcloud.example"]}}),
            json!({"egress": {"rate": 5}}),
            json!({"limits": {"timeout": "5s"}}),
        ];
        for change in changes {
            let changed = spec("oci://r.example/simcloud:v1", change);
            assert_eq!(
                next_step(&phase, &leader(2), &changed, now),
                Step::Keep { reconfigure: true },
            );
        }
        // A credential's value comes from its Secret; its spec is what is compared.
        let mut credentials = v1();
        credentials.egress_key.1 = serde_json::from_value(json!([{
            "host": "https://api.simcloud.example",
            "secretKeyRef": {"name": "simcloud", "key": "token"},
        }]))
        .expect("credentials");
        assert_eq!(
            next_step(&phase, &leader(2), &credentials, now),
            Step::Keep { reconfigure: true },
        );
        let engine = spec(
            "oci://r.example/simcloud:v1",
            json!({"limits": {"memory": "128Mi"}}),
        );
        assert_eq!(
            next_step(&phase, &leader(2), &engine, now),
            Step::MoveEngine {
                otherwise: RollOut {
                    to: Target::Spec,
                    shadow: false,
                },
            },
        );
        let config = spec(
            "oci://r.example/simcloud:v1",
            json!({"cloudConfig": {"inline": "{}"}}),
        );
        assert_eq!(
            next_step(&phase, &leader(2), &config, now),
            roll_out_spec(false),
        );
    }

    #[test]
    fn under_the_shadow_strategy_a_new_version_shadows_first() {
        let phase = serving(&v1(), V1);
        let shadowed = spec(
            "oci://r.example/simcloud:v2",
            json!({"rollout": {"strategy": "Shadow"}}),
        );
        assert_eq!(
            next_step(&phase, &leader(2), &shadowed, Instant::now()),
            roll_out_spec(true),
        );
    }

    #[test]
    fn a_shadow_is_kept_while_the_spec_names_it_and_stopped_when_it_moves_on() {
        let shadowed = spec(
            "oci://r.example/simcloud:v2",
            json!({"rollout": {"strategy": "Shadow", "shadow": {"agreeingCalls": 5}}}),
        );
        let mut phase = serving(&v1(), V1);
        let started = Instant::now();
        phase.start_shadowing(Shadowing {
            desired: shadowed.clone(),
            shadow: Fake(V2),
            generation: Some(2),
            started,
            diverged: false,
        });
        assert!(phase.judging());
        assert_eq!(
            next_step(&phase, &leader(2), &shadowed, started),
            Step::KeepShadowing { reconfigure: false },
        );
        let granted = spec(
            "oci://r.example/simcloud:v2",
            json!({"rollout": {"strategy": "Shadow", "shadow": {"agreeingCalls": 5}}, "egress": {"rate": 5}}),
        );
        assert_eq!(
            next_step(&phase, &leader(3), &granted, started),
            Step::KeepShadowing { reconfigure: true },
        );
        let policy = spec(
            "oci://r.example/simcloud:v2",
            json!({"rollout": {"strategy": "Shadow", "shadow": {"agreeingCalls": 9}}}),
        );
        assert_eq!(
            next_step(&phase, &leader(3), &policy, started),
            Step::StopShadowing,
        );
        assert_eq!(
            next_step(&phase, &leader(3), &v1(), started),
            Step::StopShadowing,
        );
        assert!(phase.stop_shadowing().is_some());
        assert!(!phase.judging());
        assert_eq!(
            next_step(&phase, &leader(3), &v1(), started),
            Step::Keep { reconfigure: false },
        );
    }

    #[test]
    fn a_shadow_is_promoted_after_enough_agreeing_calls_and_held_on_a_divergence() {
        let policy = spec(
            "oci://r.example/simcloud:v2",
            json!({"rollout": {"strategy": "Shadow", "shadow": {"agreeingCalls": 50}}}),
        )
        .rollout
        .shadow;
        assert_eq!(judge_shadow(0, 0, &policy), ShadowVerdict::Comparing);
        assert_eq!(judge_shadow(49, 0, &policy), ShadowVerdict::Comparing);
        assert_eq!(judge_shadow(50, 0, &policy), ShadowVerdict::Promote);
        assert_eq!(judge_shadow(49, 1, &policy), ShadowVerdict::Diverged);
        assert_eq!(
            judge_shadow(500, 1, &policy),
            ShadowVerdict::Diverged,
            "a divergence holds it however many agreed"
        );
    }

    fn counts(calls: u64, failures: u64) -> CallCounts {
        CallCounts { calls, failures }
    }

    #[test]
    fn a_new_version_is_rolled_back_past_the_threshold_over_the_previous_failure_rate() {
        // The defaults: 10 points over the previous version's rate, after 20 calls.
        let policy = v2().rollout.rollback;
        assert_eq!(policy.window, Duration::from_secs(300));
        let now = Instant::now();
        let until = now + policy.window;
        let judge = |new, old| judge_window(new, old, &policy, until, now);
        assert_eq!(
            judge(counts(20, 3), counts(100, 0)),
            WindowVerdict::RollBack
        );
        assert_eq!(
            judge(counts(20, 2), counts(100, 0)),
            WindowVerdict::Watching,
            "10 points is not over 10"
        );
        assert_eq!(
            judge(counts(20, 10), counts(100, 45)),
            WindowVerdict::Watching,
            "5 points over a previous version failing as much"
        );
        assert_eq!(
            judge(counts(19, 19), counts(100, 0)),
            WindowVerdict::Watching,
            "fewer calls than the minimum are not judged"
        );
        assert_eq!(judge(counts(12, 6), counts(0, 0)), WindowVerdict::Watching);
        assert!((excess_points(counts(20, 10), counts(10, 1)) - 40.0).abs() < 1e-9);
    }

    #[test]
    fn the_window_closes_at_its_end_unless_the_version_was_rolled_back_first() {
        let policy = v2().rollout.rollback;
        let now = Instant::now();
        let until = now + policy.window;
        assert_eq!(
            judge_window(counts(5, 0), counts(5, 0), &policy, until, until),
            WindowVerdict::Over
        );
        assert_eq!(
            judge_window(counts(40, 40), counts(5, 0), &policy, until, until),
            WindowVerdict::RollBack
        );
        assert_eq!(
            judge_window(counts(5, 0), counts(5, 0), &policy, until, now),
            WindowVerdict::Watching
        );
    }

    #[test]
    fn activating_opens_a_window_that_a_rollback_or_its_end_closes() {
        let mut phase = TestPhase::Starting { failure: None };
        let (replaced, closed) = phase.activated(loaded(&v1(), V1));
        assert!(replaced.is_none() && closed.is_none());
        let (replaced, closed) = phase.activated(loaded(&v2(), V2));
        assert_eq!(replaced.as_ref().map(|r| r.provider.0), Some(V1));
        assert!(closed.is_none());
        let policy = v2().rollout.rollback;
        phase.open_window(RollbackWindow {
            previous: replaced.unwrap(),
            until: Instant::now() + policy.window,
            policy,
        });
        assert!(phase.judging());

        let (rolled_back, _) = phase.roll_back().expect("a window");
        assert_eq!(rolled_back.provider.0, V2);
        assert_eq!(phase.active().map(|a| a.provider.0), Some(V1));
        assert!(phase.window().is_none() && phase.roll_back().is_none());

        // A rolled-back generation is not rolled out again, by the leader or a standby.
        let record = record(2, true, Timestamp::now());
        let observed = Observed {
            generation: Some(2),
            leading: true,
            record: Some(&record),
        };
        assert_eq!(
            next_step(&phase, &observed, &v2(), Instant::now()),
            Step::StayRolledBack,
        );
        let newer = Observed {
            generation: Some(3),
            ..observed
        };
        assert_eq!(
            next_step(&phase, &newer, &v2(), Instant::now()),
            roll_out_spec(false),
        );

        // Rolled back to the same component (new engine limits rolled it out): its
        // limits are not moved to the spec's again.
        let more_memory = spec(
            "oci://r.example/simcloud:v1",
            json!({"limits": {"memory": "128Mi"}}),
        );
        assert_eq!(
            next_step(&phase, &observed, &more_memory, Instant::now()),
            Step::StayRolledBack,
        );
    }

    #[test]
    fn a_standby_follows_the_leaders_rollback_with_the_version_it_kept_warm() {
        let mut phase = serving(&v2(), V2);
        let policy = v2().rollout.rollback;
        phase.open_window(RollbackWindow {
            previous: loaded(&v1(), V1),
            until: Instant::now() + policy.window,
            policy,
        });
        let record = record(2, true, Timestamp::now());
        let standby = Observed {
            generation: Some(2),
            leading: false,
            record: Some(&record),
        };
        let now = Instant::now();
        assert_eq!(
            next_step(&phase, &standby, &v2(), now),
            Step::FollowRollback,
        );
        let leading = Observed {
            leading: true,
            ..standby
        };
        assert_eq!(
            next_step(&phase, &leading, &v2(), now),
            Step::Keep { reconfigure: false },
        );
        phase.roll_back();
        assert_eq!(
            next_step(&phase, &standby, &v2(), now),
            Step::TakeLeaderStatus,
        );
    }

    #[test]
    fn a_manager_started_after_a_rollback_runs_the_version_rolled_back_to() {
        let phase = TestPhase::Starting { failure: None };
        let rolled_back = record(2, true, Timestamp::now());
        let observed = Observed {
            generation: Some(2),
            leading: true,
            record: Some(&rolled_back),
        };
        assert_eq!(
            next_step(&phase, &observed, &v2(), Instant::now()),
            Step::RollOut(RollOut {
                to: Target::RolledBackTo {
                    reference: "oci://r.example/simcloud:v1".parse().unwrap(),
                    digest: V1.into(),
                },
                shadow: false,
            }),
        );
        let stale = Observed {
            generation: Some(3),
            ..observed
        };
        assert_eq!(
            next_step(&phase, &stale, &v2(), Instant::now()),
            roll_out_spec(false),
        );
    }

    #[test]
    fn a_manager_restarted_inside_a_window_keeps_judging_until_the_recorded_end() {
        let now = Timestamp::now();
        let spec_window = Duration::from_secs(300);
        let end = |seconds: i64| now + k8s_openapi::jiff::SignedDuration::from_secs(seconds);
        let open = record(2, false, end(120));
        assert_eq!(
            window_to_restore(&open, Some(2), V2, spec_window, now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            window_to_restore(&open, Some(2), V2, Duration::from_secs(60), now),
            Some(Duration::from_secs(60)),
            "at most the spec's window"
        );
        assert_eq!(
            window_to_restore(&open, Some(3), V2, spec_window, now),
            None,
            "another generation's record"
        );
        assert_eq!(
            window_to_restore(&open, Some(2), V1, spec_window, now),
            None,
            "the previous version is the one running"
        );
        let over = record(2, false, end(-1));
        assert_eq!(
            window_to_restore(&over, Some(2), V2, spec_window, now),
            None
        );
        let rolled_back = record(2, true, end(120));
        assert_eq!(
            window_to_restore(&rolled_back, Some(2), V2, spec_window, now),
            None
        );
    }

    #[test]
    fn a_tags_digest_keeps_running_until_a_followed_digest_is_pinned() {
        // The rollout pins the spec to the digest its tag runs (see `super::tag`): the
        // recorded one keeps running, a followed one rolls out.
        let mut recorded = v1();
        recorded
            .version
            .pin(recorded.version.reference.clone(), V1.into());
        let phase = serving(&recorded, V1);
        let now = Instant::now();
        assert_eq!(
            next_step(&phase, &leader(1), &recorded, now),
            Step::Keep { reconfigure: false },
        );
        let mut followed = v1();
        followed
            .version
            .pin(followed.version.reference.clone(), V2.into());
        assert_eq!(
            next_step(&phase, &leader(1), &followed, now),
            roll_out_spec(false),
        );
    }
}
