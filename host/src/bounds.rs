//! The bounds on what a provider chooses, in one place: the text of its errors, the delay it
//! asks for, how many entries one answer may hold. The sandbox applies the text and time
//! bounds where a provider's error crosses into the host, and the facade checks answers
//! against the counts ([`crate::answers`]), so no controller, log line, condition, event,
//! metric or timer ever sees a value outside them. The security model's threat table names
//! each.

use std::time::Duration;

use crate::text;

/// The most bytes of a provider's error message the host keeps, after its control
/// characters are escaped (`not-found`, `retry-after` and `other` messages, and a trap's
/// reason with the guest's last words on stderr): a message lands in log lines, events and
/// Service conditions, and in `provider call` output.
pub const MAX_MESSAGE: usize = 1024;

/// The shortest `retry-after` the host honours: a provider answering `0` is called again
/// after this, not in a loop.
pub const MIN_RETRY_AFTER: Duration = Duration::from_secs(1);

/// The longest `retry-after` the host honours: the service controller's longest backoff,
/// so nothing a provider says parks a Service longer than a failure would.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);

/// How long the calls about one object may keep answering `retry-after` before each further
/// one is a failure of the version that gave it (outcome `retry-overdue`): what a load
/// balancer takes to provision. The service controller reports such a wait (event,
/// condition) from then on, and backs its retries off as it does a failure's.
pub const RETRY_AFTER_GRACE: Duration = Duration::from_secs(120);

/// Ingress points in one load-balancer status (a load balancer has one per address
/// family, a few at most).
pub const MAX_INGRESS: usize = 32;

/// Addresses of one node (AWS lists every private IP of every network interface: a large
/// instance with secondary IPs has a few hundred).
pub const MAX_NODE_ADDRESSES: usize = 512;

/// Additional labels in one `instance-metadata` answer.
pub const MAX_LABELS: usize = 64;

/// The longest load-balancer or route name a provider may answer (the cloud's own name).
pub const MAX_CLOUD_NAME: usize = 255;

/// A provider's error message as the host keeps it: control characters escaped, then cut
/// to [`MAX_MESSAGE`] bytes (ending in `...` when cut).
pub fn message(message: String) -> String {
    let escaped = match text::escaped(&message) {
        std::borrow::Cow::Borrowed(_) => message,
        std::borrow::Cow::Owned(escaped) => escaped,
    };
    text::ellipsized(escaped, MAX_MESSAGE)
}

/// The delay a provider's `retry-after` of `delay_ms` is honoured as: within
/// [`MIN_RETRY_AFTER`] and [`MAX_RETRY_AFTER`].
pub fn retry_delay(delay_ms: u64) -> Duration {
    Duration::from_millis(delay_ms).clamp(MIN_RETRY_AFTER, MAX_RETRY_AFTER)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_escaped_then_cut() {
        let huge = format!("line\n{}", "é".repeat(1 << 20));
        let kept = message(huge);
        assert!(kept.len() <= MAX_MESSAGE, "{}", kept.len());
        assert!(kept.starts_with("line\\n"), "{kept:.20}");
        assert!(kept.ends_with("..."));
        assert_eq!(kept.lines().count(), 1);
        assert_eq!(message("short".into()), "short");
    }

    #[test]
    fn a_delay_is_clamped_whatever_the_number() {
        assert_eq!(retry_delay(0), MIN_RETRY_AFTER);
        assert_eq!(retry_delay(1), MIN_RETRY_AFTER);
        assert_eq!(retry_delay(2_000), Duration::from_secs(2));
        assert_eq!(retry_delay(u64::from(u32::MAX)), MAX_RETRY_AFTER);
        assert_eq!(retry_delay(u64::MAX), MAX_RETRY_AFTER);
    }
}
