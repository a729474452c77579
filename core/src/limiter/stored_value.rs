//! What a key's stored value means for the request at hand: the same algorithm's states,
//! another algorithm's usage, or a value this module did not write.

use super::{AlgorithmKind, LimiterError, PerTier};
use crate::algorithm::{Algorithm, Quota};
use crate::encoding::{classify, decode_tiers, StoredForm, TiersBody};
use crate::fixed_window::{Fixed, WindowState};
use crate::with_algorithm;

/// What a key's value means to algorithm `A`.
pub(super) enum Prior<S> {
    /// No key.
    Empty,
    /// States of `A`, with the parameters they were written with (unknown for a plain
    /// count).
    Same(PerTier<(Option<Quota>, S)>),
    /// Another algorithm's state, reduced to the units it still counts.
    Usage(i64),
}

/// What a key's value means, and whether the key lost the expiry its state needs (see
/// [`lost_expiry_usage`]).
pub(super) fn read_prior<'a, A: Algorithm>(
    stored: Option<&'a [u8]>,
    expiry: impl Fn() -> Option<i64>,
    now_ms: i64,
) -> Result<(Prior<A::State<'a>>, bool), LimiterError> {
    let Some(bytes) = stored else {
        return Ok((Prior::Empty, false));
    };
    let form = classify(bytes).ok_or(LimiterError::NotOurs)?;
    if let Some(used) = lost_expiry_usage(&form, &expiry) {
        return Ok((Prior::Usage(used?), true));
    }
    Ok(match form {
        StoredForm::PlainCount(count) => {
            let ends_at_ms = expiry().ok_or(LimiterError::NotOurs)?;
            let prior = match A::from_plain_count(count, ends_at_ms) {
                Some(state) => Prior::Same(smallvec::smallvec![(None, state)]),
                None => {
                    let window = WindowState { count, ends_at_ms };
                    Prior::Usage(Fixed::used(&window, now_ms, &Quota::new(1, 1)))
                }
            };
            (prior, false)
        }
        StoredForm::Short {
            algorithm,
            quota,
            short,
        } => {
            let expires_at_ms = expiry().ok_or(LimiterError::NotOurs)?;
            let prior = if algorithm == A::ID {
                let state = A::from_short(short, expires_at_ms).ok_or(LimiterError::NotOurs)?;
                Prior::Same(smallvec::smallvec![(Some(quota), state)])
            } else {
                let kind = AlgorithmKind::from_id(algorithm).ok_or(LimiterError::NotOurs)?;
                let used = with_algorithm!(kind, short_usage(short, expires_at_ms, &quota, now_ms));
                Prior::Usage(used.ok_or(LimiterError::NotOurs)?)
            };
            (prior, false)
        }
        // The tiers form keeps its absolute times in the value: it reads the same with or
        // without the key's expiry, and one that lost it is written back with it.
        StoredForm::Tiers {
            algorithm,
            count,
            body,
        } if algorithm == A::ID => {
            let tiers = decode_tiers::<A>(body, count).ok_or(LimiterError::NotOurs)?;
            let prior = Prior::Same(tiers.into_iter().map(|(q, s)| (Some(q), s)).collect());
            (prior, expiry().is_none())
        }
        StoredForm::Tiers {
            algorithm,
            count,
            body,
        } => {
            let kind = AlgorithmKind::from_id(algorithm).ok_or(LimiterError::NotOurs)?;
            let used = with_algorithm!(kind, largest_usage(body, count, now_ms));
            (
                Prior::Usage(used.ok_or(LimiterError::NotOurs)?),
                expiry().is_none(),
            )
        }
    })
}

/// The units a plain count or a short form still counts when its key has no expiry
/// (`PERSIST`, `RESTORE key 0 ...`); `None` when the form does not need the expiry or the
/// key has one. Those forms keep their time in the expiry, so the time is lost, and the
/// units are counted again from now, under the request's rule: a plain count's units (a
/// window that ends one window from now), a bucket as full as its stored capacity (its
/// theoretical arrival time is unknown, so it is taken as late as it can be). Never a free
/// burst, and never a wait longer than one window of the request's rule.
fn lost_expiry_usage(
    form: &StoredForm<'_>,
    expiry: impl Fn() -> Option<i64>,
) -> Option<Result<i64, LimiterError>> {
    let used = match *form {
        StoredForm::PlainCount(count) => Ok(count),
        StoredForm::Short {
            algorithm,
            quota,
            short,
        } => match AlgorithmKind::from_id(algorithm) {
            Some(kind) if with_algorithm!(kind, short_decodes(short, 0)) => {
                Ok(with_algorithm!(kind, capacity_of(&quota)))
            }
            _ => Err(LimiterError::NotOurs),
        },
        StoredForm::Tiers { .. } => return None,
    };
    match expiry() {
        Some(_) => None,
        None => Some(used),
    }
}

fn capacity_of<B: Algorithm>(quota: &Quota) -> i64 {
    B::capacity(quota)
}

/// Whether `stored` (with the key's absolute expiry, if it has one) is a whole state this
/// module wrote: a plain count, a short form of a known algorithm, or tiers of a known
/// algorithm that decode completely. With or without an expiry: a key that lost it
/// (`PERSIST`, `RESTORE key 0 ...`) is still a state. RL.RESET deletes only such values.
pub fn is_state(stored: &[u8], expiry: Option<i64>) -> bool {
    match classify(stored) {
        Some(StoredForm::PlainCount(_)) => true,
        Some(StoredForm::Short {
            algorithm, short, ..
        }) => match AlgorithmKind::from_id(algorithm) {
            Some(kind) => with_algorithm!(kind, short_decodes(short, expiry.unwrap_or(0))),
            None => false,
        },
        Some(StoredForm::Tiers {
            algorithm,
            count,
            body,
        }) => AlgorithmKind::from_id(algorithm)
            .is_some_and(|kind| with_algorithm!(kind, decodes(body, count))),
        None => false,
    }
}

fn short_decodes<A: Algorithm>(short: i64, expires_at_ms: i64) -> bool {
    A::from_short(short, expires_at_ms).is_some()
}

fn decodes<A: Algorithm>(body: TiersBody<'_>, count: usize) -> bool {
    decode_tiers::<A>(body, count).is_some()
}

/// The units a short-form tier of algorithm `B` still counts.
fn short_usage<B: Algorithm>(
    short: i64,
    expires_at_ms: i64,
    quota: &Quota,
    now_ms: i64,
) -> Option<i64> {
    B::from_short(short, expires_at_ms).map(|state| B::used(&state, now_ms, quota))
}

/// The largest number of units any stored tier of algorithm `B` still counts.
fn largest_usage<B: Algorithm>(body: TiersBody<'_>, count: usize, now_ms: i64) -> Option<i64> {
    let tiers = decode_tiers::<B>(body, count)?;
    Some(
        tiers
            .iter()
            .map(|(q, s)| B::used(s, now_ms, q))
            .max()
            .unwrap_or(0),
    )
}

#[cfg(test)]
mod tests {
    use super::super::test_key::{fixed, Key, HOUR, T0};
    use super::super::{run, Action, Limits, Write};
    use super::*;

    #[test]
    fn only_whole_states_count_as_states() {
        let mut key = Key::default();
        key.run(
            &fixed(&[(5, HOUR), (9, 2 * HOUR)]),
            Action::Hit { cost: 1 },
            T0,
        );
        let (value, expiry) = key.value_and_expiry();
        assert!(is_state(&value, Some(expiry)));
        assert!(
            !is_state(&value[..value.len() - 1], Some(expiry)),
            "cut short"
        );
        assert!(is_state(b"5", Some(T0)));
        assert!(is_state(b"5", None), "a plain count that lost its expiry");
        assert!(is_state(&value, None), "tiers that lost their expiry");
        assert!(!is_state(b"\x01\x09\x01", Some(T0)), "unknown algorithm");
        assert!(!is_state(b"hello", Some(T0)));
    }

    #[test]
    fn foreign_values_are_refused() {
        let limits = fixed(&[(2, 1_000)]);
        for (value, expiry) in [
            (&b"hello"[..], Some(T0 + 5)),
            (b"hello", None),
            (b"03", None),
            (b"\x01\x09\x01", Some(T0)),
        ] {
            let err = run(&limits, Action::Hit { cost: 1 }, Some(value), || expiry, T0);
            assert_eq!(err, Err(LimiterError::NotOurs), "{value:?}");
        }
    }

    #[test]
    fn a_plain_count_without_its_expiry_counts_again_from_now() {
        let limits = fixed(&[(5, HOUR)]);
        let mut key = Key::default();
        key.run(&limits, Action::Hit { cost: 3 }, T0 + 10);
        let mut key = key.persisted();
        let hit = key.run(&limits, Action::Hit { cost: 1 }, T0 + 20);
        assert!(hit.decision.allowed);
        assert_eq!(hit.decision.remaining, 1, "the 3 units still count");
        let (value, expiry) = key.value_and_expiry();
        assert_eq!(value, b"4".to_vec());
        assert!(expiry > T0 + 20 && expiry <= T0 + 20 + HOUR, "{expiry}");
    }

    #[test]
    fn a_bucket_without_its_expiry_counts_as_full_for_at_most_one_window() {
        let gcra = Limits {
            algorithm: AlgorithmKind::Gcra,
            tiers: smallvec::smallvec![Quota::new(10, 60_000)],
        };
        let mut key = Key::default();
        key.run(&gcra, Action::Hit { cost: 1 }, T0);
        let mut key = key.persisted();
        let denied = key.run(&gcra, Action::Hit { cost: 1 }, T0 + 5);
        assert!(!denied.decision.allowed, "the time is lost: taken as full");
        assert!(
            denied.decision.retry_after_ms <= 6_000,
            "one unit's interval"
        );
        let (_, expiry) = key.value_and_expiry();
        assert!(expiry <= T0 + 5 + 60_000, "{expiry}");
        let later = key.run(&gcra, Action::Hit { cost: 1 }, T0 + 5 + 6_000);
        assert!(later.decision.allowed);
    }

    #[test]
    fn a_look_reads_a_state_without_its_expiry_and_writes_nothing() {
        for algorithm in AlgorithmKind::ALL.map(|(kind, _)| kind) {
            let limits = Limits {
                algorithm,
                tiers: smallvec::smallvec![Quota::new(5, HOUR)],
            };
            let mut key = Key::default();
            key.run(&limits, Action::Hit { cost: 1 }, T0);
            let mut key = key.persisted();
            let look = key.run(&limits, Action::Peek { cost: 1 }, T0 + 1);
            assert_eq!(look.write, Write::Nothing, "{algorithm:?}");
            let hit = key.run(&limits, Action::Hit { cost: 1 }, T0 + 1);
            assert!(
                matches!(hit.write, Write::Set { expires_at_ms, .. } if expires_at_ms > T0 + 1),
                "{algorithm:?}: {hit:?}"
            );
        }
    }
}
