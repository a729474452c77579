//! The partial grant (RL.TAKE): count as many units as every tier allows, up to a most.
//!
//! The grant is the largest `g <= upto` for which [`Action::Hit`](super::Action::Hit) with
//! `COST g` would be allowed, found by a binary search over the same pure check RL.HIT
//! runs, never by a loop over the units: at most about `log2(upto)` checks of every tier.
//! Then `g` is counted exactly as a hit of cost `g` would be, so the stored state, its
//! expiry and what replicas receive are those of `RL.HIT key ... COST g`. A grant of 0
//! answers and writes what a denied `COST 1` does (nothing, but for a renewal or a state
//! that lost its expiry, see [`limiter`](super)).

use super::stored_value::read_prior;
use super::tiered_check::{check, starting_states, Counting};
use super::{LimiterError, Limits, Outcome, PerTier};
use crate::algorithm::{Algorithm, OutOfRange, Quota};
use crate::with_algorithm;

/// The answer to a partial grant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Units counted, `0..=upto`.
    pub granted: i64,
    /// What `RL.HIT ... COST granted` answers (`COST 1`, denied, when nothing was granted),
    /// and the change to store.
    pub outcome: Outcome,
}

/// Counts up to `upto` (>= 1) units on a key holding `stored` (`None`: no key) at
/// `now_ms`: as many as every tier of `limits` can take now. `expiry` is as for
/// [`run`](super::run).
///
/// # Example
///
/// Five per minute, three taken: asking for four grants the two left, then none.
///
/// ```
/// use ratelimit_core::algorithm::Quota;
/// use ratelimit_core::limiter::{AlgorithmKind, Limits, MemoryKey};
///
/// let tiers = [Quota::new(5, 60_000)];
/// let limits = Limits { algorithm: AlgorithmKind::Fixed, tiers: tiers[..].into() };
/// let now = 1_796_083_200_000;
/// let mut key = MemoryKey::default();
/// assert_eq!(key.take(&limits, 3, now)?.granted, 3);
/// let partial = key.take(&limits, 4, now + 1)?;
/// assert_eq!((partial.granted, partial.outcome.decision.remaining), (2, 0));
/// let none = key.take(&limits, 4, now + 2)?;
/// assert_eq!(none.granted, 0);
/// assert_eq!(none.outcome.decision.retry_after_ms, 60_000 - 2);
/// # Ok::<(), ratelimit_core::limiter::LimiterError>(())
/// ```
pub fn take(
    limits: &Limits,
    upto: i64,
    stored: Option<&[u8]>,
    expiry: impl Fn() -> Option<i64>,
    now_ms: i64,
) -> Result<Grant, LimiterError> {
    with_algorithm!(
        limits.algorithm,
        take_with(&limits.tiers, upto, stored, expiry, now_ms)
    )
}

fn take_with<A: Algorithm>(
    tiers: &[Quota],
    upto: i64,
    stored: Option<&[u8]>,
    expiry: impl Fn() -> Option<i64>,
    now_ms: i64,
) -> Result<Grant, LimiterError> {
    let (prior, lost_expiry) = read_prior::<A>(stored, &expiry, now_ms)?;
    let start = starting_states::<A>(prior, tiers, now_ms, lost_expiry)?;
    let granted = largest_grant::<A>(&start.states, tiers, now_ms, upto)?;
    let outcome = check::<A>(start, tiers, now_ms, granted.max(1), Counting::Writes)?;
    Ok(Grant { granted, outcome })
}

/// The largest `g` in `0..=upto` that every tier allows at once. Allowing is monotone in
/// the cost (a tier that takes `g` units takes fewer), so a binary search finds it. Its
/// first probe is the smallest `remaining` the tiers show now, which is the answer for
/// every algorithm whose `remaining` is exact: then two checks settle it.
fn largest_grant<A: Algorithm>(
    states: &PerTier<Option<A::State<'_>>>,
    tiers: &[Quota],
    now_ms: i64,
    upto: i64,
) -> Result<i64, OutOfRange> {
    // A cost the arithmetic cannot take (an error for RL.HIT) is not allowed either.
    let fits = |cost: i64| {
        tiers.iter().zip(states).all(|(quota, state)| {
            A::check(state.as_ref(), now_ms, quota, cost).is_ok_and(|c| c.decision.allowed)
        })
    };
    // No tier takes more than its capacity at once.
    let capacity = tiers.iter().map(A::capacity).min().unwrap_or(0);
    let mut hi = upto.min(capacity).max(0);
    let mut hint = hi;
    for (quota, state) in tiers.iter().zip(states) {
        hint = hint.min(A::view(state.as_ref(), now_ms, quota)?.remaining);
    }
    let mut lo = 0;
    if hint >= 1 {
        if fits(hint) {
            lo = hint;
            if lo < hi && !fits(lo + 1) {
                hi = lo;
            }
        } else {
            hi = hint - 1;
        }
    }
    // Invariant: `lo` fits (0 always does), `hi + 1` does not or is above the bound.
    while lo < hi {
        let mid = lo + (hi - lo + 1) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Ok(lo)
}

#[cfg(test)]
mod tests {
    use super::super::test_key::{fixed, Key, HOUR, T0};
    use super::super::{Action, AlgorithmKind, Limits, MemoryKey, Write};
    use crate::algorithm::Quota;
    use proptest::prelude::*;

    fn take(key: &mut Key, limits: &Limits, upto: i64, now: i64) -> super::Grant {
        key.0.take(limits, upto, now).expect("answers")
    }

    #[test]
    fn grants_what_is_left_then_part_then_nothing() {
        let limits = fixed(&[(10, HOUR)]);
        let mut key = Key::default();
        let first = take(&mut key, &limits, 4, T0);
        assert_eq!(first.granted, 4);
        assert_eq!(first.outcome.decision.remaining, 6);
        assert_eq!(key.contents(), Some((b"4".to_vec(), Some(T0 + HOUR))));
        let partial = take(&mut key, &limits, 9, T0 + 1);
        assert_eq!(partial.granted, 6);
        assert!(partial.outcome.decision.allowed);
        assert_eq!(partial.outcome.decision.remaining, 0);
        let none = take(&mut key, &limits, 9, T0 + 2);
        assert_eq!(none.granted, 0);
        assert!(!none.outcome.decision.allowed);
        assert_eq!(none.outcome.decision.retry_after_ms, HOUR - 2);
        assert_eq!(
            none.outcome.write,
            Write::Nothing,
            "nothing granted, nothing written"
        );
    }

    #[test]
    fn tiers_grant_what_the_tightest_one_allows_and_count_it_in_all() {
        let limits = fixed(&[(3, 1_000), (5, HOUR)]);
        let mut key = Key::default();
        assert_eq!(take(&mut key, &limits, 10, T0).granted, 3);
        assert_eq!(take(&mut key, &limits, 10, T0 + 1).granted, 0);
        let next_second = take(&mut key, &limits, 10, T0 + 1_000);
        assert_eq!(next_second.granted, 2, "the hour tier has 2 left");
        assert_eq!(next_second.outcome.tiers[0].remaining, 1);
        assert_eq!(next_second.outcome.tiers[1].remaining, 0);
    }

    #[test]
    fn a_grant_above_every_capacity_is_bounded_by_it() {
        for (algorithm, _) in AlgorithmKind::ALL {
            let limits = Limits {
                algorithm,
                tiers: smallvec::smallvec![Quota::new(7, HOUR)],
            };
            let grant = MemoryKey::default()
                .take(&limits, i64::MAX, T0)
                .expect("answers");
            assert_eq!(grant.granted, 7, "{algorithm:?}");
        }
    }

    #[test]
    fn given_back_units_can_be_taken_again_in_the_same_window() {
        let limits = fixed(&[(5, HOUR)]);
        let mut key = Key::default();
        assert_eq!(take(&mut key, &limits, 5, T0).granted, 5);
        key.run(&limits, Action::Refund { amount: 2 }, T0 + 1);
        assert_eq!(take(&mut key, &limits, 5, T0 + 2).granted, 2);
    }

    #[test]
    fn a_calendar_window_grants_until_its_boundary() {
        let words: [&[u8]; 4] = [b"5", b"day", b"TZ", b"Europe/Paris"];
        let settings = crate::args::Settings::default();
        let limits = crate::args::parse_limits(words.into_iter(), &settings)
            .expect("a rule")
            .limits;
        let mut key = Key::default();
        // T0 is midnight UTC, 01:00 in Paris: the Paris day ends 23 hours later.
        assert_eq!(take(&mut key, &limits, 3, T0).granted, 3);
        let partial = take(&mut key, &limits, 3, T0 + 1);
        assert_eq!(partial.granted, 2);
        assert_eq!(partial.outcome.decision.reset_after_ms, 23 * HOUR - 1);
        let none = take(&mut key, &limits, 3, T0 + 2);
        assert_eq!(none.granted, 0);
        assert_eq!(none.outcome.decision.retry_after_ms, 23 * HOUR - 2);
        assert_eq!(take(&mut key, &limits, 3, T0 + 23 * HOUR).granted, 3);
    }

    /// A rule of `algorithm` with one or two tiers (calendar windows only for fixed).
    fn limits_strategy() -> impl Strategy<Value = Limits> {
        let tier = (1i64..12, 1i64..4_000).prop_map(|(l, w)| Quota::new(l, w));
        (
            0usize..5,
            proptest::collection::vec(tier, 1..3),
            proptest::option::of(1i64..20),
        )
            .prop_map(|(algo, mut tiers, burst)| {
                let algorithm = AlgorithmKind::ALL[algo].0;
                if let (true, [only], Some(burst)) = (algorithm.has_burst(), &mut tiers[..], burst)
                {
                    only.burst = burst;
                }
                Limits {
                    algorithm,
                    tiers: tiers.into_iter().collect(),
                }
            })
    }

    proptest! {
        /// Over random traffic of takes, hits and refunds on one key: a grant is what
        /// RL.HIT allows (COST g allowed, COST g+1 denied unless g is the most asked), n
        /// exactly when COST n is allowed, 0 exactly when COST 1 is denied, and it writes
        /// what RL.HIT COST g writes.
        #[test]
        fn a_grant_is_the_largest_cost_rl_hit_allows(
            limits in limits_strategy(),
            steps in proptest::collection::vec((-300i64..1_500, 0u8..3, 1i64..30), 1..80),
        ) {
            let mut key = MemoryKey::default();
            let mut now = T0;
            for (step, op, n) in steps {
                now += step;
                match op {
                    0 => {
                        let before = key.clone();
                        let hit = |cost| before.decide(&limits, Action::Hit { cost }, now).expect("answers");
                        let grant = key.take(&limits, n, now).expect("answers");
                        let g = grant.granted;
                        prop_assert!((0..=n).contains(&g));
                        prop_assert_eq!(g == n, hit(n).decision.allowed);
                        prop_assert_eq!(g == 0, !hit(1).decision.allowed);
                        if g < n {
                            prop_assert!(!hit(g + 1).decision.allowed);
                        }
                        prop_assert_eq!(grant.outcome.decision.allowed, g > 0);
                        // The same answer and the same stored bytes as RL.HIT COST g.
                        let same = hit(g.max(1));
                        prop_assert_eq!(&grant.outcome, &same);
                        let mut by_hit = before.clone();
                        by_hit.apply(&same.write);
                        prop_assert_eq!(&by_hit, &key);
                    }
                    1 => {
                        key.run(&limits, Action::Hit { cost: n }, now).expect("answers");
                    }
                    _ => {
                        key.run(&limits, Action::Refund { amount: n }, now).expect("answers");
                    }
                }
            }
        }
    }
}
