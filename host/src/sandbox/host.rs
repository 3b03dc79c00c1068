//! What the sandbox gives a provider besides `wasi:http`: the `host` interface of the
//! contract (log, cloud config, the per-version cache) and the guest's stdout/stderr, all
//! routed to `tracing` tagged with the provider's name and version, and all within budgets a
//! provider cannot exceed: the cache holds at most `--provider-cache-size` bytes per
//! version ([`cache`]), and logs are capped per call and rate-limited per version
//! ([`logs`]). Provider text is logged with its control characters escaped
//! ([`crate::text::escaped`]), so one message is one record. What the host refuses or drops
//! is reported under target `wasm_ccm::sandbox` and counted in metrics, never silently.

mod cache;
mod logs;

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::Level;

use super::bindings::wasm_ccm::provider::host::{Host, LogLevel};
use super::bindings::wasm_ccm::provider::types;
use super::{CallLimits, CallState};
use crate::egress::Caller;
use crate::metrics::{LimitLabels, Metrics, ProviderLabels};
use crate::text::{cut, escaped};
pub use cache::{CacheLimits, ProviderCache};
use cache::{ENTRY_OVERHEAD, Refusal};
use logs::{CallLog, LogLimit, SANDBOX_TARGET};
pub use logs::{LogLimits, ProviderLogs};

/// Longest log line kept, escaped; the rest is cut.
const MAX_LOG_LINE: usize = 8 * 1024;
/// Most bytes of a refused key quoted in a warning.
const KEY_SHOWN: usize = 64;

/// Where provider-written lines go.
const PROVIDER_TARGET: &str = "wasm_ccm::provider";

/// What the host interface keeps for one call: the limits it enforces, the call's log
/// tally, and the metrics it reports to.
pub(crate) struct HostState {
    cache: CacheLimits,
    log: CallLog,
    metrics: Arc<Metrics>,
}

impl HostState {
    pub(crate) fn new(limits: &CallLimits, metrics: Arc<Metrics>) -> Self {
        HostState {
            cache: limits.provider_cache,
            log: CallLog::new(limits.provider_logs),
            metrics,
        }
    }
}

/// The shared types interface has no functions.
impl types::Host for CallState {}

impl Host for CallState {
    fn log(&mut self, level: LogLevel, message: String) {
        // A line nobody would see costs no budget.
        if !enabled(level) {
            return;
        }
        let message = cut(&message, MAX_LOG_LINE);
        if !self.host.log.admit(message, &self.env.logs) {
            return;
        }
        // One message, one record: a `\n` and a forged record after it stay on its line.
        // Escaped once admitted, so a flood of lines past the budget costs no scan; cut again,
        // as escaping a control character makes up to 8 bytes of one.
        let message = escaped(message);
        let message = cut(&message, MAX_LOG_LINE);
        let caller = &self.env.caller;
        let (provider, version) = (&caller.provider, &caller.version);
        match level {
            LogLevel::Trace => {
                tracing::trace!(target: PROVIDER_TARGET, provider, version, "{message}")
            }
            LogLevel::Debug => {
                tracing::debug!(target: PROVIDER_TARGET, provider, version, "{message}")
            }
            LogLevel::Info => {
                tracing::info!(target: PROVIDER_TARGET, provider, version, "{message}")
            }
            LogLevel::Warn => {
                tracing::warn!(target: PROVIDER_TARGET, provider, version, "{message}")
            }
            LogLevel::Error => {
                tracing::error!(target: PROVIDER_TARGET, provider, version, "{message}")
            }
        }
    }

    fn cloud_config(&mut self) -> Option<Vec<u8>> {
        self.env.cloud_config.as_ref().map(|config| config.to_vec())
    }

    fn cache_get(&mut self, key: String) -> Option<Vec<u8>> {
        self.env.cache.get(&key)
    }

    fn cache_set(&mut self, key: String, value: Vec<u8>, ttl_ms: u64) {
        let value_len = value.len();
        let ttl = Duration::from_millis(ttl_ms);
        let outcome = self.env.cache.set(&key, value, ttl, &self.host.cache);
        let metrics = &self.host.metrics;
        let labels = provider_labels(&self.env.caller);
        match outcome {
            Ok(stored) => {
                if stored.evicted > 0 {
                    metrics
                        .provider_cache_evictions
                        .get_or_create(&labels)
                        .inc_by(stored.evicted as u64);
                }
                set_cache_bytes(metrics, &labels, stored.bytes);
            }
            Err(refusal) => {
                metrics
                    .provider_cache_refused
                    .get_or_create(&LimitLabels {
                        provider: labels.provider.clone(),
                        version: labels.version.clone(),
                        limit: refusal.label().into(),
                    })
                    .inc();
                set_cache_bytes(metrics, &labels, self.env.cache.bytes());
                if let Some(refusals) = self.env.cache.note_refusal(Instant::now()) {
                    let why = refusal_reason(refusal, &key, value_len, &self.host.cache);
                    warn_refused(&self.env.caller, &key, &why, refusals);
                }
            }
        }
    }

    fn cache_delete(&mut self, key: String) {
        let bytes = self.env.cache.delete(&key);
        let labels = provider_labels(&self.env.caller);
        set_cache_bytes(&self.host.metrics, &labels, bytes);
    }
}

/// After a call: log what the guest wrote to stdout and stderr (one event per line, within
/// what is left of the call's log budget), then warn once if the budget dropped lines.
pub(crate) fn finish_call(state: &mut CallState) {
    let caller = &state.env.caller;
    for (stream, pipe) in [("stdout", &state.stdout), ("stderr", &state.stderr)] {
        log_output(
            caller,
            stream,
            &pipe.contents(),
            &mut state.host.log,
            &state.env.logs,
        );
    }
    state.host.log.report(caller, &state.host.metrics);
}

fn log_output(
    caller: &Caller,
    stream: &str,
    output: &[u8],
    log: &mut CallLog,
    bucket: &ProviderLogs,
) {
    if output.is_empty() || !enabled(LogLevel::Info) {
        return;
    }
    let (provider, version) = (&caller.provider, &caller.version);
    for line in String::from_utf8_lossy(output)
        .lines()
        .filter(|l| !l.trim().is_empty())
    {
        let line = cut(line, MAX_LOG_LINE);
        if log.admit(line, bucket) {
            // Split at `\n` above; a `\r`, an escape sequence or another control stays
            // inside its record, escaped.
            let line = escaped(line);
            let line = cut(&line, MAX_LOG_LINE);
            tracing::info!(
                target: PROVIDER_TARGET,
                provider,
                version,
                stream,
                "{line}"
            );
        }
    }
}

/// Whether a provider line at `level` would reach any subscriber.
fn enabled(level: LogLevel) -> bool {
    match level {
        LogLevel::Trace => tracing::enabled!(target: PROVIDER_TARGET, Level::TRACE),
        LogLevel::Debug => tracing::enabled!(target: PROVIDER_TARGET, Level::DEBUG),
        LogLevel::Info => tracing::enabled!(target: PROVIDER_TARGET, Level::INFO),
        LogLevel::Warn => tracing::enabled!(target: PROVIDER_TARGET, Level::WARN),
        LogLevel::Error => tracing::enabled!(target: PROVIDER_TARGET, Level::ERROR),
    }
}

fn provider_labels(caller: &Caller) -> ProviderLabels {
    ProviderLabels {
        provider: caller.provider.clone(),
        version: caller.version.clone(),
    }
}

/// Every series of a provider version's cache and log budgets, at 0: a dashboard or alert
/// over them reads 0, not no data, until a budget is first hit.
pub(crate) fn create_budget_series(metrics: &Metrics, caller: &Caller) {
    let labels = provider_labels(caller);
    metrics.provider_cache_bytes.get_or_create(&labels);
    metrics.provider_cache_evictions.get_or_create(&labels);
    let limit_labels = |limit: &str| LimitLabels {
        provider: labels.provider.clone(),
        version: labels.version.clone(),
        limit: limit.into(),
    };
    for refusal in Refusal::ALL {
        metrics
            .provider_cache_refused
            .get_or_create(&limit_labels(refusal.label()));
    }
    for limit in LogLimit::ALL {
        metrics
            .provider_log_lines_dropped
            .get_or_create(&limit_labels(limit.label()));
    }
}

fn set_cache_bytes(metrics: &Metrics, labels: &ProviderLabels, bytes: usize) {
    metrics
        .provider_cache_bytes
        .get_or_create(labels)
        .set(i64::try_from(bytes).unwrap_or(i64::MAX));
}

/// Why `refusal` happened, in the operator's terms.
fn refusal_reason(refusal: Refusal, key: &str, value_len: usize, limits: &CacheLimits) -> String {
    match refusal {
        Refusal::KeyTooLong => format!(
            "the key is {} bytes, over the {}-byte key limit",
            key.len(),
            limits.max_key_bytes
        ),
        Refusal::ValueTooLarge => format!(
            "the value is {value_len} bytes, over the {}-byte value limit",
            limits.max_value_bytes
        ),
        Refusal::OverBudget => format!(
            "key, value and {ENTRY_OVERHEAD} bytes of overhead make {} bytes, more than the \
             whole cache of {} bytes (--provider-cache-size)",
            key.len() + value_len + ENTRY_OVERHEAD,
            limits.max_bytes
        ),
    }
}

fn warn_refused(caller: &Caller, key: &str, why: &str, refusals: u64) {
    let (provider, version) = (&caller.provider, &caller.version);
    let shown = cut(key, KEY_SHOWN);
    let ellipsis = if shown.len() < key.len() { "…" } else { "" };
    tracing::warn!(
        target: SANDBOX_TARGET,
        provider,
        version,
        refusals,
        "provider {provider}@{version}: cache-set {shown:?}{ellipsis} not stored: {why}; \
         {refusals} value(s) refused since the last warning (at most one a minute; see \
         wasm_ccm_provider_cache_refused_total)"
    );
}
