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
//! [`LoadArgs::parse`] refuses them at load time, naming the argument (the crate's own
//! reading of a load line ignores unknown names and misreads other cases); commands read the current values on every call, so a `CONFIG SET` applies to
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

/// The flag (no value) that registers the `RL.TESTING.*` commands.
pub const TESTING_FLAG: &str = "enable-testing-commands";

/// The configs a load line may set, as `name value` after the module's path.
const LOAD_CONFIGS: [&str; 6] = [
    "default-algorithm",
    "max-window-ms",
    "max-log-limit",
    "max-leases",
    "policies-in-rdb",
    "notify-denied",
];

/// Why the module's load arguments were refused: the module then refuses to load, and the
/// server log says this (the server's own reply to `MODULE LOAD` names no reason).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoadError {
    /// A word that is no config of the module (nor the testing flag).
    UnknownArgument(String),
    /// A config given without its value.
    MissingValue(&'static str),
    /// An integer config whose value is not an integer.
    NotAnInteger(&'static str, String),
    /// A yes/no config whose value is neither.
    NotYesOrNo(&'static str, String),
    /// `default-algorithm` naming no algorithm.
    NotAnAlgorithm(String),
    /// An integer config outside its range: the config, its largest value and the value.
    OutOfRange(&'static str, i64, i64),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::UnknownArgument(word) => write!(
                f,
                "unknown load argument '{word}': give configs as name value, the names \
                 being {} (or the flag {TESTING_FLAG})",
                LOAD_CONFIGS.join(", ")
            ),
            LoadError::MissingValue(name) => write!(f, "{name} needs a value"),
            LoadError::NotAnInteger(name, value) => {
                write!(f, "{name} must be an integer, not '{value}'")
            }
            LoadError::NotYesOrNo(name, value) => {
                write!(f, "{name} must be yes or no, not '{value}'")
            }
            LoadError::NotAnAlgorithm(value) => {
                let names: Vec<&str> = AlgorithmKind::ALL.iter().map(|(_, n)| *n).collect();
                write!(
                    f,
                    "default-algorithm must be one of {}, not '{value}'",
                    names.join(", ")
                )
            }
            LoadError::OutOfRange(name, max, value) => {
                write!(f, "{name} must be between 1 and {max}, not {value}")
            }
        }
    }
}

impl std::error::Error for LoadError {}

/// What a load line sets, read before anything is applied.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LoadArgs {
    /// `enable-testing-commands` was given.
    pub testing: bool,
    algorithm: Option<AlgorithmKind>,
    max_window_ms: Option<i64>,
    max_log_limit: Option<i64>,
    max_leases: Option<i64>,
    policies_in_rdb: Option<bool>,
    notify_denied: Option<bool>,
}

impl LoadArgs {
    /// Reads `name value` pairs (names and values in any case) and the testing flag;
    /// refuses an unknown word, a missing value and a value the config cannot take, each
    /// named, rather than loading with defaults the operator did not ask for.
    pub fn parse<'a>(args: impl IntoIterator<Item = &'a [u8]>) -> Result<Self, LoadError> {
        let mut loaded = LoadArgs::default();
        let mut args = args.into_iter();
        while let Some(word) = args.next() {
            if word.eq_ignore_ascii_case(TESTING_FLAG.as_bytes()) {
                loaded.testing = true;
                continue;
            }
            let shown = || ratelimit_core::args::printable_excerpt(word);
            let name = LOAD_CONFIGS
                .into_iter()
                .find(|name| word.eq_ignore_ascii_case(name.as_bytes()))
                .ok_or_else(|| LoadError::UnknownArgument(shown()))?;
            let value = args.next().ok_or(LoadError::MissingValue(name))?;
            loaded.set(name, value)?;
        }
        Ok(loaded)
    }

    fn set(&mut self, name: &'static str, value: &[u8]) -> Result<(), LoadError> {
        let shown = || ratelimit_core::args::printable_excerpt(value);
        let integer = |max: i64| {
            let number = std::str::from_utf8(value)
                .ok()
                .and_then(|text| text.parse::<i64>().ok())
                .ok_or_else(|| LoadError::NotAnInteger(name, shown()))?;
            if (1..=max).contains(&number) {
                Ok(Some(number))
            } else {
                Err(LoadError::OutOfRange(name, max, number))
            }
        };
        let yes_no = || match value.to_ascii_lowercase().as_slice() {
            b"yes" => Ok(Some(true)),
            b"no" => Ok(Some(false)),
            _ => Err(LoadError::NotYesOrNo(name, shown())),
        };
        match name {
            "default-algorithm" => {
                let kind = AlgorithmKind::from_name(value);
                self.algorithm = Some(kind.ok_or_else(|| LoadError::NotAnAlgorithm(shown()))?);
            }
            "max-window-ms" => self.max_window_ms = integer(LARGEST_MAX_WINDOW_MS)?,
            "max-log-limit" => self.max_log_limit = integer(LARGEST_MAX_LOG_LIMIT)?,
            "max-leases" => self.max_leases = integer(LARGEST_MAX_LEASES)?,
            "policies-in-rdb" => self.policies_in_rdb = yes_no()?,
            _ => self.notify_denied = yes_no()?,
        }
        Ok(())
    }

    /// Sets the configs the load line gave; called once, at load, after the configs are
    /// registered (so `CONFIG GET` shows these values).
    pub fn apply(&self) {
        if let Some(kind) = self.algorithm {
            let chosen = match kind {
                AlgorithmKind::Fixed => DefaultAlgorithm::fixed,
                AlgorithmKind::Sliding => DefaultAlgorithm::sliding,
                AlgorithmKind::Log => DefaultAlgorithm::log,
                AlgorithmKind::Token => DefaultAlgorithm::token,
                AlgorithmKind::Gcra => DefaultAlgorithm::gcra,
            };
            DEFAULT_ALGORITHM.0.store(chosen.into(), Ordering::Relaxed);
        }
        let numbers = [
            (self.max_window_ms, &MAX_WINDOW),
            (self.max_log_limit, &MAX_LOG),
            (self.max_leases, &MAX_LEASES_CONFIG),
        ];
        for (value, config) in numbers {
            if let Some(value) = value {
                config.store(value, Ordering::Relaxed);
            }
        }
        for (value, config) in [
            (self.policies_in_rdb, &POLICIES_IN_RDB),
            (self.notify_denied, &NOTIFY_DENIED),
        ] {
            if let Some(value) = value {
                config.store(value, Ordering::Relaxed);
            }
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(words: &[&str]) -> Result<LoadArgs, LoadError> {
        LoadArgs::parse(words.iter().map(|w| w.as_bytes()))
    }

    #[test]
    fn reads_every_config_in_any_case() {
        let loaded = parse(&[
            "DEFAULT-ALGORITHM",
            "GCRA",
            "max-window-ms",
            "1000",
            "Max-Log-Limit",
            "20",
            "max-leases",
            "5",
            "policies-in-rdb",
            "YES",
            "notify-denied",
            "no",
            "enable-testing-commands",
        ])
        .expect("valid");
        assert!(loaded.testing);
        assert_eq!(loaded.algorithm, Some(AlgorithmKind::Gcra));
        assert_eq!(loaded.max_window_ms, Some(1000));
        assert_eq!(loaded.max_log_limit, Some(20));
        assert_eq!(loaded.max_leases, Some(5));
        assert_eq!(loaded.policies_in_rdb, Some(true));
        assert_eq!(loaded.notify_denied, Some(false));
        assert_eq!(parse(&[]), Ok(LoadArgs::default()));
    }

    #[test]
    fn refuses_each_bad_argument_by_name() {
        #[rustfmt::skip]
        let cases: &[(&[&str], &str)] = &[
            (&["FOO", "1"], "unknown load argument 'FOO': give configs as name value, the names \
              being default-algorithm, max-window-ms, max-log-limit, max-leases, \
              policies-in-rdb, notify-denied (or the flag enable-testing-commands)"),
            (&["default-algoritm", "gcra"], "unknown load argument 'default-algoritm'"),
            (&["max-leases"], "max-leases needs a value"),
            (&["max-leases", "ten"], "max-leases must be an integer, not 'ten'"),
            (&["max-window-ms", "-5"], "max-window-ms must be between 1 and 316224000000, not -5"),
            (&["max-log-limit", "10001"], "max-log-limit must be between 1 and 10000, not 10001"),
            (&["notify-denied", "true"], "notify-denied must be yes or no, not 'true'"),
            (&["default-algorithm", "leaky"],
                "default-algorithm must be one of fixed, sliding, log, token, gcra, not 'leaky'"),
        ];
        for (words, expected) in cases {
            let err = parse(words).expect_err("refused");
            assert!(err.to_string().starts_with(expected), "{words:?}: {err}");
        }
    }
}
