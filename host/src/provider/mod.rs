//! The typed provider facade: async Rust methods for every contract function over one
//! loaded provider version. This is all controllers see of a provider: they do not know
//! wasm exists.
//!
//! The methods are declared from the contract's one table ([`crate::contract_table!`]), each
//! by the call path its line names. Every call goes through one path ([`Provider::call`]),
//! which times it, counts its outcome and maps its failure; the read-only ones also hand
//! their inputs and answer to a [`Shadow`], when one is attached.
//!
//! [`ProviderError`] keeps the contract's error kinds apart from sandbox failures, so a
//! controller can tell "the instance is gone" (`not-found`) from "the provider broke"
//! (trap, deadline, memory, egress denied) and never deletes a node on the latter.
//!
//! [`ProviderSlot`] holds the active version and swaps it atomically; a [`Shadow`] runs a
//! candidate version beside it on the read-only calls.

mod shadow;
mod slot;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::contract::{Capabilities, CloudError, Function, Node, Service};
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
}

fn describe(denials: &[Denial]) -> String {
    let all: Vec<String> = denials
        .iter()
        .map(|d| format!("{}: {}", d.request, d.reason))
        .collect();
    all.join("; ")
}

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

    /// The fixed delay the provider asked for, if it asked to be called again.
    pub fn retry_after(&self) -> Option<Duration> {
        match self.kind {
            ErrorKind::Cloud(CloudError::RetryAfter { delay_ms, .. }) => {
                Some(Duration::from_millis(delay_ms))
            }
            _ => None,
        }
    }

    /// Whether the call counts as a failure of the provider version when versions are
    /// compared (automatic rollback): the sandbox ended it, the gate refused its requests,
    /// or the provider answered `other`. Answers the contract expects in normal operation
    /// (`not-found`, `retry-after`, `not-implemented`, `implemented-elsewhere`) do not.
    pub fn is_version_failure(&self) -> bool {
        matches!(
            self.kind,
            ErrorKind::Sandbox(_)
                | ErrorKind::EgressDenied { .. }
                | ErrorKind::Cloud(CloudError::Other { .. })
        )
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
        // `init` is counted under the name it answered, as every later call: a dashboard's
        // `sum by (provider)` does not split a version's `init` from its other calls.
        let guest = match &answered {
            Ok(Finished {
                value: Ok(capabilities),
                ..
            }) => guest.initialised(
                Caller {
                    // Every record about the provider names it: one name, one line.
                    provider: crate::text::escaped(&capabilities.name).into_owned(),
                    version: version.clone(),
                },
                capabilities,
            ),
            _ => guest,
        };
        let capabilities =
            settle(&guest, &metrics, Function::Init, started, answered).map_err(|error| {
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
        T: Answer + Clone + serde::Serialize + PartialEq + std::fmt::Debug,
    {
        let mirror = self.shadow.as_ref().and_then(|shadow| {
            let held = args.hold();
            shadow.mirror(function, move |candidate| async move {
                candidate.call(function, held.args()).await
            })
        });
        settled(mirror, self.call(function, args).await)
    }

    /// A call carrying the nodes of a load balancer: a provider that reads nodes through a
    /// `node-set` is lent them without a copy; any other gets them as a list.
    async fn with_nodes<T: Answer>(
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

    /// The one path of every call: run `function` in the sandbox, time it, count its
    /// outcome and map its failure to a [`ProviderError`].
    async fn call<A: Args, T: Answer>(
        &self,
        function: Function,
        args: A,
    ) -> Result<T, ProviderError> {
        let result = call(&self.guest, &self.metrics, function, args).await;
        self.tally.record(&result);
        result
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
trait Holdable: Args {
    /// The owned copy.
    type Held: Held;
    /// Copy the arguments.
    fn hold(&self) -> Self::Held;
}

/// An owned copy of a read-only call's arguments.
trait Held: Send + Sync + 'static {
    /// The arguments it lends.
    type Args<'a>: Args
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

/// Run `function` on `guest`, recording metrics; the facade's result.
async fn call<A: Args, T: Answer>(
    guest: &Guest,
    metrics: &Metrics,
    function: Function,
    args: A,
) -> Result<T, ProviderError> {
    let started = Instant::now();
    let result = guest.call(function, args).await;
    settle(guest, metrics, function, started, result)
}

/// Turn a sandbox result into the facade's, recording metrics.
fn settle<T>(
    guest: &Guest,
    metrics: &Metrics,
    function: Function,
    started: Instant,
    result: Called<T>,
) -> Result<T, ProviderError> {
    let (kind, hints) = match result {
        Ok(Finished {
            value: Ok(value), ..
        }) => {
            observe(guest, metrics, function, started, "ok");
            return Ok(value);
        }
        Ok(Finished {
            value: Err(CloudError::Other { message }),
            denials,
            hints,
        }) if !denials.is_empty() => (ErrorKind::EgressDenied { denials, message }, hints),
        Ok(Finished {
            value: Err(error),
            hints,
            ..
        }) => (ErrorKind::Cloud(error), hints),
        Err(failure) => (ErrorKind::Sandbox(failure), Vec::new()),
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
