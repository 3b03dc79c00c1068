//! The typed provider facade: async Rust methods for every contract function over one
//! loaded provider version. This is all controllers see of a provider: they do not know
//! wasm exists.
//!
//! The methods are declared from the contract's one table ([`crate::contract_table!`]), each
//! by the call path its line names. Every call goes through one path ([`Provider::call`]),
//! which times it, counts its outcome and maps its failure; the read-only ones also hand
//! their inputs and answer to a [`Shadow`], when one is attached.
//!
//! Every answer crosses [`AnswerChecks`] here, before a controller sees it: an answer the
//! host refuses (an address that would capture traffic, a reserved label, an unbounded
//! list) is a failed call of the version that gave it (outcome `refused`), as is a
//! `retry-after` about an object that has answered only that for longer than
//! [`RETRY_AFTER_GRACE`] (outcome `retry-overdue`). The sandbox has already cut the
//! provider's messages and clamped its delays ([`crate::bounds`]).
//!
//! [`ProviderError`] keeps the contract's error kinds apart from sandbox failures, so a
//! controller can tell "the instance is gone" (`not-found`) from "the provider broke"
//! (trap, deadline, memory, egress denied, a refused answer) and never deletes a node on the
//! latter.
//!
//! [`ProviderSlot`] holds the active version and swaps it atomically; a [`Shadow`] runs a
//! candidate version beside it on the read-only calls.

mod shadow;
mod slot;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::answers::{AnswerChecks, Refusals, check_provider_name};
use crate::bounds::RETRY_AFTER_GRACE;
use crate::contract::{
    Capabilities, CloudError, Function, InstanceMetadata, LbStatus, Node, Route, Service,
};
use crate::egress::{Caller, Denial, EgressGate};
use crate::metrics::{CallLabels, FunctionLabels, Metrics};
use crate::sandbox::{
    Answer, Args, CallFailure, CallLimits, Called, Finished, Guest, GuestEnv, Image, LoadError,
    ProviderCache, Sandbox,
};
use crate::source::{Artifact, Identity};

pub use shadow::{Divergence, MAX_DIVERGENCES, Shadow, ShadowReport};
pub use slot::ProviderSlot;

/// Why a provider call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("provider {provider} {function}: {kind}{}", hinted(hints))]
pub struct ProviderError {
    /// `name@sha256:…` of the provider version.
    pub provider: String,
    /// The contract function.
    pub function: Function,
    /// Whether the provider, the sandbox or the egress gate failed the call.
    pub kind: ErrorKind,
    /// What the egress gate noticed during the call that may explain the failure (a host
    /// that answered 401 or 403 to a request no credential rule covered).
    pub hints: Vec<String>,
}

fn hinted(hints: &[String]) -> String {
    hints.iter().map(|hint| format!("; hint: {hint}")).collect()
}

/// What went wrong, by who is to blame.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ErrorKind {
    /// The provider answered with a contract error.
    #[error(transparent)]
    Cloud(CloudError),
    /// The sandbox ended the call (trap, deadline, memory, instantiation).
    #[error(transparent)]
    Sandbox(CallFailure),
    /// The provider failed after the egress gate refused one of its requests.
    #[error("egress denied: {}; the provider said: {message}", describe(denials))]
    EgressDenied {
        /// The requests the gate refused during the call.
        denials: Vec<Denial>,
        /// The `other` error the provider returned after the refusal.
        message: String,
    },
    /// The provider answered what the host refuses to write ([`crate::answers`]).
    #[error("answered what the host refuses to write: {0}")]
    Refused(Refusals),
    /// The provider answered `retry-after` about an object it has answered nothing else
    /// about for longer than [`RETRY_AFTER_GRACE`].
    #[error(
        "{error} (answering only retry-after for {}s, past the grace of {}s)",
        waited.as_secs(),
        RETRY_AFTER_GRACE.as_secs()
    )]
    RetryOverdue {
        /// The `retry-after` answered.
        error: CloudError,
        /// Since the first `retry-after` of the run.
        waited: Duration,
    },
}

/// The refused requests, escaped and cut to [`MAX_DENIALS_TEXT`] bytes in all.
fn describe(denials: &[Denial]) -> String {
    let all: Vec<String> = denials
        .iter()
        .map(|d| format!("{}: {}", d.request, d.reason))
        .collect();
    crate::text::ellipsized(
        crate::text::escaped(&all.join("; ")).into_owned(),
        MAX_DENIALS_TEXT,
    )
}

/// The most bytes of refused requests an error quotes (each request's path is the guest's).
const MAX_DENIALS_TEXT: usize = 2048;

impl ProviderError {
    /// The provider said the thing definitely does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(self.kind, ErrorKind::Cloud(CloudError::NotFound { .. }))
    }

    /// The provider does not implement the function.
    pub fn is_not_implemented(&self) -> bool {
        matches!(self.kind, ErrorKind::Cloud(CloudError::NotImplemented))
    }

    /// Another controller owns the load balancer.
    pub fn is_implemented_elsewhere(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Cloud(CloudError::ImplementedElsewhere)
        )
    }

    /// The delay the provider asked for, if it asked to be called again: within
    /// [`crate::bounds::MIN_RETRY_AFTER`] and [`crate::bounds::MAX_RETRY_AFTER`], as the
    /// sandbox clamped it.
    pub fn retry_after(&self) -> Option<Duration> {
        match self.kind {
            ErrorKind::Cloud(CloudError::RetryAfter { delay_ms, .. })
            | ErrorKind::RetryOverdue {
                error: CloudError::RetryAfter { delay_ms, .. },
                ..
            } => Some(Duration::from_millis(delay_ms)),
            _ => None,
        }
    }

    /// The refused fields, if the host refused the answer.
    pub fn refusals(&self) -> Option<&Refusals> {
        match &self.kind {
            ErrorKind::Refused(refusals) => Some(refusals),
            _ => None,
        }
    }

    /// Whether the call counts as a failure of the provider version when versions are
    /// compared (automatic rollback): the sandbox ended it, the gate refused its requests,
    /// the host refused its answer for what the answer is (not only because something in
    /// the cluster holds its address or the Service lacks its port, which whoever may edit
    /// a Service can bring about), the provider answered `other`, or it kept answering
    /// `retry-after` past the grace. Answers the contract expects in normal operation
    /// (`not-found`, `retry-after`, `not-implemented`, `implemented-elsewhere`) do not.
    pub fn is_version_failure(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Sandbox(_)
                | ErrorKind::EgressDenied { .. }
                | ErrorKind::RetryOverdue { .. }
                | ErrorKind::Cloud(CloudError::Other { .. })
        ) || self.refusals().is_some_and(Refusals::blame_the_answer)
    }

    /// A short label for metrics and logs: the contract's name of a cloud error
    /// (`not-found`, `other`, ...), or how the sandbox or the egress gate ended the call.
    pub fn outcome(&self) -> &'static str {
        match &self.kind {
            ErrorKind::Cloud(CloudError::NotFound { .. }) => "not-found",
            ErrorKind::Cloud(CloudError::NotImplemented) => "not-implemented",
            ErrorKind::Cloud(CloudError::ImplementedElsewhere) => "implemented-elsewhere",
            ErrorKind::Cloud(CloudError::RetryAfter { .. }) => "retry-after",
            ErrorKind::Cloud(CloudError::Other { .. }) => "other",
            ErrorKind::Sandbox(CallFailure::Trap { .. }) => "trap",
            ErrorKind::Sandbox(CallFailure::Deadline { .. }) => "deadline",
            ErrorKind::Sandbox(CallFailure::MemoryLimit { .. }) => "memory",
            ErrorKind::Sandbox(CallFailure::Instantiate { .. }) => "instantiate",
            ErrorKind::Sandbox(CallFailure::ResultTooLarge { .. }) => "result-too-large",
            ErrorKind::Sandbox(CallFailure::HttpBudget { .. }) => "http-budget",
            ErrorKind::EgressDenied { .. } => "egress-denied",
            ErrorKind::Refused(_) => "refused",
            ErrorKind::RetryOverdue { .. } => "retry-overdue",
        }
    }
}

/// Why a provider version could not be made ready.
#[derive(Debug, thiserror::Error)]
pub enum ProviderLoadError {
    /// The bytes are not a provider this host can run (invalid, foreign imports, wrong
    /// contract), or the engine failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// `init` failed: the provider rejected the cloud configuration, or the sandbox ended
    /// the call.
    #[error("{origin}: init rejected the configuration: {error}")]
    Init {
        /// Where the component came from (a path or reference).
        origin: String,
        /// How `init` failed.
        error: ProviderError,
    },
}

/// One loaded provider version and what it said it supports.
#[derive(Clone)]
pub struct Provider {
    guest: Guest,
    capabilities: Capabilities,
    identity: Arc<Identity>,
    metrics: Arc<Metrics>,
    tally: Arc<Tally>,
    /// A candidate answering this version's read-only calls beside it.
    shadow: Option<Arc<Shadow>>,
    /// What every answer is checked against before it is returned.
    checks: Arc<AnswerChecks>,
    /// The objects whose calls answer `retry-after`, and since when.
    retrying: Arc<Retrying>,
}

/// Calls one provider version answered since it was loaded, and how many of them failed
/// ([`ProviderError::is_version_failure`]): what automatic rollback compares.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CallCounts {
    /// Calls answered (`init` is not counted).
    pub calls: u64,
    /// Of those, failures.
    pub failures: u64,
}

impl CallCounts {
    /// The calls and failures since `earlier` was taken.
    pub fn since(self, earlier: CallCounts) -> CallCounts {
        CallCounts {
            calls: self.calls.saturating_sub(earlier.calls),
            failures: self.failures.saturating_sub(earlier.failures),
        }
    }

    /// Failures per call, 0 without calls.
    pub fn failure_rate(self) -> f64 {
        if self.calls == 0 {
            0.0
        } else {
            self.failures as f64 / self.calls as f64
        }
    }
}

/// The objects (a Service, a node, by UID) whose calls of one version answer `retry-after`,
/// each since the first such answer and until a call about it succeeds: another failure
/// in between does not restart the grace.
#[derive(Debug, Default)]
struct Retrying {
    /// Object → (first `retry-after` of the run, the latest).
    runs: Mutex<HashMap<String, (Instant, Instant)>>,
}

/// Objects followed at once: far more than a cluster's Services and nodes waiting at a
/// time. When full, runs with no `retry-after` for [`FORGOTTEN_AFTER`] (deleted objects)
/// are forgotten; if it is full still, a new object's run is not followed (never overdue).
const MAX_RETRYING: usize = 65_536;

/// How long a run without a `retry-after` lasts (it is forgotten when the map is full, and
/// the next `retry-after` starts another): twice the longest delay a provider may ask for.
const FORGOTTEN_AFTER: Duration = Duration::from_secs(600);

impl Retrying {
    /// A `retry-after` about `object` now: how long its run of them has lasted.
    fn answered(&self, object: String, now: Instant) -> Duration {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((first, latest)) = runs.get_mut(&object) {
            // A run with no `retry-after` for longer than any delay asked for has ended,
            // whatever came between: this one starts another.
            if now.saturating_duration_since(*latest) >= FORGOTTEN_AFTER {
                *first = now;
            }
            *latest = now;
            return now.saturating_duration_since(*first);
        }
        if runs.len() >= MAX_RETRYING {
            runs.retain(|_, (_, latest)| now.saturating_duration_since(*latest) < FORGOTTEN_AFTER);
        }
        if runs.len() < MAX_RETRYING {
            runs.insert(object, (now, now));
        }
        Duration::ZERO
    }

    /// A call about `object` succeeded.
    fn ended(&self, object: &str) {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        runs.remove(object);
    }
}

#[derive(Debug, Default)]
struct Tally {
    calls: AtomicU64,
    failures: AtomicU64,
}

impl Tally {
    fn record<T>(&self, result: &Result<T, ProviderError>) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        if result
            .as_ref()
            .is_err_and(ProviderError::is_version_failure)
        {
            self.failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Everything needed to load a provider version.
pub struct ProviderSource {
    /// The component and its identity (reference and digest), from [`crate::source`].
    pub artifact: Artifact,
    /// The bytes of `--cloud-config`, passed to `init` and readable by every call.
    pub cloud_config: Option<Vec<u8>>,
}

/// A provider version compiled and checked against the host contract, not yet `init`ed:
/// the step of a rollout between verification and initialisation.
pub struct Compiled {
    image: Image,
    identity: Identity,
    limits: CallLimits,
    /// The name `init` must answer, when the operator said it: what `init`'s own records
    /// (its requests, logs and cache) carry before it has answered.
    expected_name: Option<String>,
}

impl Compiled {
    /// Compile (or load from cache) and link `artifact`, checking it against the host
    /// contract.
    pub async fn new(sandbox: &Sandbox, artifact: Artifact) -> Result<Compiled, LoadError> {
        let identity = artifact.identity;
        let image = sandbox.load(artifact.wasm, &identity.reference).await?;
        let limits = image.call_limits();
        Ok(Compiled {
            image,
            identity,
            limits,
            expected_name: None,
        })
    }

    /// The name `init` must answer (`--cloud-provider`, a CloudProvider's `spec.name`):
    /// everything `init` does is recorded under it, so a version's series carry one name from
    /// its first request on. Without it they carry the origin's file stem until `init`
    /// answers. A version answering another name is refused by its loader anyway.
    pub fn expecting(self, name: &str) -> Compiled {
        Compiled {
            expected_name: Some(crate::text::escaped(name).into_owned()),
            ..self
        }
    }

    /// Calls of this version, `init` included, run under `limits` instead of the
    /// sandbox's.
    pub fn with_limits(self, limits: CallLimits) -> Compiled {
        Compiled { limits, ..self }
    }

    /// `sha256:<hex>` of the component itself.
    pub fn component_digest(&self) -> &str {
        self.image.digest()
    }

    /// `init` the version with `cloud_config`, its requests passing `egress`.
    pub async fn init(
        self,
        egress: Arc<EgressGate>,
        cloud_config: Option<Vec<u8>>,
        metrics: Arc<Metrics>,
    ) -> Result<Provider, ProviderLoadError> {
        let Compiled {
            image,
            identity,
            limits,
            expected_name,
        } = self;
        let version = short_version(&identity.digest);
        let guest = image.bind(GuestEnv {
            caller: Arc::new(Caller {
                provider: expected_name.unwrap_or_else(|| origin_name(&identity.reference)),
                version: version.clone(),
            }),
            connections: egress.connections(),
            egress,
            cache: ProviderCache::default(),
            cloud_config: cloud_config.clone().map(Into::into),
            node_metadata: None,
            logs: Default::default(),
            limits,
        });
        let config = cloud_config.as_deref();
        let started = Instant::now();
        let answered: Called<Capabilities> = guest.call(Function::Init, (config,)).await;
        // The name is the scheme of the version's provider IDs and the `provider` label of
        // every series and record about it: a DNS label, or `init` fails.
        let result = classify(answered).and_then(|capabilities| {
            match check_provider_name(&capabilities.name) {
                Ok(()) => Ok(capabilities),
                Err(refusals) => Err((ErrorKind::Refused(refusals), Vec::new())),
            }
        });
        // `init` is counted under the name it answered, as every later call: a dashboard's
        // `sum by (provider)` does not split a version's `init` from its other calls.
        let guest = match &result {
            Ok(capabilities) => guest.initialised(
                Caller {
                    provider: capabilities.name.clone(),
                    version: version.clone(),
                },
                capabilities,
            ),
            Err(_) => guest,
        };
        let capabilities =
            finish(&guest, &metrics, Function::Init, started, result).map_err(|error| {
                metrics.provider_not_loaded(&version);
                ProviderLoadError::Init {
                    origin: identity.reference.clone(),
                    error,
                }
            })?;
        metrics.provider_info(&capabilities.name, &version, &identity);
        Ok(Provider {
            guest,
            capabilities,
            identity: Arc::new(identity),
            metrics,
            tally: Arc::default(),
            shadow: None,
            checks: Arc::default(),
            retrying: Arc::default(),
        })
    }
}

impl Provider {
    /// Compile (or load from cache), link, and `init` a provider version.
    pub async fn load(
        sandbox: &Sandbox,
        egress: Arc<EgressGate>,
        source: ProviderSource,
        metrics: Arc<Metrics>,
    ) -> Result<Provider, ProviderLoadError> {
        Compiled::new(sandbox, source.artifact)
            .await?
            .init(egress, source.cloud_config, metrics)
            .await
    }

    /// This version with another egress gate (changed grants, credentials or budgets):
    /// same component, same `init` answer, same cache and call counts, no `init` call; only
    /// the connection pool starts empty.
    pub fn with_egress(&self, egress: Arc<EgressGate>) -> Provider {
        Provider {
            guest: self.guest.with_egress(egress),
            ..self.clone()
        }
    }

    /// This version with other call limits (`spec.limits` but memory and concurrency):
    /// no `init`, same cache contents, egress and call counts.
    pub fn with_limits(&self, limits: CallLimits) -> Provider {
        Provider {
            guest: self.guest.with_limits(limits),
            ..self.clone()
        }
    }

    /// This version moved to the engine `compiled` was loaded into (other memory or
    /// concurrency limits), under its call limits: no `init`, same cache contents, egress
    /// and call counts. `None` if `compiled` is another component.
    pub fn moved_to(&self, compiled: Compiled) -> Option<Provider> {
        if compiled.image.digest() != self.digest() {
            return None;
        }
        let mut guest = self.guest.on_image(compiled.image);
        if guest.limits() != &compiled.limits {
            guest = guest.with_limits(compiled.limits);
        }
        Some(Provider {
            guest,
            ..self.clone()
        })
    }

    /// This version with its answers checked by `checks` (the manager's ranges and the
    /// cluster's addresses); a version is loaded checking against the default policy and
    /// no cluster. A shadow's candidate is checked by the active version's checks.
    pub fn with_checks(&self, checks: Arc<AnswerChecks>) -> Provider {
        Provider {
            checks,
            ..self.clone()
        }
    }

    /// This version with `shadow` answering its read-only calls beside it (or none).
    pub fn with_shadow(&self, shadow: Option<Arc<Shadow>>) -> Provider {
        Provider {
            shadow,
            ..self.clone()
        }
    }

    /// Calls answered and failed since this version was loaded.
    pub fn call_counts(&self) -> CallCounts {
        CallCounts {
            calls: self.tally.calls.load(Ordering::Relaxed),
            failures: self.tally.failures.load(Ordering::Relaxed),
        }
    }

    /// What the provider supports, as `init` answered.
    pub fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    /// `name@sha256:<12 hex>`: the provider's name and its short digest (the manifest's
    /// for an OCI artifact, the component's for a file).
    pub fn label(&self) -> String {
        let caller = self.guest.caller();
        format!("{}@{}", caller.provider, caller.version)
    }

    /// `sha256:<hex>` of the component itself.
    pub fn digest(&self) -> &str {
        self.guest.image().digest()
    }

    /// The reference this version was resolved from and its digest.
    pub fn identity(&self) -> &Identity {
        &self.identity
    }

    /// The egress gate this provider's requests pass (for its audit trail).
    pub fn egress(&self) -> &Arc<EgressGate> {
        self.guest.egress()
    }

    /// A read-only call, which a shadow's candidate, when one is attached, answers too: its
    /// answer is compared with the active version's, which is returned.
    async fn mirrored<A: Holdable, T>(
        &self,
        function: Function,
        args: A,
    ) -> Result<T, ProviderError>
    where
        T: Answer + Checked + Clone + serde::Serialize + PartialEq + std::fmt::Debug,
    {
        let mirror = self.shadow.as_ref().and_then(|shadow| {
            let held = args.hold();
            // Nothing writes a shadow's answer: it claims no address.
            let checks = Arc::new(self.checks.without_claims());
            shadow.mirror(function, move |candidate| async move {
                candidate.checked_call(&checks, function, held.args()).await
            })
        });
        settled(mirror, self.call(function, args).await)
    }

    /// A call carrying the nodes of a load balancer: a provider that reads nodes through a
    /// `node-set` is lent them without a copy; any other gets them as a list.
    async fn with_nodes<T: Answer + Checked>(
        &self,
        function: Function,
        (cluster, svc, nodes): (&str, &Service, &Arc<[Node]>),
    ) -> Result<T, ProviderError> {
        if self.guest.image().reads_node_sets() {
            self.call(function, (cluster, svc, nodes)).await
        } else {
            self.call(function, (cluster, svc, &nodes[..])).await
        }
    }

    /// The one path of every call: run `function` in the sandbox, check its answer, time
    /// it, count its outcome and map its failure to a [`ProviderError`].
    async fn call<A: Subject, T: Answer + Checked>(
        &self,
        function: Function,
        args: A,
    ) -> Result<T, ProviderError> {
        self.checked_call(&self.checks, function, args).await
    }

    /// [`Provider::call`] with its answer checked by `checks`.
    async fn checked_call<A: Subject, T: Answer + Checked>(
        &self,
        checks: &AnswerChecks,
        function: Function,
        args: A,
    ) -> Result<T, ProviderError> {
        let started = Instant::now();
        let object = args.object().map(|object| format!("{function} {object}"));
        let mut result = classify(self.guest.call::<A, T>(function, args).await);
        match &result {
            Ok(answer) if checks.enforced() => {
                if let Err(refusals) = answer.check(checks, &self.capabilities.name, args) {
                    result = Err((ErrorKind::Refused(refusals), Vec::new()));
                }
            }
            Ok(_) => {}
            Err((ErrorKind::Cloud(error @ CloudError::RetryAfter { .. }), hints)) => {
                if let Some(object) = object.clone() {
                    let waited = self.retrying.answered(object, Instant::now());
                    if waited > RETRY_AFTER_GRACE {
                        result = Err((
                            ErrorKind::RetryOverdue {
                                error: error.clone(),
                                waited,
                            },
                            hints.clone(),
                        ));
                    }
                }
            }
            Err(_) => {}
        }
        if let Some(object) = &object
            && result.is_ok()
        {
            self.retrying.ended(object);
        }
        let result = finish(&self.guest, &self.metrics, function, started, result);
        self.tally.record(&result);
        result
    }
}

/// The object a call is about, by its arguments, for following its `retry-after` answers.
trait Subject: Args + Copy {
    /// `node NAME UID`, `service NAMESPACE/NAME UID`, or `None` for a call about no one
    /// object.
    fn object(&self) -> Option<String>;
    /// The node the call is about, if one.
    fn node(&self) -> Option<&Node> {
        None
    }
    /// The Service the call is about, if one.
    fn service(&self) -> Option<&Service> {
        None
    }
}

impl Subject for (&Node,) {
    fn object(&self) -> Option<String> {
        Some(format!("node {} {}", self.0.name, self.0.uid))
    }
    fn node(&self) -> Option<&Node> {
        Some(self.0)
    }
}

/// `service NAMESPACE/NAME UID`: a Service made again under its name starts afresh.
fn service_object(service: &Service) -> Option<String> {
    Some(format!(
        "service {}/{} {}",
        service.namespace, service.name, service.uid
    ))
}

/// `Subject` for argument tuples about one Service, the second element.
macro_rules! service_subject {
    ($($args:ty),*) => {
        $(
            impl<'x> Subject for $args {
                fn object(&self) -> Option<String> {
                    service_object(self.1)
                }
                fn service(&self) -> Option<&Service> {
                    Some(self.1)
                }
            }
        )*
    };
}

service_subject!(
    (&'x str, &'x Service),
    (&'x str, &'x Service, &'x Arc<[Node]>),
    (&'x str, &'x Service, &'x [Node])
);

impl Subject for (&str,) {
    fn object(&self) -> Option<String> {
        None
    }
}

impl<'x> Subject for (&'x str, &'x str, &'x Route) {
    fn object(&self) -> Option<String> {
        None
    }
}

impl<'x> Subject for (&'x str, &'x Route) {
    fn object(&self) -> Option<String> {
        None
    }
}

/// An answer the facade checks before returning it ([`AnswerChecks`]).
trait Checked {
    /// Check the answer of a provider named `provider` to a call with `args`.
    fn check(
        &self,
        checks: &AnswerChecks,
        provider: &str,
        args: impl Subject,
    ) -> Result<(), Refusals>;
}

impl Checked for bool {
    fn check(&self, _: &AnswerChecks, _: &str, _: impl Subject) -> Result<(), Refusals> {
        Ok(())
    }
}

impl Checked for () {
    fn check(&self, _: &AnswerChecks, _: &str, _: impl Subject) -> Result<(), Refusals> {
        Ok(())
    }
}

/// `get-load-balancer-name`.
impl Checked for String {
    fn check(&self, checks: &AnswerChecks, _: &str, _: impl Subject) -> Result<(), Refusals> {
        checks.load_balancer_name(self)
    }
}

impl Checked for InstanceMetadata {
    fn check(
        &self,
        checks: &AnswerChecks,
        provider: &str,
        args: impl Subject,
    ) -> Result<(), Refusals> {
        match args.node() {
            Some(node) => checks.instance_metadata(self, provider, node),
            None => Ok(()),
        }
    }
}

impl Checked for LbStatus {
    fn check(&self, checks: &AnswerChecks, _: &str, args: impl Subject) -> Result<(), Refusals> {
        match args.service() {
            Some(service) => checks.load_balancer_status(self, service),
            None => Ok(()),
        }
    }
}

/// `get-load-balancer`: checked as `ensure-load-balancer`'s status is, claiming nothing (it
/// is read for existence, or compared by a shadow).
impl Checked for Option<LbStatus> {
    fn check(&self, checks: &AnswerChecks, _: &str, args: impl Subject) -> Result<(), Refusals> {
        match (self, args.service()) {
            (Some(status), Some(service)) => checks
                .without_claims()
                .load_balancer_status(status, service),
            _ => Ok(()),
        }
    }
}

impl Checked for Vec<Route> {
    fn check(&self, checks: &AnswerChecks, _: &str, _: impl Subject) -> Result<(), Refusals> {
        checks.routes(self)
    }
}

/// Declares the facade's method of every contract function from [`crate::contract_table!`]:
/// each hands its arguments to the call path its line names.
macro_rules! facade_methods {
    (
        $init:ident: $init_interface:literal / $init_name:literal ($init_param:literal);
        $(
            $(#[$doc:meta])*
            $variant:ident: $interface:literal / $name:literal
                $how:ident fn $method:ident($($param:literal $arg:ident: &$ty:ty),*) -> $answer:ty;
        )*
    ) => {
        impl Provider {
            $(
                $(#[$doc])*
                pub async fn $method(&self, $($arg: &$ty),*) -> Result<$answer, ProviderError> {
                    self.$how(Function::$variant, ($($arg,)*)).await
                }
            )*
        }
    };
}

crate::contract_table!(facade_methods);

/// Arguments of a read-only call that a shadow's candidate takes along to its own task: a
/// copy it owns, which lends them again as the call's arguments.
trait Holdable: Subject {
    /// The owned copy.
    type Held: Held;
    /// Copy the arguments.
    fn hold(&self) -> Self::Held;
}

/// An owned copy of a read-only call's arguments.
trait Held: Send + Sync + 'static {
    /// The arguments it lends.
    type Args<'a>: Subject
    where
        Self: 'a;
    /// Lend them.
    fn args(&self) -> Self::Args<'_>;
}

impl Holdable for (&Node,) {
    type Held = (Node,);
    fn hold(&self) -> (Node,) {
        (self.0.clone(),)
    }
}

impl Held for (Node,) {
    type Args<'a> = (&'a Node,);
    fn args(&self) -> (&Node,) {
        (&self.0,)
    }
}

impl Holdable for (&str,) {
    type Held = (String,);
    fn hold(&self) -> (String,) {
        (self.0.to_string(),)
    }
}

impl Held for (String,) {
    type Args<'a> = (&'a str,);
    fn args(&self) -> (&str,) {
        (&self.0,)
    }
}

impl<'x> Holdable for (&'x str, &'x Service) {
    type Held = (String, Service);
    fn hold(&self) -> (String, Service) {
        (self.0.to_string(), self.1.clone())
    }
}

impl Held for (String, Service) {
    type Args<'a> = (&'a str, &'a Service);
    fn args(&self) -> (&str, &Service) {
        (&self.0, &self.1)
    }
}

/// Where the active version's answer goes for a shadow comparison.
type Mirror<T> = tokio::sync::oneshot::Sender<Result<T, ProviderError>>;

/// Hand the active version's answer to the shadow comparison, if any, and return it.
fn settled<T: Clone>(
    mirror: Option<Mirror<T>>,
    answer: Result<T, ProviderError>,
) -> Result<T, ProviderError> {
    if let Some(mirror) = mirror {
        let _ = mirror.send(answer.clone());
    }
    answer
}

/// A sandbox result as the facade's: the answer, or the error kind and the gate's hints.
fn classify<T>(result: Called<T>) -> Result<T, (ErrorKind, Vec<String>)> {
    match result {
        Ok(Finished {
            value: Ok(value), ..
        }) => Ok(value),
        Ok(Finished {
            value: Err(CloudError::Other { message }),
            denials,
            hints,
        }) if !denials.is_empty() => Err((ErrorKind::EgressDenied { denials, message }, hints)),
        Ok(Finished {
            value: Err(error),
            hints,
            ..
        }) => Err((ErrorKind::Cloud(error), hints)),
        Err(failure) => Err((ErrorKind::Sandbox(failure), Vec::new())),
    }
}

/// The facade's result of a call, its duration and outcome recorded.
fn finish<T>(
    guest: &Guest,
    metrics: &Metrics,
    function: Function,
    started: Instant,
    result: Result<T, (ErrorKind, Vec<String>)>,
) -> Result<T, ProviderError> {
    let (kind, hints) = match result {
        Ok(value) => {
            observe(guest, metrics, function, started, "ok");
            return Ok(value);
        }
        Err(failed) => failed,
    };
    let caller = guest.caller();
    let error = ProviderError {
        provider: format!("{}@{}", caller.provider, caller.version),
        function,
        kind,
        hints,
    };
    observe(guest, metrics, function, started, error.outcome());
    Err(error)
}

fn observe(guest: &Guest, metrics: &Metrics, function: Function, started: Instant, outcome: &str) {
    let caller = guest.caller();
    let labels = FunctionLabels {
        provider: caller.provider.clone(),
        version: caller.version.clone(),
        function: function.name().to_string(),
    };
    metrics
        .provider_call_duration
        .get_or_create(&labels)
        .observe(started.elapsed().as_secs_f64());
    metrics
        .provider_calls
        .get_or_create(&CallLabels {
            provider: labels.provider,
            version: labels.version,
            function: labels.function,
            outcome: outcome.to_string(),
        })
        .inc();
}

/// `sha256:` and the first 12 hex digits of the component's digest.
fn short_version(digest: &str) -> String {
    digest.chars().take("sha256:".len() + 12).collect()
}

/// A provider's name before `init` has told it: the file stem of its origin.
fn origin_name(origin: &str) -> String {
    let last = origin.rsplit(['/', '\\']).next().unwrap_or(origin);
    let stem = last.split(['.', ':', '@']).next().unwrap_or(last);
    if stem.is_empty() {
        "provider".into()
    } else {
        stem.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_of_retry_afters_lasts_until_a_success_or_a_long_pause() {
        let retrying = Retrying::default();
        let start = Instant::now();
        let at = |seconds: u64| start + Duration::from_secs(seconds);
        assert_eq!(retrying.answered("svc".into(), at(0)), Duration::ZERO);
        assert_eq!(
            retrying.answered("svc".into(), at(100)),
            Duration::from_secs(100)
        );
        assert_eq!(
            retrying.answered("svc".into(), at(130)),
            Duration::from_secs(130),
            "past the grace"
        );
        let paused = 130 + FORGOTTEN_AFTER.as_secs();
        assert_eq!(
            retrying.answered("svc".into(), at(paused)),
            Duration::ZERO,
            "a long pause starts another run"
        );
        retrying.ended("svc");
        assert_eq!(
            retrying.answered("svc".into(), at(paused + 5)),
            Duration::ZERO
        );
    }

    #[test]
    fn origin_names_are_file_stems() {
        assert_eq!(origin_name("/x/y/simcloud.wasm"), "simcloud");
        assert_eq!(origin_name("file:///x/hostile.wasm"), "hostile");
        assert_eq!(origin_name(""), "provider");
    }

    #[test]
    fn errors_keep_contract_kinds_apart_from_sandbox_failures() {
        let error = |kind| ProviderError {
            provider: "p@sha256:0".into(),
            function: Function::InstanceExists,
            kind,
            hints: Vec::new(),
        };
        let not_found = error(ErrorKind::Cloud(CloudError::NotFound {
            message: "gone".into(),
        }));
        assert!(not_found.is_not_found());
        let trap = error(ErrorKind::Sandbox(CallFailure::Trap {
            message: "boom".into(),
        }));
        assert!(!trap.is_not_found());
        assert_eq!(trap.outcome(), "trap");
        let retry = error(ErrorKind::Cloud(CloudError::RetryAfter {
            delay_ms: 1500,
            message: "busy".into(),
        }));
        assert_eq!(retry.retry_after(), Some(Duration::from_millis(1500)));
        assert_eq!(
            trap.to_string(),
            "provider p@sha256:0 instance-exists: the provider trapped: boom"
        );
        let unauthorised = ProviderError {
            hints: vec!["https://api.example.com:443 answered 401 and …".into()],
            ..error(ErrorKind::Cloud(CloudError::Other {
                message: "401 Unauthorized".into(),
            }))
        };
        assert_eq!(
            unauthorised.to_string(),
            "provider p@sha256:0 instance-exists: 401 Unauthorized; hint: https://api.example.com:443 answered 401 and …"
        );
    }
}
