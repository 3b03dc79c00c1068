//! Snooping: collect everything a guest can see of its environment — variables, arguments,
//! the file system, the cloud config, the host cache and a response — to prove no secret is
//! among it.

use std::path::Path;

use serde_json::{Value, json};
use wasm_ccm_sdk::{cache, config, http};

use crate::net::{outcome, response_report};

/// Directories whose listing is attempted.
const DIRECTORIES: [&str; 2] = ["/", "."];
/// Files whose contents are attempted.
const FILES: [&str; 2] = ["/etc/passwd", "/proc/self/environ"];
/// At most this many bytes of a file are reported.
const MAX_FILE_BYTES: usize = 64 * 1024;

/// Everything visible, and `GET url`.
pub fn snoop(url: &str) -> Value {
    json!({
        "env": env(),
        "args": std::env::args_os().map(|arg| arg.to_string_lossy().into_owned()).collect::<Vec<_>>(),
        "fs": fs(),
        "config": config::raw().map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
        "cache_secret": cache::get("secret").map(|bytes| String::from_utf8_lossy(&bytes).into_owned()),
        "fetch": outcome(http::get(url), response_report),
    })
}

fn env() -> Vec<(String, String)> {
    std::env::vars_os()
        .map(|(key, value)| {
            (
                key.to_string_lossy().into_owned(),
                value.to_string_lossy().into_owned(),
            )
        })
        .collect()
}

/// Each directory listing and file read, keyed by path: the data or `{"error": …}`.
fn fs() -> Value {
    let listings = DIRECTORIES.iter().map(|dir| (dir.to_string(), list(dir)));
    let reads = FILES.iter().map(|file| (file.to_string(), read(file)));
    Value::Object(listings.chain(reads).collect())
}

fn list(dir: &str) -> Value {
    let entries = std::fs::read_dir(dir).and_then(|entries| {
        entries
            .map(|entry| entry.map(|entry| entry.file_name().to_string_lossy().into_owned()))
            .collect::<std::io::Result<Vec<_>>>()
    });
    match entries {
        Ok(names) => json!({"entries": names}),
        Err(err) => json!({"error": err.to_string()}),
    }
}

fn read(file: &str) -> Value {
    match std::fs::read(Path::new(file)) {
        Ok(bytes) => {
            let shown = bytes.get(..MAX_FILE_BYTES).unwrap_or(&bytes);
            json!({"bytes": bytes.len(), "content": String::from_utf8_lossy(shown)})
        }
        Err(err) => json!({"error": err.to_string()}),
    }
}
