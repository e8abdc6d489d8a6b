//! How often and how patiently transient registry failures are retried, and which failure texts
//! count as transient. Owns only the arithmetic and the classification; the callers (push, registry
//! HTTP) decide what a failure is and report the attempts in their errors.

use std::time::Duration;

/// Exponential backoff: attempt 1 runs at once, attempt n waits `initial_delay * 2^(n-2)`,
/// capped at `max_delay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts, including the first one; at least 1.
    pub attempts: u32,
    pub initial_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    /// 5 attempts over about 15 s (1 s, 2 s, 4 s, 8 s between them).
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            initial_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// A single attempt, no retries.
    pub fn no_retries() -> Self {
        RetryPolicy {
            attempts: 1,
            initial_delay: Duration::ZERO,
            max_delay: Duration::ZERO,
        }
    }

    /// The wait before attempt number `attempt` (1-based); zero before the first.
    pub fn delay_before(&self, attempt: u32) -> Duration {
        if attempt <= 1 {
            return Duration::ZERO;
        }
        let doublings = (attempt - 2).min(20);
        self.initial_delay
            .saturating_mul(1u32 << doublings)
            .min(self.max_delay)
    }

    /// The attempts, never below 1.
    pub fn total_attempts(&self) -> u32 {
        self.attempts.max(1)
    }
}

/// Whether a failure message from a push or a registry call describes a transient condition
/// (network trouble, a 5xx answer, a timeout) rather than a permanent one (denied, unknown).
/// Permanent markers win: "denied" in a message is never retried even if it also says "timeout".
pub fn is_transient_message(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    const PERMANENT: &[&str] = &[
        "denied",
        "unauthorized",
        "authentication required",
        "forbidden",
        "no basic auth credentials",
        "name unknown",
        "manifest unknown",
        "manifest invalid",
        "blob unknown",
        "does not exist",
        "no such image",
        "invalid reference",
        "repository name must",
        "no such host",
        "http: server gave http response to https client",
        "x509",
    ];
    const TRANSIENT: &[&str] = &[
        "connection refused",
        "connection reset",
        "broken pipe",
        "i/o timeout",
        "timeout",
        "timed out",
        "unexpected eof",
        "eof",
        "temporary failure",
        "too many requests",
        "500 internal server error",
        "502 bad gateway",
        "503 service unavailable",
        "504 gateway timeout",
        "status 500",
        "status 502",
        "status 503",
        "status 504",
        "service unavailable",
        "bad gateway",
        "network is unreachable",
        "no route to host",
    ];
    if PERMANENT.iter().any(|marker| lower.contains(marker)) {
        return false;
    }
    TRANSIENT.iter().any(|marker| lower.contains(marker))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_is_capped() {
        let policy = RetryPolicy {
            attempts: 6,
            initial_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(500),
        };
        let delays: Vec<u128> = (1..=6)
            .map(|attempt| policy.delay_before(attempt).as_millis())
            .collect();
        assert_eq!(delays, vec![0, 100, 200, 400, 500, 500]);
    }

    #[test]
    fn zero_attempts_still_means_one() {
        let policy = RetryPolicy {
            attempts: 0,
            ..RetryPolicy::default()
        };
        assert_eq!(policy.total_attempts(), 1);
    }

    #[test]
    fn classifies_daemon_push_messages() {
        assert!(is_transient_message(
            "Get \"http://127.0.0.1:5000/v2/\": dial tcp 127.0.0.1:5000: connect: connection refused"
        ));
        assert!(is_transient_message(
            "received unexpected HTTP status: 503 Service Unavailable"
        ));
        assert!(is_transient_message("net/http: TLS handshake timeout"));
        assert!(!is_transient_message(
            "denied: requested access to the resource is denied"
        ));
        assert!(!is_transient_message(
            "unauthorized: authentication required"
        ));
        assert!(!is_transient_message("no basic auth credentials"));
        assert!(!is_transient_message(
            "An image does not exist locally with the tag: x"
        ));
        assert!(!is_transient_message("something nobody has seen before"));
    }
}
