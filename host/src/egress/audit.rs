//! The egress audit trail: one record per request a provider made or tried to make, as a
//! structured log event (target `wasm_ccm::egress::audit`), as metrics, and in a bounded
//! in-memory list for summaries (`wasm-ccm demo`, `provider call`).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::Serialize;

use crate::metrics::{EgressHostLabels, EgressLabels, Metrics};

/// How many records the in-memory trail keeps.
const RECENT_CAPACITY: usize = 1024;

/// One request, allowed or not.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditRecord {
    /// Name of the calling provider.
    pub provider: String,
    /// Version of the calling provider: `sha256:` and the first 12 hex digits of its digest.
    pub version: String,
    /// HTTP method, e.g. `GET`.
    pub method: String,
    /// `scheme://host:port`.
    pub host: String,
    /// URL path, without the query.
    pub path: String,
    /// The response status, when a response came (a synthetic 429 for rate-limited requests).
    pub status: Option<u16>,
    /// Why the gate refused or failed the request.
    pub denied: Option<String>,
    /// Bytes of response body the provider received.
    pub response_bytes: u64,
    /// From the start of the request to the end of its response body, or to the refusal;
    /// serialised in milliseconds.
    #[serde(serialize_with = "as_millis")]
    pub latency: Duration,
    /// Whether the request went over a pooled connection that had carried a request before
    /// (`false` for a new connection and for requests that never got one).
    pub connection_reused: bool,
}

fn as_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

impl AuditRecord {
    /// `2xx` .. `5xx`, `denied`, `rate-limited` or `error`.
    pub fn outcome(&self) -> String {
        match (&self.denied, self.status) {
            (Some(reason), _) if reason.starts_with("rate budget") => "rate-limited".into(),
            (Some(reason), _) if reason.starts_with("failed:") => "error".into(),
            (Some(_), _) => "denied".into(),
            (None, Some(status)) => format!("{}xx", status / 100),
            (None, None) => "error".into(),
        }
    }
}

/// Where audit records go.
#[derive(Debug, Clone)]
pub struct Audit {
    metrics: Arc<Metrics>,
    recent: Arc<Mutex<VecDeque<AuditRecord>>>,
}

impl Audit {
    /// An empty trail that counts its records into `metrics`.
    pub fn new(metrics: Arc<Metrics>) -> Self {
        Audit {
            metrics,
            recent: Arc::default(),
        }
    }

    /// Log, count and keep `record`.
    pub fn record(&self, record: AuditRecord) {
        tracing::info!(
            target: "wasm_ccm::egress::audit",
            provider = %record.provider,
            version = %record.version,
            method = %record.method,
            host = %record.host,
            path = %record.path,
            status = record.status,
            denied = record.denied.as_deref(),
            response_bytes = record.response_bytes,
            latency_ms = record.latency.as_secs_f64() * 1000.0,
            connection_reused = record.connection_reused,
            "egress"
        );
        let host = EgressHostLabels {
            provider: record.provider.clone(),
            version: record.version.clone(),
            host: record.host.clone(),
        };
        self.metrics
            .egress_requests
            .get_or_create(&EgressLabels {
                provider: host.provider.clone(),
                version: host.version.clone(),
                host: host.host.clone(),
                outcome: record.outcome(),
            })
            .inc();
        self.metrics
            .egress_response_bytes
            .get_or_create(&host)
            .inc_by(record.response_bytes);
        self.metrics
            .egress_request_duration
            .get_or_create(&host)
            .observe(record.latency.as_secs_f64());
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if recent.len() == RECENT_CAPACITY {
            recent.pop_front();
        }
        recent.push_back(record);
    }

    /// The latest records, oldest first.
    pub fn recent(&self) -> Vec<AuditRecord> {
        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        recent.iter().cloned().collect()
    }
}
