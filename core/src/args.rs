//! The argument grammar of the RL commands, parsed once into typed values.
//!
//! `RL.HIT | RL.PEEK | RL.REFUND key limit window [limit window ...] [ALGO name]
//! [BURST b] [COST n] [TZ zone] [ANCHOR day]`: the parser sees the arguments after the key.
//!
//! A window is a duration (`250ms`, `5m`, `60`) or a calendar period (`day`, `week`,
//! `month`, `year`, see [`crate::calendar`]). `TZ` names the IANA zone of every calendar
//! window of the rule (UTC without it), `ANCHOR` the day its `month` windows reset on.
//! Calendar windows count as a fixed window: a rule with one and no `ALGO` is a fixed
//! window whatever the default algorithm, and `ALGO` naming another one is refused, as
//! are `TZ` without a calendar window and `ANCHOR` without a `month` window.

use super::algorithm::Quota;
use super::calendar::{Calendar, Period, Zone};
use super::duration::{parse_duration_ms, DurationError, DAY_MS, MAX_WINDOW_MS};
use super::encoding::MAX_TIERS;
use super::limiter::{AlgorithmKind, Limits, Tiers};

mod error;
mod multi;
mod take;
pub use self::error::ArgError;
pub use self::multi::{parse_multi, KeyRule, MultiArgs, MAX_KEYS};
pub use self::take::{parse_take, TakeArgs, TakeRule};

/// The limits the module's configs put on the grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// The algorithm without `ALGO`.
    pub default_algorithm: AlgorithmKind,
    /// The longest window accepted, in ms.
    pub max_window_ms: i64,
    /// The largest limit accepted for `ALGO log`.
    pub max_log_limit: i64,
}

impl Default for Settings {
    /// The configs' defaults.
    fn default() -> Self {
        Settings {
            default_algorithm: AlgorithmKind::Fixed,
            max_window_ms: MAX_WINDOW_MS,
            max_log_limit: super::sliding_log::MAX_LOG_LIMIT,
        }
    }
}

/// The parsed arguments of RL.HIT, RL.PEEK and RL.REFUND.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitArgs {
    /// The algorithm and its tiers.
    pub limits: Limits,
    /// `COST`: units to count (or, for RL.REFUND, to give back), >= 1.
    pub cost: i64,
}

const OPTIONS: [&str; 6] = ["ALGO", "BURST", "COST", "MODE", "TZ", "ANCHOR"];

fn is_option(arg: &[u8]) -> bool {
    // Every option starts with a letter; a limit or a duration with a digit.
    arg.first().is_some_and(u8::is_ascii_alphabetic)
        && OPTIONS
            .iter()
            .any(|o| arg.eq_ignore_ascii_case(o.as_bytes()))
}

/// Parses `limit window [limit window ...] [ALGO name] [BURST b] [COST n]`. Takes an
/// iterator so that the command layer can hand over the server's arguments without
/// collecting them first.
///
/// # Example
///
/// `RL.HIT user:42 10 1m 100 1h ALGO sliding COST 2`, whose arguments after the key are:
///
/// ```
/// use ratelimit_core::algorithm::Quota;
/// use ratelimit_core::args::{parse_limits, ArgError, Settings};
/// use ratelimit_core::limiter::AlgorithmKind;
///
/// let args: [&[u8]; 8] = [b"10", b"1m", b"100", b"1h", b"ALGO", b"sliding", b"COST", b"2"];
/// let parsed = parse_limits(args.into_iter(), &Settings::default())?;
/// assert_eq!(parsed.limits.algorithm, AlgorithmKind::Sliding);
/// assert_eq!(parsed.limits.tiers[..], [Quota::new(10, 60_000), Quota::new(100, 3_600_000)]);
/// assert_eq!(parsed.cost, 2);
///
/// // A window above `ratelimit.max-window-ms` (366 days by default) is refused.
/// let too_long: [&[u8]; 2] = [b"5", b"400d"];
/// let refused = parse_limits(too_long.into_iter(), &Settings::default()).unwrap_err();
/// assert_eq!(refused.message(), "ERR window must be at most 366d (ratelimit.max-window-ms)");
/// # Ok::<(), ArgError>(())
/// ```
pub fn parse_limits<'a>(
    args: impl ExactSizeIterator<Item = &'a [u8]>,
    settings: &Settings,
) -> Result<LimitArgs, ArgError> {
    let rule = parse_rule(args, settings, Grammar::Call)?;
    Ok(LimitArgs {
        limits: rule.limits,
        cost: rule.cost.unwrap_or(1),
    })
}

/// Whether a policy enforces its limits or only reports what it would deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Denies what is over the limit.
    Enforce,
    /// Never denies; answers and counts what it would have denied.
    Shadow,
}

impl Mode {
    /// The name in `MODE name`.
    pub fn name(self) -> &'static str {
        match self {
            Mode::Enforce => "enforce",
            Mode::Shadow => "shadow",
        }
    }
}

/// A named rule: what `RL.POLICY SET name ...` defines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyArgs {
    /// The algorithm and tiers every call naming the policy uses.
    pub limits: Limits,
    /// Enforce or shadow.
    pub mode: Mode,
}

/// Parses a policy's definition: `limit window [limit window ...] [ALGO name] [BURST b]
/// [MODE enforce|shadow]`.
pub fn parse_policy<'a>(
    args: impl ExactSizeIterator<Item = &'a [u8]>,
    settings: &Settings,
) -> Result<PolicyArgs, ArgError> {
    let rule = parse_rule(args, settings, Grammar::Policy)?;
    Ok(PolicyArgs {
        limits: rule.limits,
        mode: rule.mode.unwrap_or(Mode::Enforce),
    })
}

/// The arguments that define `policy`, as `RL.POLICY GET` shows them and as they are
/// persisted: parsing them again gives the same policy.
pub fn policy_arguments(policy: &PolicyArgs) -> Vec<String> {
    let mut args = Vec::new();
    for quota in &policy.limits.tiers {
        args.push(quota.limit.to_string());
        args.push(match &quota.calendar {
            None => format_duration(quota.window_ms),
            Some(calendar) => calendar.period.name().into(),
        });
    }
    args.push("ALGO".into());
    args.push(policy.limits.algorithm.name().into());
    args.extend(calendar_arguments(&policy.limits.tiers));
    if let [only] = policy.limits.tiers.as_slice() {
        if policy.limits.algorithm.has_burst() && only.burst != only.limit {
            args.push("BURST".into());
            args.push(only.burst.to_string());
        }
    }
    args.push("MODE".into());
    args.push(policy.mode.name().into());
    args
}

/// `TZ zone` when the calendar windows of `tiers` are not in UTC, and `ANCHOR day` when
/// their months have one: the options that, after the tiers, give the same calendars.
pub fn calendar_arguments(tiers: &[Quota]) -> Vec<String> {
    let mut args = Vec::new();
    let calendars = || tiers.iter().filter_map(|q| q.calendar.as_ref());
    if let Some(zone) = calendars().map(|c| c.zone).find(|&zone| zone != Zone::UTC) {
        args.push("TZ".into());
        args.push(zone.name().unwrap_or("?").into());
    }
    if let Some(anchor) = calendars().map(|c| c.anchor).find(|&anchor| anchor > 1) {
        args.push("ANCHOR".into());
        args.push(anchor.to_string());
    }
    args
}

/// A window in the largest unit that divides it: `90s`, `5m`, `250ms`.
pub fn format_duration(ms: i64) -> String {
    const UNITS: [(i64, &str); 4] = [(DAY_MS, "d"), (3_600_000, "h"), (60_000, "m"), (1_000, "s")];
    UNITS.iter().find(|(size, _)| ms % size == 0).map_or_else(
        || format!("{ms}ms"),
        |(size, unit)| format!("{}{unit}", ms / size),
    )
}

/// Which grammar the options follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Grammar {
    /// A call (RL.HIT, RL.PEEK, RL.REFUND): `COST` allowed.
    Call,
    /// A policy's definition: `MODE` allowed, `COST` belongs to the calls.
    Policy,
}

/// What either grammar reads.
struct Rule {
    limits: Limits,
    cost: Option<i64>,
    mode: Option<Mode>,
}

fn parse_rule<'a>(
    args: impl ExactSizeIterator<Item = &'a [u8]>,
    settings: &Settings,
    grammar: Grammar,
) -> Result<Rule, ArgError> {
    if args.len() < 2 {
        return Err(ArgError::WrongArity);
    }
    let mut rest = args.peekable();
    let (mut tiers, any_calendar) = parse_tiers(&mut rest, settings)?;
    let options = parse_options(rest, grammar)?;
    let Options {
        algorithm,
        burst,
        cost,
        mode,
        zone,
        anchor,
    } = options;
    let algorithm = if any_calendar || zone.is_some() || anchor.is_some() {
        calendars(&mut tiers, algorithm, zone, anchor)?
    } else {
        algorithm
    }
    .unwrap_or(settings.default_algorithm);
    if let Some(burst) = burst {
        if !algorithm.has_burst() || tiers.len() != 1 {
            return Err(ArgError::BurstNotApplicable);
        }
        tiers[0].burst = burst;
    }
    if algorithm == AlgorithmKind::Log && tiers.iter().any(|q| q.limit > settings.max_log_limit) {
        return Err(ArgError::LimitTooLarge(algorithm, settings.max_log_limit));
    }
    Ok(Rule {
        limits: Limits { algorithm, tiers },
        cost,
        mode,
    })
}

/// Reads the `limit window` pairs; also says whether one of the windows is a calendar
/// period. After the first pair, a word starting with a letter ends the tiers: it is an
/// option, or a mistyped one that the options then name (`COSTS 2` is not a limit).
fn parse_tiers<'a, I: Iterator<Item = &'a [u8]>>(
    rest: &mut std::iter::Peekable<I>,
    settings: &Settings,
) -> Result<(Tiers, bool), ArgError> {
    let mut tiers = Tiers::new();
    let mut any_calendar = false;
    let starts_with_letter = |arg: &&[u8]| arg.first().is_some_and(u8::is_ascii_alphabetic);
    while let Some(limit) =
        rest.next_if(|arg| !is_option(arg) && (tiers.is_empty() || !starts_with_letter(arg)))
    {
        let limit = parse_positive(limit).ok_or(ArgError::Limit)?;
        let window = rest
            .next_if(|arg| !is_option(arg))
            .ok_or(ArgError::MissingWindow)?;
        // A duration starts with a digit, a calendar period with a letter.
        let period = if starts_with_letter(&window) {
            Period::from_name(window)
        } else {
            None
        };
        let quota = match period {
            // The zone and the anchor are set once the options are read.
            Some(period) => Quota::calendar(
                limit,
                Calendar {
                    period,
                    anchor: 0,
                    zone: Zone::UTC,
                },
            ),
            None => Quota::new(
                limit,
                parse_duration_ms(window).map_err(|err| match err {
                    DurationError::TooLong => ArgError::WindowAboveMax(settings.max_window_ms),
                    other => ArgError::Window(other),
                })?,
            ),
        };
        if quota.window_ms > settings.max_window_ms {
            return Err(ArgError::WindowAboveMax(settings.max_window_ms));
        }
        if tiers.len() == MAX_TIERS {
            return Err(ArgError::TooManyTiers);
        }
        any_calendar |= quota.calendar.is_some();
        tiers.push(quota);
    }
    if tiers.is_empty() {
        return Err(ArgError::Limit);
    }
    Ok((tiers, any_calendar))
}

/// The options after the tiers, each given at most once.
#[derive(Default)]
struct Options {
    algorithm: Option<AlgorithmKind>,
    burst: Option<i64>,
    cost: Option<i64>,
    mode: Option<Mode>,
    zone: Option<Zone>,
    anchor: Option<i64>,
}

/// Reads the options of `grammar` up to the end; an unknown word is refused with the list
/// of the grammar's options.
fn parse_options<'a>(
    mut rest: impl Iterator<Item = &'a [u8]>,
    grammar: Grammar,
) -> Result<Options, ArgError> {
    let mut o = Options::default();
    while let Some(option) = rest.next() {
        if option.eq_ignore_ascii_case(b"ALGO") {
            let kind = rest.next().and_then(AlgorithmKind::from_name);
            set_once(&mut o.algorithm, kind.ok_or(ArgError::Algo)?, "ALGO")?;
        } else if option.eq_ignore_ascii_case(b"BURST") {
            let value = rest.next().and_then(parse_positive);
            set_once(&mut o.burst, value.ok_or(ArgError::Burst)?, "BURST")?;
        } else if option.eq_ignore_ascii_case(b"COST") && grammar == Grammar::Call {
            let value = rest.next().and_then(parse_positive);
            set_once(&mut o.cost, value.ok_or(ArgError::Cost)?, "COST")?;
        } else if option.eq_ignore_ascii_case(b"TZ") {
            let value = rest.next().and_then(Zone::from_name);
            set_once(&mut o.zone, value.ok_or(ArgError::TimeZone)?, "TZ")?;
        } else if option.eq_ignore_ascii_case(b"ANCHOR") {
            let value = rest
                .next()
                .and_then(parse_positive)
                .filter(|day| (1..=31).contains(day));
            set_once(&mut o.anchor, value.ok_or(ArgError::Anchor)?, "ANCHOR")?;
        } else if option.eq_ignore_ascii_case(b"MODE") && grammar == Grammar::Policy {
            let value = rest.next().and_then(parse_mode);
            set_once(&mut o.mode, value.ok_or(ArgError::Mode)?, "MODE")?;
        } else {
            let excerpt = printable_excerpt(option);
            return Err(match grammar {
                Grammar::Call => ArgError::UnknownOption(excerpt),
                Grammar::Policy => ArgError::UnknownPolicyOption(excerpt),
            });
        }
    }
    Ok(o)
}

/// Gives the calendar windows of `tiers` their zone and anchor, and checks the options
/// apply; returns the algorithm, which is fixed for a rule with a calendar window.
fn calendars(
    tiers: &mut Tiers,
    algorithm: Option<AlgorithmKind>,
    zone: Option<Zone>,
    anchor: Option<i64>,
) -> Result<Option<AlgorithmKind>, ArgError> {
    let has = |period: Option<Period>| {
        tiers.iter().any(|q| {
            q.calendar
                .is_some_and(|c| period.is_none_or(|p| c.period == p))
        })
    };
    if !has(None) {
        return match (zone, anchor) {
            (Some(_), _) => Err(ArgError::TzWithoutCalendar),
            (None, Some(_)) => Err(ArgError::AnchorWithoutMonth),
            (None, None) => Ok(algorithm),
        };
    }
    if anchor.is_some() && !has(Some(Period::Month)) {
        return Err(ArgError::AnchorWithoutMonth);
    }
    if let Some(other) = algorithm.filter(|&kind| kind != AlgorithmKind::Fixed) {
        return Err(ArgError::CalendarAlgo(other));
    }
    // ANCHOR 1 is the plain month: stored as one, so the two never renew each other.
    let anchor = anchor.filter(|&day| day > 1).map_or(0, |day| day as u8);
    for calendar in tiers.iter_mut().filter_map(|q| q.calendar.as_mut()) {
        calendar.zone = zone.unwrap_or(Zone::UTC);
        if calendar.period == Period::Month {
            calendar.anchor = anchor;
        }
    }
    Ok(Some(AlgorithmKind::Fixed))
}

fn parse_mode(name: &[u8]) -> Option<Mode> {
    [Mode::Enforce, Mode::Shadow]
        .into_iter()
        .find(|mode| name.eq_ignore_ascii_case(mode.name().as_bytes()))
}

/// Parses `POLICY name [COST n]`, the arguments of a call that names a policy (after the
/// key); `None` when they do not start with `POLICY`.
pub fn parse_policy_call<'a>(
    mut args: impl Iterator<Item = &'a [u8]>,
) -> Option<Result<(&'a [u8], i64), ArgError>> {
    let first = args.next()?;
    if !first.eq_ignore_ascii_case(b"POLICY") {
        return None;
    }
    Some((|| {
        let name = args.next().ok_or(ArgError::PolicyName)?;
        let mut cost = None;
        while let Some(option) = args.next() {
            if option.eq_ignore_ascii_case(b"COST") {
                let value = args.next().and_then(parse_positive);
                set_once(&mut cost, value.ok_or(ArgError::Cost)?, "COST")?;
            } else {
                return Err(ArgError::UnknownPolicyCallOption(printable_excerpt(option)));
            }
        }
        Ok((name, cost.unwrap_or(1)))
    })())
}

fn set_once<T>(slot: &mut Option<T>, value: T, name: &'static str) -> Result<(), ArgError> {
    if slot.replace(value).is_some() {
        return Err(ArgError::RepeatedOption(name));
    }
    Ok(())
}

/// An integer >= 1 written in plain decimal digits.
fn parse_positive(text: &[u8]) -> Option<i64> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    super::duration::parse_digits(text).filter(|&n| n >= 1)
}

/// At most 32 bytes of a user argument, with anything but printable ASCII replaced, so an
/// error reply can quote it without breaking the protocol.
pub fn printable_excerpt(arg: &[u8]) -> String {
    let mut text: String = arg
        .iter()
        .take(32)
        .map(|&b| if b.is_ascii_graphic() { b as char } else { '?' })
        .collect();
    if arg.len() > 32 {
        text.push_str("...");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parse(args: &[&str]) -> Result<LimitArgs, ArgError> {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        parse_limits(bytes.iter().copied(), &Settings::default())
    }

    fn single(limit: i64, window_ms: i64, cost: i64) -> LimitArgs {
        LimitArgs {
            limits: Limits {
                algorithm: AlgorithmKind::Fixed,
                tiers: smallvec::smallvec![Quota::new(limit, window_ms)],
            },
            cost,
        }
    }

    #[test]
    fn parses_limit_window_and_cost() {
        assert_eq!(parse(&["5", "1m"]), Ok(single(5, 60_000, 1)));
        assert_eq!(parse(&["5", "60", "cost", "3"]), Ok(single(5, 60_000, 3)));
        assert_eq!(parse(&["5", "60s", "CoSt", "5"]), Ok(single(5, 60_000, 5)));
        assert_eq!(
            parse(&["5", "60s", "ALGO", "Fixed"]),
            Ok(single(5, 60_000, 1))
        );
        let max = parse(&["9223372036854775807", "1s", "COST", "9223372036854775807"]);
        assert_eq!(max, Ok(single(i64::MAX, 1_000, i64::MAX)));
    }

    #[test]
    fn follows_the_configs() {
        let settings = Settings {
            default_algorithm: AlgorithmKind::Gcra,
            max_window_ms: 60_000,
            max_log_limit: 50,
        };
        let parse_with = |args: &[&str]| {
            let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
            parse_limits(bytes.iter().copied(), &settings)
        };
        let gcra = parse_with(&["5", "1m"]).expect("valid");
        assert_eq!(gcra.limits.algorithm, AlgorithmKind::Gcra);
        assert_eq!(
            parse_with(&["5", "61s"]),
            Err(ArgError::WindowAboveMax(60_000))
        );
        assert_eq!(
            ArgError::WindowAboveMax(60_000).message(),
            "ERR window must be at most 60000ms (ratelimit.max-window-ms)"
        );
        let log = parse_with(&["51", "1m", "ALGO", "log"]);
        assert_eq!(log, Err(ArgError::LimitTooLarge(AlgorithmKind::Log, 50)));
        assert!(parse_with(&["50", "1m", "ALGO", "log"]).is_ok());
    }

    /// A policy parsed from `args` with the default settings.
    fn parse_policy_str(args: &[&str]) -> Result<PolicyArgs, ArgError> {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        parse_policy(bytes.iter().copied(), &Settings::default())
    }

    /// The arguments a policy is stored as parse back into the same policy.
    fn assert_policy_round_trips(args: &[&str]) {
        let policy = parse_policy_str(args).expect("valid");
        let again = policy_arguments(&policy);
        let again: Vec<&str> = again.iter().map(String::as_str).collect();
        assert_eq!(
            parse_policy_str(&again),
            Ok(policy),
            "{args:?} -> {again:?}"
        );
    }

    #[test]
    fn a_policy_round_trips_through_its_arguments() {
        for args in [
            &["5", "60", "10", "1h"][..],
            &["3", "90s", "ALGO", "gcra", "BURST", "7", "MODE", "Shadow"],
            &["1", "250ms", "ALGO", "log"],
        ] {
            assert_policy_round_trips(args);
        }
        let shadow = parse_policy_str(&["5", "1m", "MODE", "shadow"]).expect("valid");
        assert_eq!(shadow.mode, Mode::Shadow);
        assert_eq!(
            policy_arguments(&shadow),
            ["5", "1m", "ALGO", "fixed", "MODE", "shadow"]
        );
        assert_eq!(
            parse_policy_str(&["5", "1m", "MODE", "loud"]),
            Err(ArgError::Mode)
        );
        let cost = parse_policy_str(&["5", "1m", "COST", "2"]);
        assert_eq!(cost, Err(ArgError::UnknownPolicyOption("COST".into())));
        assert_eq!(
            parse(&["5", "1m", "MODE", "shadow"]),
            Err(ArgError::UnknownOption("MODE".into()))
        );
    }

    #[test]
    fn parses_calls_that_name_a_policy() {
        let call = |args: &[&'static str]| parse_policy_call(args.iter().map(|a| a.as_bytes()));
        assert_eq!(call(&["5", "1m"]), None);
        assert_eq!(call(&["policy", "login"]), Some(Ok((&b"login"[..], 1))));
        assert_eq!(
            call(&["POLICY", "login", "cost", "3"]),
            Some(Ok((&b"login"[..], 3)))
        );
        assert_eq!(call(&["POLICY"]), Some(Err(ArgError::PolicyName)));
        assert_eq!(
            call(&["POLICY", "x", "COST", "0"]),
            Some(Err(ArgError::Cost))
        );
        assert_eq!(
            call(&["POLICY", "x", "ALGO", "gcra"]),
            Some(Err(ArgError::UnknownPolicyCallOption("ALGO".into())))
        );
    }

    #[test]
    fn parses_tiers_in_order() {
        let args = parse(&["10", "1s", "1000", "1h", "COST", "2"]).expect("valid");
        assert_eq!(
            args.limits.tiers.as_slice(),
            [Quota::new(10, 1_000), Quota::new(1_000, 3_600_000)]
        );
        assert_eq!(args.cost, 2);
        let eight: Vec<&str> = ["1", "1s"].repeat(8);
        assert_eq!(parse(&eight).map(|a| a.limits.tiers.len()), Ok(8));
        let nine: Vec<&str> = ["1", "1s"].repeat(9);
        assert_eq!(parse(&nine), Err(ArgError::TooManyTiers));
    }

    #[test]
    fn refuses_each_malformed_argument_by_name() {
        use ArgError::*;
        #[rustfmt::skip]
        let cases: &[(&[&str], ArgError)] = &[
            (&[], WrongArity),
            (&["5"], WrongArity),
            (&["0", "1m"], Limit),
            (&["-1", "1m"], Limit),
            (&["1.5", "1m"], Limit),
            (&["five", "1m"], Limit),
            (&["9223372036854775808", "1m"], Limit),
            (&["COST", "1"], Limit),
            (&["5", "0"], Window(DurationError::TooShort)),
            (&["5", "-1"], Window(DurationError::Malformed)),
            (&["5", "1y"], Window(DurationError::UnknownUnit)),
            (&["5", "9223372036854775807"], WindowAboveMax(MAX_WINDOW_MS)),
            (&["5", "367d"], WindowAboveMax(MAX_WINDOW_MS)),
            (&["5", "1m", "10"], MissingWindow),
            (&["5", "1m", "10", "COST", "1"], MissingWindow),
            (&["5", "1m", "COST"], Cost),
            (&["5", "1m", "COST", "0"], Cost),
            (&["5", "1m", "COST", "-2"], Cost),
            (&["5", "1m", "COST", "x"], Cost),
            (&["5", "1m", "COST", "1", "COST", "1"], RepeatedOption("COST")),
            (&["5", "1m", "ALGO"], Algo),
            (&["5", "1m", "ALGO", "leaky"], Algo),
            (&["5", "1m", "ALGO", "fixed", "ALGO", "fixed"], RepeatedOption("ALGO")),
            (&["5", "1m", "BURST", "0"], Burst),
            (&["5", "1m", "BURST", "2"], BurstNotApplicable),
            (&["5", "1m", "COST", "1", "extra"], UnknownOption("extra".into())),
            // A mistyped option after the tiers is named, not read as a limit.
            (&["5", "1m", "COSTS", "2"], UnknownOption("COSTS".into())),
            (&["5", "1m", "extra"], UnknownOption("extra".into())),
            (&["5", "1w"], Window(DurationError::UnknownUnit)),
        ];
        for (args, err) in cases {
            assert_eq!(parse(args).as_ref(), Err(err), "{:?}", args);
            assert!(err.message().starts_with("ERR "), "{:?}", err);
        }
    }

    fn calendar(period: Period, anchor: u8, zone: &str) -> Quota {
        let zone = Zone::from_name(zone.as_bytes()).expect("an IANA name");
        Quota::calendar(
            1_000,
            Calendar {
                period,
                anchor,
                zone,
            },
        )
    }

    #[test]
    fn parses_calendar_windows_beside_durations() {
        let args = parse(&["10", "1s", "1000", "month", "TZ", "Europe/Paris"]).expect("valid");
        assert_eq!(args.limits.algorithm, AlgorithmKind::Fixed);
        assert_eq!(
            args.limits.tiers.as_slice(),
            [
                Quota::new(10, 1_000),
                calendar(Period::Month, 0, "Europe/Paris")
            ]
        );
        let utc = parse(&["1000", "DAY"]).expect("valid");
        assert_eq!(utc.limits.tiers[0], calendar(Period::Day, 0, "UTC"));
        let billing = parse(&["1000", "month", "anchor", "31", "tz", "asia/kathmandu"]);
        assert_eq!(
            billing.expect("valid").limits.tiers[0],
            calendar(Period::Month, 31, "Asia/Kathmandu")
        );
        // The anchor is the month's: a day window beside it has none.
        let both = parse(&["1000", "day", "1000", "month", "ANCHOR", "5"]).expect("valid");
        assert_eq!(
            both.limits.tiers.as_slice(),
            [
                calendar(Period::Day, 0, "UTC"),
                calendar(Period::Month, 5, "UTC")
            ]
        );
        // ANCHOR 1 is the plain month.
        let first = parse(&["1000", "month", "ANCHOR", "1"]).expect("valid");
        assert_eq!(first.limits.tiers[0], calendar(Period::Month, 0, "UTC"));
        // Without ALGO, a calendar rule is fixed whatever the default.
        let settings = Settings {
            default_algorithm: AlgorithmKind::Gcra,
            ..Settings::default()
        };
        let args: [&[u8]; 2] = [b"5", b"week"];
        let parsed = parse_limits(args.into_iter(), &settings).expect("valid");
        assert_eq!(parsed.limits.algorithm, AlgorithmKind::Fixed);
        // A year is 366 days: within the default cap, not within a shorter one.
        let short = Settings {
            max_window_ms: 30 * DAY_MS,
            ..Settings::default()
        };
        let args: [&[u8]; 2] = [b"5", b"month"];
        let refused = parse_limits(args.into_iter(), &short);
        assert_eq!(refused, Err(ArgError::WindowAboveMax(30 * DAY_MS)));
        assert!(parse(&["5", "year"]).is_ok());
    }

    #[test]
    fn refuses_calendar_options_that_do_not_apply() {
        use ArgError::*;
        #[rustfmt::skip]
        let cases: &[(&[&str], ArgError)] = &[
            (&["5", "month", "TZ", "Mars/Olympus"], TimeZone),
            (&["5", "month", "TZ"], TimeZone),
            (&["5", "month", "TZ", "+02:00"], TimeZone),
            (&["5", "month", "TZ", "UTC", "TZ", "UTC"], RepeatedOption("TZ")),
            (&["5", "1d", "TZ", "Europe/Paris"], TzWithoutCalendar),
            (&["5", "month", "ANCHOR", "0"], Anchor),
            (&["5", "month", "ANCHOR", "32"], Anchor),
            (&["5", "month", "ANCHOR", "x"], Anchor),
            (&["5", "month", "ANCHOR", "-3"], Anchor),
            (&["5", "month", "ANCHOR"], Anchor),
            (&["5", "month", "ANCHOR", "5", "ANCHOR", "5"], RepeatedOption("ANCHOR")),
            (&["5", "day", "ANCHOR", "5"], AnchorWithoutMonth),
            (&["5", "1m", "ANCHOR", "5"], AnchorWithoutMonth),
            (&["5", "month", "ALGO", "gcra"], CalendarAlgo(AlgorithmKind::Gcra)),
            (&["5", "1s", "5", "week", "ALGO", "sliding"], CalendarAlgo(AlgorithmKind::Sliding)),
            (&["5", "month", "BURST", "3"], BurstNotApplicable),
            (&["5", "months"], Window(DurationError::Malformed)),
            (&["month", "5"], Limit),
        ];
        for (args, err) in cases {
            assert_eq!(parse(args).as_ref(), Err(err), "{:?}", args);
            assert!(err.message().starts_with("ERR "), "{:?}", err);
        }
        assert_eq!(
            TimeZone.message(),
            "ERR TZ must be an IANA time zone name, e.g. Europe/Paris"
        );
        assert!(parse(&["5", "month", "ALGO", "fixed", "TZ", "UTC"]).is_ok());
    }

    #[test]
    fn a_calendar_policy_round_trips_through_its_arguments() {
        for args in [
            &["10", "1s", "1000", "month", "TZ", "Europe/Paris"][..],
            &[
                "5",
                "day",
                "50",
                "week",
                "500",
                "month",
                "ANCHOR",
                "31",
                "TZ",
                "Pacific/Chatham",
            ],
            &["1", "year", "MODE", "shadow"],
        ] {
            assert_policy_round_trips(args);
        }
        let paris = parse_policy_str(&["1000", "month", "ANCHOR", "5", "TZ", "europe/paris"]);
        assert_eq!(
            policy_arguments(&paris.expect("valid")),
            [
                "1000",
                "month",
                "ALGO",
                "fixed",
                "TZ",
                "Europe/Paris",
                "ANCHOR",
                "5",
                "MODE",
                "enforce"
            ]
        );
    }

    #[test]
    fn quotes_unknown_options_safely() {
        let nul_and_newline: &[u8] = b"x\0\r\ny";
        let err = parse_limits(
            [&b"5"[..], b"1m", b"COST", b"1", nul_and_newline].into_iter(),
            &Settings::default(),
        )
        .unwrap_err();
        assert_eq!(
            err.message(),
            "ERR unknown option 'x???y' (expected ALGO, BURST, COST, TZ or ANCHOR)"
        );
        let long = [b'a'; 100];
        let err = parse_limits(
            [&b"5"[..], b"1m", b"COST", b"1", &long].into_iter(),
            &Settings::default(),
        )
        .unwrap_err();
        assert!(err.message().contains(&format!("'{}...'", "a".repeat(32))));
    }

    proptest! {
        #[test]
        fn never_panics_and_errors_are_printable(
            args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..24), 0..6)
        ) {
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            if let Err(err) = parse_limits(refs.iter().copied(), &Settings::default()) {
                let msg = err.message();
                prop_assert!(msg.starts_with("ERR "));
                prop_assert!(msg.bytes().all(|b| b.is_ascii_graphic() || b == b' '));
            }
        }
    }

    /// Display is the reply without `ERR `, for every variant (the reply texts themselves
    /// are pinned by the tests above), and nests as a SPEC's error quotes it.
    #[test]
    fn display_is_the_reply_without_its_error_code() {
        use ArgError::*;
        let all = [
            WrongArity,
            Limit,
            Window(DurationError::Malformed),
            Window(DurationError::UnknownUnit),
            Window(DurationError::TooShort),
            Window(DurationError::TooLong),
            WindowAboveMax(60_000),
            MissingWindow,
            TooManyTiers,
            Cost,
            Burst,
            BurstNotApplicable,
            Algo,
            LimitTooLarge(AlgorithmKind::Log, 10_000),
            Mode,
            PolicyName,
            TimeZone,
            Anchor,
            TzWithoutCalendar,
            AnchorWithoutMonth,
            CalendarAlgo(AlgorithmKind::Token),
            UnknownPolicyOption("x".into()),
            UnknownPolicyCallOption("x".into()),
            RepeatedOption("COST"),
            UnknownOption("x".into()),
            Upto,
            MissingUpto,
            CostInTake,
            UnknownTakeOption("x".into()),
            NumKeys,
            FewerKeys(3),
            MissingSpec,
            SpecAsKey {
                numkeys: 2,
                index: 1,
            },
            SpecCount { keys: 2 },
            DuplicateKey {
                key: "a".into(),
                first: 0,
                second: 1,
            },
            InSpec {
                index: 0,
                key: "a".into(),
                error: Box::new(Limit),
            },
        ];
        for err in all {
            let shown = err.to_string();
            assert_eq!(err.message(), format!("ERR {shown}"), "{err:?}");
            assert!(!shown.starts_with("ERR"), "{err:?}");
            // A std error: boxes into what `?` in a caller's `main` takes.
            let _: Box<dyn std::error::Error> = Box::new(err);
        }
        assert_eq!(
            Window(DurationError::UnknownUnit).to_string(),
            "window has an unknown unit: use ms, s, m, h or d (a week is 7d), or a calendar \
             period: day, week, month or year"
        );
        let nested = InSpec {
            index: 1,
            key: "b".into(),
            error: Box::new(WrongArity),
        };
        assert_eq!(
            nested.to_string(),
            "SPEC 1 (key 'b'): a SPEC needs limit window [limit window ...] or POLICY name"
        );
    }
}
