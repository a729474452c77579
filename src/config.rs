//! Module configs: `CONFIG GET/SET ratelimit.<name>`, or `--loadmodule <path> <name> <value>`.
//!
//! | config | default | range |
//! |---|---|---|
//! | `ratelimit.default-algorithm` | `fixed` | `fixed`, `sliding`, `log`, `token`, `gcra` |
//! | `ratelimit.max-window-ms` | 31622400000 (366 days) | 1 to 316224000000 (3660 days) |
//! | `ratelimit.max-log-limit` | 10000 | 1 to 10000 |
//! | `ratelimit.max-leases` | 10000 | 1 to 10000: the largest `max` of RL.ACQUIRE |
//! | `ratelimit.policies-in-rdb` | `no` | load time only; Redis 7.0 only (see `policy::rdb`) |
//! | `ratelimit.notify-denied` | `no` | `yes`: a denied hit fires the keyspace event `rl.denied` |
//!
//! The server refuses values outside the range (or unknown names) with an error, and
//! [`check_loaded`] refuses them at load time (the crate passes load-time values through
//! unchecked); commands read the current values on every call, so a `CONFIG SET` applies to
//! the next call.

use ratelimit_core::args::Settings;
use ratelimit_core::duration::{LARGEST_WINDOW_MS, MAX_WINDOW_MS};
use ratelimit_core::lease::MAX_LEASES;
use ratelimit_core::limiter::AlgorithmKind;
use ratelimit_core::sliding_log::MAX_LOG_LIMIT;
use redis_module::configuration::ConfigurationContext;
use redis_module::enum_configuration;
use redis_module::{ConfigurationValue, RedisError};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicI64, Ordering};

enum_configuration! {
    /// `ratelimit.default-algorithm`: the algorithm of a call without `ALGO`. The variants
    /// are named as the config's values.
    #[allow(non_camel_case_types)]
    pub enum DefaultAlgorithm {
        fixed = 1,
        sliding = 2,
        log = 3,
        token = 4,
        gcra = 5,
    }
}

/// The default of `ratelimit.max-window-ms`.
pub const DEFAULT_MAX_WINDOW_MS: i64 = MAX_WINDOW_MS;
/// The largest `ratelimit.max-window-ms` accepted: ten times the default.
pub const LARGEST_MAX_WINDOW_MS: i64 = LARGEST_WINDOW_MS;
/// The default of `ratelimit.max-log-limit`.
pub const DEFAULT_MAX_LOG_LIMIT: i64 = MAX_LOG_LIMIT;
/// The largest `ratelimit.max-log-limit` accepted: the most entries the sliding log keeps
/// exactly (it would merge older entries beyond that), so the config can only lower it.
pub const LARGEST_MAX_LOG_LIMIT: i64 = MAX_LOG_LIMIT;

/// The default of `ratelimit.max-leases`.
pub const DEFAULT_MAX_LEASES: i64 = MAX_LEASES;
/// The largest `ratelimit.max-leases` accepted: the most leases a key's value holds, which
/// bounds the work of every lease call, so the config can only lower it.
pub const LARGEST_MAX_LEASES: i64 = MAX_LEASES;

/// `ratelimit.default-algorithm`, held as the enum's number in an atomic so that every call
/// reads it without a lock.
pub struct AlgorithmConfig(AtomicI32);

impl ConfigurationValue<DefaultAlgorithm> for AlgorithmConfig {
    fn get(&self, _ctx: &ConfigurationContext) -> DefaultAlgorithm {
        DefaultAlgorithm::try_from(self.0.load(Ordering::Relaxed))
            .unwrap_or(DefaultAlgorithm::fixed)
    }

    fn set(&self, _ctx: &ConfigurationContext, value: DefaultAlgorithm) -> Result<(), RedisError> {
        self.0.store(value.into(), Ordering::Relaxed);
        Ok(())
    }
}

/// `ratelimit.default-algorithm`.
pub static DEFAULT_ALGORITHM: AlgorithmConfig =
    AlgorithmConfig(AtomicI32::new(DefaultAlgorithm::fixed as i32));
/// `ratelimit.max-window-ms`.
pub static MAX_WINDOW: AtomicI64 = AtomicI64::new(DEFAULT_MAX_WINDOW_MS);
/// `ratelimit.max-log-limit`.
pub static MAX_LOG: AtomicI64 = AtomicI64::new(DEFAULT_MAX_LOG_LIMIT);

/// `ratelimit.max-leases`.
pub static MAX_LEASES_CONFIG: AtomicI64 = AtomicI64::new(DEFAULT_MAX_LEASES);

/// The largest `max` RL.ACQUIRE accepts now.
pub fn max_leases() -> i64 {
    MAX_LEASES_CONFIG.load(Ordering::Relaxed)
}

/// `ratelimit.policies-in-rdb`: on Redis 7.0, save policies in the RDB (whose files then
/// need the module to load). Newer servers save them only when there are some, always.
pub static POLICIES_IN_RDB: AtomicBool = AtomicBool::new(false);

/// Checks the values given at load time against the ranges `CONFIG SET` enforces.
pub fn check_loaded() -> Result<(), String> {
    let window = MAX_WINDOW.load(Ordering::Relaxed);
    if !(1..=LARGEST_MAX_WINDOW_MS).contains(&window) {
        return Err(format!(
            "max-window-ms must be between 1 and {LARGEST_MAX_WINDOW_MS}, not {window}"
        ));
    }
    let log = MAX_LOG.load(Ordering::Relaxed);
    if !(1..=LARGEST_MAX_LOG_LIMIT).contains(&log) {
        return Err(format!(
            "max-log-limit must be between 1 and {LARGEST_MAX_LOG_LIMIT}, not {log}"
        ));
    }
    let leases = MAX_LEASES_CONFIG.load(Ordering::Relaxed);
    if !(1..=LARGEST_MAX_LEASES).contains(&leases) {
        return Err(format!(
            "max-leases must be between 1 and {LARGEST_MAX_LEASES}, not {leases}"
        ));
    }
    Ok(())
}

/// `ratelimit.notify-denied`: fire the keyspace event `rl.denied` (class generic, `g`) on
/// the key of every denied hit.
pub static NOTIFY_DENIED: AtomicBool = AtomicBool::new(false);

/// Whether denied hits fire `rl.denied`.
pub fn notify_denied() -> bool {
    NOTIFY_DENIED.load(Ordering::Relaxed)
}

/// The configs as the argument parser takes them.
pub fn settings() -> Settings {
    let chosen = DefaultAlgorithm::try_from(DEFAULT_ALGORITHM.0.load(Ordering::Relaxed));
    let algorithm = match chosen {
        Ok(DefaultAlgorithm::sliding) => AlgorithmKind::Sliding,
        Ok(DefaultAlgorithm::log) => AlgorithmKind::Log,
        Ok(DefaultAlgorithm::token) => AlgorithmKind::Token,
        Ok(DefaultAlgorithm::gcra) => AlgorithmKind::Gcra,
        Ok(DefaultAlgorithm::fixed) | Err(_) => AlgorithmKind::Fixed,
    };
    Settings {
        default_algorithm: algorithm,
        max_window_ms: MAX_WINDOW.load(Ordering::Relaxed),
        max_log_limit: MAX_LOG.load(Ordering::Relaxed),
    }
}
