//! The gateway's log: one event per line on stderr, through `tracing`, with an RFC 3339
//! time and a level, as plain text or as JSON (`--log-format`), filtered by `RL_LOG` (or
//! `--log-level`) in `tracing-subscriber`'s `EnvFilter` syntax: `warn`,
//! `info,rl_gateway::heartbeat=warn`... The default is `info`.
//!
//! Every file writes through [`log!`] (info), [`log_warn!`] and [`log_error!`], or
//! [`log_throttled!`] (warn) for the lines that requests cause: so that the call sites do not
//! depend on the logging crate, and the throttling stays in one place.
//!
//! Lines that one request can cause (an upstream that fails, a client whose body breaks off
//! or stalls, an accept that fails) are rate-limited per [`Kind`]: at most one line per
//! [`LOG_EVERY`], the next one saying how many were left out. Without that, a client
//! sending broken requests as fast as it can writes the gateway's log as fast as it can
//! (800 lines a second from one address), filling disks and drowning the lines that
//! matter. Lines about the gateway's own state (start, stop, reloads, the Redis
//! connection) are few by nature and always written.

use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tracing_subscriber::EnvFilter;

/// The macros below reach `tracing` through this path, so that a crate calling them needs
/// no `tracing` of its own.
pub use tracing;

/// The variable that holds the log filter.
pub const FILTER_VARIABLE: &str = "RL_LOG";

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// <time> <LEVEL> <module>: <message>, for people.
    #[default]
    Text,
    /// One JSON object a line (timestamp, level, target, message), for a log pipeline.
    Json,
}

/// Installs the log writer for the whole process: `filter` if given, else `RL_LOG`, else
/// `info`. An invalid filter is refused (with why), rather than silently logging nothing.
pub fn init(format: LogFormat, filter: Option<&str>) -> Result<(), LogInitError> {
    let from_env = std::env::var(FILTER_VARIABLE).ok();
    let (directives, source) = match (filter, from_env.as_deref()) {
        (Some(filter), _) => (filter, "--log-level"),
        (None, Some(filter)) if !filter.trim().is_empty() => (filter, FILTER_VARIABLE),
        (None, _) => ("info", "the default"),
    };
    let filter = EnvFilter::try_new(directives).map_err(|e| LogInitError::Filter {
        source,
        directives: directives.to_owned(),
        error: e.to_string(),
    })?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
    installed.map_err(|e| LogInitError::Install(e.to_string()))
}

/// Why the log writer could not be installed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogInitError {
    /// The level filter (from `source`: `--log-level` or `RL_LOG`) does not parse.
    Filter {
        /// Where the filter came from.
        source: &'static str,
        /// The filter as given.
        directives: String,
        /// What the filter's parser said.
        error: String,
    },
    /// Another writer is installed already.
    Install(String),
}

impl std::fmt::Display for LogInitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LogInitError::Filter {
                source,
                directives,
                error,
            } => write!(f, "{source} {directives:?}: {error}"),
            LogInitError::Install(error) => write!(f, "cannot install the log writer: {error}"),
        }
    }
}

impl std::error::Error for LogInitError {}

/// Writes one line at level info (`log!("...", args)`). The arguments go through
/// `format_args!` as they are: `name = value` is a named argument, as in `format!`, not a
/// `tracing` field.
///
/// Fields come first, before a `;`: `log!(rule = name, outcome = "fail_open"; "...", args)`.
/// Each value is written with its `Display` (a JSON string with `--log-format json`, a
/// `name=value` after the message in text). The field names the gateway uses are listed in
/// the Logs section of docs/src/gateway/metrics.md: an event about a rule, a key or a
/// Redis node says which in a field, not only in its text, so that a log pipeline can
/// select on it.
///
/// Fields whose values are `Option`s go after `if_some`, in a group of their own before
/// the message, and are written only when `Some`: `log!(breaker = "closed"; if_some
/// redis_node = node; "...")`, or `log!(if_some redis_node = node; "...")`.
#[macro_export]
macro_rules! gateway_log {
    (if_some $($maybe:ident = $option:expr),+ ; $($arg:tt)+) => {
        $crate::logging::tracing::info!(
            $($maybe = $crate::logging::if_some(&$option),)+ "{}", format_args!($($arg)+)
        )
    };
    ($($field:ident = $value:expr),+ ; if_some $($maybe:ident = $option:expr),+ ; $($arg:tt)+) => {
        $crate::logging::tracing::info!(
            $($field = %$value,)+
            $($maybe = $crate::logging::if_some(&$option),)+
            "{}", format_args!($($arg)+)
        )
    };
    ($($field:ident = $value:expr),+ ; $($arg:tt)+) => {
        $crate::logging::tracing::info!(
            $($field = %$value,)+ "{}", format_args!($($arg)+)
        )
    };
    ($($arg:tt)*) => {
        $crate::logging::tracing::info!("{}", format_args!($($arg)*))
    };
}
pub use crate::gateway_log as log;

/// Writes one line at level warn: something is wrong that the gateway works around.
/// Fields as in [`log!`].
#[macro_export]
macro_rules! gateway_log_warn {
    (if_some $($maybe:ident = $option:expr),+ ; $($arg:tt)+) => {
        $crate::logging::tracing::warn!(
            $($maybe = $crate::logging::if_some(&$option),)+ "{}", format_args!($($arg)+)
        )
    };
    ($($field:ident = $value:expr),+ ; if_some $($maybe:ident = $option:expr),+ ; $($arg:tt)+) => {
        $crate::logging::tracing::warn!(
            $($field = %$value,)+
            $($maybe = $crate::logging::if_some(&$option),)+
            "{}", format_args!($($arg)+)
        )
    };
    ($($field:ident = $value:expr),+ ; $($arg:tt)+) => {
        $crate::logging::tracing::warn!(
            $($field = %$value,)+ "{}", format_args!($($arg)+)
        )
    };
    ($($arg:tt)*) => {
        $crate::logging::tracing::warn!("{}", format_args!($($arg)*))
    };
}
pub use crate::gateway_log_warn as log_warn;

/// Writes one line at level error: something the gateway cannot do. Fields as in [`log!`].
#[macro_export]
macro_rules! gateway_log_error {
    ($($field:ident = $value:expr),+ ; if_some $($maybe:ident = $option:expr),+ ; $($arg:tt)+) => {
        $crate::logging::tracing::error!(
            $($field = %$value,)+
            $($maybe = $crate::logging::if_some(&$option),)+
            "{}", format_args!($($arg)+)
        )
    };
    ($($field:ident = $value:expr),+ ; $($arg:tt)+) => {
        $crate::logging::tracing::error!(
            $($field = %$value,)+ "{}", format_args!($($arg)+)
        )
    };
    ($($arg:tt)*) => {
        $crate::logging::tracing::error!("{}", format_args!($($arg)*))
    };
}
pub use crate::gateway_log_error as log_error;

/// Writes a line of `kind` at level warn (`log_throttled!(Kind::Upstream, "...", args)`)
/// unless one of that kind was written less than [`LOG_EVERY`] ago; the line that is
/// written ends with the number left out since the previous one. Fields as in [`log!`],
/// after the kind: `log_throttled!(Kind::Refund, failure = f; "...")`.
#[macro_export]
macro_rules! gateway_log_throttled {
    ($kind:expr, $($field:ident = $value:expr),+ ; $($arg:tt)+) => {
        if let Some(left_out) = $crate::logging::admit($kind) {
            $crate::logging::tracing::warn!(
                $($field = %$value,)+
                "{}{}",
                format_args!($($arg)+),
                $crate::logging::LeftOut(left_out)
            )
        }
    };
    ($kind:expr, $($arg:tt)*) => {
        if let Some(left_out) = $crate::logging::admit($kind) {
            $crate::logging::tracing::warn!(
                "{}{}",
                format_args!($($arg)*),
                $crate::logging::LeftOut(left_out)
            )
        }
    };
}
pub use crate::gateway_log_throttled as log_throttled;

/// An optional field's value for `tracing`: written with its `Display` when `Some`, and
/// not at all when `None` (`tracing` leaves out a `None`).
pub fn if_some<T: fmt::Display>(value: &Option<T>) -> Option<tracing::field::DisplayValue<&T>> {
    value.as_ref().map(tracing::field::display)
}

/// A key as the log shows it (field `key_hash`): the first 12 hex digits of its SHA-256,
/// never the key itself, which holds a client's identity (an address, a user id, an API
/// key). The same key gives the same hash in every gateway and every run, so that its
/// lines can be found (`printf %s "$key" | sha256sum | cut -c1-12`) and followed across
/// gateways; it is a pseudonym, not a secret: a key drawn from a small set (an IPv4
/// address) can be found again by hashing every candidate.
pub fn key_hash(key: &str) -> String {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(key.as_bytes());
    digest[..6]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

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
    fn a_key_is_logged_as_the_start_of_its_sha256() {
        // As `printf %s 'rl:{ip:127.0.0.1}:api' | sha256sum | cut -c1-12` says.
        let hash = key_hash("rl:{ip:127.0.0.1}:api");
        assert_eq!(hash, "ec57c868d554");
        assert_ne!(hash, key_hash("rl:{ip:127.0.0.2}:api"));
    }

    #[test]
    fn kinds_are_apart() {
        // Other tests may write lines too: only that the kinds have their own slots.
        let indices = [Kind::Upstream, Kind::Client, Kind::Accept, Kind::Refund].map(Kind::index);
        assert_eq!(indices, [0, 1, 2, 3]);
        assert_eq!(SLOTS.len(), indices.len());
    }
}
