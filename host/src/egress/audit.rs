//! The egress audit trail: one record per request a provider made or tried to make, as
//! metrics, in a bounded in-memory list for summaries (`wasm-ccm demo`, `provider call`),
//! and as a structured log event (target `wasm_ccm::egress::audit`).
//!
//! Metrics count each request under the grant that matched it (or `denied`), never under
//! the destination a provider named, so their series are as many as the allow-list's
//! entries whatever names a provider tries.
//!
//! Records and metrics are never dropped. Log events are, twice over. By default
//! ([`AuditLogScope::Failures`]) only a request that failed (refused, rate-limited, no
//! answer, or an answer of 400 or above) is logged at INFO; one that succeeded is a DEBUG
//! event, so a quiet cluster's log is not mostly audit lines (`--egress-audit-log=all` logs
//! every request at INFO). And a provider looping on refused or rate-limited requests gets
//! an answer in microseconds, and would otherwise write log events as fast as it runs: each
//! provider version draws its events from a token bucket ([`AuditLogLimits`]); past it,
//! events are counted, and one warning per [`AuditLogLimits::summary_interval`] says how
//! many were suppressed. An event the log's filter drops (a DEBUG event under an INFO
//! filter) draws nothing from the bucket.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::metrics::{EgressGrantLabels, EgressLabels, EgressSignedLabels, Metrics, NO_GRANT};
use crate::rate::{Budgets, RateBudget};

/// How many records the in-memory trail keeps.
const RECENT_CAPACITY: usize = 1024;

/// How many audit log events each provider version may write.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AuditLogLimits {
    /// Events per second, and burst, of one provider version (`--egress-audit-log-rate`,
    /// `--egress-audit-log-burst`; default 100 a second, burst 1000: more than the default
    /// egress budget lets a provider send to one destination, so a well-behaved provider's
    /// every request is logged, while a refusal loop writes at most ~30 KB of events a
    /// second).
    pub rate: RateBudget,
    /// At most one "suppressed" warning per provider version in this time (default 10s);
    /// it comes with the version's first audit record after the interval.
    pub summary_interval: Duration,
    /// Which requests are logged at INFO (`--egress-audit-log`, `spec.egress.auditLog`).
    pub scope: AuditLogScope,
}

/// Which requests the audit trail logs at INFO; the others are DEBUG events.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum AuditLogScope {
    /// Requests that failed: refused, rate-limited, unanswered, or answered with a status
    /// of 400 or above.
    #[default]
    Failures,
    /// Every request.
    All,
}

impl Default for AuditLogLimits {
    fn default() -> Self {
        AuditLogLimits {
            rate: RateBudget {
                per_second: 100.0,
                burst: 1000,
            },
            summary_interval: Duration::from_secs(10),
            scope: AuditLogScope::default(),
        }
    }
}

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
    /// The allow-list entry that matched `host`, as the operator's grant reads
    /// (`https://*.example.com`); `None` if no entry did. Metrics count requests by this,
    /// never by `host`, which the provider chooses.
    pub grant: Option<String>,
    /// URL path, without the query; cut to 512 bytes.
    pub path: String,
    /// For a request a signing rule applies to: the AWS service and API action, read from
    /// the query (so an action sent as `GET /?Action=…` is kept too) or the body.
    pub aws: Option<AwsCall>,
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

/// The AWS service and API action of a request the gate signed, or refused to sign.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AwsCall {
    /// The service it is signed for, e.g. `ec2`.
    pub service: String,
    /// The API action (`DescribeInstances`), `None` for a REST request (which names none)
    /// or one whose action could not be told.
    pub action: Option<String>,
    /// The `service` and `action` label values of `wasm_ccm_egress_signed_requests_total`,
    /// from a bounded set (the rule's lists and the gate's own), else `other`.
    #[serde(skip)]
    pub labels: (String, String),
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

    /// Whether the request was answered below 400 (and not refused or failed by the gate).
    pub fn succeeded(&self) -> bool {
        self.denied.is_none() && self.status.is_some_and(|status| status < 400)
    }
}

/// Where audit records go.
#[derive(Debug, Clone)]
pub struct Audit {
    metrics: Arc<Metrics>,
    recent: Arc<Mutex<VecDeque<AuditRecord>>>,
    log: Arc<AuditLog>,
}

/// The log event buckets of each provider version, and what each suppressed.
#[derive(Debug)]
struct AuditLog {
    limits: AuditLogLimits,
    /// Keyed by `provider@version`.
    buckets: Budgets,
    suppressed: Mutex<HashMap<String, Suppressed>>,
}

/// Events of one provider version not logged since the last summary.
#[derive(Debug)]
struct Suppressed {
    count: u64,
    since: Instant,
}

impl AuditLog {
    /// Whether `record`, which the log's filter takes if `wanted`, may be logged; first
    /// warns about the events its version had suppressed, once the summary interval has
    /// passed (for every record, so that a provider cannot keep a summary of refusals back
    /// by answering only successes, which the filter leaves out).
    fn admit(&self, record: &AuditRecord, wanted: bool) -> bool {
        let key = format!("{}@{}", record.provider, record.version);
        let admitted = wanted && self.buckets.take(&key).is_ok();
        let mut suppressed = self.suppressed.lock().unwrap_or_else(|p| p.into_inner());
        if wanted && !admitted {
            let now = Instant::now();
            suppressed
                .entry(key.clone())
                .or_insert(Suppressed {
                    count: 0,
                    since: now,
                })
                .count += 1;
        }
        if let Some(pending) = suppressed.get(&key)
            && pending.since.elapsed() >= self.limits.summary_interval
        {
            let count = pending.count;
            suppressed.remove(&key);
            drop(suppressed);
            let rate = self.limits.rate;
            tracing::warn!(
                target: "wasm_ccm::egress::audit",
                provider = %record.provider,
                version = %record.version,
                suppressed = count,
                "{count} egress audit events suppressed: more than {} a second (burst {}, --egress-audit-log-rate); every request is still counted in wasm_ccm_egress_requests_total",
                rate.per_second,
                rate.burst
            );
        }
        admitted
    }
}

impl Audit {
    /// An empty trail that counts its records into `metrics` and logs within `limits`.
    pub fn new(metrics: Arc<Metrics>, limits: AuditLogLimits) -> Self {
        Audit {
            metrics,
            recent: Arc::default(),
            log: Arc::new(AuditLog {
                limits,
                buckets: Budgets::new(limits.rate),
                suppressed: Mutex::default(),
            }),
        }
    }

    /// Count and keep `record`, and log it if the log's filter takes its level and its
    /// version's log budget allows.
    pub fn record(&self, record: AuditRecord) {
        let at_info = self.log.limits.scope == AuditLogScope::All || !record.succeeded();
        let filtered_in = if at_info {
            tracing::enabled!(target: "wasm_ccm::egress::audit", tracing::Level::INFO)
        } else {
            tracing::enabled!(target: "wasm_ccm::egress::audit", tracing::Level::DEBUG)
        };
        if self.log.admit(&record, filtered_in) {
            log_event(&record, at_info);
        }
        self.count(&record);
        let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if recent.len() == RECENT_CAPACITY {
            recent.pop_front();
        }
        recent.push_back(record);
    }

    fn count(&self, record: &AuditRecord) {
        let grant = EgressGrantLabels {
            provider: record.provider.clone(),
            version: record.version.clone(),
            grant: record.grant.as_deref().unwrap_or(NO_GRANT).to_string(),
        };
        let mut labels = EgressLabels {
            provider: grant.provider.clone(),
            version: grant.version.clone(),
            grant: grant.grant.clone(),
            outcome: record.outcome(),
        };
        self.metrics.egress_requests.get_or_create(&labels).inc();
        if let Some(aws) = &record.aws {
            // The request's labels, and the service and action.
            let signed = EgressSignedLabels {
                provider: std::mem::take(&mut labels.provider),
                version: std::mem::take(&mut labels.version),
                grant: std::mem::take(&mut labels.grant),
                service: aws.labels.0.clone(),
                action: aws.labels.1.clone(),
                outcome: std::mem::take(&mut labels.outcome),
            };
            self.metrics
                .egress_signed_requests
                .get_or_create(&signed)
                .inc();
        }
        self.metrics
            .egress_response_bytes
            .get_or_create(&grant)
            .inc_by(record.response_bytes);
        self.metrics
            .egress_request_duration
            .get_or_create(&grant)
            .observe(record.latency.as_secs_f64());
    }

    /// The latest records, oldest first.
    pub fn recent(&self) -> Vec<AuditRecord> {
        let recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
        recent.iter().cloned().collect()
    }
}

/// Write `record` as an event under target `wasm_ccm::egress::audit`, at INFO or DEBUG.
fn log_event(record: &AuditRecord, at_info: bool) {
    macro_rules! event {
        ($level:expr) => {
            tracing::event!(
                target: "wasm_ccm::egress::audit",
                $level,
                provider = %record.provider,
                version = %record.version,
                method = %record.method,
                host = %record.host,
                grant = record.grant.as_deref(),
                path = %record.path,
                service = record.aws.as_ref().map(|aws| aws.service.as_str()),
                action = record.aws.as_ref().and_then(|aws| aws.action.as_deref()),
                status = record.status,
                denied = record.denied.as_deref(),
                response_bytes = record.response_bytes,
                latency_ms = record.latency.as_secs_f64() * 1000.0,
                connection_reused = record.connection_reused,
                "egress"
            )
        };
    }
    if at_info {
        event!(tracing::Level::INFO);
    } else {
        event!(tracing::Level::DEBUG);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run `test` with a log that takes INFO events and above, as the manager's default.
    fn with_info_log(test: impl FnOnce()) {
        let log = tracing_subscriber::fmt()
            .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(log, test);
    }

    fn answered(version: &str, status: u16) -> AuditRecord {
        AuditRecord {
            status: Some(status),
            denied: None,
            grant: Some("https://api.example.com".into()),
            ..refused(version)
        }
    }

    fn refused(version: &str) -> AuditRecord {
        AuditRecord {
            provider: "looping".into(),
            version: version.into(),
            method: "GET".into(),
            host: "https://evil.example:443".into(),
            grant: None,
            path: "/".into(),
            aws: None,
            status: None,
            denied: Some("no --allow entry matches (granted: none)".into()),
            response_bytes: 0,
            latency: Duration::ZERO,
            connection_reused: false,
        }
    }

    #[test]
    fn successes_logged_at_debug_under_an_info_log_leave_the_budget_to_failures() {
        let burst_of_one = |scope| AuditLogLimits {
            rate: RateBudget {
                per_second: 0.001,
                burst: 1,
            },
            summary_interval: Duration::from_secs(3600),
            scope,
        };
        with_info_log(|| {
            let audit = Audit::new(Arc::default(), burst_of_one(AuditLogScope::Failures));
            for status in [200, 204, 301, 399] {
                audit.record(answered("sha256:000000000001", status));
            }
            audit.record(answered("sha256:000000000001", 404));
            assert!(
                audit.log.suppressed.lock().unwrap().is_empty(),
                "the 404 took the one event the budget had"
            );
            audit.record(refused("sha256:000000000001"));
            assert_eq!(
                audit.log.suppressed.lock().unwrap()["looping@sha256:000000000001"].count,
                1,
                "the refusal after it found the budget spent"
            );

            let audit = Audit::new(Arc::default(), burst_of_one(AuditLogScope::All));
            for _ in 0..5 {
                audit.record(answered("sha256:000000000001", 200));
            }
            assert_eq!(
                audit.log.suppressed.lock().unwrap()["looping@sha256:000000000001"].count,
                4,
                "with every request logged, successes draw on the budget"
            );
        });
    }

    #[test]
    fn a_summary_of_suppressed_refusals_comes_with_the_next_record_a_success_too() {
        let limits = AuditLogLimits {
            rate: RateBudget {
                per_second: 0.001,
                burst: 1,
            },
            summary_interval: Duration::ZERO,
            scope: AuditLogScope::Failures,
        };
        with_info_log(|| {
            let audit = Audit::new(Arc::default(), limits);
            audit.record(refused("sha256:000000000001"));
            // Suppressed, and summarised at once (a zero interval) by itself: count again.
            audit.record(refused("sha256:000000000001"));
            audit.log.suppressed.lock().unwrap().insert(
                "looping@sha256:000000000001".into(),
                Suppressed {
                    count: 7,
                    since: Instant::now(),
                },
            );
            audit.record(answered("sha256:000000000001", 200));
            assert!(
                audit.log.suppressed.lock().unwrap().is_empty(),
                "a success, which the log leaves out, still brings the summary"
            );
        });
    }

    #[test]
    fn past_its_log_budget_a_version_is_kept_and_counted_but_not_logged() {
        let metrics = Arc::new(Metrics::default());
        let limits = AuditLogLimits {
            rate: RateBudget {
                per_second: 0.001,
                burst: 10,
            },
            summary_interval: Duration::from_secs(3600),
            scope: AuditLogScope::Failures,
        };
        let audit = Audit::new(metrics.clone(), limits);
        with_info_log(|| {
            for _ in 0..50 {
                audit.record(refused("sha256:000000000001"));
            }
        });
        let suppressed = |key: &str| audit.log.suppressed.lock().unwrap()[key].count;
        assert_eq!(
            suppressed("looping@sha256:000000000001"),
            40,
            "10 logged (the burst), 40 suppressed"
        );
        assert!(
            audit.log.admit(&refused("sha256:000000000002"), true),
            "each version has its own budget"
        );
        assert_eq!(audit.recent().len(), 50, "every record is kept");
        let denied = metrics
            .egress_requests
            .get_or_create(&EgressLabels {
                provider: "looping".into(),
                version: "sha256:000000000001".into(),
                grant: "denied".into(),
                outcome: "denied".into(),
            })
            .get();
        assert_eq!(denied, 50, "and counted");
    }
}
