//! The argument grammar of the lease commands (after the key):
//!
//! - RL.ACQUIRE: `max ttl [limit window ...] [ALGO a] [BURST b] [COST n] [ID id]`
//! - RL.RELEASE: `id`
//! - RL.RENEW: `id ttl`
//! - RL.LEASES: `max`
//!
//! `ttl` is a duration as RL.HIT's windows are written (`250ms`, `30s`, bare digits are
//! seconds), at most `ratelimit.max-window-ms`; the tiers and their options are RL.HIT's,
//! parsed by [`parse_limits`].

use super::{LeaseId, MAX_ID_LEN};
use crate::args::{parse_limits, printable_excerpt, ArgError, LimitArgs, Settings};
use crate::duration::{parse_duration_ms, DurationError, DAY_MS};
use std::borrow::Cow;

/// The parsed arguments of RL.ACQUIRE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AcquireArgs<'a> {
    /// Slots, 1 to `ratelimit.max-leases`.
    pub max: i64,
    /// The lease's length in ms.
    pub ttl_ms: i64,
    /// `ID`, in canonical form; `None`: the module generates one.
    pub id: Option<LeaseId<'a>>,
    /// The tiers and cost, when given.
    pub tiers: Option<LimitArgs>,
}

/// Why lease arguments were refused. As for [`ArgError`], [`Display`](std::fmt::Display)
/// gives the reply's text without its error code and [`LeaseArgError::message`] the reply
/// (`ERR ` and that text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseArgError {
    /// Too few arguments.
    WrongArity,
    /// `max` is not an integer from 1 to the cap (`ratelimit.max-leases`, which it carries).
    Max(i64),
    /// `ttl` is not a duration, is 0, or is above `ratelimit.max-window-ms` (carried).
    Ttl(i64),
    /// `ID` is missing its value, empty or longer than [`MAX_ID_LEN`] bytes.
    Id,
    /// `ID` is given twice.
    RepeatedId,
    /// `COST`, `ALGO` or `BURST` without a tier.
    OptionsWithoutTiers,
    /// A word where an option belongs that is no option of RL.ACQUIRE; holds a printable
    /// excerpt of it.
    UnknownOption(String),
    /// The tiers or their options, as RL.HIT refuses them.
    Tiers(ArgError),
}

impl LeaseArgError {
    /// The error reply: `ERR ` and then the [`Display`](std::fmt::Display) text.
    pub fn message(&self) -> Cow<'static, str> {
        format!("ERR {self}").into()
    }

    /// The text after `ERR `: borrowed where it is fixed, so that Display copies nothing.
    pub(crate) fn reason(&self) -> Cow<'static, str> {
        match self {
            LeaseArgError::WrongArity => "wrong number of arguments".into(),
            LeaseArgError::Max(cap) => {
                format!("max must be an integer from 1 to {cap} (ratelimit.max-leases)").into()
            }
            LeaseArgError::Ttl(max_ms) => {
                let max = if max_ms % DAY_MS == 0 {
                    format!("{}d", max_ms / DAY_MS)
                } else {
                    format!("{max_ms}ms")
                };
                format!(
                    "ttl must be a positive duration (e.g. 500ms, 30s) of at most {max} \
                     (ratelimit.max-window-ms)"
                )
                .into()
            }
            LeaseArgError::Id => {
                format!("ID must be followed by a lease id of 1 to {MAX_ID_LEN} bytes").into()
            }
            LeaseArgError::RepeatedId => "ID is given more than once".into(),
            LeaseArgError::OptionsWithoutTiers => {
                "ALGO, BURST and COST apply to tiers: give limit window first".into()
            }
            LeaseArgError::UnknownOption(arg) => {
                format!("unknown option '{arg}' (expected ALGO, BURST, COST, TZ, ANCHOR or ID)")
                    .into()
            }
            LeaseArgError::Tiers(err) => err.reason(),
        }
    }
}

/// The reply's text without the `ERR ` that only a reply carries (see
/// [`LeaseArgError::message`]).
impl std::fmt::Display for LeaseArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason())
    }
}

impl std::error::Error for LeaseArgError {}

/// Parses `max` against the cap (`ratelimit.max-leases`).
pub fn parse_max(arg: &[u8], cap: i64) -> Result<i64, LeaseArgError> {
    let valid = !arg.is_empty() && arg.len() <= 19 && arg.iter().all(u8::is_ascii_digit);
    let max = valid
        .then(|| crate::duration::parse_digits(arg))
        .flatten()
        .filter(|max| (1..=cap).contains(max));
    max.ok_or(LeaseArgError::Max(cap))
}

/// Parses a `ttl` against `ratelimit.max-window-ms`.
pub fn parse_ttl(arg: &[u8], settings: &Settings) -> Result<i64, LeaseArgError> {
    let error = LeaseArgError::Ttl(settings.max_window_ms);
    match parse_duration_ms(arg) {
        Ok(ms) if ms <= settings.max_window_ms => Ok(ms),
        Ok(_) | Err(DurationError::TooLong) => Err(error),
        Err(_) => Err(error),
    }
}

/// Checks a lease id a client gave and puts it in canonical form.
pub fn parse_id(arg: &[u8]) -> Result<LeaseId<'_>, LeaseArgError> {
    if arg.is_empty() || arg.len() > MAX_ID_LEN {
        return Err(LeaseArgError::Id);
    }
    Ok(LeaseId::parse(arg))
}

/// Parses RL.ACQUIRE's arguments after the key. `cap` is `ratelimit.max-leases`.
///
/// ```
/// use ratelimit_core::args::Settings;
/// use ratelimit_core::lease::args::parse_acquire;
///
/// let args: [&[u8]; 8] = [b"3", b"30s", b"100", b"1m", b"ID", b"job-7", b"COST", b"2"];
/// let parsed = parse_acquire(&args, &Settings::default(), 10_000).expect("valid");
/// assert_eq!((parsed.max, parsed.ttl_ms), (3, 30_000));
/// assert_eq!(parsed.tiers.map(|t| t.cost), Some(2));
/// let zero: [&[u8]; 2] = [b"0", b"30s"];
/// let refused = parse_acquire(&zero, &Settings::default(), 10_000).unwrap_err();
/// assert_eq!(refused.message(), "ERR max must be an integer from 1 to 10000 (ratelimit.max-leases)");
/// ```
pub fn parse_acquire<'a>(
    args: &[&'a [u8]],
    settings: &Settings,
    cap: i64,
) -> Result<AcquireArgs<'a>, LeaseArgError> {
    let [max, ttl, rest @ ..] = args else {
        return Err(LeaseArgError::WrongArity);
    };
    let max = parse_max(max, cap)?;
    let ttl_ms = parse_ttl(ttl, settings)?;
    // Tiers and options come in pairs (limit window, name value), so `ID` can only be
    // the first of a pair: an id spelt ALGO or 10 is never taken for anything else.
    let mut id = None;
    let mut others: Vec<&[u8]> = Vec::with_capacity(rest.len());
    for pair in rest.chunks(2) {
        match pair {
            [name, value] if name.eq_ignore_ascii_case(b"ID") => {
                if id.replace(parse_id(value)?).is_some() {
                    return Err(LeaseArgError::RepeatedId);
                }
            }
            [name] if name.eq_ignore_ascii_case(b"ID") => return Err(LeaseArgError::Id),
            _ => others.extend_from_slice(pair),
        }
    }
    let tiers = match others.first() {
        None => None,
        Some(first) if is_option(first) => return Err(LeaseArgError::OptionsWithoutTiers),
        // A word after the ttl that starts with a letter can only be a mistyped option
        // (`IDS`): a limit is digits. (`TZ` and `ANCHOR` without tiers stay RL.HIT's
        // error.)
        Some(first) if is_unknown_word(first) => {
            return Err(LeaseArgError::UnknownOption(printable_excerpt(first)));
        }
        Some(_) => {
            let parsed =
                parse_limits(others.iter().copied(), settings).map_err(|err| match err {
                    ArgError::WrongArity => LeaseArgError::Tiers(ArgError::MissingWindow),
                    ArgError::UnknownOption(arg) => LeaseArgError::UnknownOption(arg),
                    other => LeaseArgError::Tiers(other),
                })?;
            Some(parsed)
        }
    };
    Ok(AcquireArgs {
        max,
        ttl_ms,
        id,
        tiers,
    })
}

fn is_unknown_word(arg: &[u8]) -> bool {
    arg.first().is_some_and(u8::is_ascii_alphabetic)
        && !["TZ", "ANCHOR"]
            .iter()
            .any(|name| arg.eq_ignore_ascii_case(name.as_bytes()))
}

fn is_option(arg: &[u8]) -> bool {
    ["ALGO", "BURST", "COST"]
        .iter()
        .any(|name| arg.eq_ignore_ascii_case(name.as_bytes()))
}
