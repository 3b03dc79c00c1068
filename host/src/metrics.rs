//! The manager's own Prometheus metrics for providers: sandboxed calls, compilation and the
//! egress gate. Controllers register theirs beside these in the same registry.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Which provider version did something.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProviderLabels {
    pub provider: String,
    pub version: String,
}

/// One egress request's destination and outcome (`2xx`, `4xx`, `5xx`, `denied`, `rate-limited`, `error`).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EgressLabels {
    pub provider: String,
    pub version: String,
    pub host: String,
    pub outcome: String,
}

/// One egress destination.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EgressHostLabels {
    pub provider: String,
    pub version: String,
    pub host: String,
}

/// One provider call and its outcome (`ok`, a contract error kind, or a sandbox failure).
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub provider: String,
    pub version: String,
    pub function: String,
    pub outcome: String,
}

/// One provider function.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FunctionLabels {
    pub provider: String,
    pub version: String,
    pub function: String,
}

/// Where precompiled code came from: `cache` or `compile`.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CompileLabels {
    pub source: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    // 100 µs .. ~50 s
    Histogram::new(exponential_buckets(0.0001, 2.5, 15))
}

/// Every metric of providers, sandbox and egress.
#[derive(Debug, Clone)]
pub struct Metrics {
    pub provider_calls: Family<CallLabels, Counter>,
    pub provider_call_duration: HistogramFamily<FunctionLabels>,
    pub compiles: Family<CompileLabels, Counter>,
    pub egress_requests: Family<EgressLabels, Counter>,
    pub egress_response_bytes: Family<EgressHostLabels, Counter>,
    pub egress_request_duration: HistogramFamily<EgressHostLabels>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            provider_calls: Family::default(),
            provider_call_duration: Family::new_with_constructor(latency_histogram),
            compiles: Family::default(),
            egress_requests: Family::default(),
            egress_response_bytes: Family::default(),
            egress_request_duration: Family::new_with_constructor(latency_histogram),
        }
    }
}

impl Metrics {
    /// Register every metric under the `wasm_ccm` prefix.
    pub fn register(&self, registry: &mut Registry) {
        let registry = registry.sub_registry_with_prefix("wasm_ccm");
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
