//! The grammar of the several-keys commands, RL.MHIT, RL.MPEEK and RL.MREFUND:
//!
//! ```text
//! numkeys key [key ...] SPEC rule [SPEC rule ...]
//! ```
//!
//! `numkeys` (1 to [`MAX_KEYS`]) keys, then one `SPEC` per key, in key order. Each `rule`
//! is what RL.HIT takes after its key: `limit window [limit window ...] [ALGO name]
//! [BURST b] [COST n]`, or `POLICY name [COST n]`. `SPEC` (any case) starts the next
//! key's rule wherever it stands, except as the name right after `POLICY`, so a policy may
//! be called `spec`. A key may appear only once in a call.
//!
//! A builder (the gateway) writes `numkeys`, the keys, then `SPEC` and each key's words
//! exactly as it would after the key of RL.HIT.

use super::{parse_limits, parse_policy_call, printable_excerpt, ArgError, LimitArgs, Settings};
use crate::encoding::MAX_TIERS;
use smallvec::SmallVec;

/// The most keys one call may name.
pub const MAX_KEYS: usize = 16;

/// The most words a valid rule has: every tier, then `ALGO`, `BURST` and `COST` with
/// their values. A rule that goes on longer is refused without reading the rest.
const MAX_RULE_WORDS: usize = 2 * MAX_TIERS + 6;

/// One key's rule in a several-keys call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyRule<'a> {
    /// Limits given in the call, and the cost.
    Limits(LimitArgs),
    /// `POLICY name [COST n]`: a named policy (looked up by the module) and the cost.
    Policy {
        /// The policy's name.
        name: &'a [u8],
        /// `COST`, 1 when not given.
        cost: i64,
    },
}

/// The parsed arguments of RL.MHIT, RL.MPEEK and RL.MREFUND.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiArgs<'a> {
    /// The keys, in call order (1 to [`MAX_KEYS`], all different).
    pub keys: SmallVec<[&'a [u8]; 4]>,
    /// One rule per key, in the same order.
    pub rules: SmallVec<[KeyRule<'a>; 4]>,
}

/// Parses `numkeys key [key ...] SPEC rule [SPEC rule ...]` (the arguments after the
/// command's name). Memory is bounded by [`MAX_KEYS`] rules of at most 22 words, whatever
/// the number of arguments.
///
/// # Example
///
/// `RL.MHIT 2 user:42 ip:10.0.0.1 SPEC 10 1m 100 1h SPEC POLICY per-ip COST 2`, whose
/// arguments after the name are:
///
/// ```
/// use ratelimit_core::args::{parse_multi, KeyRule, Settings};
///
/// let words = "2 user:42 ip:10.0.0.1 SPEC 10 1m 100 1h SPEC POLICY per-ip COST 2";
/// let args: Vec<&[u8]> = words.split(' ').map(str::as_bytes).collect();
/// let call = parse_multi(args.into_iter(), &Settings::default())?;
/// assert_eq!(call.keys[..], [&b"user:42"[..], b"ip:10.0.0.1"]);
/// assert!(matches!(&call.rules[0], KeyRule::Limits(rule) if rule.limits.tiers.len() == 2));
/// assert_eq!(call.rules[1], KeyRule::Policy { name: b"per-ip", cost: 2 });
///
/// let twice: Vec<&[u8]> = "2 a a SPEC 1 1s SPEC 1 1s".split(' ').map(str::as_bytes).collect();
/// let refused = parse_multi(twice.into_iter(), &Settings::default()).unwrap_err();
/// assert_eq!(
///     refused.message(),
///     "ERR key 'a' is given twice (indexes 0 and 1): name each key once, with the sum of \
///      its costs"
/// );
/// # Ok::<(), ratelimit_core::args::ArgError>(())
/// ```
pub fn parse_multi<'a>(
    args: impl Iterator<Item = &'a [u8]>,
    settings: &Settings,
) -> Result<MultiArgs<'a>, ArgError> {
    let mut args = args.peekable();
    let numkeys = args.next().ok_or(ArgError::WrongArity)?;
    let numkeys = super::parse_positive(numkeys)
        .and_then(|n| usize::try_from(n).ok())
        .filter(|&n| n <= MAX_KEYS)
        .ok_or(ArgError::NumKeys)?;
    let mut keys = SmallVec::<[&[u8]; 4]>::new();
    for _ in 0..numkeys {
        keys.push(args.next().ok_or(ArgError::FewerKeys(numkeys))?);
    }
    // A key spelt `SPEC` is a key like any other; but when the call then fails for want of
    // SPECs, the likelier mistake is a numkeys too large, and the error says so.
    let spec_among_keys = keys.iter().position(|k| is_spec(k));
    let for_want_of_specs = |error: ArgError| match spec_among_keys {
        Some(index) => ArgError::SpecAsKey { numkeys, index },
        None => error,
    };
    for (second, key) in keys.iter().enumerate() {
        if let Some(first) = keys[..second].iter().position(|k| k == key) {
            return Err(ArgError::DuplicateKey {
                key: printable_excerpt(key),
                first,
                second,
            });
        }
    }
    match args.next() {
        Some(word) if is_spec(word) => {}
        _ => return Err(for_want_of_specs(ArgError::MissingSpec)),
    }
    let mut rules = SmallVec::<[KeyRule; 4]>::new();
    loop {
        let index = rules.len();
        if index == numkeys {
            return Err(for_want_of_specs(ArgError::SpecCount { keys: numkeys }));
        }
        let mut words = SmallVec::<[&[u8]; MAX_RULE_WORDS + 1]>::new();
        let mut ended = true;
        for word in args.by_ref() {
            let policy_name = words.len() == 1 && words[0].eq_ignore_ascii_case(b"POLICY");
            if is_spec(word) && !policy_name {
                ended = false;
                break;
            }
            words.push(word);
            if words.len() > MAX_RULE_WORDS {
                break;
            }
        }
        let rule = parse_rule(&words, settings).map_err(|error| ArgError::InSpec {
            index,
            key: printable_excerpt(keys[index]),
            error: Box::new(error),
        })?;
        rules.push(rule);
        if ended && args.peek().is_none() {
            break;
        }
    }
    if rules.len() != numkeys {
        return Err(for_want_of_specs(ArgError::SpecCount { keys: numkeys }));
    }
    Ok(MultiArgs { keys, rules })
}

fn is_spec(word: &[u8]) -> bool {
    word.eq_ignore_ascii_case(b"SPEC")
}

/// One key's rule: a policy call or limits (at most `MAX_RULE_WORDS + 1` words, so one
/// too many is refused by the limits grammar itself).
fn parse_rule<'a>(words: &[&'a [u8]], settings: &Settings) -> Result<KeyRule<'a>, ArgError> {
    if let Some(call) = parse_policy_call(words.iter().copied()) {
        let (name, cost) = call?;
        return Ok(KeyRule::Policy { name, cost });
    }
    let rule = parse_limits(words.iter().copied(), settings)?;
    if words.len() > MAX_RULE_WORDS {
        // Unreachable for any rule the grammar takes, kept so that a long rule can never
        // pass by being cut short.
        return Err(ArgError::UnknownOption(printable_excerpt(
            words[MAX_RULE_WORDS],
        )));
    }
    Ok(KeyRule::Limits(rule))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::Quota;
    use crate::limiter::AlgorithmKind;
    use proptest::prelude::*;

    fn parse(words: &str) -> Result<MultiArgs<'_>, ArgError> {
        parse_multi(words.split(' ').map(str::as_bytes), &Settings::default())
    }

    fn message(words: &str) -> String {
        parse(words).expect_err(words).message().into_owned()
    }

    #[test]
    fn reads_keys_and_one_rule_each() {
        let call = parse("3 a b c SPEC 5 1m spec 3 1s ALGO gcra BURST 4 COST 2 Spec POLICY p")
            .expect("valid");
        assert_eq!(call.keys[..], [&b"a"[..], b"b", b"c"]);
        let KeyRule::Limits(first) = &call.rules[0] else {
            panic!("limits")
        };
        assert_eq!(first.limits.tiers[..], [Quota::new(5, 60_000)]);
        let KeyRule::Limits(second) = &call.rules[1] else {
            panic!("limits")
        };
        assert_eq!(second.limits.algorithm, AlgorithmKind::Gcra);
        assert_eq!((second.limits.tiers[0].burst, second.cost), (4, 2));
        assert_eq!(
            call.rules[2],
            KeyRule::Policy {
                name: b"p",
                cost: 1
            }
        );
    }

    #[test]
    fn a_policy_may_be_called_spec() {
        let call = parse("2 a b SPEC POLICY spec COST 3 SPEC POLICY SPEC").expect("valid");
        assert_eq!(
            call.rules[0],
            KeyRule::Policy {
                name: b"spec",
                cost: 3
            }
        );
        assert_eq!(
            call.rules[1],
            KeyRule::Policy {
                name: b"SPEC",
                cost: 1
            }
        );
    }

    #[test]
    fn takes_up_to_sixteen_keys() {
        let keys: Vec<String> = (0..16).map(|i| format!("k{i}")).collect();
        let words = format!("16 {} {}", keys.join(" "), "SPEC 1 1s ".repeat(16));
        assert_eq!(parse(words.trim()).map(|c| c.rules.len()), Ok(16));
        let words = format!("17 {} k16 {}", keys.join(" "), "SPEC 1 1s ".repeat(17));
        assert_eq!(parse(words.trim()), Err(ArgError::NumKeys));
    }

    #[test]
    fn a_key_spelt_spec_is_a_key_when_it_has_its_own_spec() {
        let call = parse("2 spec a SPEC 1 1s SPEC 2 1m").expect("two keys, two rules");
        assert_eq!(call.keys.as_slice(), [b"spec".as_slice(), b"a"]);
        assert_eq!(call.rules.len(), 2);
    }

    #[test]
    fn refuses_each_malformed_call_by_name() {
        #[rustfmt::skip]
        let cases: &[(&str, &str)] = &[
            ("0 SPEC 1 1s", "ERR numkeys must be an integer from 1 to 16"),
            ("x a SPEC 1 1s", "ERR numkeys must be an integer from 1 to 16"),
            ("-1 a SPEC 1 1s", "ERR numkeys must be an integer from 1 to 16"),
            ("3 a b", "ERR numkeys is 3 but fewer keys follow"),
            ("1 a", "ERR each key needs a rule: numkeys key [key ...] SPEC rule [SPEC rule ...]"),
            ("1 a 1 1s", "ERR each key needs a rule: numkeys key [key ...] SPEC rule [SPEC rule ...]"),
            ("2 a b SPEC 1 1s", "ERR give one SPEC per key, in key order (2 keys)"),
            ("1 a SPEC 1 1s SPEC 1 1s", "ERR give one SPEC per key, in key order (1 keys)"),
            ("2 a b SPEC 1 1s SPEC", "ERR SPEC 1 (key 'b'): a SPEC needs limit window [limit window ...] or POLICY name"),
            ("2 a b SPEC SPEC 1 1s", "ERR SPEC 0 (key 'a'): a SPEC needs limit window [limit window ...] or POLICY name"),
            ("2 a b SPEC 1 1s SPEC 0 1s", "ERR SPEC 1 (key 'b'): limit must be a positive integer"),
            ("2 a b SPEC 1 1s COST 0 SPEC 1 1s", "ERR SPEC 0 (key 'a'): COST must be a positive integer"),
            ("2 a b SPEC 1 1s SPEC 5", "ERR SPEC 1 (key 'b'): a SPEC needs limit window [limit window ...] or POLICY name"),
            ("1 a SPEC POLICY", "ERR SPEC 0 (key 'a'): POLICY needs a policy name"),
            ("1 a SPEC 1 1s ALGO leaky", "ERR SPEC 0 (key 'a'): ALGO must be one of fixed, sliding, log, token, gcra"),
            ("3 a b a SPEC 1 1s", "ERR key 'a' is given twice (indexes 0 and 2): name each key once, with the sum of its costs"),
            ("2 a SPEC 1 1s", "ERR numkeys is 2 but SPEC comes after 1 keys: is numkeys too large? (a key named SPEC needs a SPEC of its own)"),
            ("2 spec a SPEC 1 1s", "ERR numkeys is 2 but SPEC comes after 0 keys: is numkeys too large? (a key named SPEC needs a SPEC of its own)"),
        ];
        for (words, expected) in cases {
            assert_eq!(message(words), *expected, "{words}");
        }
        assert_eq!(
            parse_multi(std::iter::empty(), &Settings::default()),
            Err(ArgError::WrongArity)
        );
    }

    #[test]
    fn a_long_rule_is_refused_without_reading_on() {
        let words = format!("1 a SPEC {}", "1 1s ".repeat(1000));
        assert_eq!(
            message(words.trim()),
            "ERR SPEC 0 (key 'a'): at most 8 tiers per key"
        );
        let words = format!("1 a SPEC 1 1s {}", "COST 1 ".repeat(1000));
        assert_eq!(
            message(words.trim()),
            "ERR SPEC 0 (key 'a'): COST is given more than once"
        );
    }

    proptest! {
        #[test]
        fn never_panics_and_errors_are_printable(
            words in prop::collection::vec(
                prop_oneof![
                    Just(b"SPEC".to_vec()), Just(b"POLICY".to_vec()), Just(b"2".to_vec()),
                    Just(b"1s".to_vec()), Just(b"COST".to_vec()),
                    prop::collection::vec(any::<u8>(), 0..8),
                ],
                0..24,
            )
        ) {
            let refs: Vec<&[u8]> = words.iter().map(Vec::as_slice).collect();
            match parse_multi(refs.iter().copied(), &Settings::default()) {
                Ok(call) => {
                    prop_assert_eq!(call.keys.len(), call.rules.len());
                    prop_assert!((1..=MAX_KEYS).contains(&call.keys.len()));
                }
                Err(err) => {
                    let msg = err.message();
                    prop_assert!(msg.starts_with("ERR "));
                    prop_assert!(msg.bytes().all(|b| b.is_ascii_graphic() || b == b' '));
                }
            }
        }
    }
}
