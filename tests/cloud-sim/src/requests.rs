//! The request log: one [`RequestRecord`] per `/v1` (or unknown-path)
//! request, readable at `/_admin/requests` (all of it, or from a position on).
//! Credentials never reach it; it holds at most 10,000 records and 64 MiB of bodies.

use std::collections::VecDeque;

use axum::http::{HeaderMap, header};
use serde::{Deserialize, Serialize};

/// Recorded bodies are cut to this many bytes.
const MAX_RECORDED_BODY: usize = 64 * 1024;
/// The log keeps the most recent this-many requests.
const MAX_RECORDS: usize = 10_000;
/// The log keeps at most this many bytes of bodies: past it, the oldest records' bodies are
/// emptied (the records stay).
const MAX_LOG_BODY_BYTES: usize = 64 * 1024 * 1024;
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

/// Response of `GET /_admin/requests[?from=N]`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct RequestList {
    pub requests: Vec<RequestRecord>,
    /// The log position after the last record logged: `?from=` it reads only the requests
    /// logged since (positions count records as their requests complete, clears included).
    pub next: u64,
    /// How many records logged at or after `from` (and after the last clear) the log no
    /// longer holds: it keeps the last 10,000.
    pub dropped: u64,
}

/// Bounded log, in the order requests completed.
#[derive(Debug, Default)]
pub(crate) struct RequestLog {
    records: VecDeque<RequestRecord>,
    /// How many records were ever logged: the position of the next one.
    logged: u64,
    /// The position of the first record logged after the last clear.
    cleared_at: u64,
    /// Bytes of the bodies held.
    body_bytes: usize,
    /// How many of the oldest records had their bodies emptied.
    bodiless: usize,
}

impl RequestLog {
    pub(crate) fn push(&mut self, record: RequestRecord) {
        if self.records.len() == MAX_RECORDS
            && let Some(oldest) = self.records.pop_front()
        {
            match self.bodiless.checked_sub(1) {
                Some(fewer) => self.bodiless = fewer,
                None => self.body_bytes -= oldest.body.len(),
            }
        }
        self.body_bytes += record.body.len();
        self.records.push_back(record);
        self.logged += 1;
        while self.body_bytes > MAX_LOG_BODY_BYTES && self.bodiless < self.records.len() {
            let body = std::mem::take(&mut self.records[self.bodiless].body);
            self.body_bytes -= body.len();
            self.bodiless += 1;
        }
    }

    /// All records sorted by `seq`.
    pub(crate) fn records(&self) -> Vec<RequestRecord> {
        self.from(0).requests
    }

    /// The records logged at position `from` or later, sorted by `seq`.
    pub(crate) fn from(&self, from: u64) -> RequestList {
        let first = self.logged - self.records.len() as u64;
        let skip = usize::try_from(from.saturating_sub(first)).unwrap_or(usize::MAX);
        let mut requests: Vec<_> = self.records.iter().skip(skip).cloned().collect();
        requests.sort_by_key(|record| record.seq);
        RequestList {
            requests,
            next: self.logged,
            dropped: first.saturating_sub(from.max(self.cleared_at)),
        }
    }

    pub(crate) fn clear(&mut self) {
        self.records.clear();
        self.body_bytes = 0;
        self.bodiless = 0;
        self.cleared_at = self.logged;
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

    fn record_with_body(seq: u64, body: usize) -> RequestRecord {
        RequestRecord {
            seq,
            method: "PUT".into(),
            path: "/v1/load-balancers/lb-00000001/targets".into(),
            query: None,
            status: 200,
            authorized: true,
            headers: Vec::new(),
            body: "t".repeat(body),
            latency_ms: 0,
        }
    }

    #[test]
    fn the_oldest_bodies_are_emptied_past_the_logs_byte_bound() {
        let mut log = RequestLog::default();
        let held = MAX_LOG_BODY_BYTES / MAX_RECORDED_BODY;
        for seq in 1..=(held as u64 + 3) {
            log.push(record_with_body(seq, MAX_RECORDED_BODY));
        }
        let records = log.records();
        assert_eq!(records.len(), held + 3, "every record is kept");
        let emptied: Vec<u64> = records
            .iter()
            .filter(|r| r.body.is_empty())
            .map(|r| r.seq)
            .collect();
        assert_eq!(emptied, [1, 2, 3], "the three oldest bodies are dropped");
        assert_eq!(log.body_bytes, MAX_LOG_BODY_BYTES);
        // Records leaving the log past its count bound leave the byte count right.
        for seq in 0..MAX_RECORDS as u64 {
            log.push(record_with_body(1_000_000 + seq, 10));
        }
        assert_eq!(log.body_bytes, MAX_RECORDS * 10);
        assert_eq!(log.bodiless, 0);
    }

    #[test]
    fn a_reader_from_a_position_gets_what_was_logged_since_and_how_much_it_missed() {
        let mut log = RequestLog::default();
        for seq in 1..=5 {
            log.push(record_with_body(seq, 1));
        }
        let all = log.from(0);
        assert_eq!((all.requests.len(), all.next, all.dropped), (5, 5, 0));
        log.push(record_with_body(6, 1));
        let since = log.from(all.next);
        let seqs: Vec<u64> = since.requests.iter().map(|r| r.seq).collect();
        assert_eq!((seqs, since.next, since.dropped), (vec![6], 6, 0));

        // Cleared records are not missed; records the bound let go are.
        log.clear();
        for seq in 7..=(7 + MAX_RECORDS as u64) {
            log.push(record_with_body(seq, 1));
        }
        let late = log.from(since.next);
        assert_eq!(late.requests.len(), MAX_RECORDS);
        assert_eq!(
            late.dropped, 1,
            "one record logged after the clear was let go"
        );
        assert_eq!(late.requests.first().map(|r| r.seq), Some(8));
    }
}
