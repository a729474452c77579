//! The argument grammar of the RL commands, parsed once into typed values.
//!
//! `RL.HIT key limit window [COST n]`: the parser sees the arguments after the key.

use super::algorithm::Quota;
use super::duration::{parse_duration_ms, DurationError, DAY_MS, MAX_WINDOW_MS};
use std::borrow::Cow;

/// The parsed arguments of RL.HIT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HitArgs {
    /// The limit and its window.
    pub quota: Quota,
    /// Units this call counts, >= 1.
    pub cost: i64,
}

/// Why the arguments were refused. [`ArgError::message`] gives the reply text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArgError {
    /// Too few arguments for the command: answered with Redis's standard arity error.
    WrongArity,
    /// `limit` is not an integer >= 1.
    Limit,
    /// `window` is not a valid duration.
    Window(DurationError),
    /// `COST` is not followed by an integer >= 1.
    Cost,
    /// `COST` appears twice.
    RepeatedOption(&'static str),
    /// An argument that is no known option; holds a printable excerpt of it.
    UnknownOption(String),
}

impl ArgError {
    /// The error reply, starting with `ERR` and naming the argument and the rule.
    pub fn message(&self) -> Cow<'static, str> {
        match self {
            ArgError::WrongArity => "ERR wrong number of arguments".into(),
            ArgError::Limit => "ERR limit must be a positive integer".into(),
            ArgError::Window(DurationError::Malformed) => {
                "ERR window must be a positive integer of seconds or an integer with a unit \
                 (ms, s, m, h, d), e.g. 250ms or 5m"
                    .into()
            }
            ArgError::Window(DurationError::UnknownUnit) => {
                "ERR window has an unknown unit: use ms, s, m, h or d".into()
            }
            ArgError::Window(DurationError::TooShort) => "ERR window must be at least 1ms".into(),
            ArgError::Window(DurationError::TooLong) => {
                format!("ERR window must be at most {}d", MAX_WINDOW_MS / DAY_MS).into()
            }
            ArgError::Cost => "ERR COST must be a positive integer".into(),
            ArgError::RepeatedOption(name) => format!("ERR {name} is given more than once").into(),
            ArgError::UnknownOption(arg) => {
                format!("ERR unknown option '{arg}' (expected COST)").into()
            }
        }
    }
}

/// Parses `limit window [COST n]`, the arguments of RL.HIT after the key.
pub fn parse_hit(args: &[&[u8]]) -> Result<HitArgs, ArgError> {
    let [limit, window, options @ ..] = args else {
        return Err(ArgError::WrongArity);
    };
    let limit = parse_positive(limit).ok_or(ArgError::Limit)?;
    let window_ms = parse_duration_ms(window).map_err(ArgError::Window)?;
    let mut cost = None;
    let mut rest = options.iter();
    while let Some(option) = rest.next() {
        if option.eq_ignore_ascii_case(b"COST") {
            if cost.is_some() {
                return Err(ArgError::RepeatedOption("COST"));
            }
            let value = rest.next().ok_or(ArgError::Cost)?;
            cost = Some(parse_positive(value).ok_or(ArgError::Cost)?);
        } else {
            return Err(ArgError::UnknownOption(printable_excerpt(option)));
        }
    }
    Ok(HitArgs {
        quota: Quota::new(limit, window_ms),
        cost: cost.unwrap_or(1),
    })
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
fn printable_excerpt(arg: &[u8]) -> String {
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

    fn parse(args: &[&str]) -> Result<HitArgs, ArgError> {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        parse_hit(&bytes)
    }

    #[test]
    fn parses_limit_window_and_cost() {
        let quota = Quota::new(5, 60_000);
        assert_eq!(parse(&["5", "1m"]), Ok(HitArgs { quota, cost: 1 }));
        assert_eq!(
            parse(&["5", "60", "cost", "3"]),
            Ok(HitArgs { quota, cost: 3 })
        );
        assert_eq!(
            parse(&["5", "60s", "CoSt", "5"]),
            Ok(HitArgs { quota, cost: 5 })
        );
        let max = parse(&["9223372036854775807", "1s", "COST", "9223372036854775807"]);
        assert_eq!(
            max.map(|a| (a.quota.limit, a.cost)),
            Ok((i64::MAX, i64::MAX))
        );
    }

    #[test]
    fn refuses_each_malformed_argument_by_name() {
        use ArgError::*;
        let cases: &[(&[&str], ArgError)] = &[
            (&[], WrongArity),
            (&["5"], WrongArity),
            (&["0", "1m"], Limit),
            (&["-1", "1m"], Limit),
            (&["1.5", "1m"], Limit),
            (&["five", "1m"], Limit),
            (&["9223372036854775808", "1m"], Limit),
            (&["5", "0"], Window(DurationError::TooShort)),
            (&["5", "-1"], Window(DurationError::Malformed)),
            (&["5", "1y"], Window(DurationError::UnknownUnit)),
            (
                &["5", "9223372036854775807"],
                Window(DurationError::TooLong),
            ),
            (&["5", "1m", "COST"], Cost),
            (&["5", "1m", "COST", "0"], Cost),
            (&["5", "1m", "COST", "-2"], Cost),
            (&["5", "1m", "COST", "x"], Cost),
            (
                &["5", "1m", "COST", "1", "COST", "1"],
                RepeatedOption("COST"),
            ),
            (&["5", "1m", "BURST", "1"], UnknownOption("BURST".into())),
            (
                &["5", "1m", "COST", "1", "extra"],
                UnknownOption("extra".into()),
            ),
        ];
        for (args, err) in cases {
            assert_eq!(parse(args).as_ref(), Err(err), "{:?}", args);
            assert!(err.message().starts_with("ERR "), "{:?}", err);
        }
    }

    #[test]
    fn quotes_unknown_options_safely() {
        let nul_and_newline: &[u8] = b"x\0\r\ny";
        let err = parse_hit(&[b"5", b"1m", nul_and_newline]).unwrap_err();
        assert_eq!(err.message(), "ERR unknown option 'x???y' (expected COST)");
        let long = [b'a'; 100];
        let err = parse_hit(&[b"5", b"1m", &long]).unwrap_err();
        assert!(err.message().contains(&format!("'{}...'", "a".repeat(32))));
    }

    proptest! {
        #[test]
        fn never_panics_and_errors_are_printable(
            args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..24), 0..6)
        ) {
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            if let Err(err) = parse_hit(&refs) {
                let msg = err.message();
                prop_assert!(msg.starts_with("ERR "));
                prop_assert!(msg.bytes().all(|b| b.is_ascii_graphic() || b == b' '));
            }
        }
    }
}
