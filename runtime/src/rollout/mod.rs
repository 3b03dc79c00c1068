//! Run mode from a `CloudProvider` resource (`--provider-resource NAME`): the rollout
//! follows the object and the Secrets and ConfigMaps it names, and keeps the
//! [`ProviderSlot`] the controllers call through serving the version the spec asks for.
//!
//! On a spec change it fetches, verifies, compiles and `init`s the new version, checks its
//! name and that it supports every running controller, and only then activates it
//! atomically: calls already running finish on the old version, and the service controller
//! resyncs every Service through the new one. Any failing step leaves the active version
//! serving, sets a condition saying which step and why, and emits an Event; a failure that
//! may pass (a registry down, an `init` that could not reach the cloud) is retried with
//! backoff, one that cannot (a digest mismatch, a wrong name) waits for the spec to change.
//!
//! Changing only grants, budgets or credentials reconfigures the active version in place; the
//! spec's routing fields (which nodes and Services are this provider's, beside others) take
//! effect as they are read ([`crate::controllers::fleet::Fleet::read`]), whatever version
//! runs, and a `NodesUncontested` condition says which of its nodes another provider claims.
//! Under the Shadow strategy the candidate first answers the read-only calls beside the
//! active version (a [`Shadow`], egress limited to safe methods) and is promoted after
//! enough agreeing answers; a divergence holds it back. After an activation the previous
//! version stays loaded for the rollback window; if the new one fails more than the policy
//! allows, the previous one is reactivated and `RolledBack` says why. Every replica follows
//! the resource and loads the same versions (a standby takes over warm, and follows the
//! leader's rollbacks); only the leader writes status and events.
//!
//! This module owns the loop, which takes the steps of a rollout; [`machine`] holds the
//! rollout's phase and decides each step (the rules, without I/O), [`candidate`] brings a
//! version up (fetch, verify, compile, `init`) or reports why not, [`activation`] makes it
//! serve and opens the rollback window, [`spec`] parses a spec,
//! [`ceiling`] holds its grants within the operator's `--egress-grant-ceiling`,
//! [`references`] watches the Secrets and ConfigMaps it names, [`status`] writes conditions,
//! [`shadowing`] runs a candidate beside the active version, [`rollback`] watches a new
//! one and rolls it back, [`record`] keeps the rollback window across restarts, and [`tag`]
//! keeps a tag's digest across restarts and replicas and reports a moved tag.

mod activation;
mod candidate;
pub mod ceiling;
mod machine;
mod record;
mod references;
mod rollback;
mod shadowing;
pub mod spec;
mod status;
mod tag;

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::WatchStreamExt;
use kube::runtime::events::EventType;
use kube::runtime::watcher::watch_object;
use kube::{Api, Resource};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::controllers::fleet::Fleet;
use crate::controllers::{Controller, EventSink};
use crate::resource::{
    CandidatePhase, CloudConfigSource, CloudProvider, CloudProviderSpec, CloudProviderStatus,
    ConditionStatus, condition,
};
use ceiling::GrantCeiling;
use machine::{Failure, Observed, RollOut, Step, Target};
use record::RollbackRecord;
use references::{Kind, ObjectKey, References};
use spec::{Defaults, Desired, SpecError};
use status::set_condition;
use wasm_ccm_host::answers::AnswerChecks;
use wasm_ccm_host::egress::EgressGate;
use wasm_ccm_host::metrics::Metrics;
use wasm_ccm_host::provider::{Compiled, Provider, ProviderSlot, Shadow};
use wasm_ccm_host::sandbox::Sandbox;
use wasm_ccm_host::source::{Distribution, DistributionSettings};

/// How often the rollback window compares failure rates.
const ROLLBACK_TICK: Duration = Duration::from_secs(1);
/// Least time between two status writes of the rollback window's call counts.
const CALLS_WRITE_INTERVAL: Duration = Duration::from_secs(10);

/// Everything the rollout needs, from flags.
#[derive(Debug, Clone)]
pub struct RolloutSettings {
    /// `--provider-resource`: the `CloudProvider` to follow.
    pub resource: String,
    /// The flags' egress and sandbox settings, which the spec overrides.
    pub defaults: Defaults,
    /// Registries, credentials and the cache.
    pub distribution: DistributionSettings,
    /// `--allow-untagged-cloud`.
    pub allow_untagged_cloud: bool,
    /// `--egress-grant-ceiling`: what the spec may grant; `None`, anything.
    pub grant_ceiling: Option<GrantCeiling>,
    /// `--tag-check-interval`: how often the leader asks which digest an unpinned tag
    /// names; zero, never.
    pub tag_check_interval: Duration,
    /// What every activated version's answers are checked against (the manager's ranges
    /// and the cluster's addresses).
    pub answer_checks: Arc<AnswerChecks>,
    /// Where the spec's routing fields (node selector, load-balancer class, default,
    /// targets) take effect as soon as they are read, whatever version runs.
    pub fleet: Arc<Fleet>,
}

/// What the manager holds of the rollout.
pub struct RolloutHandle {
    slot: watch::Receiver<Option<ProviderSlot>>,
    not_ready: Arc<Mutex<Option<String>>>,
    required: Arc<OnceLock<Vec<Controller>>>,
}

impl RolloutHandle {
    /// The `/readyz` check: failing, with the reason, until a version is active.
    pub fn readiness(&self) -> impl Fn() -> Result<(), String> + Send + Sync + 'static {
        let not_ready = self.not_ready.clone();
        move || match &*not_ready.lock().unwrap_or_else(|p| p.into_inner()) {
            None => Ok(()),
            Some(reason) => Err(reason.clone()),
        }
    }

    /// Wait for the first version to be active; `None` if `shutdown` comes first.
    pub async fn first_version(&mut self, shutdown: &CancellationToken) -> Option<ProviderSlot> {
        tokio::select! {
            () = shutdown.cancelled() => None,
            slot = self.slot.wait_for(Option::is_some) => slot.ok().and_then(|slot| slot.clone()),
        }
    }

    /// The controllers that run: a later version must support each of them.
    pub fn require(&self, controllers: Vec<Controller>) {
        let _ = self.required.set(controllers);
    }
}

/// Start following the resource; the returned handle yields the first active version.
/// `leading` says whether this replica writes status and events (into `events`).
pub fn start(
    settings: RolloutSettings,
    client: kube::Client,
    events: EventSink,
    metrics: Arc<Metrics>,
    leading: watch::Receiver<bool>,
    shutdown: CancellationToken,
) -> RolloutHandle {
    if settings.grant_ceiling.is_none() {
        tracing::warn!(resource = %settings.resource, "no --egress-grant-ceiling: whoever may edit the CloudProvider decides every host the provider reaches and every host its credentials go to, IP literals included; set the ceiling to the cloud API hosts this cluster uses");
    }
    let (slot_tx, slot) = watch::channel(None);
    let not_ready = Arc::new(Mutex::new(Some(format!(
        "CloudProvider {} has not been read yet",
        settings.resource
    ))));
    let required = Arc::new(OnceLock::new());
    let namespace = client.default_namespace().to_string();
    let rollout = Rollout {
        api: Api::all(client.clone()),
        references: References::new(client.clone(), namespace),
        distribution: Distribution::new(settings.distribution.clone()),
        events,
        settings,
        metrics,
        leading,
        slot_tx,
        not_ready: not_ready.clone(),
        required: required.clone(),
        object: None,
        status: CloudProviderStatus::default(),
        written: None,
        sandbox: None,
        phase: Phase::Starting { failure: None },
        spec_error: None,
        last_calls_write: Instant::now(),
        record: None,
        record_written: None,
        tags: tag::Tags::default(),
    };
    tokio::spawn(rollout.run(shutdown));
    RolloutHandle {
        slot,
        not_ready,
        required,
    }
}

/// A version loaded to serve calls, and what it was made from.
type Active = machine::Loaded<Arc<Provider>>;
/// Where the rollout stands, with the versions it loaded.
type Phase = machine::Phase<Arc<Provider>, Arc<Shadow>>;

struct Rollout {
    settings: RolloutSettings,
    api: Api<CloudProvider>,
    references: Arc<References>,
    distribution: Distribution,
    events: EventSink,
    metrics: Arc<Metrics>,
    leading: watch::Receiver<bool>,
    slot_tx: watch::Sender<Option<ProviderSlot>>,
    not_ready: Arc<Mutex<Option<String>>>,
    required: Arc<OnceLock<Vec<Controller>>>,
    /// The object as last seen (`None`: absent or not read yet).
    object: Option<CloudProvider>,
    /// The status this replica reports.
    status: CloudProviderStatus,
    /// The status last written.
    written: Option<CloudProviderStatus>,
    /// The engine, and the `spec.limits` it was made for.
    sandbox: Option<(spec::EngineLimits, Sandbox)>,
    /// What serves, what is kept for a rollback and what is under way.
    phase: Phase,
    /// The last spec refused as unusable, by generation (reported once).
    spec_error: Option<(Option<i64>, SpecError)>,
    last_calls_write: Instant,
    /// The rollback window as recorded: this leader's own, or the object's.
    record: Option<RollbackRecord>,
    /// The record last written (or read from the object).
    record_written: Option<RollbackRecord>,
    /// The digest an unpinned tag runs, and the checks of what it names.
    tags: tag::Tags,
}

impl Rollout {
    async fn run(mut self, shutdown: CancellationToken) {
        let mut objects = watch_object(self.api.clone(), &self.settings.resource)
            .default_backoff()
            .boxed();
        let mut references = self.references.changed();
        let mut leading = self.leading.clone();
        let mut ticks = tokio::time::interval(ROLLBACK_TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first check comes with the first version active; then one per interval.
        let mut tag_ticks =
            tokio::time::interval(self.settings.tag_check_interval.max(Duration::from_secs(1)));
        tag_ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let (tag_checked, mut tag_checks) = tokio::sync::mpsc::channel(1);
        let mut contested = self.settings.fleet.contested();
        loop {
            let retry_at = self
                .phase
                .failure()
                .and_then(Failure::retry_at)
                .map(tokio::time::Instant::from_std);
            tokio::select! {
                () = shutdown.cancelled() => break,
                change = objects.next() => match change {
                    None => break,
                    Some(Ok(object)) => self.seen(object),
                    Some(Err(error)) => {
                        tracing::warn!(resource = %self.settings.resource, %error, "watching the CloudProvider failed; retrying");
                        continue;
                    }
                },
                Ok(()) = references.changed() => {}
                Ok(()) = leading.changed() => {
                    // A new leader writes its view at once.
                    self.written = None;
                }
                Ok(()) = contested.changed() => {
                    let counted = contested.borrow_and_update().clone();
                    self.note_contested(counted.as_ref());
                    self.write_status().await;
                    continue;
                }
                // The failed version is tried again below; `attempts` grows the next pause.
                () = sleep_until(retry_at) => {}
                _ = ticks.tick(), if self.phase.judging() => {
                    self.judge_shadow();
                    self.judge_window();
                    self.write_status().await;
                    continue;
                }
                _ = tag_ticks.tick(), if self.tag_check_due() => {
                    self.start_tag_check(tag_checked.clone());
                    continue;
                }
                Some(check) = tag_checks.recv() => {
                    // A moved tag to follow is rolled out below, as a spec change is.
                    if !self.tag_checked(check) {
                        self.write_status().await;
                        continue;
                    }
                }
            }
            self.reconcile().await;
            self.write_status().await;
        }
        // Stop the watches of the Secrets and ConfigMaps (their tasks hold the references).
        self.references.watch(&[]);
    }

    fn seen(&mut self, object: Option<CloudProvider>) {
        let first = self.object.is_none();
        if first
            && let Some(object) = &object
            && let Some(status) = &object.status
        {
            // Carry on from what was reported (transition times, conditions); what runs is
            // decided from the spec and the record, never from the status.
            self.status = status.clone();
        }
        // A starting manager and a standby follow the object's record; the leader keeps its
        // own (the object may not carry its last write yet).
        if let Some(object) = &object
            && (first || !self.leading())
        {
            match RollbackRecord::of(object) {
                Some(Ok(record)) => {
                    self.record = Some(record.clone());
                    self.record_written = Some(record);
                }
                Some(Err(error)) if first => {
                    tracing::warn!(resource = %self.settings.resource, %error, "ignoring the rollback record");
                }
                _ => {}
            }
        }
        if let Some(object) = &object {
            self.read_resolved(object, first);
        }
        // Routing fields the spec parse refuses (InvalidSpec) leave the last ones in force.
        let spec = object.as_ref().map(|object| &object.spec);
        self.settings.fleet.read(&self.settings.resource, spec);
        self.object = object;
        if first {
            // The contested nodes as this replica knows them, not as last written.
            let contested = self.settings.fleet.contested().borrow().clone();
            self.note_contested(contested.as_ref());
        }
    }

    /// With several providers, once the nodes' owners have been counted: `NodesUncontested`,
    /// naming the nodes this provider claims with another and that other (the first 20).
    fn note_contested(&mut self, contested: Option<&crate::controllers::fleet::Contested>) {
        let Some(contested) = contested.filter(|_| self.settings.fleet.several()) else {
            return;
        };
        const LISTED: usize = 20;
        let generation = self.generation();
        match contested.get(&self.settings.resource) {
            None => set_condition(
                &mut self.status,
                condition::NODES_UNCONTESTED,
                ConditionStatus::True,
                "NoContestedNodes",
                "every node this provider claims is its own alone",
                generation,
            ),
            Some(nodes) => {
                let listed: Vec<String> = nodes
                    .iter()
                    .take(LISTED)
                    .map(|(node, others)| format!("{node} (also {})", others.join(", ")))
                    .collect();
                let more = nodes.len().saturating_sub(LISTED);
                let more = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                set_condition(
                    &mut self.status,
                    condition::NODES_UNCONTESTED,
                    ConditionStatus::False,
                    "NodesContested",
                    format!(
                        "{} claimed by this provider and another: {}{more}; no provider touches them until one does: narrow spec.nodeSelector",
                        match nodes.len() {
                            1 => "1 node is".to_string(),
                            n => format!("{n} nodes are"),
                        },
                        listed.join(", ")
                    ),
                    generation,
                );
            }
        }
    }

    fn generation(&self) -> Option<i64> {
        self.object
            .as_ref()
            .and_then(|object| object.metadata.generation)
    }

    fn set_not_ready(&self, reason: Option<String>) {
        *self.not_ready.lock().unwrap_or_else(|p| p.into_inner()) = reason;
    }

    /// `generation`'s spec names the active version: `SpecApplied`, and a refusal that
    /// `Progressing` still reports (of a spec since reverted) is over.
    fn spec_runs(&mut self, generation: Option<i64>) {
        if self.rolled_back_at(generation) {
            // The version it was rolled back to runs (same component, other limits):
            // `SpecApplied` keeps saying so.
            return;
        }
        let Some(label) = self.phase.active().map(|active| active.provider.label()) else {
            return;
        };
        self.spec_applied(
            ConditionStatus::True,
            "Applied",
            format!("{label} runs this generation's spec"),
            generation,
        );
        if status::condition(&self.status, condition::PROGRESSING).is_some_and(|progressing| {
            progressing.status == ConditionStatus::False && progressing.reason != "Activated"
        }) {
            set_condition(
                &mut self.status,
                condition::PROGRESSING,
                ConditionStatus::False,
                "Kept",
                format!("the spec names the active version, {label}: nothing to roll out"),
                generation,
            );
        }
    }

    /// Whether the record says `generation` was rolled back.
    fn rolled_back_at(&self, generation: Option<i64>) -> bool {
        self.record
            .as_ref()
            .is_some_and(|record| record.rolled_back_at(generation))
    }

    /// The `SpecApplied` condition: whether `generation`'s spec is what runs, and if not,
    /// why (the printer column `Spec` shows `reason`).
    fn spec_applied(
        &mut self,
        value: ConditionStatus,
        reason: &str,
        message: impl Into<String>,
        generation: Option<i64>,
    ) {
        set_condition(
            &mut self.status,
            condition::SPEC_APPLIED,
            value,
            reason,
            message,
            generation,
        );
    }

    fn leading(&self) -> bool {
        *self.leading.borrow()
    }

    /// A Warning event about the CloudProvider, as the leader; `subject` (a version, a
    /// field) tells it apart from earlier events with the same reason.
    fn warn(&self, reason: &'static str, subject: &str, note: String) {
        self.event(EventType::Warning, reason, subject, note);
    }

    /// A Normal event, as [`Rollout::warn`].
    fn normal(&self, reason: &'static str, subject: &str, note: String) {
        self.event(EventType::Normal, reason, subject, note);
    }

    fn event(&self, type_: EventType, reason: &'static str, subject: &str, note: String) {
        if self.leading()
            && let Some(object) = &self.object
        {
            let action = format!("{reason} {subject}");
            self.events
                .record(object.object_ref(&()), type_, reason, action, note);
        }
    }

    /// Bring the active version in line with the object.
    async fn reconcile(&mut self) {
        let Some(object) = self.object.clone() else {
            match self.phase.active() {
                None => self.set_not_ready(Some(format!(
                    "CloudProvider {} not found: create it to choose the provider",
                    self.settings.resource
                ))),
                Some(active) => tracing::warn!(
                    resource = %self.settings.resource,
                    provider = %active.provider.label(),
                    "the CloudProvider is gone; the active version keeps serving"
                ),
            }
            return;
        };
        let generation = object.metadata.generation;
        let mut keys = referenced(&self.references, &object.spec);
        // The cloud config of the version the record keeps for a rollback, to load it again.
        if let Some(source) = self
            .record
            .as_ref()
            .filter(|record| record.is_for(generation))
            .and_then(|record| record.previous_cloud_config.as_ref())
        {
            keys.extend(cloud_config_keys(&self.references, source));
        }
        self.references.watch(&keys);
        if !self.references.all_read() {
            return;
        }
        let parsed = spec::parse(&object.spec, &self.settings.defaults, &self.references);
        let ceiling = self.settings.grant_ceiling.as_ref();
        let desired = match parsed.and_then(|desired| {
            ceiling.map_or(Ok(()), |ceiling| ceiling.check(&object.spec))?;
            Ok(desired)
        }) {
            Ok(desired) => desired,
            Err(error) => {
                self.refuse_spec(generation, error);
                return;
            }
        };
        self.spec_error = None;
        self.report_credentials(generation);
        let mut desired = desired;
        // An unpinned tag runs the digest recorded for this generation.
        self.pin_tag(&object.spec, generation, &mut desired);
        // Each step either ends the reconcile or moves the phase on (a shadow stopped, an
        // engine moved), so the next one differs.
        loop {
            let observed = Observed {
                generation,
                leading: self.leading(),
                record: self.record.as_ref(),
            };
            match machine::next_step(&self.phase, &observed, &desired, Instant::now()) {
                Step::KeepShadowing { reconfigure } => {
                    if reconfigure {
                        self.reconfigure(&desired);
                    }
                    self.status.observed_generation = generation;
                    return;
                }
                Step::StopShadowing => self.stop_shadowing(),
                Step::TakeLeaderStatus => {
                    self.take_stored_status();
                    return;
                }
                Step::FollowRollback => {
                    self.follow_rollback();
                    return;
                }
                Step::MoveEngine { otherwise } => {
                    self.carry_resolution(&object.spec, generation);
                    if !self.move_engine(&desired).await {
                        // Could not move it (the file changed, the registry is down): load
                        // the version afresh instead.
                        self.roll_out(desired, generation, otherwise).await;
                        return;
                    }
                }
                Step::Keep { reconfigure } => {
                    self.carry_resolution(&object.spec, generation);
                    if reconfigure {
                        self.reconfigure(&desired);
                    }
                    self.status.observed_generation = generation;
                    self.spec_runs(generation);
                    return;
                }
                Step::StayRolledBack => {
                    self.status.observed_generation = generation;
                    if status::condition(&self.status, condition::SPEC_APPLIED)
                        .is_none_or(|applied| applied.reason != "RolledBack")
                    {
                        self.spec_applied(
                            ConditionStatus::False,
                            "RolledBack",
                            "this generation's version was rolled back (see RolledBack); change the spec to roll out again",
                            generation,
                        );
                    }
                    return;
                }
                Step::Wait => return,
                Step::RollOut(how) => {
                    self.roll_out(desired, generation, how).await;
                    return;
                }
            }
        }
    }

    fn refuse_spec(&mut self, generation: Option<i64>, error: SpecError) {
        let message = format!("the spec cannot be used: {error}");
        self.spec_applied(
            ConditionStatus::False,
            "InvalidSpec",
            message.clone(),
            generation,
        );
        if self.spec_error.as_ref() != Some(&(generation, error.clone())) {
            tracing::error!(resource = %self.settings.resource, "{message}");
            self.warn("InvalidSpec", &error.field, message.clone());
            self.spec_error = Some((generation, error));
        }
        self.status.observed_generation = generation;
        set_condition(
            &mut self.status,
            condition::PROGRESSING,
            ConditionStatus::False,
            "InvalidSpec",
            message.clone(),
            generation,
        );
        if self.phase.active().is_none() {
            set_condition(
                &mut self.status,
                condition::READY,
                ConditionStatus::False,
                "InvalidSpec",
                message.clone(),
                generation,
            );
            self.set_not_ready(Some(message));
        }
    }

    /// `Degraded` while a credential Secret or key is missing.
    fn report_credentials(&mut self, generation: Option<i64>) {
        let problems = self.references.credential_problems();
        if problems.is_empty() {
            if status::condition(&self.status, condition::DEGRADED).is_some() {
                set_condition(
                    &mut self.status,
                    condition::DEGRADED,
                    ConditionStatus::False,
                    "AsExpected",
                    "every credential Secret key is present",
                    generation,
                );
            }
            return;
        }
        let message = format!(
            "requests to hosts with these credentials are refused until fixed: {}",
            problems.join("; ")
        );
        let changed = status::condition(&self.status, condition::DEGRADED)
            .is_none_or(|degraded| degraded.message != message);
        if changed {
            self.warn("CredentialMissing", &problems.join(", "), message.clone());
        }
        set_condition(
            &mut self.status,
            condition::DEGRADED,
            ConditionStatus::True,
            "CredentialMissing",
            message,
            generation,
        );
    }

    /// Give the active version the spec's grants, budgets, credentials and call limits: no
    /// `init`, no resync.
    fn reconfigure(&mut self, desired: &Desired) {
        let Some(slot) = self.slot_tx.borrow().clone() else {
            return;
        };
        let Some(active) = self.phase.active_mut() else {
            return;
        };
        let mut provider = (*active.provider).clone();
        let mut changed = Vec::new();
        if active.egress_key != desired.egress_key {
            let gate = EgressGate::new(desired.egress.clone(), self.metrics.clone());
            provider = provider.with_egress(gate);
            changed.push("egress grants, budgets and credentials");
        }
        let limits = desired.version.sandbox.call_limits();
        if active.call_limits != limits {
            provider = provider.with_limits(limits);
            changed.push("call limits");
        }
        slot.reconfigure(provider);
        active.provider = slot.current();
        active.egress_key = desired.egress_key.clone();
        active.call_limits = limits;
        let label = active.provider.label();
        let note = format!("{label} now runs with the spec's {}", changed.join(" and "));
        tracing::info!(resource = %self.settings.resource, "{note}");
        self.normal("Reconfigured", &label, note);
    }

    /// Move the active version to an engine built with the spec's memory and concurrency
    /// limits: the same component loaded (from the cache when it can) into the new engine,
    /// with no `init` and no resync. Whether it moved.
    async fn move_engine(&mut self, desired: &Desired) -> bool {
        let version = &desired.version;
        let Ok(sandbox) = self.sandbox_for(version) else {
            return false;
        };
        let Ok(artifact) = self.distribution.fetch(&version.reference).await else {
            return false;
        };
        let Ok(compiled) = Compiled::new(&sandbox, artifact).await else {
            return false;
        };
        let compiled = compiled.with_limits(version.sandbox.call_limits());
        let (Some(slot), Some(active)) = (self.slot_tx.borrow().clone(), self.phase.active_mut())
        else {
            return false;
        };
        let Some(moved) = active.provider.moved_to(compiled) else {
            return false;
        };
        slot.reconfigure(moved);
        active.provider = slot.current();
        active.version = version.clone();
        active.call_limits = version.sandbox.call_limits();
        let label = active.provider.label();
        let note = format!(
            "{label} now runs on an engine with {} bytes of memory per call and {} calls at once",
            version.sandbox.memory_limit, version.sandbox.max_concurrent_calls
        );
        tracing::info!(resource = %self.settings.resource, "{note}");
        self.normal("Reconfigured", &format!("{label} engine"), note);
        true
    }

    /// Fetch, verify, compile and `init` the version `how` names; activate it if it passes,
    /// or let it shadow the active version first.
    async fn roll_out(&mut self, mut desired: Desired, generation: Option<i64>, how: RollOut) {
        if let Target::RolledBackTo { reference, digest } = how.to {
            // Started after this generation was rolled back: run the version it was rolled
            // back to, not the one that failed, with the cloud config it ran with.
            tracing::warn!(resource = %self.settings.resource, %reference, %digest, "this generation was rolled back; starting the version it was rolled back to");
            desired.version.pin(reference, digest);
            self.recorded_cloud_config(&mut desired.version);
        }
        let started = Instant::now();
        let reference = desired.version.reference.to_string();
        tracing::info!(resource = %self.settings.resource, %reference, "rolling out a provider version");
        self.status.observed_generation = generation;
        // A generation rolled back stays so while its previous version loads again.
        if !self.rolled_back_at(generation) {
            self.spec_applied(
                ConditionStatus::Unknown,
                "RollingOut",
                format!("rolling out {reference}"),
                generation,
            );
        }
        self.phase(&reference, None, CandidatePhase::Fetching, generation)
            .await;
        if self.phase.active().is_none() {
            self.set_not_ready(Some(format!("fetching {reference}")));
        }
        let loaded = self.load(&desired, generation, how.shadow).await;
        match loaded {
            Ok(provider) if how.shadow => self.start_shadowing(desired, provider, generation).await,
            Ok(provider) => {
                // A manager starting inside a rollback window loads the previous version again.
                let starting = self.phase.active().is_none().then(|| desired.clone());
                self.activate(desired, provider, generation, started);
                if let Some(desired) = starting {
                    self.restore_window(&desired, generation).await;
                }
            }
            Err(refusal) => self.refused(&desired, generation, refusal),
        }
    }

    /// Write the status, as the leader, when it changed.
    async fn write_status(&mut self) {
        if !self.leading() || self.object.is_none() {
            return;
        }
        if self.record != self.record_written
            && let Some(record) = &self.record
        {
            match record.write(&self.api, &self.settings.resource).await {
                Ok(()) => self.record_written = self.record.clone(),
                Err(error) => {
                    tracing::warn!(resource = %self.settings.resource, %error, "writing the rollback record failed; retrying with the next change");
                }
            }
        }
        self.write_resolved().await;
        if self.written.as_ref() == Some(&self.status) {
            return;
        }
        // Counts going up are written at most every CALLS_WRITE_INTERVAL; the first ones at
        // once.
        let calls_only = self.written.as_ref().is_some_and(|written| {
            !written.version_calls.is_empty()
                && CloudProviderStatus {
                    version_calls: self.status.version_calls.clone(),
                    ..written.clone()
                } == self.status
        });
        if calls_only && self.last_calls_write.elapsed() < CALLS_WRITE_INTERVAL {
            return;
        }
        match status::write(&self.api, &self.settings.resource, &self.status).await {
            Ok(()) => {
                self.written = Some(self.status.clone());
                self.last_calls_write = Instant::now();
            }
            Err(error) => {
                tracing::warn!(resource = %self.settings.resource, %error, "writing the CloudProvider status failed; retrying with the next change");
            }
        }
    }
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The objects `spec` reads: its cloud config's ConfigMap or Secret, and its credentials'
/// Secrets.
fn referenced(references: &References, spec: &CloudProviderSpec) -> Vec<ObjectKey> {
    let mut keys = Vec::new();
    if let Some(source) = &spec.cloud_config {
        keys.extend(cloud_config_keys(references, source));
    }
    let signature_keys = spec.signature.iter().flat_map(|signature| &signature.keys);
    for source in signature_keys {
        keys.extend(
            source
                .config_map_key_ref
                .iter()
                .map(|key| references.key(Kind::ConfigMap, key)),
        );
        keys.extend(
            source
                .secret_key_ref
                .iter()
                .map(|key| references.key(Kind::Secret, key)),
        );
    }
    for credential in &spec.credentials {
        let aws = credential.aws.iter().flat_map(|aws| {
            [
                &aws.access_key_id_ref,
                &aws.secret_access_key_ref,
                &aws.session_token_ref,
            ]
        });
        for key in std::iter::once(&credential.secret_key_ref)
            .chain(aws)
            .flatten()
        {
            keys.push(references.key(Kind::Secret, key));
        }
    }
    keys.dedup();
    keys
}

/// The ConfigMap or Secret a cloud config `source` reads, if any.
fn cloud_config_keys(references: &References, source: &CloudConfigSource) -> Vec<ObjectKey> {
    let config_map = source
        .config_map_key_ref
        .iter()
        .map(|key| references.key(Kind::ConfigMap, key));
    let secret = source
        .secret_key_ref
        .iter()
        .map(|key| references.key(Kind::Secret, key));
    config_map.chain(secret).collect()
}
