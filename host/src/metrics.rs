//! The manager's own Prometheus metrics for providers: sandboxed calls, compilation, the
//! budgets of the host interface (cache, logs) and the egress gate. Controllers register theirs beside these in the same registry.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Which provider version did something.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    /// Provider name: `capabilities.name`, or the file stem until `init` answers.
    pub provider: String,
    /// `sha256:` and the first 12 hex digits of the component's digest.
    pub version: String,
}

/// One egress request's destination and outcome (`2xx`, `4xx`, `5xx`, `denied`, `rate-limited`, `error`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EgressLabels {
    /// Provider name: `capabilities.name`, or the file stem until `init` answers.
    pub provider: String,
    /// `sha256:` and the first 12 hex digits of the component's digest.
    pub version: String,
    /// Destination as `scheme://host:port`.
    pub host: String,
    /// `2xx`, `4xx`, `5xx`, `denied`, `rate-limited` or `error`.
    pub outcome: String,
}

/// One egress destination.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EgressHostLabels {
    /// Provider name: `capabilities.name`, or the file stem until `init` answers.
    pub provider: String,
    /// `sha256:` and the first 12 hex digits of the component's digest.
    pub version: String,
    /// Destination as `scheme://host:port`.
    pub host: String,
}

/// One provider call and its outcome (`ok`, a contract error kind, or a sandbox failure).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// Provider name: `capabilities.name`, or the file stem until `init` answers.
    pub provider: String,
    /// `sha256:` and the first 12 hex digits of the component's digest.
    pub version: String,
    /// Contract function as named in the WIT, e.g. `instance-metadata`.
    pub function: String,
    /// `ok`, a cloud error (`not-found`, `retry-after`, `error`...), a sandbox failure
    /// (`trap`, `deadline`, `memory`...) or `egress-denied`: `ProviderError::outcome`.
    pub outcome: String,
}

/// One provider function.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FunctionLabels {
    /// Provider name: `capabilities.name`, or the file stem until `init` answers.
    pub provider: String,
    /// `sha256:` and the first 12 hex digits of the component's digest.
    pub version: String,
    /// Contract function as named in the WIT, e.g. `instance-metadata`.
    pub function: String,
}

/// A provider version and the limit it ran into (`key-too-long`, `value-too-large`,
/// `over-budget` for the cache; `lines-per-call`, `bytes-per-call`, `rate` for logs).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LimitLabels {
    /// The provider's name.
    pub provider: String,
    /// Its version (`sha256:<12 hex>`).
    pub version: String,
    /// The limit.
    pub limit: String,
}

/// Where precompiled code came from: `cache` or `compile`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CompileLabels {
    /// `cache` (loaded from the `compiled/` directory of `--cache-dir`) or `compile`.
    pub source: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100 µs .. ~50 s
    Histogram::new(exponential_buckets(0.0001, 2.5, 15))
}

/// What exactly a loaded provider version is.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderInfoLabels {
    /// Provider name, as `init` reported it.
    pub provider: String,
    /// `sha256:` and the first 12 hex digits of `digest`: the `version` label of the other
    /// metrics.
    pub version: String,
    /// The manifest digest of an OCI artifact, or the component's sha256 for a file.
    pub digest: String,
    /// The reference it was resolved from (`oci://…:TAG`, `file://…`).
    pub source: String,
}

/// Every metric of providers, sandbox and egress.
#[derive(Debug, Clone)]
pub struct Metrics {
    /// `wasm_ccm_provider_info`: 1 for each loaded provider version.
    pub provider_info: Family<ProviderInfoLabels, Gauge>,
    /// `wasm_ccm_provider_calls_total`: calls by function and outcome.
    pub provider_calls: Family<CallLabels, Counter>,
    /// `wasm_ccm_provider_call_duration_seconds`: call latency, waiting for a slot and
    /// instantiation included (buckets 100 µs to ~50 s).
    pub provider_call_duration: HistogramFamily<FunctionLabels>,
    /// `wasm_ccm_sandbox_compiles_total`: components made ready, by where their machine
    /// code came from.
    pub compiles: Family<CompileLabels, Counter>,
    /// Bytes each provider version's cache holds (keys, values, per-entry overhead).
    pub provider_cache_bytes: Family<ProviderLabels, Gauge>,
    /// Unexpired entries evicted to make room in a provider version's cache.
    pub provider_cache_evictions: Family<ProviderLabels, Counter>,
    /// Values a provider asked to cache that were not stored.
    pub provider_cache_refused: Family<LimitLabels, Counter>,
    /// Provider log lines dropped by the log budgets.
    pub provider_log_lines_dropped: Family<LimitLabels, Counter>,
    /// `wasm_ccm_egress_requests_total`: provider HTTP requests, by destination and outcome.
    pub egress_requests: Family<EgressLabels, Counter>,
    /// `wasm_ccm_egress_response_bytes_total`: response body bytes providers received.
    pub egress_response_bytes: Family<EgressHostLabels, Counter>,
    /// `wasm_ccm_egress_request_duration_seconds`: request to end of response body
    /// (buckets 100 µs to ~50 s).
    pub egress_request_duration: HistogramFamily<EgressHostLabels>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            provider_info: Family::default(),
            provider_calls: Family::default(),
            provider_call_duration: Family::new_with_constructor(latency_histogram),
            compiles: Family::default(),
            provider_cache_bytes: Family::default(),
            provider_cache_evictions: Family::default(),
            provider_cache_refused: Family::default(),
            provider_log_lines_dropped: Family::default(),
            egress_requests: Family::default(),
            egress_response_bytes: Family::default(),
            egress_request_duration: Family::new_with_constructor(latency_histogram),
        }
    }
}

impl Metrics {
    /// Record that provider `name` at `version` (its short digest) is loaded from
    /// `identity`.
    pub fn provider_info(&self, name: &str, version: &str, identity: &crate::source::Identity) {
        self.provider_info
            .get_or_create(&ProviderInfoLabels {
                provider: name.to_string(),
                version: version.to_string(),
                digest: identity.digest.clone(),
                source: identity.reference.clone(),
            })
            .set(1);
    }

    /// Record that a version recorded by [`Metrics::provider_info`] is no longer loaded.
    pub fn provider_unloaded(&self, name: &str, version: &str, identity: &crate::source::Identity) {
        self.provider_info.remove(&ProviderInfoLabels {
            provider: name.to_string(),
            version: version.to_string(),
            digest: identity.digest.clone(),
            source: identity.reference.clone(),
        });
    }

    /// Register every metric under the `wasm_ccm` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("wasm_ccm");
        registry.register(
            "provider_info",
            "Loaded provider versions: name, short and full digest, and the reference resolved",
            self.provider_info.clone(),
        );
        registry.register(
            "provider_calls",
            "Calls into provider components, by function and outcome",
            self.provider_calls.clone(),
        );
        registry.register(
            "provider_call_duration_seconds",
            "Duration of calls into provider components, sandbox set-up included",
            self.provider_call_duration.clone(),
        );
        registry.register(
            "sandbox_compiles",
            "Provider components made ready to run, by source of the machine code",
            self.compiles.clone(),
        );
        registry.register(
            "provider_cache_bytes",
            "Bytes a provider version keeps in its cache: keys, values and per-entry overhead",
            self.provider_cache_bytes.clone(),
        );
        registry.register(
            "provider_cache_evictions",
            "Unexpired cache entries evicted to keep a provider version within its cache size",
            self.provider_cache_evictions.clone(),
        );
        registry.register(
            "provider_cache_refused",
            "Values a provider asked to cache that were not stored, by the limit they broke",
            self.provider_cache_refused.clone(),
        );
        registry.register(
            "provider_log_lines_dropped",
            "Provider log lines (host log, stdout, stderr) dropped, by the limit that dropped them",
            self.provider_log_lines_dropped.clone(),
        );
        registry.register(
            "egress_requests",
            "HTTP requests providers made, by destination and outcome",
            self.egress_requests.clone(),
        );
        registry.register(
            "egress_response_bytes",
            "Response body bytes providers received, by destination",
            self.egress_response_bytes.clone(),
        );
        registry.register(
            "egress_request_duration_seconds",
            "Time from request to end of response body, by destination",
            self.egress_request_duration.clone(),
        );
    }
}
