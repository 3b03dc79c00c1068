//! The host's key-value cache: values that outlive one call, shared by all calls of this
//! provider version (and nothing else), each with a time to live.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::bindings::wasm_ccm::provider::host;

/// The value stored under `key`, if it has not expired.
pub fn get(key: &str) -> Option<Vec<u8>> {
    host::cache_get(key)
}

/// Store `value` under `key` for `ttl` (the host may cap the TTL or evict early).
pub fn set(key: &str, value: &[u8], ttl: Duration) {
    host::cache_set(
        key,
        value,
        u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
    );
}

/// Forget `key`.
pub fn delete(key: &str) {
    host::cache_delete(key)
}

/// The value under `key` decoded from JSON; a value that no longer decodes counts as absent.
pub fn get_json<T: DeserializeOwned>(key: &str) -> Option<T> {
    get(key).and_then(|bytes| serde_json::from_slice(&bytes).ok())
}

/// Store `value` as JSON under `key` for `ttl`.
pub fn set_json<T: Serialize>(key: &str, value: &T, ttl: Duration) {
    if let Ok(bytes) = serde_json::to_vec(value) {
        set(key, &bytes, ttl);
    }
}
