//! Why the arguments of an RL command were refused, and the reply that says so.

use super::MAX_KEYS;
use crate::duration::{DurationError, DAY_MS, LARGEST_WINDOW_MS};
use crate::encoding::MAX_TIERS;
use crate::limiter::AlgorithmKind;
use std::borrow::Cow;

/// Why the arguments were refused.
///
/// [`Display`](std::fmt::Display) gives the reply's text without its error code; the module
/// replies `ERR ` and that text ([`ArgError::message`]), so that the gateway and a SPEC's
/// error quote it as it is. [`ArgError::WrongArity`] is the one the module answers with the
/// server's own arity error instead.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    /// Too few arguments for the command: answered with Redis's standard arity error.
    WrongArity,
    /// `limit` is not an integer >= 1.
    Limit,
    /// `window` is not a valid duration.
    Window(DurationError),
    /// `window` is longer than `ratelimit.max-window-ms` (which it carries).
    WindowAboveMax(i64),
    /// A `limit` without its `window`.
    MissingWindow,
    /// More tiers than [`MAX_TIERS`].
    TooManyTiers,
    /// `COST` is not followed by an integer >= 1.
    Cost,
    /// `BURST` is not followed by an integer >= 1.
    Burst,
    /// `BURST` with an algorithm that has no burst, or with several tiers.
    BurstNotApplicable,
    /// `ALGO` is not followed by a known algorithm name.
    Algo,
    /// A limit above what the algorithm supports (the sliding log's size cap).
    LimitTooLarge(AlgorithmKind, i64),
    /// `MODE` is not followed by `enforce` or `shadow`.
    Mode,
    /// `POLICY` is not followed by a name.
    PolicyName,
    /// `TZ` is not followed by a time zone name the tz database carries.
    TimeZone,
    /// `ANCHOR` is not followed by a day of the month, 1 to 31.
    Anchor,
    /// `TZ` in a rule without a calendar window.
    TzWithoutCalendar,
    /// `ANCHOR` in a rule without a `month` window.
    AnchorWithoutMonth,
    /// A calendar window with an `ALGO` other than fixed (which it carries).
    CalendarAlgo(AlgorithmKind),
    /// An argument of a policy's definition that is no known option.
    UnknownPolicyOption(String),
    /// An argument after `POLICY name` other than `COST`.
    UnknownPolicyCallOption(String),
    /// An option appears twice.
    RepeatedOption(&'static str),
    /// An argument that is no known option; holds a printable excerpt of it.
    UnknownOption(String),
    /// RL.TAKE: `UPTO` is not followed by an integer >= 1.
    Upto,
    /// RL.TAKE without `UPTO n`.
    MissingUpto,
    /// RL.TAKE with `COST`.
    CostInTake,
    /// RL.TAKE: an argument that is no option of it; holds a printable excerpt of it.
    UnknownTakeOption(String),
    /// Several keys: `numkeys` is not an integer from 1 to [`MAX_KEYS`].
    NumKeys,
    /// Several keys: fewer keys follow than `numkeys` (which it carries) says.
    FewerKeys(usize),
    /// Several keys: the keys are not followed by `SPEC`.
    MissingSpec,
    /// Several keys: too few SPECs, and the word at key index `index` is `SPEC`: likely a
    /// numkeys (`numkeys`) larger than the keys the call gives.
    SpecAsKey {
        /// The call's numkeys.
        numkeys: usize,
        /// Where `SPEC` stands among the keys.
        index: usize,
    },
    /// Several keys: not one `SPEC` per key (`keys` keys).
    SpecCount {
        /// How many keys the call names.
        keys: usize,
    },
    /// Several keys: a key is named twice, at indexes `first` and `second`.
    DuplicateKey {
        /// A printable excerpt of the key.
        key: String,
        /// The index of its first mention.
        first: usize,
        /// The index of its second mention.
        second: usize,
    },
    /// Several keys: the rule of key `index` is refused for `error`.
    InSpec {
        /// The key's index (0 for the first key).
        index: usize,
        /// A printable excerpt of the key.
        key: String,
        /// Why its rule was refused.
        error: Box<ArgError>,
    },
}

impl ArgError {
    /// The error reply, naming the argument and the rule: `ERR ` and then the
    /// [`Display`](std::fmt::Display) text.
    pub fn message(&self) -> Cow<'static, str> {
        format!("ERR {self}").into()
    }

    /// The text after `ERR `: borrowed where it is fixed, so that Display copies nothing.
    pub(crate) fn reason(&self) -> Cow<'static, str> {
        match self {
            ArgError::WrongArity => "wrong number of arguments".into(),
            ArgError::Limit => "limit must be a positive integer".into(),
            ArgError::Window(DurationError::Malformed) => {
                "window must be a positive integer of seconds or an integer with a unit \
                 (ms, s, m, h, d), e.g. 250ms or 5m, or a calendar period: day, week, month \
                 or year"
                    .into()
            }
            ArgError::Window(DurationError::UnknownUnit) => {
                "window has an unknown unit: use ms, s, m, h or d (a week is 7d), or a \
                 calendar period: day, week, month or year"
                    .into()
            }
            ArgError::Window(DurationError::TooShort) => "window must be at least 1ms".into(),
            ArgError::Window(DurationError::TooLong) => {
                ArgError::WindowAboveMax(LARGEST_WINDOW_MS).reason()
            }
            ArgError::WindowAboveMax(max_ms) => {
                let max = if max_ms % DAY_MS == 0 {
                    format!("{}d", max_ms / DAY_MS)
                } else {
                    format!("{max_ms}ms")
                };
                format!("window must be at most {max} (ratelimit.max-window-ms)").into()
            }
            ArgError::MissingWindow => {
                "each limit needs a window: limit window [limit window ...]".into()
            }
            ArgError::TooManyTiers => format!("at most {MAX_TIERS} tiers per key").into(),
            ArgError::Cost => "COST must be a positive integer".into(),
            ArgError::Burst => "BURST must be a positive integer".into(),
            ArgError::BurstNotApplicable => {
                "BURST applies to ALGO token or gcra with a single tier".into()
            }
            ArgError::Algo => format!("ALGO must be one of {}", algorithm_names()).into(),
            ArgError::LimitTooLarge(kind, max) => {
                format!("ALGO {} allows a limit of at most {max}", kind.name()).into()
            }
            ArgError::Mode => "MODE must be enforce or shadow".into(),
            ArgError::PolicyName => "POLICY needs a policy name".into(),
            ArgError::TimeZone => "TZ must be an IANA time zone name, e.g. Europe/Paris".into(),
            ArgError::Anchor => "ANCHOR must be a day of the month from 1 to 31".into(),
            ArgError::TzWithoutCalendar => {
                "TZ applies to calendar windows: day, week, month or year".into()
            }
            ArgError::AnchorWithoutMonth => "ANCHOR applies to a month window".into(),
            ArgError::CalendarAlgo(kind) => format!(
                "calendar windows (day, week, month, year) count as ALGO fixed, not ALGO {}",
                kind.name()
            )
            .into(),
            ArgError::UnknownPolicyCallOption(arg) => {
                format!("unknown option '{arg}' after POLICY name (expected COST)").into()
            }
            ArgError::UnknownPolicyOption(arg) => {
                format!("unknown option '{arg}' (expected ALGO, BURST, MODE, TZ or ANCHOR)").into()
            }
            ArgError::RepeatedOption(name) => format!("{name} is given more than once").into(),
            ArgError::UnknownOption(arg) => {
                format!("unknown option '{arg}' (expected ALGO, BURST, COST, TZ or ANCHOR)").into()
            }
            ArgError::Upto => "UPTO must be a positive integer: the most units to take".into(),
            ArgError::MissingUpto => {
                "RL.TAKE needs UPTO n: the most units to take, an integer >= 1".into()
            }
            ArgError::CostInTake => {
                "RL.TAKE takes UPTO n, not COST: it counts up to n units and answers how many \
                 (RL.HIT COST n counts all n or none)"
                    .into()
            }
            ArgError::UnknownTakeOption(arg) => format!(
                "unknown option '{arg}' (expected UPTO, and with limits ALGO, BURST, TZ or ANCHOR)"
            )
            .into(),
            // The several-keys errors (RL.MHIT and its kin).
            several => several.several_keys_reason(),
        }
    }

    /// The text of the errors only several-keys calls make.
    fn several_keys_reason(&self) -> Cow<'static, str> {
        match self {
            ArgError::NumKeys => format!("numkeys must be an integer from 1 to {MAX_KEYS}").into(),
            ArgError::FewerKeys(numkeys) => {
                format!("numkeys is {numkeys} but fewer keys follow").into()
            }
            ArgError::MissingSpec => {
                "each key needs a rule: numkeys key [key ...] SPEC rule [SPEC rule ...]".into()
            }
            ArgError::SpecAsKey { numkeys, index } => format!(
                "numkeys is {numkeys} but SPEC comes after {index} keys: is numkeys too \
                 large? (a key named SPEC needs a SPEC of its own)"
            )
            .into(),
            ArgError::SpecCount { keys } => {
                format!("give one SPEC per key, in key order ({keys} keys)").into()
            }
            ArgError::DuplicateKey { key, first, second } => format!(
                "key '{key}' is given twice (indexes {first} and {second}): name each key \
                 once, with the sum of its costs"
            )
            .into(),
            ArgError::InSpec { index, key, error } => {
                let reason = match **error {
                    ArgError::WrongArity => {
                        "a SPEC needs limit window [limit window ...] or POLICY name".into()
                    }
                    ref other => other.reason(),
                };
                format!("SPEC {index} (key '{key}'): {reason}").into()
            }
            // Every other error is worded by `reason`, which never sends it here.
            _ => "invalid arguments".into(),
        }
    }
}

/// The reply's text without the `ERR ` that only a reply carries (see
/// [`ArgError::message`]).
impl std::fmt::Display for ArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason())
    }
}

impl std::error::Error for ArgError {}

fn algorithm_names() -> String {
    let names: Vec<&str> = AlgorithmKind::ALL.iter().map(|(_, name)| *name).collect();
    names.join(", ")
}
