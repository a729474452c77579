//! The server's clock, read once per command and handed to the core.

use super::api::api;

/// Wall-clock Unix time in milliseconds, as the server sees it.
///
/// Wall-clock, not monotonic, because stored states hold absolute times that must mean
/// the same thing after a restart or on a replica. It may go backwards; the core copes.
pub fn now_ms() -> i64 {
    // SAFETY: takes no arguments and only reads the server's clock.
    unsafe { api!(RedisModule_Milliseconds)() }
}
