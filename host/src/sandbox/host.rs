//! What the sandbox gives a provider besides `wasi:http`: the `host` interface of the
//! contract (log, cloud config, the per-version cache) and the guest's stdout/stderr, all
//! routed to `tracing` tagged with the provider's name and version.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::CallState;
use super::bindings::wasm_ccm::provider::host::{Host, LogLevel};
use super::bindings::wasm_ccm::provider::types;

/// Longest a cache entry lives, whatever TTL the provider asks for.
const MAX_TTL: Duration = Duration::from_secs(3600);
/// Most entries one provider version may keep; beyond it the soonest to expire go first.
const MAX_ENTRIES: usize = 10_000;
/// Largest value one entry may hold.
const MAX_VALUE_BYTES: usize = 1024 * 1024;
/// Longest log line kept; the rest is cut.
const MAX_LOG_LINE: usize = 8 * 1024;

/// Values by key, each with the instant it expires.
type Entries = HashMap<String, (Instant, Vec<u8>)>;

/// The key-value cache shared by all calls of one provider version.
#[derive(Debug, Clone, Default)]
pub struct ProviderCache {
    entries: Arc<Mutex<Entries>>,
}

impl ProviderCache {
    fn get(&self, key: &str) -> Option<Vec<u8>> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        match entries.get(key) {
            Some((expires, value)) if *expires > Instant::now() => Some(value.clone()),
            Some(_) => {
                entries.remove(key);
                None
            }
            None => None,
        }
    }

    fn set(&self, key: String, value: Vec<u8>, ttl: Duration) {
        if value.len() > MAX_VALUE_BYTES {
            return;
        }
        let now = Instant::now();
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() >= MAX_ENTRIES && !entries.contains_key(&key) {
            entries.retain(|_, (expires, _)| *expires > now);
            if entries.len() >= MAX_ENTRIES
                && let Some(soonest) = entries
                    .iter()
                    .min_by_key(|(_, (expires, _))| *expires)
                    .map(|(k, _)| k.clone())
            {
                entries.remove(&soonest);
            }
        }
        entries.insert(key, (now + ttl.min(MAX_TTL), value));
    }

    fn delete(&self, key: &str) {
        self.entries
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
    }
}

/// The shared types interface has no functions.
impl types::Host for CallState {}

impl Host for CallState {
    fn log(&mut self, level: LogLevel, message: String) {
        let caller = &self.env.caller;
        let message = truncate(&message, MAX_LOG_LINE);
        let (provider, version) = (&caller.provider, &caller.version);
        match level {
            LogLevel::Trace => {
                tracing::trace!(target: "wasm_ccm::provider", provider, version, "{message}")
            }
            LogLevel::Debug => {
                tracing::debug!(target: "wasm_ccm::provider", provider, version, "{message}")
            }
            LogLevel::Info => {
                tracing::info!(target: "wasm_ccm::provider", provider, version, "{message}")
            }
            LogLevel::Warn => {
                tracing::warn!(target: "wasm_ccm::provider", provider, version, "{message}")
            }
            LogLevel::Error => {
                tracing::error!(target: "wasm_ccm::provider", provider, version, "{message}")
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
        self.env
            .cache
            .set(key, value, Duration::from_millis(ttl_ms));
    }

    fn cache_delete(&mut self, key: String) {
        self.env.cache.delete(&key);
    }
}

/// Log what the guest wrote to stdout and stderr during a call, one event per line.
pub fn log_output(caller: &crate::egress::Caller, stream: &str, output: &[u8]) {
    let (provider, version) = (&caller.provider, &caller.version);
    for line in String::from_utf8_lossy(output)
        .lines()
        .filter(|l| !l.trim().is_empty())
    {
        let line = truncate(line, MAX_LOG_LINE);
        tracing::info!(target: "wasm_ccm::provider", provider, version, stream, "{line}");
    }
}

fn truncate(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_entries_expire_and_are_capped() {
        let cache = ProviderCache::default();
        cache.set("a".into(), b"1".to_vec(), Duration::from_secs(60));
        assert_eq!(cache.get("a"), Some(b"1".to_vec()));
        cache.set("b".into(), b"2".to_vec(), Duration::ZERO);
        assert_eq!(cache.get("b"), None);
        cache.delete("a");
        assert_eq!(cache.get("a"), None);
        cache.set(
            "big".into(),
            vec![0; MAX_VALUE_BYTES + 1],
            Duration::from_secs(60),
        );
        assert_eq!(cache.get("big"), None);
    }

    #[test]
    fn truncation_respects_char_boundaries() {
        assert_eq!(truncate("héllo", 2), "h");
        assert_eq!(truncate("hello", 10), "hello");
    }
}
