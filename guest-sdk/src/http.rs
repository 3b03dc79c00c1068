//! A blocking HTTP client over `wasi:http/outgoing-handler`.
//!
//! It writes and finishes the whole request body *before* handing the request to the host
//! and reads every error from the response future: the order that is reliable on wasmtime
//! (wstd 0.6's client, which streams the body while awaiting the response, loses about half
//! of its requests to "connection reset" there and hides denials).
//!
//! The host decides where a request may go. A request to a host the operator did not grant,
//! or to an address inside the cluster network, fails with [`HttpError::Denied`]. Headers
//! that carry credentials (`authorization`, `proxy-authorization`, `cookie`) are the host's
//! to set: setting one fails with [`HttpError::ForbiddenHeader`].

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;
use wasip2::http::outgoing_handler;
pub use wasip2::http::types::Method;
use wasip2::http::types::{
    ErrorCode, Fields, HeaderError, IncomingBody, OutgoingBody, OutgoingRequest, Scheme,
};
use wasip2::io::streams::StreamError;

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    /// The URL could not be parsed.
    InvalidUrl(String),
    /// The host refused to send the request (host not granted, address not allowed).
    Denied {
        /// The URL the request was for.
        url: String,
    },
    /// The request set a header the host keeps for itself.
    ForbiddenHeader(String),
    /// The request could not be sent or the response not read.
    Transport {
        /// The URL the request was for.
        url: String,
        /// What failed: the host's `wasi:http` error code or a stream error.
        error: String,
    },
    /// The server answered with a non-success status.
    Status {
        /// The URL the request was for.
        url: String,
        /// The HTTP status code, outside 2xx.
        status: u16,
        /// The response body, decoded as UTF-8 (invalid bytes replaced).
        body: String,
        /// The `Retry-After` header, when it gave a number of seconds.
        retry_after: Option<Duration>,
    },
    /// The response body was not the JSON expected.
    Decode {
        /// The URL the request was for.
        url: String,
        /// What `serde_json` said was wrong.
        error: String,
    },
}

impl HttpError {
    /// The delay a throttling server asked for: 429, or 503 with `Retry-After`.
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            HttpError::Status {
                status: 429,
                retry_after,
                ..
            } => Some(retry_after.unwrap_or(Duration::from_secs(1))),
            HttpError::Status {
                status: 503,
                retry_after: Some(delay),
                ..
            } => Some(*delay),
            _ => None,
        }
    }

    /// The HTTP status, if the server answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            HttpError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }
}

impl std::fmt::Display for HttpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HttpError::InvalidUrl(url) => write!(f, "invalid URL {url:?}"),
            HttpError::Denied { url } => write!(f, "egress denied by the host: {url}"),
            HttpError::ForbiddenHeader(name) => {
                write!(f, "header {name:?} is set by the host, not by providers")
            }
            HttpError::Transport { url, error } => write!(f, "request to {url} failed: {error}"),
            HttpError::Status {
                url, status, body, ..
            } => {
                let body = body.chars().take(200).collect::<String>();
                write!(f, "{url} answered {status}: {body}")
            }
            HttpError::Decode { url, error } => {
                write!(f, "unexpected response from {url}: {error}")
            }
        }
    }
}

impl std::error::Error for HttpError {}

/// An HTTP request under construction.
#[derive(Debug, Clone)]
pub struct Request {
    method: Method,
    url: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

/// A received response with its whole body.
#[derive(Debug, Clone)]
pub struct Response {
    /// The URL the request was for.
    pub url: String,
    /// The HTTP status code, whatever it is; [`Response::success`] turns non-2xx into errors.
    pub status: u16,
    /// Header names and values in the order the host gave them; look one up with
    /// [`Response::header`].
    pub headers: Vec<(String, String)>,
    /// The whole body, as received.
    pub body: Vec<u8>,
}

/// `GET url`.
pub fn get(url: &str) -> Result<Response, HttpError> {
    Request::new(Method::Get, url).send()
}

/// `POST url` with `body` as JSON.
pub fn post_json(url: &str, body: &impl Serialize) -> Result<Response, HttpError> {
    Request::new(Method::Post, url).json(body)?.send()
}

/// `PUT url` with `body` as JSON.
pub fn put_json(url: &str, body: &impl Serialize) -> Result<Response, HttpError> {
    Request::new(Method::Put, url).json(body)?.send()
}

/// `DELETE url`.
pub fn delete(url: &str) -> Result<Response, HttpError> {
    Request::new(Method::Delete, url).send()
}

impl Request {
    /// A request with no headers and an empty body.
    pub fn new(method: Method, url: &str) -> Self {
        Request {
            method,
            url: url.to_string(),
            headers: Vec::new(),
            body: Vec::new(),
        }
    }

    /// Add a header. Requests accept `application/json` unless they set `accept` here.
    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Set the body to `body` as JSON, with `content-type: application/json`.
    pub fn json(mut self, body: &impl Serialize) -> Result<Self, HttpError> {
        self.body = serde_json::to_vec(body).map_err(|err| HttpError::Decode {
            url: self.url.clone(),
            error: err.to_string(),
        })?;
        Ok(self.header("content-type", "application/json"))
    }

    /// Set the raw body.
    pub fn body(mut self, body: Vec<u8>) -> Self {
        self.body = body;
        self
    }

    /// Send the request and read the whole response. Any status is returned as a response;
    /// see [`Response::success`] to turn non-2xx into errors.
    pub fn send(self) -> Result<Response, HttpError> {
        let url = self.url.clone();
        let transport = |error: String| HttpError::Transport {
            url: url.clone(),
            error,
        };
        let target = Target::parse(&self.url)?;

        // `accept: application/json` unless the request names what it accepts (an XML API).
        let accepts = self
            .headers
            .iter()
            .any(|(name, _)| name.eq_ignore_ascii_case("accept"));
        let mut entries = Vec::with_capacity(self.headers.len() + 1);
        if !accepts {
            entries.push(("accept".to_string(), b"application/json".to_vec()));
        }
        entries.extend(
            self.headers
                .iter()
                .map(|(name, value)| (name.to_ascii_lowercase(), value.as_bytes().to_vec())),
        );
        // A body of known length goes with `content-length`: without it the host sends
        // the body chunked, and the end of a chunked body is one more write on the wire.
        let sized = entries.iter().any(|(name, _)| name == "content-length");
        if !self.body.is_empty() && !sized {
            let length = self.body.len().to_string().into_bytes();
            entries.push(("content-length".to_string(), length));
        }
        let fields = Fields::from_list(&entries).map_err(|err| match err {
            HeaderError::Forbidden => {
                let name = entries
                    .iter()
                    .map(|(name, _)| name.as_str())
                    .find(|name| is_credential_header(name))
                    .unwrap_or("a header");
                HttpError::ForbiddenHeader(name.to_string())
            }
            other => transport(format!("invalid header: {other:?}")),
        })?;

        let request = OutgoingRequest::new(fields);
        let set =
            |ok: Result<(), ()>, what: &str| ok.map_err(|()| transport(format!("invalid {what}")));
        set(request.set_method(&self.method), "method")?;
        set(request.set_scheme(Some(&target.scheme)), "scheme")?;
        set(request.set_authority(Some(&target.authority)), "authority")?;
        set(request.set_path_with_query(Some(&target.path)), "path")?;

        // Write and finish the body before `handle`: see the module docs.
        let outgoing_body = request
            .body()
            .map_err(|()| transport("request body already taken".into()))?;
        {
            let stream = outgoing_body
                .write()
                .map_err(|()| transport("request body stream unavailable".into()))?;
            // Nothing drains the host's buffer before `handle`, so the body goes in as few
            // writes as the host allows (each up to its chunk size, 1 MiB on wasmtime 48),
            // never blocking: `blocking-write-and-flush` writes 4 KiB at a time and would
            // wait forever once the host's few buffered chunks are full.
            let mut rest: &[u8] = &self.body;
            while !rest.is_empty() {
                let permit = stream
                    .check_write()
                    .map_err(|err| transport(format!("writing request body: {err:?}")))?;
                if permit == 0 {
                    return Err(transport(format!(
                        "request body of {} bytes is larger than the host buffers before sending",
                        self.body.len()
                    )));
                }
                let (now, later) = rest.split_at(rest.len().min(permit as usize));
                stream
                    .write(now)
                    .map_err(|err| transport(format!("writing request body: {err:?}")))?;
                rest = later;
            }
        }
        OutgoingBody::finish(outgoing_body, None).map_err(|err| error_code(&url, err))?;

        let future =
            outgoing_handler::handle(request, None).map_err(|err| error_code(&url, err))?;
        future.subscribe().block();
        let response = match future.get() {
            Some(Ok(Ok(response))) => response,
            Some(Ok(Err(err))) => return Err(error_code(&url, err)),
            Some(Err(())) => return Err(transport("response already taken".into())),
            None => return Err(transport("response not ready".into())),
        };

        let status = response.status();
        let headers = response
            .headers()
            .entries()
            .into_iter()
            .map(|(name, value)| (name, String::from_utf8_lossy(&value).into_owned()))
            .collect();
        let incoming = response
            .consume()
            .map_err(|()| transport("response body already taken".into()))?;
        let body = read_body(&url, &incoming)?;
        drop(response);
        IncomingBody::finish(incoming);
        Ok(Response {
            url,
            status,
            headers,
            body,
        })
    }
}

/// The whole body; a failure names the host's reason and how many bytes had arrived.
fn read_body(url: &str, incoming: &IncomingBody) -> Result<Vec<u8>, HttpError> {
    let failed = |error: String| HttpError::Transport {
        url: url.to_string(),
        error,
    };
    let stream = incoming
        .stream()
        .map_err(|()| failed("response body stream unavailable".into()))?;
    let mut body = Vec::new();
    loop {
        match stream.blocking_read(64 * 1024) {
            Ok(chunk) => body.extend_from_slice(&chunk),
            Err(StreamError::Closed) => return Ok(body),
            Err(StreamError::LastOperationFailed(err)) => {
                return Err(match wasip2::http::types::http_error_code(&err) {
                    Some(code) => error_code(url, code),
                    None => failed(format!(
                        "reading the response body failed after {} bytes: {}",
                        body.len(),
                        err.to_debug_string()
                    )),
                });
            }
        }
    }
}

fn error_code(url: &str, code: ErrorCode) -> HttpError {
    match code {
        ErrorCode::HttpRequestDenied => HttpError::Denied {
            url: url.to_string(),
        },
        other => HttpError::Transport {
            url: url.to_string(),
            error: format!("{other:?}"),
        },
    }
}

fn is_credential_header(name: &str) -> bool {
    matches!(name, "authorization" | "proxy-authorization" | "cookie")
}

impl Response {
    /// The value of header `name` (case-insensitive), if present.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
    }

    /// This response if its status is 2xx, else [`HttpError::Status`].
    pub fn success(self) -> Result<Response, HttpError> {
        if (200..300).contains(&self.status) {
            return Ok(self);
        }
        let retry_after = self
            .header("retry-after")
            .and_then(|value| value.trim().parse::<u64>().ok())
            .map(Duration::from_secs);
        Err(HttpError::Status {
            url: self.url,
            status: self.status,
            body: String::from_utf8_lossy(&self.body).into_owned(),
            retry_after,
        })
    }

    /// The body of a 2xx response as JSON of type `T`.
    pub fn json<T: DeserializeOwned>(self) -> Result<T, HttpError> {
        let response = self.success()?;
        serde_json::from_slice(&response.body).map_err(|err| HttpError::Decode {
            url: response.url,
            error: err.to_string(),
        })
    }

    /// Like [`Response::json`], but a 404 is `Ok(None)`.
    pub fn json_unless_not_found<T: DeserializeOwned>(self) -> Result<Option<T>, HttpError> {
        if self.status == 404 {
            return Ok(None);
        }
        self.json().map(Some)
    }
}

/// The parts of an absolute `http(s)://authority/path?query` URL.
struct Target {
    scheme: Scheme,
    authority: String,
    path: String,
}

impl Target {
    fn parse(url: &str) -> Result<Target, HttpError> {
        let invalid = || HttpError::InvalidUrl(url.to_string());
        let (scheme, rest) = url.split_once("://").ok_or_else(invalid)?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "http" => Scheme::Http,
            "https" => Scheme::Https,
            _ => return Err(invalid()),
        };
        let split = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(split);
        if authority.is_empty() || authority.contains('@') {
            return Err(invalid());
        }
        let path = match path {
            "" => "/".to_string(),
            p if p.starts_with('?') => format!("/{p}"),
            p => p.to_string(),
        };
        Ok(Target {
            scheme,
            authority: authority.to_string(),
            path,
        })
    }
}
