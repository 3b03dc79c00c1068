//! Outgoing HTTP: plain fetches, requests of any method, headers and body, huge responses,
//! and attempts to set the credential headers the host keeps for itself, through the SDK and
//! through raw `wasi:http` fields.

use serde_json::{Value, json};
use wasip2::http::types::{Fields, HeaderError, Method};
use wasm_ccm_sdk::Error;
use wasm_ccm_sdk::http::{self, HttpError, Request, Response};

/// Header names a guest must not set, in the spellings tried.
const CREDENTIAL_HEADERS: [&str; 4] = [
    "authorization",
    "Authorization",
    "proxy-authorization",
    "cookie",
];
/// The credential a guest tries to smuggle.
const STOLEN: &[u8] = b"Bearer stolen";

/// Open a raw TCP connection to `addr` with `std::net` (which uses `wasi:sockets`) and
/// write to it, bypassing the HTTP gate.
pub fn connect(addr: &str) -> Value {
    use std::io::Write;
    match std::net::TcpStream::connect(addr) {
        Ok(mut stream) => {
            let written = stream.write_all(b"GET / HTTP/1.0\r\n\r\n");
            json!({"connected": true, "write": format!("{written:?}")})
        }
        Err(err) => json!({"connected": false, "error": err.to_string()}),
    }
}

/// `GET url`: status, headers and body, or the error.
pub fn fetch(url: &str) -> Value {
    outcome(http::get(url), response_report)
}

/// The request `arg` describes, as JSON: `{"method", "url", "headers": [[name, value]…],
/// "body"}`, or `"body_bytes": N` for a body of N `a`s. The fetch report, and with a
/// forbidden header, `"raw"`: the raw `wasi:http` attempts to set each header named.
pub fn request(arg: &str) -> Value {
    let Ok(spec) = serde_json::from_str::<Value>(arg) else {
        return json!({"error": format!("not JSON: {arg}"), "kind": "invalid-url"});
    };
    let method = match spec["method"].as_str().unwrap_or("GET") {
        "GET" => Method::Get,
        "POST" => Method::Post,
        "PUT" => Method::Put,
        "DELETE" => Method::Delete,
        "TRACE" => Method::Trace,
        "CONNECT" => Method::Connect,
        other => Method::Other(other.to_string()),
    };
    let mut request = Request::new(method, spec["url"].as_str().unwrap_or_default());
    let headers: Vec<(String, String)> =
        serde_json::from_value(spec["headers"].clone()).unwrap_or_default();
    for (name, value) in &headers {
        request = request.header(name, value);
    }
    let body = match spec["body_bytes"].as_u64() {
        Some(length) => vec![b'a'; usize::try_from(length).unwrap_or(0)],
        None => spec["body"]
            .as_str()
            .unwrap_or_default()
            .as_bytes()
            .to_vec(),
    };
    let sent = request.body(body).send();
    let forbidden = matches!(sent, Err(HttpError::ForbiddenHeader(_)));
    let mut report = outcome(sent, response_report);
    if forbidden {
        let names: Vec<&str> = headers.iter().map(|(name, _)| name.as_str()).collect();
        report["raw"] = raw_attempts(&names).into();
    }
    report
}

/// `GET URL` N times (`arg` is `N:URL`), then an error: with refused requests, the host
/// reports the call as `egress-denied`.
pub fn fetch_many(arg: &str) -> Error {
    let (count, url) = arg.split_once(':').unwrap_or(("0", arg));
    let count: u32 = count.parse().unwrap_or(0);
    for _ in 0..count {
        let _ = http::get(url);
    }
    Error::other(format!("fetched {count} times"))
}

/// `GET url`, counting the body bytes received.
pub fn huge(url: &str) -> Value {
    outcome(
        http::get(url),
        |response| json!({"status": response.status, "bytes": response.body.len()}),
    )
}

/// Try to set `Authorization` through the SDK (sending the request) and through each raw
/// `wasi:http` way of building fields.
pub fn set_auth(url: &str) -> Value {
    let sdk = Request::new(Method::Get, url)
        .header("Authorization", "Bearer stolen")
        .send();
    json!({"sdk": outcome(sdk, response_report), "raw": raw_attempts(&CREDENTIAL_HEADERS)})
}

/// The report of `result`: `ok` turned into JSON, or `{"error","kind"}`.
pub fn outcome(result: Result<Response, HttpError>, ok: impl FnOnce(Response) -> Value) -> Value {
    match result {
        Ok(response) => ok(response),
        Err(err) => json!({"error": err.to_string(), "kind": kind(&err)}),
    }
}

/// Status, headers and body (as lossy UTF-8) of `response`.
pub fn response_report(response: Response) -> Value {
    json!({
        "status": response.status,
        "headers": response.headers,
        "body": String::from_utf8_lossy(&response.body),
    })
}

/// The `kind` of a report's error.
pub fn kind(err: &HttpError) -> &'static str {
    match err {
        HttpError::InvalidUrl(_) => "invalid-url",
        HttpError::Denied { .. } => "denied",
        HttpError::ForbiddenHeader(_) => "forbidden-header",
        HttpError::Transport { .. } => "transport",
        HttpError::Status { .. } => "status",
        HttpError::Decode { .. } => "decode",
    }
}

/// Each of `names` through `Fields::from_list`, `Fields::append` and `Fields::set`.
fn raw_attempts(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .flat_map(|name| {
            [
                attempt(name, "from_list", from_list(name)),
                attempt(name, "append", Fields::new().append(name, STOLEN)),
                attempt(name, "set", Fields::new().set(name, &[STOLEN.to_vec()])),
            ]
        })
        .collect()
}

fn from_list(name: &str) -> Result<(), HeaderError> {
    Fields::from_list(&[(name.to_string(), STOLEN.to_vec())]).map(drop)
}

fn attempt(name: &str, via: &str, result: Result<(), HeaderError>) -> Value {
    let result = match result {
        Ok(()) => "ok",
        Err(HeaderError::Forbidden) => "forbidden",
        Err(HeaderError::InvalidSyntax) => "invalid-syntax",
        Err(HeaderError::Immutable) => "immutable",
    };
    json!({"header": name, "via": via, "result": result})
}
