//! The arguments of RL.TAKE, the partial grant: RL.HIT's rule, written out or named with
//! `POLICY name`, and `UPTO n`, the most units to take. `COST` is refused: RL.HIT's cost is
//! all or nothing, and a call that says both would be ambiguous.

use super::{parse_limits, parse_policy_call, parse_positive, set_once, ArgError, Settings};
use crate::limiter::Limits;
use smallvec::SmallVec;

/// The parsed arguments of RL.TAKE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TakeArgs<'a> {
    /// The rule the units are counted under.
    pub rule: TakeRule<'a>,
    /// `UPTO`: the most units to count, >= 1.
    pub upto: i64,
}

/// Where the rule of an RL.TAKE comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TakeRule<'a> {
    /// Written out: `limit window [limit window ...] [ALGO name] ...`.
    Limits(Limits),
    /// `POLICY name`: a policy defined with RL.POLICY SET (looked up by the caller).
    Policy(&'a [u8]),
}

/// The options of a written-out rule that take a value: the word after one of them is
/// that value, never `UPTO` itself (`POLICY UPTO` names a policy called `UPTO`).
const VALUED: [&str; 6] = ["ALGO", "BURST", "TZ", "ANCHOR", "POLICY", "COST"];

/// Parses the arguments of RL.TAKE after the key: `UPTO n` anywhere among the options,
/// and RL.HIT's rule (without `COST`) around it.
///
/// # Example
///
/// ```
/// use ratelimit_core::args::{parse_take, Settings, TakeRule};
///
/// let args: [&[u8]; 6] = [b"100", b"1m", b"ALGO", b"token", b"UPTO", b"20"];
/// let take = parse_take(args.into_iter(), &Settings::default())?;
/// assert_eq!(take.upto, 20);
/// assert!(matches!(take.rule, TakeRule::Limits(_)));
///
/// let by_policy: [&[u8]; 4] = [b"POLICY", b"api", b"UPTO", b"5"];
/// let take = parse_take(by_policy.into_iter(), &Settings::default())?;
/// assert_eq!(take.rule, TakeRule::Policy(b"api"));
/// # Ok::<(), ratelimit_core::args::ArgError>(())
/// ```
pub fn parse_take<'a>(
    args: impl Iterator<Item = &'a [u8]>,
    settings: &Settings,
) -> Result<TakeArgs<'a>, ArgError> {
    let mut rest: SmallVec<[&'a [u8]; 16]> = SmallVec::new();
    let mut upto = None;
    let mut args = args.peekable();
    while let Some(word) = args.next() {
        if word.eq_ignore_ascii_case(b"UPTO") {
            let value = args.next().and_then(parse_positive);
            set_once(&mut upto, value.ok_or(ArgError::Upto)?, "UPTO")?;
            continue;
        }
        if word.eq_ignore_ascii_case(b"COST") {
            return Err(ArgError::CostInTake);
        }
        rest.push(word);
        if VALUED
            .iter()
            .any(|o| word.eq_ignore_ascii_case(o.as_bytes()))
        {
            if let Some(value) = args.next() {
                rest.push(value);
            }
        }
    }
    if rest.is_empty() {
        return Err(ArgError::WrongArity);
    }
    let upto = upto.ok_or(ArgError::MissingUpto)?;
    if let Some(call) = parse_policy_call(rest.iter().copied()) {
        // COST was refused above, so the cost is the default: only the name counts.
        let (name, _) = call.map_err(take_wording)?;
        return Ok(TakeArgs {
            rule: TakeRule::Policy(name),
            upto,
        });
    }
    let limits = parse_limits(rest.iter().copied(), settings)
        .map_err(take_wording)?
        .limits;
    Ok(TakeArgs {
        rule: TakeRule::Limits(limits),
        upto,
    })
}

/// RL.HIT's errors that list its options, worded with RL.TAKE's.
fn take_wording(err: ArgError) -> ArgError {
    match err {
        ArgError::UnknownOption(word) | ArgError::UnknownPolicyCallOption(word) => {
            ArgError::UnknownTakeOption(word)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Quota;
    use crate::limiter::AlgorithmKind;

    fn parse(args: &[&str]) -> Result<TakeArgs<'static>, ArgError> {
        let owned: Vec<&'static [u8]> = args
            .iter()
            .map(|a| &*Box::leak(a.as_bytes().to_vec().into_boxed_slice()))
            .collect();
        parse_take(owned.into_iter(), &Settings::default())
    }

    #[test]
    fn upto_goes_anywhere_among_the_options() {
        for args in [
            &["10", "1m", "UPTO", "3", "ALGO", "gcra"][..],
            &["10", "1m", "ALGO", "gcra", "upto", "3"][..],
        ] {
            let take = parse(args).expect("parses");
            assert_eq!(take.upto, 3);
            let TakeRule::Limits(limits) = take.rule else {
                panic!("limits written out");
            };
            assert_eq!(limits.algorithm, AlgorithmKind::Gcra);
            assert_eq!(limits.tiers[..], [Quota::new(10, 60_000)]);
        }
        let policy = parse(&["POLICY", "UPTO", "UPTO", "2"]).expect("parses");
        assert_eq!(policy.rule, TakeRule::Policy(b"UPTO"));
    }

    #[test]
    fn refuses_what_it_cannot_mean() {
        let cases: [(&[&str], ArgError); 10] = [
            (&["10", "1m"], ArgError::MissingUpto),
            (&["10", "1m", "UPTO"], ArgError::Upto),
            (&["10", "1m", "UPTO", "0"], ArgError::Upto),
            (&["10", "1m", "UPTO", "-3"], ArgError::Upto),
            (&["10", "1m", "UPTO", "9223372036854775808"], ArgError::Upto),
            (
                &["10", "1m", "UPTO", "2", "UPTO", "3"],
                ArgError::RepeatedOption("UPTO"),
            ),
            (
                &["10", "1m", "COST", "2", "UPTO", "3"],
                ArgError::CostInTake,
            ),
            (&["UPTO", "3"], ArgError::WrongArity),
            (
                &["10", "1m", "UPTO", "3", "FAST"],
                ArgError::UnknownTakeOption("FAST".into()),
            ),
            (
                &["POLICY", "api", "UPTO", "3", "FAST"],
                ArgError::UnknownTakeOption("FAST".into()),
            ),
        ];
        for (args, expected) in cases {
            assert_eq!(parse(args), Err(expected), "{args:?}");
        }
        assert_eq!(
            parse(&["10", "UPTO", "3"]),
            Err(ArgError::WrongArity),
            "a limit without its window is too few arguments, as for RL.HIT"
        );
    }

    #[test]
    fn the_largest_upto_is_i64_max() {
        let take = parse(&["10", "1m", "UPTO", "9223372036854775807"]).expect("parses");
        assert_eq!(take.upto, i64::MAX);
    }
}
