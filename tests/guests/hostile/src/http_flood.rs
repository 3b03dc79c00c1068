//! Floods of host-side `wasi:http` resources, kept alive until the call ends: many fields
//! carrying large headers, and many request bodies filled to the host's buffer, each costing
//! the guest's own memory almost nothing. They prove the host's `wasi:http` budgets hold.

use serde_json::{Value, json};
use wasip2::http::types::{Fields, OutgoingBody, OutgoingRequest};
use wasip2::io::streams::OutputStream;
use wasm_ccm_sdk::Error;

/// Most bytes written to a body at once: the host's chunk size on wasmtime 48.
const CHUNK: usize = 1024 * 1024;

/// `COUNTxSIZE`: make COUNT fields of one SIZE-byte header each and keep them all.
pub fn fields_flood(arg: &str) -> Result<Value, Error> {
    let (count, size) = count_by_size(arg)?;
    let value = vec![b'f'; size];
    let mut kept = Vec::with_capacity(count);
    for _ in 0..count {
        let fields = Fields::from_list(&[("x-flood".to_string(), value.clone())])
            .map_err(|err| Error::other(format!("fields refused: {err:?}")))?;
        kept.push(fields);
    }
    Ok(json!({"count": kept.len(), "size": size}))
}

/// `COUNT`: open COUNT requests, fill each one's body as far as the host buffers before
/// sending, and keep them all unsent.
pub fn bodies_flood(arg: &str) -> Result<Value, Error> {
    let count: usize = arg
        .parse()
        .map_err(|_| Error::other(format!("bodies-flood needs COUNT, got {arg:?}")))?;
    let chunk = vec![b'b'; CHUNK];
    // Dropped in this order at the end: a body's stream before the body.
    let mut kept: Vec<(OutputStream, OutgoingBody, OutgoingRequest)> = Vec::new();
    let mut buffered = 0usize;
    for _ in 0..count {
        let request = OutgoingRequest::new(Fields::new());
        let body = request
            .body()
            .map_err(|()| Error::other("request body already taken"))?;
        let stream = body
            .write()
            .map_err(|()| Error::other("request body stream unavailable"))?;
        loop {
            let permit = stream
                .check_write()
                .map_err(|err| Error::other(format!("check-write: {err:?}")))?;
            if permit == 0 {
                break;
            }
            let now = &chunk[..chunk.len().min(usize::try_from(permit).unwrap_or(CHUNK))];
            stream
                .write(now)
                .map_err(|err| Error::other(format!("write: {err:?}")))?;
            buffered += now.len();
        }
        kept.push((stream, body, request));
    }
    Ok(json!({"count": kept.len(), "buffered": buffered}))
}

fn count_by_size(arg: &str) -> Result<(usize, usize), Error> {
    arg.split_once('x')
        .and_then(|(count, size)| Some((count.parse().ok()?, size.parse().ok()?)))
        .ok_or_else(|| Error::other(format!("needs COUNTxSIZE, got {arg:?}")))
}
