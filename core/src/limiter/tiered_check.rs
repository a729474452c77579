//! The tiered check, refund and renewal: every tier counts or none does, and a key whose
//! parameters changed starts afresh from its usage (see the [`limiter`](super) docs).

use super::stored_value::Prior;
use super::{Outcome, PerTier, Value, Write};
use crate::algorithm::{Algorithm, OutOfRange, Quota, TierCheck};
use crate::decision::{Decision, NEVER};
use crate::encoding::{encode_count, encode_short, encode_tiers};

/// The states the request starts from, one per tier (`None`: empty).
pub(super) struct Start<S> {
    /// One per tier, in request order.
    pub(super) states: PerTier<Option<S>>,
    /// The key was renewed from its usage (see the module docs): worth writing even when
    /// nothing is counted.
    pub(super) renewed: bool,
    /// The key has no expiry though its state ends: a hit writes the state back with its
    /// expiry even when it counts nothing, so that the key goes when its state does.
    pub(super) lost_expiry: bool,
}

/// The stored states when they were written with the request's parameters and last no
/// longer than their span from now; else states seeded with the units the old ones still
/// count (a renewal, see the module docs of [`limiter`](super)).
pub(super) fn starting_states<'a, A: Algorithm>(
    prior: Prior<A::State<'a>>,
    tiers: &[Quota],
    now_ms: i64,
    lost_expiry: bool,
) -> Result<Start<A::State<'a>>, OutOfRange> {
    let empty = || Start {
        states: std::iter::repeat_n(None, tiers.len()).collect(),
        renewed: false,
        lost_expiry,
    };
    let used = match prior {
        Prior::Empty => return Ok(empty()),
        Prior::Same(stored) => {
            let reusable = stored.len() == tiers.len()
                && stored
                    .iter()
                    .zip(tiers)
                    .all(|((written_with, state), quota)| {
                        written_with
                            .map_or_else(|| A::fits_unrecorded(state, quota), |q| q == *quota)
                            && A::expires_at_ms(state, quota).saturating_sub(now_ms)
                                <= A::span_ms(quota)
                    });
            if reusable {
                return Ok(Start {
                    states: stored.into_iter().map(|(_, s)| Some(s)).collect(),
                    renewed: false,
                    lost_expiry,
                });
            }
            stored
                .iter()
                .zip(tiers.iter().cycle())
                .map(|((written_with, state), quota)| {
                    A::used(state, now_ms, written_with.as_ref().unwrap_or(quota))
                })
                .max()
                .unwrap_or(0)
        }
        Prior::Usage(used) => used,
    };
    if used <= 0 {
        return Ok(empty());
    }
    let states = tiers
        .iter()
        .map(|quota| A::seeded(used.min(A::capacity(quota)), now_ms, quota).map(Some))
        .collect::<Result<_, _>>()?;
    Ok(Start {
        states,
        renewed: true,
        lost_expiry,
    })
}

/// What a check does with the units when every tier allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Counting {
    /// Counts them and writes the new state (RL.HIT).
    Writes,
    /// Answers as if they were counted, writing nothing (RL.PEEK).
    Looks,
    /// Answers as if another key denied: nothing counted, nothing written.
    Held,
}

/// Checks `cost` in every tier: counted in all of them when every tier allows (and the
/// check writes, which a look does not), else in none.
pub(super) fn check<'a, A: Algorithm>(
    start: Start<A::State<'a>>,
    tiers: &[Quota],
    now_ms: i64,
    cost: i64,
    counting: Counting,
) -> Result<Outcome, OutOfRange> {
    let writes = counting == Counting::Writes;
    let checks = tiers
        .iter()
        .zip(&start.states)
        .map(|(quota, state)| A::check(state.as_ref(), now_ms, quota, cost))
        .collect::<Result<PerTier<TierCheck<A::State<'a>>>, _>>()?;
    let allowed = checks.iter().all(|c| c.decision.allowed);
    let counted = allowed && counting != Counting::Held;
    let mut decisions = PerTier::with_capacity(checks.len());
    for ((check, quota), state) in checks.iter().zip(tiers).zip(&start.states) {
        decisions.push(if counted || !check.decision.allowed {
            check.decision
        } else {
            // This tier would allow, but another tier (or key) denies, so nothing is
            // counted here either.
            let now = A::view(state.as_ref(), now_ms, quota)?;
            Decision {
                remaining: now.remaining,
                reset_after_ms: now.reset_after_ms,
                ..check.decision
            }
        });
    }
    let write = if !writes {
        Write::Nothing
    } else if allowed {
        let charged: Option<PerTier<A::State<'a>>> =
            checks.into_iter().map(|c| c.charged).collect();
        charged.map_or(Write::Nothing, |states| store::<A>(tiers, &states, now_ms))
    } else if start.renewed || start.lost_expiry {
        match renewal::<A>(tiers, start.states, now_ms) {
            // Nothing left to count: a key that lost its expiry goes now.
            Write::Nothing if start.lost_expiry => Write::Delete,
            write => write,
        }
    } else {
        Write::Nothing
    };
    Ok(Outcome {
        decision: combine(&decisions, allowed),
        tiers: decisions,
        write,
    })
}

/// Gives back up to `amount` units in every tier, never below empty; an emptied key is
/// deleted.
pub(super) fn refund<'a, A: Algorithm>(
    start: Start<A::State<'a>>,
    tiers: &[Quota],
    now_ms: i64,
    amount: i64,
) -> Result<Outcome, OutOfRange> {
    // Units counted under other parameters were not charged by this request's rules:
    // there is nothing of them to give back.
    let refunded: PerTier<Option<A::State<'a>>> = if start.renewed {
        std::iter::repeat_n(None, tiers.len()).collect()
    } else {
        tiers
            .iter()
            .zip(&start.states)
            .map(|(quota, state)| A::refund(state.as_ref(), now_ms, quota, amount))
            .collect()
    };
    let changed = refunded.iter().any(Option::is_some);
    let states: PerTier<Option<A::State<'a>>> = refunded
        .into_iter()
        .zip(start.states)
        .map(|(new, old)| new.or(old))
        .collect();
    let mut decisions = PerTier::with_capacity(tiers.len());
    for (quota, state) in tiers.iter().zip(&states) {
        let now = A::view(state.as_ref(), now_ms, quota)?;
        decisions.push(Decision {
            allowed: changed,
            limit: A::capacity(quota),
            remaining: now.remaining,
            reset_after_ms: now.reset_after_ms,
            retry_after_ms: 0,
        });
    }
    let write = if !changed {
        Write::Nothing
    } else {
        let states: Option<PerTier<A::State<'a>>> = states.into_iter().collect();
        match states {
            Some(states)
                if states
                    .iter()
                    .zip(tiers)
                    .any(|(state, quota)| A::used(state, now_ms, quota) > 0) =>
            {
                store::<A>(tiers, &states, now_ms)
            }
            _ => Write::Delete,
        }
    };
    let mut decision = combine(&decisions, true);
    decision.allowed = changed;
    Ok(Outcome {
        decision,
        tiers: decisions,
        write,
    })
}

/// The write that keeps a renewal, or a state that lost its expiry, when nothing is
/// counted: so the announced wait holds, and the key goes when its state does.
fn renewal<'a, A: Algorithm>(
    tiers: &[Quota],
    states: PerTier<Option<A::State<'a>>>,
    now_ms: i64,
) -> Write {
    let states: Option<PerTier<A::State<'a>>> = states.into_iter().collect();
    states.map_or(Write::Nothing, |states| store::<A>(tiers, &states, now_ms))
}

/// The write that stores `states`: a plain count where the algorithm uses one, else the
/// tiers form; the key expires when the last tier's state is the same as no state.
fn store<A: Algorithm>(tiers: &[Quota], states: &[A::State<'_>], now_ms: i64) -> Write {
    let expires_at_ms = states
        .iter()
        .zip(tiers)
        .map(|(state, quota)| A::expires_at_ms(state, quota))
        .max()
        .unwrap_or(now_ms);
    if expires_at_ms <= now_ms {
        return Write::Delete;
    }
    let value = match (tiers, states) {
        // A calendar window records its calendar in the tiers form: the plain count and the
        // short form keep only the limit and the window's length.
        ([quota], [only]) if quota.calendar.is_none() => {
            match (A::to_plain_count(only), A::to_short(only, expires_at_ms)) {
                (Some(count), _) => Value::from_slice(encode_count(count, &mut [0u8; 20])),
                (None, Some(short)) => encode_short::<A>(quota, short)
                    .unwrap_or_else(|| encode_tiers::<A>(tiers, states)),
                (None, None) => encode_tiers::<A>(tiers, states),
            }
        }
        _ => encode_tiers::<A>(tiers, states),
    };
    Write::Set {
        value,
        expires_at_ms,
    }
}

/// The binding answer over all tiers: when allowed, the tier with the least remaining;
/// when denied, the denied tier with the longest wait. `remaining` is the smallest and
/// `reset_after_ms` the longest over all tiers.
fn combine(tiers: &[Decision], allowed: bool) -> Decision {
    let wait = |d: &Decision| match d.retry_after_ms {
        NEVER => i64::MAX,
        ms => ms,
    };
    let binding = if allowed {
        tiers.iter().min_by_key(|d| d.remaining)
    } else {
        tiers.iter().filter(|d| !d.allowed).max_by_key(|d| wait(d))
    };
    let Some(binding) = binding.or(tiers.first()) else {
        return Decision {
            allowed,
            limit: 0,
            remaining: 0,
            reset_after_ms: 0,
            retry_after_ms: 0,
        };
    };
    Decision {
        allowed,
        limit: binding.limit,
        remaining: tiers.iter().map(|d| d.remaining).min().unwrap_or(0),
        reset_after_ms: tiers.iter().map(|d| d.reset_after_ms).max().unwrap_or(0),
        retry_after_ms: if allowed { 0 } else { binding.retry_after_ms },
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_key::{fixed, Key, HOUR, T0};
    use super::super::{Action, AlgorithmKind, Limits, Write};
    use crate::algorithm::Quota;
    use crate::encoding::FORMAT_V1;

    #[test]
    fn every_tier_counts_or_none_does() {
        let limits = fixed(&[(2, 1_000), (3, HOUR)]);
        let mut key = Key::default();
        let hit = Action::Hit { cost: 1 };
        assert!(key.run(&limits, hit, T0).decision.allowed);
        assert!(key.run(&limits, hit, T0 + 1).decision.allowed);
        // The one-second tier is full: denied, and the hour tier counts nothing either.
        let denied = key.run(&limits, hit, T0 + 2);
        assert!(!denied.decision.allowed);
        assert_eq!(denied.write, Write::Nothing);
        assert_eq!(denied.decision.retry_after_ms, 998);
        assert_eq!(denied.tiers[1].remaining, 1, "the hour tier still has room");
        assert!(denied.tiers[1].allowed);
        // Next second: the hour tier allows one more, then binds for the rest of the hour.
        let third = key.run(&limits, hit, T0 + 1_000);
        assert!(third.decision.allowed);
        assert_eq!((third.decision.limit, third.decision.remaining), (3, 0));
        assert_eq!(third.decision.reset_after_ms, HOUR - 1_000);
        let fourth = key.run(&limits, hit, T0 + 2_000);
        assert!(!fourth.decision.allowed);
        assert_eq!(fourth.decision.limit, 3, "the binding tier is the hour");
        assert_eq!(fourth.decision.retry_after_ms, HOUR - 2_000);
    }

    #[test]
    fn a_single_fixed_tier_is_stored_as_a_plain_count() {
        let mut key = Key::default();
        key.run(&fixed(&[(5, HOUR)]), Action::Hit { cost: 2 }, T0 + 5);
        assert_eq!(key.contents(), Some((b"2".to_vec(), Some(T0 + HOUR))));
        key.run(
            &fixed(&[(5, HOUR), (9, 2 * HOUR)]),
            Action::Hit { cost: 1 },
            T0 + 6,
        );
        let (value, expiry) = key.value_and_expiry();
        assert_eq!(value[0], FORMAT_V1);
        assert_eq!(expiry, T0 + 2 * HOUR);
    }

    #[test]
    fn refund_gives_back_within_the_window_and_deletes_an_emptied_key() {
        let limits = fixed(&[(3, HOUR)]);
        let mut key = Key::default();
        let nothing = key.run(&limits, Action::Refund { amount: 1 }, T0);
        assert!(!nothing.decision.allowed);
        assert_eq!(nothing.write, Write::Nothing);
        key.run(&limits, Action::Hit { cost: 3 }, T0);
        let back = key.run(&limits, Action::Refund { amount: 2 }, T0 + 1);
        assert!(back.decision.allowed);
        assert_eq!(back.decision.remaining, 2);
        assert_eq!(key.contents(), Some((b"1".to_vec(), Some(T0 + HOUR))));
        let more = key.run(&limits, Action::Refund { amount: 5 }, T0 + 2);
        assert_eq!(more.decision.remaining, 3, "never above the limit");
        assert_eq!(more.write, Write::Delete);
    }

    #[test]
    fn a_shorter_window_carries_the_count_and_never_waits_longer_than_it() {
        let mut key = Key::default();
        key.run(&fixed(&[(5, HOUR)]), Action::Hit { cost: 5 }, T0 + 10);
        // Same key, now 5 per minute: the 5 units still count, for at most a minute.
        let denied = key.run(&fixed(&[(5, 60_000)]), Action::Hit { cost: 1 }, T0 + 20);
        assert!(!denied.decision.allowed);
        assert_eq!(denied.decision.retry_after_ms, 60_000 - 20);
        assert_eq!(
            key.contents(),
            Some((b"5".to_vec(), Some(T0 + 60_000))),
            "renewal is written"
        );
        let later = key.run(&fixed(&[(5, 60_000)]), Action::Hit { cost: 1 }, T0 + 60_000);
        assert!(later.decision.allowed);
    }

    #[test]
    fn a_longer_window_carries_the_count_into_its_own_window() {
        let mut key = Key::default();
        // 5 used in the minute window ending at T0 + 60 s.
        key.run(&fixed(&[(5, 60_000)]), Action::Hit { cost: 5 }, T0 + 1_000);
        // Now 5 per hour: the 5 still count, until the hour window ends.
        let hour = fixed(&[(5, HOUR)]);
        let denied = key.run(&hour, Action::Hit { cost: 1 }, T0 + 30_000);
        assert!(!denied.decision.allowed);
        assert_eq!(denied.decision.retry_after_ms, HOUR - 30_000);
        let later = key.run(&hour, Action::Hit { cost: 1 }, T0 + HOUR);
        assert!(later.decision.allowed);
    }

    #[test]
    fn a_clock_back_by_more_than_a_window_costs_at_most_one_window() {
        let limits = fixed(&[(2, 1_000)]);
        let mut key = Key::default();
        key.run(&limits, Action::Hit { cost: 2 }, T0 + 10_500);
        let back = key.run(&limits, Action::Hit { cost: 1 }, T0 + 500);
        assert!(!back.decision.allowed, "no second burst");
        assert_eq!(back.decision.retry_after_ms, 500);
        assert!(
            key.run(&limits, Action::Hit { cost: 1 }, T0 + 1_000)
                .decision
                .allowed
        );
    }

    #[test]
    fn a_single_bucket_tier_is_stored_short_and_read_back_with_the_expiry() {
        let gcra = Limits {
            algorithm: AlgorithmKind::Gcra,
            tiers: smallvec::smallvec![Quota::new(100, HOUR)],
        };
        let mut key = Key::default();
        let mut last = None;
        for at in [0, 10, 36_000, 36_001] {
            let hit = key.run(&gcra, Action::Hit { cost: 1 }, T0 + at);
            let (value, expiry) = key.value_and_expiry();
            // The interval is 36 s, a whole ms: tag, limit and window only.
            assert_eq!(value.len(), 4, "{value:?}");
            assert_eq!(expiry, T0 + at + hit.decision.reset_after_ms);
            last = Some(hit.decision.remaining);
        }
        assert_eq!(last, Some(97));
        // A third of a ms per unit: the ns below the ms are stored too.
        let thirds = Limits {
            algorithm: AlgorithmKind::Token,
            tiers: smallvec::smallvec![Quota::new(3, 1)],
        };
        let mut key = Key::default();
        key.run(&thirds, Action::Hit { cost: 1 }, T0);
        let second = key.run(&thirds, Action::Hit { cost: 1 }, T0);
        assert_eq!(second.decision.remaining, 1);
        let third = key.run(&thirds, Action::Hit { cost: 1 }, T0);
        assert!(third.decision.allowed, "exact: three fit at once");
        assert!(
            !key.run(&thirds, Action::Hit { cost: 1 }, T0)
                .decision
                .allowed
        );
    }

    #[test]
    fn a_denied_hit_writes_back_a_state_that_lost_its_expiry() {
        // Full, then persisted: denied, but written back with its expiry.
        let limits = fixed(&[(2, HOUR)]);
        let mut key = Key::default();
        key.run(&limits, Action::Hit { cost: 2 }, T0);
        let mut key = key.persisted();
        let denied = key.run(&limits, Action::Hit { cost: 1 }, T0 + 5);
        assert!(!denied.decision.allowed);
        assert!(denied.decision.retry_after_ms <= HOUR);
        assert!(matches!(denied.write, Write::Set { expires_at_ms, .. } if expires_at_ms > T0));
        // Tiers whose windows all ended, without an expiry: a denied hit deletes them.
        let tiers = fixed(&[(1, 1_000), (5, HOUR)]);
        let mut key = Key::default();
        key.run(&tiers, Action::Hit { cost: 1 }, T0);
        let mut key = key.persisted();
        let outcome = key.run(&tiers, Action::Hit { cost: 9 }, T0 + 2 * HOUR);
        assert!(!outcome.decision.allowed, "cost above every limit");
        assert_eq!(outcome.write, Write::Delete);
    }
}
