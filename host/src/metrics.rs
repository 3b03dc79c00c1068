//! The manager's own Prometheus metrics for providers: sandboxed calls, compilation, the
//! budgets of the host interface (cache, logs) and the egress gate. Controllers register theirs beside these in the same registry.
//!
//! Every label value is bounded by what the operator configured, never by what a provider
//! asks for: an egress request is counted under the grant that allowed it (or `denied`),
//! not its destination. Each provider version's series are removed when the version is
//! unloaded ([`Metrics::provider_unloaded`]).

mod versions;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

pub use versions::{VersionFamily, VersionLabel};

/// The `grant` label of a request no allow-list entry covers.
pub const NO_GRANT: &str = "denied";

/// Which provider version did something.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    /// Provider name: `capabilities.name` (before `init` answers, the name it must answer, or
    /// the file stem of its origin when none was given).
    pub provider: String,
    /// `sha256:` and the first 12 hex digits of the version's digest.
    pub version: String,
}

/// One egress request's grant and outcome (`2xx`, `4xx`, `5xx`, `denied`, `rate-limited`, `error`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EgressLabels {
    /// Provider name: `capabilities.name` (before `init` answers, the name it must answer, or
    /// the file stem of its origin when none was given).
    pub provider: String,
    /// `sha256:` and the first 12 hex digits of the version's digest.
    pub version: String,
    /// The allow-list entry that matched the destination (`https://*.example.com`), or
    /// [`NO_GRANT`]; never the destination a provider named.
    pub grant: String,
    /// `2xx`, `4xx`, `5xx`, `denied`, `rate-limited` or `error`.
    pub outcome: String,
}

/// One grant of a provider version.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EgressGrantLabels {
    /// Provider name: `capabilities.name` (before `init` answers, the name it must answer, or
    /// the file stem of its origin when none was given).
    pub provider: String,
    /// `sha256:` and the first 12 hex digits of the version's digest.
    pub version: String,
    /// The allow-list entry that matched the destination, or [`NO_GRANT`].
    pub grant: String,
}

/// One request the gate signed for AWS (or refused to sign): its grant, service, API action
/// and outcome. Service and action values come from a bounded set (the signing rule's
/// `services=` and `actions=`, and the gate's own lists), any other counting as `other`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EgressSignedLabels {
    /// Provider name: `capabilities.name` (before `init` answers, the name it must answer, or
    /// the file stem of its origin when none was given).
    pub provider: String,
    /// `sha256:` and the first 12 hex digits of the version's digest.
    pub version: String,
    /// The allow-list entry that matched the destination.
    pub grant: String,
    /// The AWS service signing name, e.g. `ec2`, or `other`.
    pub service: String,
    /// The API action, e.g. `DescribeInstances`; `none` for a REST request; or `other`.
    pub action: String,
    /// `2xx`, `4xx`, `5xx`, `denied`, `rate-limited` or `error`.
    pub outcome: String,
}

/// One provider call and its outcome (`ok`, a contract error kind, or a sandbox failure).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    /// Provider name: `capabilities.name` (before `init` answers, the name it must answer, or
    /// the file stem of its origin when none was given).
    pub provider: String,
    /// `sha256:` and the first 12 hex digits of the version's digest.
    pub version: String,
    /// Contract function as named in the WIT, e.g. `instance-metadata`.
    pub function: String,
    /// `ok`, a cloud error as the contract names it (`not-found`, `retry-after`, `other`...),
    /// a sandbox failure (`trap`, `deadline`, `memory`...) or `egress-denied`:
    /// `ProviderError::outcome`.
    pub outcome: String,
}

/// One provider function.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FunctionLabels {
    /// Provider name: `capabilities.name` (before `init` answers, the name it must answer, or
    /// the file stem of its origin when none was given).
    pub provider: String,
    /// `sha256:` and the first 12 hex digits of the version's digest.
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

type HistogramFamily<L> = VersionFamily<L, Histogram, fn() -> Histogram>;

macro_rules! version_labels {
    ($($labels:ty),*) => {$(
        impl VersionLabel for $labels {
            fn version(&self) -> &str {
                &self.version
            }
        }
    )*};
}

version_labels!(
    ProviderLabels,
    EgressLabels,
    EgressGrantLabels,
    EgressSignedLabels,
    CallLabels,
    FunctionLabels,
    LimitLabels
);

/// Latency buckets of calls and egress requests, in seconds: 100 µs to 60 s in steps of 1,
/// 2.5 and 5, written out so that each bound reads as written (`le="0.00025"`); products of
/// a factor read `le="5.9604644775390629"`.
const LATENCY_BUCKETS: [f64; 18] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
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
    pub provider_calls: VersionFamily<CallLabels, Counter>,
    /// `wasm_ccm_provider_call_duration_seconds`: call latency, waiting for a slot and
    /// instantiation included (buckets 100 µs to 60 s).
    pub provider_call_duration: HistogramFamily<FunctionLabels>,
    /// `wasm_ccm_sandbox_compiles_total`: components made ready, by where their machine
    /// code came from.
    pub compiles: Family<CompileLabels, Counter>,
    /// Bytes each provider version's cache holds (keys, values, per-entry overhead).
    pub provider_cache_bytes: VersionFamily<ProviderLabels, Gauge>,
    /// Unexpired entries evicted to make room in a provider version's cache.
    pub provider_cache_evictions: VersionFamily<ProviderLabels, Counter>,
    /// Values a provider asked to cache that were not stored.
    pub provider_cache_refused: VersionFamily<LimitLabels, Counter>,
    /// Provider log lines dropped by the log budgets.
    pub provider_log_lines_dropped: VersionFamily<LimitLabels, Counter>,
    /// `wasm_ccm_egress_requests_total`: provider HTTP requests, by grant and outcome.
    pub egress_requests: VersionFamily<EgressLabels, Counter>,
    /// `wasm_ccm_egress_response_bytes_total`: response body bytes providers received.
    pub egress_response_bytes: VersionFamily<EgressGrantLabels, Counter>,
    /// `wasm_ccm_egress_signed_requests_total`: requests the gate signed for AWS, or
    /// refused to sign, by grant, service, action and outcome.
    pub egress_signed_requests: VersionFamily<EgressSignedLabels, Counter>,
    /// `wasm_ccm_egress_request_duration_seconds`: request to end of response body
    /// (buckets 100 µs to 60 s).
    pub egress_request_duration: HistogramFamily<EgressGrantLabels>,
    /// How many loaded instances each version has (a version may be loaded twice, e.g.
    /// with another cloud config); its series go when the last one is unloaded.
    loaded: Arc<Mutex<HashMap<String, usize>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            provider_info: Family::default(),
            provider_calls: VersionFamily::default(),
            provider_call_duration: VersionFamily::new_with_constructor(latency_histogram),
            compiles: Family::default(),
            provider_cache_bytes: VersionFamily::default(),
            provider_cache_evictions: VersionFamily::default(),
            provider_cache_refused: VersionFamily::default(),
            provider_log_lines_dropped: VersionFamily::default(),
            egress_requests: VersionFamily::default(),
            egress_response_bytes: VersionFamily::default(),
            egress_signed_requests: VersionFamily::default(),
            egress_request_duration: VersionFamily::new_with_constructor(latency_histogram),
            loaded: Arc::default(),
        }
    }
}

impl Metrics {
    /// Record that provider `name` at `version` (its short digest) is loaded from
    /// `identity`.
    pub fn provider_info(&self, name: &str, version: &str, identity: &crate::source::Identity) {
        *self
            .loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(version.to_string())
            .or_default() += 1;
        self.provider_info
            .get_or_create(&ProviderInfoLabels {
                provider: name.to_string(),
                version: version.to_string(),
                digest: identity.digest.clone(),
                source: identity.reference.clone(),
            })
            .set(1);
    }

    /// Record that a version recorded by [`Metrics::provider_info`] is no longer loaded:
    /// once no instance of it is, every series of the version goes.
    pub fn provider_unloaded(&self, name: &str, version: &str, identity: &crate::source::Identity) {
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        let instances = loaded.entry(version.to_string()).or_default();
        *instances = instances.saturating_sub(1);
        if *instances > 0 {
            return;
        }
        loaded.remove(version);
        drop(loaded);
        self.provider_info.remove(&ProviderInfoLabels {
            provider: name.to_string(),
            version: version.to_string(),
            digest: identity.digest.clone(),
            source: identity.reference.clone(),
        });
        self.remove_version(version);
    }

    /// Record that a version failed to load (its `init` failed): the series its attempt
    /// made go, unless an instance of the same version is loaded.
    pub fn provider_not_loaded(&self, version: &str) {
        let loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        if !loaded.contains_key(version) {
            drop(loaded);
            self.remove_version(version);
        }
    }

    fn remove_version(&self, version: &str) {
        self.provider_calls.remove_version(version);
        self.provider_call_duration.remove_version(version);
        self.provider_cache_bytes.remove_version(version);
        self.provider_cache_evictions.remove_version(version);
        self.provider_cache_refused.remove_version(version);
        self.provider_log_lines_dropped.remove_version(version);
        self.egress_requests.remove_version(version);
        self.egress_response_bytes.remove_version(version);
        self.egress_request_duration.remove_version(version);
        self.egress_signed_requests.remove_version(version);
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
            "HTTP requests providers made, by grant (the allow-list entry that matched, or denied) and outcome",
            self.egress_requests.clone(),
        );
        registry.register(
            "egress_response_bytes",
            "Response body bytes providers received, by grant",
            self.egress_response_bytes.clone(),
        );
        registry.register(
            "egress_signed_requests",
            "Requests the gate signed for AWS or refused to sign, by grant, service, API action and outcome",
            self.egress_signed_requests.clone(),
        );
        registry.register(
            "egress_request_duration_seconds",
            "Time from request to end of response body, by grant",
            self.egress_request_duration.clone(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::Identity;

    fn rendered(metrics: &Metrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    /// Some series of `version`, as a call, its egress and its logs make them.
    fn used(metrics: &Metrics, version: &str) {
        let call = CallLabels {
            provider: "looping".into(),
            version: version.into(),
            function: "init".into(),
            outcome: "ok".into(),
        };
        metrics.provider_calls.get_or_create(&call).inc();
        let grant = EgressGrantLabels {
            provider: "looping".into(),
            version: version.into(),
            grant: NO_GRANT.into(),
        };
        metrics
            .egress_request_duration
            .get_or_create(&grant)
            .observe(0.1);
        let limit = LimitLabels {
            provider: "looping".into(),
            version: version.into(),
            limit: "rate".into(),
        };
        metrics
            .provider_log_lines_dropped
            .get_or_create(&limit)
            .inc();
    }

    #[test]
    fn a_versions_series_go_when_its_last_instance_is_unloaded() {
        let metrics = Metrics::default();
        let identity = |digest: &str| Identity {
            reference: "file:///looping.wasm".into(),
            digest: digest.into(),
            manifest: None,
        };
        let (old, new) = (
            identity("sha256:000000000001"),
            identity("sha256:000000000002"),
        );
        metrics.provider_info("looping", "sha256:000000000001", &old);
        metrics.provider_info("looping", "sha256:000000000001", &old);
        metrics.provider_info("looping", "sha256:000000000002", &new);
        used(&metrics, "sha256:000000000001");
        used(&metrics, "sha256:000000000002");
        let count = |text: &str, version: &str| text.matches(version).count();
        let before = rendered(&metrics);
        assert!(count(&before, "sha256:000000000001") > 3, "{before}");

        metrics.provider_unloaded("looping", "sha256:000000000001", &old);
        let one_left = rendered(&metrics);
        assert_eq!(
            count(&one_left, "sha256:000000000001"),
            count(&before, "sha256:000000000001"),
            "another instance of the version is loaded: its series stay"
        );
        metrics.provider_unloaded("looping", "sha256:000000000001", &old);
        let after = rendered(&metrics);
        assert_eq!(count(&after, "sha256:000000000001"), 0, "{after}");
        assert_eq!(
            count(&after, "sha256:000000000002"),
            count(&before, "sha256:000000000002"),
            "the other version keeps its series"
        );

        used(&metrics, "sha256:000000000003");
        metrics.provider_not_loaded("sha256:000000000003");
        metrics.provider_not_loaded("sha256:000000000002");
        let failed = rendered(&metrics);
        assert_eq!(
            count(&failed, "sha256:000000000003"),
            0,
            "a failed init's series go"
        );
        assert_eq!(
            count(&failed, "sha256:000000000002"),
            count(&before, "sha256:000000000002"),
            "a failed load of a loaded version removes nothing"
        );
    }
}
