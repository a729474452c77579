//! One line per event on stderr, with the time: what an operator needs from a small
//! service, without a logging framework.
//!
//! Lines that one request can cause (an upstream that fails, a client whose body breaks off
//! or stalls, an accept that fails) are rate-limited per [`Kind`]: at most one line per
//! [`LOG_EVERY`], the next one saying how many were left out. Without that, a client
//! sending broken requests as fast as it can writes the gateway's log as fast as it can
//! (800 lines a second from one address), filling disks and drowning the lines that
//! matter. Lines about the gateway's own state (start, stop, reloads, the Redis
//! connection) are few by nature and always written, with [`log!`].

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Seconds since the epoch with milliseconds, for log lines.
pub fn timestamp() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:03}", now.as_secs(), now.subsec_millis())
}

/// Writes one log line (`log!("...", args)`) to stderr with the time.
#[macro_export]
macro_rules! gateway_log {
    ($($arg:tt)*) => {
        eprintln!("{} rl-gateway: {}", $crate::logging::timestamp(), format_args!($($arg)*))
    };
}
pub use crate::gateway_log as log;

/// Writes a line of `kind` (`log_throttled!(Kind::Upstream, "...", args)`) unless one of
/// that kind was written less than [`LOG_EVERY`] ago; the line that is written ends with
/// the number left out since the previous one.
#[macro_export]
macro_rules! gateway_log_throttled {
    ($kind:expr, $($arg:tt)*) => {
        if let Some(left_out) = $crate::logging::admit($kind) {
            $crate::gateway_log!(
                "{}{}",
                format_args!($($arg)*),
                $crate::logging::LeftOut(left_out)
            )
        }
    };
}
pub use crate::gateway_log_throttled as log_throttled;

/// The least time between two throttled lines of one kind (or one rule's module errors).
pub const LOG_EVERY: Duration = Duration::from_secs(1);

/// The kinds of line that requests cause, each throttled on its own so that a flood of one
/// does not hide the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// The upstream refused, reset or did not speak HTTP.
    Upstream,
    /// A client's request body broke off or did not arrive in time.
    Client,
    /// A listener could not accept (out of file descriptors, say).
    Accept,
    /// A refund Redis never answered before its window ended.
    Refund,
}

impl Kind {
    fn index(self) -> usize {
        match self {
            Kind::Upstream => 0,
            Kind::Client => 1,
            Kind::Accept => 2,
            Kind::Refund => 3,
        }
    }
}

/// When a stream of lines last had one written, and how many were left out since.
pub type Slot = Option<(Instant, u64)>;

/// Records one line due at `now` in `slot`: `Some(n)` when it is to be written, `n` being
/// the lines left out since the previous one; `None` when it is to be left out.
pub fn step(slot: &mut Slot, now: Instant) -> Option<u64> {
    match slot {
        Some((written_at, left_out)) if now.saturating_duration_since(*written_at) < LOG_EVERY => {
            *left_out = left_out.saturating_add(1);
            None
        }
        Some((written_at, left_out)) => {
            let skipped = *left_out;
            *written_at = now;
            *left_out = 0;
            Some(skipped)
        }
        None => {
            *slot = Some((now, 0));
            Some(0)
        }
    }
}

static SLOTS: [Mutex<Slot>; 4] = [
    Mutex::new(None),
    Mutex::new(None),
    Mutex::new(None),
    Mutex::new(None),
];

/// Whether a line of `kind` is to be written now, and how many were left out before it.
pub fn admit(kind: Kind) -> Option<u64> {
    let mut slot = SLOTS[kind.index()]
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    step(&mut slot, Instant::now())
}

/// The end of a throttled line: nothing, or how many lines it stands for besides itself.
pub struct LeftOut(pub u64);

impl fmt::Display for LeftOut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0 => Ok(()),
            n => write!(f, " ({n} more since the last line)"),
        }
    }
}

/// `error` and its sources, `: `-separated: hyper's client says "client error
/// (SendRequest)" and keeps the reason (connection refused, reset) in its sources.
pub fn with_sources(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.ends_with(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_counting_the_rest() {
        let mut slot = None;
        let start = Instant::now();
        assert_eq!(step(&mut slot, start), Some(0), "the first is written");
        for i in 1..=9 {
            assert_eq!(
                step(&mut slot, start + Duration::from_millis(i * 100)),
                None
            );
        }
        assert_eq!(step(&mut slot, start + LOG_EVERY), Some(9));
        assert_eq!(step(&mut slot, start + LOG_EVERY), None);
        assert_eq!(step(&mut slot, start + 3 * LOG_EVERY), Some(1));
        assert_eq!(LeftOut(0).to_string(), "");
        assert_eq!(LeftOut(9).to_string(), " (9 more since the last line)");
    }

    #[test]
    fn kinds_are_apart() {
        // Other tests may write lines too: only that the kinds have their own slots.
        let indices = [Kind::Upstream, Kind::Client, Kind::Accept, Kind::Refund].map(Kind::index);
        assert_eq!(indices, [0, 1, 2, 3]);
        assert_eq!(SLOTS.len(), indices.len());
    }
}
