//! How much a provider may log. Per call, its `host.log` lines, stdout and stderr together
//! are held to a number of lines and of bytes; across calls, each provider version draws
//! its lines from one token bucket. Lines past a limit are dropped and counted, and the
//! call ends with a single warning saying how many and which limit dropped them, never one
//! event per dropped line.

use std::sync::{Arc, OnceLock};

use super::MAX_LOG_LINE;
use crate::egress::Caller;
use crate::metrics::{LimitLabels, Metrics};
use crate::rate::{Budgets, RateBudget};
use crate::text::escaped_len;

/// Where the host reports what it did to a provider (dropped lines, refused cache values),
/// apart from `wasm_ccm::provider`, which carries only what providers wrote: a provider
/// cannot forge these events.
pub(crate) const SANDBOX_TARGET: &str = "wasm_ccm::sandbox";

/// How much a provider may log.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LogLimits {
    /// Most lines one call may log (`--provider-log-lines-per-call`).
    pub lines_per_call: u32,
    /// Most bytes of log lines one call may log (`--provider-log-bytes-per-call`).
    pub bytes_per_call: usize,
    /// Lines per second (and burst) across the calls of one provider version
    /// (`--provider-log-rate`, `--provider-log-burst`).
    pub rate: RateBudget,
}

impl Default for LogLimits {
    /// A provider logs a few lines per call (what it changed, what failed): 1000 lines or
    /// 256 KiB leave room for a verbose call, while a runaway loop writes at most 256 KiB
    /// per call. 100 lines a second per version, burst 1000, is several lines for each of
    /// the ~20 calls a second a 5,000-node cluster makes at steady state; sustained, one
    /// version writes at most 100 × 8 KiB (the line cap) = 800 KiB a second, however it
    /// misbehaves.
    fn default() -> Self {
        LogLimits {
            lines_per_call: 1000,
            bytes_per_call: 256 * 1024,
            rate: RateBudget {
                per_second: 100.0,
                burst: 1000,
            },
        }
    }
}

/// The line bucket of one provider version, shared by its calls; cheap to clone.
///
/// The bucket is made by the first line logged, with that call's [`LogLimits::rate`]; every
/// call of a sandbox has the same limits.
#[derive(Debug, Clone, Default)]
pub struct ProviderLogs {
    bucket: Arc<OnceLock<Budgets>>,
}

impl ProviderLogs {
    fn take(&self, rate: RateBudget) -> bool {
        self.bucket
            .get_or_init(|| Budgets::new(rate))
            .take("lines")
            .is_ok()
    }
}

/// A limit that drops log lines (the `limit` label of
/// `wasm_ccm_provider_log_lines_dropped_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LogLimit {
    LinesPerCall,
    BytesPerCall,
    Rate,
}

impl LogLimit {
    pub(crate) const ALL: [LogLimit; 3] = [
        LogLimit::LinesPerCall,
        LogLimit::BytesPerCall,
        LogLimit::Rate,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            LogLimit::LinesPerCall => "lines-per-call",
            LogLimit::BytesPerCall => "bytes-per-call",
            LogLimit::Rate => "rate",
        }
    }

    fn describe(self, limits: &LogLimits) -> String {
        match self {
            LogLimit::LinesPerCall => format!(
                "{} lines per call (--provider-log-lines-per-call)",
                limits.lines_per_call
            ),
            LogLimit::BytesPerCall => format!(
                "{} bytes per call (--provider-log-bytes-per-call)",
                limits.bytes_per_call
            ),
            LogLimit::Rate => format!(
                "{} lines per second, burst {} (--provider-log-rate, --provider-log-burst)",
                limits.rate.per_second, limits.rate.burst
            ),
        }
    }
}

/// One call's log tally.
#[derive(Debug)]
pub(crate) struct CallLog {
    limits: LogLimits,
    lines: u32,
    bytes: usize,
    /// Lines dropped, by the limit that dropped them (in [`LogLimit::ALL`] order).
    dropped: [u64; 3],
}

impl CallLog {
    pub(crate) fn new(limits: LogLimits) -> Self {
        CallLog {
            limits,
            lines: 0,
            bytes: 0,
            dropped: [0; 3],
        }
    }

    /// Whether `line` (cut to [`MAX_LOG_LINE`]) may be logged, charged the bytes it takes
    /// once escaped; a line that may not is counted as dropped. `bucket` is the provider
    /// version's line bucket. Its escaped length is counted only once the line count, its own
    /// length and the bucket let it through, so a flood past a limit costs no scan.
    pub(crate) fn admit(&mut self, line: &str, bucket: &ProviderLogs) -> bool {
        let fits = |bytes: usize| self.bytes.saturating_add(bytes) <= self.limits.bytes_per_call;
        let mut written = line.len();
        let over = if self.lines >= self.limits.lines_per_call {
            Some(LogLimit::LinesPerCall)
        } else if !fits(written) {
            Some(LogLimit::BytesPerCall)
        } else if !bucket.take(self.limits.rate) {
            Some(LogLimit::Rate)
        } else {
            written = escaped_len(line).min(MAX_LOG_LINE);
            (!fits(written)).then_some(LogLimit::BytesPerCall)
        };
        match over {
            None => {
                self.lines += 1;
                self.bytes += written;
                true
            }
            Some(limit) => {
                let index = LogLimit::ALL.iter().position(|l| *l == limit).unwrap_or(0);
                self.dropped[index] = self.dropped[index].saturating_add(1);
                false
            }
        }
    }

    /// Lines dropped so far.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.iter().sum()
    }

    /// At the end of the call: if lines were dropped, one warning naming the provider, the
    /// count and the limits that dropped them, and the dropped-lines counter.
    pub(crate) fn report(&self, caller: &Caller, metrics: &Metrics) {
        let dropped = self.dropped();
        if dropped == 0 {
            return;
        }
        let mut reasons = Vec::new();
        let mut labels = Vec::new();
        for (limit, count) in LogLimit::ALL.iter().zip(self.dropped) {
            if count == 0 {
                continue;
            }
            reasons.push(format!("{count} over {}", limit.describe(&self.limits)));
            labels.push(limit.label());
            metrics
                .provider_log_lines_dropped
                .get_or_create(&LimitLabels {
                    provider: caller.provider.clone(),
                    version: caller.version.clone(),
                    limit: limit.label().into(),
                })
                .inc_by(count);
        }
        let (provider, version) = (&caller.provider, &caller.version);
        let limits = labels.join(",");
        tracing::warn!(
            target: SANDBOX_TARGET,
            provider,
            version,
            dropped,
            limits,
            "provider {provider}@{version}: dropped {dropped} of {total} log lines of one call: {}",
            reasons.join("; "),
            total = u64::from(self.lines) + dropped,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(lines_per_call: u32, bytes_per_call: usize, burst: u32) -> LogLimits {
        LogLimits {
            lines_per_call,
            bytes_per_call,
            rate: RateBudget {
                per_second: 0.001,
                burst,
            },
        }
    }

    #[test]
    fn a_call_logs_up_to_its_lines_and_bytes() {
        let version = ProviderLogs::default();
        let mut call = CallLog::new(limits(3, 1000, 100));
        let ten = "x".repeat(10);
        assert!((0..3).all(|_| call.admit(&ten, &version)));
        assert!(!call.admit(&ten, &version));
        assert_eq!(call.dropped, [1, 0, 0]);

        let mut call = CallLog::new(limits(100, 25, 100));
        assert!(call.admit(&ten, &version) && call.admit(&ten, &version));
        assert!(!call.admit(&ten, &version), "30 bytes > 25");
        assert!(call.admit("five5", &version), "a shorter line still fits");
        assert_eq!(call.dropped, [0, 1, 0]);
        assert_eq!(call.dropped(), 1);
    }

    #[test]
    fn a_line_is_charged_the_bytes_it_takes_escaped() {
        let version = ProviderLogs::default();
        let mut call = CallLog::new(limits(100, 6000, 100));
        // `\u{7f}`: six bytes written for each one the provider sent.
        assert!(
            !call.admit(&"\x7f".repeat(1001), &version),
            "6006 bytes > 6000"
        );
        assert!(call.admit(&"\x7f".repeat(1000), &version));
        assert_eq!(call.bytes, 6000);
        let mut call = CallLog::new(limits(100, 100_000, 100));
        assert!(call.admit(&"\x7f".repeat(MAX_LOG_LINE), &version));
        assert_eq!(
            call.bytes, MAX_LOG_LINE,
            "a line is cut to its bound once escaped"
        );
    }

    #[test]
    fn calls_of_one_version_share_the_rate() {
        let version = ProviderLogs::default();
        let rate = limits(100, 1_000_000, 5);
        let mut first = CallLog::new(rate);
        assert!((0..4).all(|_| first.admit("x", &version)));
        let mut second = CallLog::new(rate);
        assert!(second.admit("x", &version));
        assert!(!second.admit("x", &version));
        assert_eq!(second.dropped, [0, 0, 1]);
        let mut other_version = CallLog::new(rate);
        assert!(other_version.admit("x", &ProviderLogs::default()));
    }
}
