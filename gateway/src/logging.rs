//! One line per event on stderr, with the time: what an operator needs from a small
//! service, without a logging framework.

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
