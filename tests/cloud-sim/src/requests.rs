//! The request log: one [`RequestRecord`] per `/v1` (or unknown-path)
//! request, readable at `/_admin/requests`. Credentials never reach it.

use std::collections::VecDeque;

use axum::http::{HeaderMap, header};
use serde::{Deserialize, Serialize};

/// Recorded bodies are cut to this many bytes.
const MAX_RECORDED_BODY: usize = 64 * 1024;
/// The log keeps the most recent this-many requests.
const MAX_RECORDS: usize = 10_000;
/// What an `authorization` header's value is recorded as.
const REDACTED: &str = "<redacted>";

/// One handled request.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RequestRecord {
    /// Arrival order, starting at 1; never reused, even after a clear.
    pub seq: u64,
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    pub status: u16,
    /// Whether the request carried the right bearer token.
    pub authorized: bool,
    /// Every header in arrival order; `authorization` values are redacted.
    pub headers: Vec<(String, String)>,
    /// The body as lossy UTF-8, truncated to 64 KiB.
    pub body: String,
    /// Time from arrival to response, injected latency included.
    pub latency_ms: u64,
}

/// Response of `GET /_admin/requests`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RequestList {
    pub requests: Vec<RequestRecord>,
}

/// Bounded log, oldest first.
#[derive(Debug, Default)]
pub(crate) struct RequestLog {
    records: VecDeque<RequestRecord>,
}

impl RequestLog {
    pub(crate) fn push(&mut self, record: RequestRecord) {
        if self.records.len() == MAX_RECORDS {
            self.records.pop_front();
        }
        self.records.push_back(record);
    }

    /// All records sorted by `seq`.
    pub(crate) fn records(&self) -> Vec<RequestRecord> {
        let mut records: Vec<_> = self.records.iter().cloned().collect();
        records.sort_by_key(|record| record.seq);
        records
    }

    pub(crate) fn clear(&mut self) {
        self.records.clear();
    }
}

/// Header names and values, with `authorization` redacted.
pub(crate) fn redacted_headers(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .map(|(name, value)| {
            let value = if name == header::AUTHORIZATION {
                REDACTED.to_owned()
            } else {
                String::from_utf8_lossy(value.as_bytes()).into_owned()
            };
            (name.as_str().to_owned(), value)
        })
        .collect()
}

/// The body as recorded: lossy UTF-8 of at most 64 KiB.
pub(crate) fn recorded_body(body: &[u8]) -> String {
    let cut = &body[..body.len().min(MAX_RECORDED_BODY)];
    String::from_utf8_lossy(cut).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn authorization_is_redacted() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("Bearer secret"),
        );
        headers.insert("x-trace", HeaderValue::from_static("abc"));
        let recorded = redacted_headers(&headers);
        assert!(recorded.contains(&("authorization".into(), REDACTED.into())));
        assert!(recorded.contains(&("x-trace".into(), "abc".into())));
    }

    #[test]
    fn body_is_truncated() {
        assert_eq!(
            recorded_body(&vec![b'a'; MAX_RECORDED_BODY + 10]).len(),
            MAX_RECORDED_BODY
        );
    }

    #[test]
    fn log_is_bounded() {
        let mut log = RequestLog::default();
        let record = |seq| RequestRecord {
            seq,
            method: "GET".into(),
            path: "/".into(),
            query: None,
            status: 200,
            authorized: true,
            headers: Vec::new(),
            body: String::new(),
            latency_ms: 0,
        };
        for seq in 1..=(MAX_RECORDS as u64 + 1) {
            log.push(record(seq));
        }
        let records = log.records();
        assert_eq!(records.len(), MAX_RECORDS);
        assert_eq!(records.first().map(|r| r.seq), Some(2));
    }
}
