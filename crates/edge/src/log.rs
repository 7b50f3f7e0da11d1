//! What the edge writes to its log: request text made safe for a log line, a rate limit for
//! lines a flood could multiply, and optional values shown as `-`.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

/// Text from the request, made safe for a log line: whitespace, quotes, `=`, `%`, control and
/// non-ASCII bytes are percent-encoded, so that a Host like `x status=200` cannot forge fields
/// in the text log format.
pub struct LogSafe<'a>(pub &'a str);

const LOG_ESCAPED: &AsciiSet = &CONTROLS.add(b' ').add(b'"').add(b'=').add(b'%').add(b'\\');

impl fmt::Display for LogSafe<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&utf8_percent_encode(self.0, LOG_ESCAPED), f)
    }
}

/// A log rate limit for floods: at most [`LogBudget::PER_SECOND`] lines a second; lines over it
/// are counted and the count reported on the next line let through. Lock-free, fixed size.
#[derive(Default)]
pub struct LogBudget {
    /// The current second (Unix time) in the high 32 bits, lines logged in it in the low 32.
    window: AtomicU64,
    suppressed: AtomicU64,
}

impl LogBudget {
    pub const PER_SECOND: u64 = 20;

    /// A budget with nothing spent, for a `static`.
    pub const fn new() -> LogBudget {
        LogBudget {
            window: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// Whether one more line may be logged now.
    pub fn allow(&self) -> bool {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            & 0xffff_ffff;
        let mut current = self.window.load(Ordering::Relaxed);
        loop {
            let (second, count) = (current >> 32, current & 0xffff_ffff);
            let next = if second == now {
                if count >= Self::PER_SECOND {
                    self.suppressed.fetch_add(1, Ordering::Relaxed);
                    return false;
                }
                current + 1
            } else {
                (now << 32) | 1
            };
            match self.window.compare_exchange_weak(
                current,
                next,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return true,
                Err(seen) => current = seen,
            }
        }
    }

    /// Lines suppressed since the last call.
    pub fn take_suppressed(&self) -> u64 {
        self.suppressed.swap(0, Ordering::Relaxed)
    }
}

/// An optional value in a log line: the value, or `-`.
pub struct OrDash<T>(pub Option<T>);

impl<T: fmt::Display> fmt::Display for OrDash<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Some(v) => v.fmt(f),
            None => f.write_str("-"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_text_cannot_forge_fields() {
        assert_eq!(LogSafe("example.com:8080").to_string(), "example.com:8080");
        assert_eq!(
            LogSafe("x status=200 rule=evil").to_string(),
            "x%20status%3D200%20rule%3Devil"
        );
        assert_eq!(LogSafe("a\nb\"c\\").to_string(), "a%0Ab%22c%5C");
        assert_eq!(LogSafe("ü").to_string(), "%C3%BC");
    }

    #[test]
    fn the_log_budget_holds_under_a_flood() {
        let budget = LogBudget::default();
        let allowed = (0..10_000).filter(|_| budget.allow()).count() as u64;
        // At most two windows can be crossed during the loop.
        assert!(allowed <= 2 * LogBudget::PER_SECOND, "{allowed}");
        assert!(budget.take_suppressed() >= 10_000 - 2 * LogBudget::PER_SECOND);
    }
}
