//! The host's own imports: the key-value cache and logging, plus the WASI stdio a guest might
//! use to log around the host.

use std::io::Write;
use std::time::Duration;

use serde_json::{Value, json};
use wasm_ccm_sdk::{Error, cache};

/// TTL of values stored by `cache-set`.
const CACHE_TTL: Duration = Duration::from_secs(60);

/// `KEY=VALUE`: store VALUE under KEY, then read it back.
pub fn cache_set(arg: &str) -> Result<Value, Error> {
    let (key, value) = arg
        .split_once('=')
        .ok_or_else(|| Error::other(format!("cache-set needs KEY=VALUE, got {arg:?}")))?;
    cache::set(key, value.as_bytes(), CACHE_TTL);
    Ok(json!({"key": key, "value": read(key)}))
}

/// The value under `key`, if any.
pub fn cache_get(key: &str) -> Value {
    json!({"key": key, "value": read(key)})
}

fn read(key: &str) -> Option<String> {
    cache::get(key).map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
}

/// Write `message` to the host log, stdout and stderr.
pub fn log(message: &str) -> Value {
    wasm_ccm_sdk::info!("{message}");
    let stdout = writeln!(std::io::stdout(), "{message}");
    let stderr = writeln!(std::io::stderr(), "{message}");
    json!({"ok": true, "stdout": written(stdout), "stderr": written(stderr)})
}

fn written(result: std::io::Result<()>) -> String {
    match result {
        Ok(()) => "ok".into(),
        Err(err) => err.to_string(),
    }
}
