//! The host's own imports: the key-value cache and logging, plus the WASI stdio a guest might
//! use to log around the host; and floods of both, to prove the host's budgets hold.

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

/// `COUNTxSIZE`: store COUNT values of SIZE bytes under `fill-0` … `fill-<COUNT-1>` in
/// order (the same TTL, so the earliest expire first), then read every key back.
pub fn cache_fill(arg: &str) -> Result<Value, Error> {
    let (count, size) = count_and_size(arg)?;
    let value = vec![b'v'; size];
    for i in 0..count {
        cache::set(&format!("fill-{i}"), &value, CACHE_TTL);
    }
    let present: Vec<usize> = (0..count)
        .filter(|i| cache::get(&format!("fill-{i}")).is_some())
        .collect();
    Ok(json!({
        "count": count,
        "size": size,
        "present": present.len(),
        "first_present": present.first(),
        "last_present": present.last() == count.checked_sub(1).as_ref(),
    }))
}

/// `LEN`: store `v` under a key of LEN bytes, then read it back.
pub fn cache_key(arg: &str) -> Result<Value, Error> {
    let len: usize = arg
        .parse()
        .map_err(|_| Error::other(format!("cache-key needs a length, got {arg:?}")))?;
    let key = "k".repeat(len);
    cache::set(&key, b"v", CACHE_TTL);
    Ok(json!({"len": len, "stored": cache::get(&key).is_some()}))
}

/// `COUNTxSIZE`: write COUNT host log lines (info) of SIZE bytes each.
pub fn log_flood(arg: &str) -> Result<Value, Error> {
    let (count, size) = count_and_size(arg)?;
    let line = "x".repeat(size);
    for _ in 0..count {
        wasm_ccm_sdk::log::write(wasm_ccm_sdk::log::Level::Info, &line);
    }
    Ok(json!({"lines": count, "size": size}))
}

fn count_and_size(arg: &str) -> Result<(usize, usize), Error> {
    arg.split_once('x')
        .and_then(|(count, size)| Some((count.parse().ok()?, size.parse().ok()?)))
        .ok_or_else(|| Error::other(format!("expected COUNTxSIZE, got {arg:?}")))
}
