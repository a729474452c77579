//! GCRA, the generic cell rate algorithm: `limit` units per window, evenly spaced, with a
//! tolerance of `burst` units at once (default `burst` = `limit`).
//!
//! **How it counts.** The emission interval is T = window / limit. The state is one
//! theoretical arrival time (TAT): when the next unit would be due if every unit so far had
//! come exactly T apart. A cost c fits at `now` iff `max(TAT, now) + c*T - now <= burst*T`;
//! then `TAT' = max(TAT, now) + c*T`. The arithmetic (exact, in ticks of 1/limit ns, so T
//! may be any fraction of a millisecond such as 10 000 per second) is shared with the
//! token bucket in [`bucket`](super::bucket): [`Gcra`] is an instance of its [`Bucket`].
//!
//! **The same algorithm as the token bucket.** A token bucket of capacity `burst`, refilled
//! at `limit` per window, holds `burst - (TAT - now) / T` tokens and is full at TAT: the
//! two take the same decisions, report the same numbers and store the same bytes for the
//! same parameters (see [`token_bucket`](super::token_bucket)). GCRA is the name for the
//! view "how far ahead of schedule is this key", the token bucket for "how many tokens are
//! left"; pick by the vocabulary of your users. They differ only in their `ALGO` name and
//! stored id, so switching a key from one to the other counts as a change of algorithm.
//!
//! **Reply.** `limit` is the capacity `burst`; `remaining` the whole units that fit now
//! (after counting, if allowed); `reset_after_ms` the time until the bucket is full again
//! (TAT - now, rounded up); `retry_after_ms` the exact wait, rounded up to whole ms, after
//! which the same cost fits, or -1 when the cost is above `burst`.
//!
//! **Guarantee.** Over any interval of length t at most `burst + t / T` units pass: the
//! rate is smooth, with no edge where two windows' worth can pass at once. Waiting
//! `retry_after_ms` is enough and one ms less is not.
//!
//! **Time.** A `now` before the TAT (including a clock that went back) only makes the key
//! look fuller: elapsed time below zero counts as zero, never as a free burst. A state
//! always ends within [`span_ms`](super::algorithm::Algorithm::span_ms) = `burst * T` of
//! the write; one that lasts longer from `now` (the clock went back by more than that) is
//! renewed by `limiter` from its usage, so no wait is longer than the span. The key
//! expires at TAT, when the state is the same as no state.
//!
//! **Memory.** One 8-byte time per tier (plus the tier's parameters in the stored value),
//! whatever the traffic or the limit.
//!
//! **When to choose it.** For a smooth rate with a controlled burst, e.g. an API allowing
//! 10 requests per second in bursts of 20: constant memory and exact decisions, without the
//! fixed window's double burst at window edges nor the sliding log's memory per unit. It is
//! what redis-cell's `CL.THROTTLE` uses (see [`cell`](super::cell)).

use super::bucket::Bucket;

/// The GCRA algorithm: the [`Bucket`] arithmetic stored under id 5. Its state is a
/// [`BucketState`](super::bucket::BucketState).
///
/// # Example
///
/// One unit per second with a tolerance of one: units are spaced a second apart, and the
/// wait is exact.
///
/// ```
/// use ratelimit_core::algorithm::{Algorithm, Quota};
/// use ratelimit_core::gcra::Gcra;
///
/// let quota = Quota::new(1, 1_000);
/// let t0 = 1_796_083_200_000;
/// let first = Gcra::check(None, t0, &quota, 1)?;
/// assert!(first.decision.allowed);
/// let early = Gcra::check(first.charged.as_ref(), t0 + 400, &quota, 1)?.decision;
/// assert_eq!((early.allowed, early.retry_after_ms), (false, 600));
/// assert!(Gcra::check(first.charged.as_ref(), t0 + 1_000, &quota, 1)?.decision.allowed);
/// # Ok::<(), ratelimit_core::algorithm::OutOfRange>(())
/// ```
pub type Gcra = Bucket<5>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Algorithm, OutOfRange, Quota};
    use crate::bucket::BucketState;
    use crate::codec::{Bytes, Reader};
    use crate::decision::NEVER;
    use crate::duration::MAX_WINDOW_MS;
    use crate::scenario::{self, case, Case};
    use proptest::prelude::*;

    /// 2026-11-30T00:00:00Z.
    const T0: i64 = 1_796_083_200_000;
    const NS: i64 = 1_000_000;

    /// Runs `cases` against one key (see `scenario`).
    fn run(quota: Quota, cases: &[Case]) -> Option<<Gcra as Algorithm>::State<'static>> {
        scenario::run::<Gcra>(quota, cases)
    }

    fn quota(limit: i64, window_ms: i64, burst: i64) -> Quota {
        Quota {
            limit,
            window_ms,
            burst,
            calendar: None,
        }
    }

    #[test]
    fn takes_the_burst_at_once_then_one_unit_per_interval() {
        // 5 per 5 s: T = 1 s, burst 5.
        #[rustfmt::skip]
        run(Quota::new(5, 5_000), &[
            case(T0,         1, true,  4, 1_000, 0),
            case(T0,         1, true,  3, 2_000, 0),
            case(T0,         1, true,  2, 3_000, 0),
            case(T0,         1, true,  1, 4_000, 0),
            case(T0,         1, true,  0, 5_000, 0),
            case(T0,         1, false, 0, 5_000, 1_000),
            case(T0 + 999,   1, false, 0, 4_001, 1),
            case(T0 + 1_000, 1, true,  0, 5_000, 0),
            // Half a unit has leaked back: one whole unit fits, two do not yet.
            case(T0 + 3_500, 1, true,  1, 3_500, 0),
            case(T0 + 3_500, 2, false, 1, 3_500, 500),
            case(T0 + 4_000, 2, true,  0, 5_000, 0),
            // Full again at the TAT; a cost above the burst never fits.
            case(T0 + 9_000, 6, false, 5, 0,     NEVER),
            case(T0 + 9_000, 5, true,  0, 5_000, 0),
        ]);
    }

    #[test]
    fn sub_millisecond_intervals_are_exact() {
        // 10 000 per second, burst 3: T = 100 us; times round up to whole ms.
        #[rustfmt::skip]
        run(quota(10_000, 1_000, 3), &[
            case(T0,     1, true,  2, 1, 0),
            case(T0,     1, true,  1, 1, 0),
            case(T0,     1, true,  0, 1, 0),
            case(T0,     1, false, 0, 1, 1),
            case(T0 + 1, 3, true,  0, 1, 0),
            case(T0 + 1, 4, false, 0, 1, NEVER),
        ]);
        // The default burst: one second's worth, and 10 units per ms back.
        #[rustfmt::skip]
        run(Quota::new(10_000, 1_000), &[
            case(T0,     10_000, true,  0,  1_000, 0),
            case(T0 + 1, 11,     false, 10, 999,   1),
            case(T0 + 1, 10,     true,  0,  1_000, 0),
            case(T0 + 1, 1,      false, 0,  1_000, 1),
        ]);
    }

    #[test]
    fn fractional_intervals_lose_nothing_to_rounding() {
        // 3 per second: T = 333.3 ms. Three hits fill exactly one second.
        #[rustfmt::skip]
        let last = run(Quota::new(3, 1_000), &[
            case(T0,         1, true,  2, 334,   0),
            case(T0,         1, true,  1, 667,   0),
            case(T0,         1, true,  0, 1_000, 0),
            case(T0,         1, false, 0, 1_000, 334),
            // 666.7 ms of the next unit's 333.3 are still due: 0.3 ms short.
            case(T0 + 333,   1, false, 0, 667,   1),
            case(T0 + 334,   1, true,  0, 1_000, 0),
            case(T0 + 2_000, 3, true,  0, 1_000, 0),
        ]);
        assert_eq!(last.map(|s| s.tat_ns), Some((T0 + 3_000) * NS));
        // 7 per minute: seven hits end exactly one minute later.
        let mut stored = None;
        for _ in 0..7 {
            let hit = Gcra::check(stored.as_ref(), T0, &Quota::new(7, 60_000), 1).expect("ok");
            stored = hit.charged;
        }
        assert_eq!(stored.map(|s| s.tat_ns), Some((T0 + 60_000) * NS));
    }

    #[test]
    fn a_burst_above_the_limit_is_a_bigger_bucket_at_the_same_rate() {
        // 2 per second (T = 500 ms) with a bucket of 4.
        #[rustfmt::skip]
        run(quota(2, 1_000, 4), &[
            case(T0,         4, true,  0, 2_000, 0),
            case(T0 + 500,   1, true,  0, 2_000, 0),
            case(T0 + 600,   1, false, 0, 1_900, 400),
            case(T0 + 1_000, 2, false, 1, 1_500, 500),
            case(T0 + 1_500, 2, true,  0, 2_000, 0),
            case(T0 + 9_000, 5, false, 4, 0,     NEVER),
        ]);
    }

    #[test]
    fn a_burst_below_the_limit_spaces_units_out() {
        // 10 per second (T = 100 ms), at most 2 at once.
        #[rustfmt::skip]
        run(quota(10, 1_000, 2), &[
            case(T0,         1, true,  1, 100, 0),
            case(T0,         1, true,  0, 200, 0),
            case(T0,         1, false, 0, 200, 100),
            case(T0 + 50,    1, false, 0, 150, 50),
            case(T0 + 100,   1, true,  0, 200, 0),
            case(T0 + 1_000, 3, false, 2, 0,   NEVER),
        ]);
        assert_eq!(Gcra::span_ms(&quota(10, 1_000, 2)), 200);
        assert_eq!(Gcra::capacity(&quota(10, 1_000, 2)), 2);
    }

    #[test]
    fn a_clock_that_goes_back_counts_no_time_passed() {
        // 2 per second: T = 500 ms.
        #[rustfmt::skip]
        let stored = run(Quota::new(2, 1_000), &[
            case(T0 + 10_000, 2, true,  0, 1_000,  0),
            // Back by 100 ms: the bucket looks fuller, not emptier.
            case(T0 + 9_900,  1, false, 0, 1_100,  600),
            // Back by 10 s: still no free burst; the wait it announces works.
            case(T0,          1, false, 0, 11_000, 10_500),
            case(T0 + 10_500, 1, true,  0, 1_000,  0),
        ]);
        // Seen from T0, that state lasts longer than any state made at T0 can: `limiter`
        // renews it from its usage, so the wait is never longer than the span.
        let state = stored.expect("stored");
        let quota = Quota::new(2, 1_000);
        assert!(Gcra::expires_at_ms(&state, &quota) - T0 > Gcra::span_ms(&quota));
        assert_eq!(Gcra::used(&state, T0, &quota), 23);
        let renewed = Gcra::seeded(2, T0, &quota).expect("in range");
        let after = Gcra::check(Some(&renewed), T0 + 500, &quota, 1).expect("in range");
        assert!(after.decision.allowed);
    }

    #[test]
    fn refund_moves_the_tat_back_but_never_before_now() {
        let quota = Quota::new(5, 5_000);
        let full = Gcra::seeded(5, T0, &quota).expect("in range");
        assert_eq!(full.tat_ns, (T0 + 5_000) * NS);
        let back = Gcra::refund(Some(&full), T0, &quota, 2).expect("refunded");
        assert_eq!(back.tat_ns, (T0 + 3_000) * NS);
        let view = Gcra::view(Some(&back), T0, &quota).expect("in range");
        assert_eq!((view.remaining, view.reset_after_ms), (2, 3_000));
        let all = Gcra::refund(Some(&back), T0, &quota, i64::MAX).expect("refunded");
        assert_eq!(all.tat_ns, T0 * NS, "empty, not below empty");
        assert_eq!(
            Gcra::view(Some(&all), T0, &quota).map(|v| v.remaining),
            Ok(5)
        );
        assert_eq!(
            Gcra::refund(Some(&all), T0, &quota, 1),
            None,
            "nothing to give"
        );
        assert_eq!(Gcra::refund(None, T0, &quota, 1), None);
        assert_eq!(
            Gcra::refund(Some(&full), T0 + 5_000, &quota, 1),
            None,
            "ended"
        );
    }

    #[test]
    fn usage_seeding_and_expiry_agree() {
        let quota = Quota::new(3, 1_000);
        let state = Gcra::seeded(2, T0, &quota).expect("in range");
        assert_eq!(Gcra::used(&state, T0, &quota), 2);
        assert_eq!(Gcra::used(&state, T0 + 1, &quota), 2, "rounded up");
        assert_eq!(Gcra::used(&state, T0 + 334, &quota), 1);
        assert_eq!(Gcra::used(&state, T0 + 667, &quota), 0);
        assert_eq!(Gcra::expires_at_ms(&state, &quota), T0 + 667);
        let view = Gcra::view(Some(&state), T0 + 667, &quota).expect("in range");
        assert_eq!(
            (view.remaining, view.reset_after_ms),
            (3, 0),
            "same as no state"
        );
        assert_eq!(Gcra::span_ms(&quota), 1_000);
        assert_eq!(Gcra::span_ms(&Quota::new(7, 1_000)), 1_000);
        let one_at_a_time = Quota {
            burst: 1,
            calendar: None,
            ..Quota::new(7, 1_000)
        };
        assert_eq!(Gcra::span_ms(&one_at_a_time), 143, "rounded up");
    }

    #[test]
    fn encodes_eight_bytes() {
        let state = BucketState {
            tat_ns: (T0 + 1) * NS + 7,
        };
        let mut out = Bytes::new();
        Gcra::encode(&state, &mut out);
        assert_eq!(out.as_slice(), state.tat_ns.to_le_bytes());
        assert_eq!(Gcra::decode(&mut Reader::new(&out)), Some(state));
        assert_eq!(Gcra::decode(&mut Reader::new(&out[..7])), None);
    }

    #[test]
    fn works_at_the_extremes_of_i64() {
        // Every unit is a sliver of a ns, and the whole limit is one ms: still exact.
        let huge = quota(i64::MAX, 1, i64::MAX);
        let all = Gcra::check(None, T0, &huge, i64::MAX).expect("in range");
        assert!(all.decision.allowed);
        assert_eq!(
            (all.decision.remaining, all.decision.reset_after_ms),
            (0, 1)
        );
        let state = all.charged.expect("allowed");
        assert_eq!(state.tat_ns, (T0 + 1) * NS);
        let more = Gcra::check(Some(&state), T0, &huge, 1).expect("in range");
        assert_eq!(more.decision.retry_after_ms, 1);
        // A year per unit, and more units than a TAT in ns can hold.
        let slow = quota(1, MAX_WINDOW_MS, i64::MAX);
        assert_eq!(Gcra::check(None, T0, &slow, i64::MAX), Err(OutOfRange));
        let one = Gcra::check(None, T0, &slow, 1).expect("in range");
        assert_eq!(one.decision.reset_after_ms, MAX_WINDOW_MS);
        assert_eq!(one.decision.remaining, i64::MAX - 1);
        assert_eq!(Gcra::span_ms(&slow), i64::MAX);
        // Clock readings at the ends of i64.
        assert_eq!(
            Gcra::check(None, i64::MAX, &Quota::new(1, 1), 1),
            Err(OutOfRange)
        );
        assert!(Gcra::check(None, i64::MIN, &huge, 1).is_err());
        assert_eq!(
            Gcra::used(&state, i64::MIN, &huge),
            i64::MAX,
            "counts as full"
        );
    }

    /// A model with the exact TAT in ticks of 1/limit ns and no rounding at all: what the
    /// stored nanoseconds must reproduce when limit <= 10^6.
    struct Exact {
        tat: Option<i128>,
    }

    impl Exact {
        fn check(&mut self, now_ms: i64, q: &Quota, cost: i64) -> (bool, i64, i64) {
            let (l, t, b) = (
                q.limit as i128,
                q.window_ms as i128 * 1_000_000,
                q.burst as i128,
            );
            let now = now_ms as i128 * 1_000_000 * l;
            let base = self.tat.map_or(now, |tat| tat.max(now));
            let next = base + cost as i128 * t;
            let allowed = next - now <= b * t;
            if allowed {
                self.tat = Some(next);
            }
            let fill = if allowed { next - now } else { base - now };
            let remaining = ((b * t - fill).div_euclid(t)).max(0) as i64;
            let reset = (fill + 1_000_000 * l - 1).div_euclid(1_000_000 * l) as i64;
            (allowed, remaining, reset)
        }
    }

    /// Steps of (ms forward or back, cost).
    fn steps() -> impl Strategy<Value = Vec<(i64, i64)>> {
        proptest::collection::vec((-3_000i64..3_000, 1i64..12), 1..150)
    }

    proptest! {
        /// Over random steps (some backwards) and costs: in no interval of length t do
        /// more than `burst + t / T` units pass, a denied hit that waits `retry_after_ms`
        /// is allowed and one ms less is not, and the reply stays in range.
        #[test]
        fn never_more_than_burst_plus_rate_and_retry_after_is_exact(
            limit in prop_oneof![1i64..20, 1i64..20_000_000],
            window_ms in prop_oneof![1i64..5_000, 1i64..=MAX_WINDOW_MS],
            burst in 1i64..30,
            steps in steps(),
        ) {
            let quota = quota(limit, window_ms, burst);
            let mut now = T0;
            let mut stored: Option<BucketState> = None;
            let mut passed: Vec<(i64, i64)> = Vec::new();
            for (step, cost) in steps {
                now += step;
                let hit = Gcra::check(stored.as_ref(), now, &quota, cost).expect("in range");
                let d = hit.decision;
                prop_assert!(d.remaining >= 0 && d.remaining <= burst);
                prop_assert!(d.reset_after_ms >= 0);
                prop_assert!(d.reset_after_ms <= Gcra::span_ms(&quota) || stored
                    .is_some_and(|s| Gcra::expires_at_ms(&s, &quota) - now > Gcra::span_ms(&quota)));
                if let Some(state) = hit.charged {
                    prop_assert!(d.allowed);
                    prop_assert!(Gcra::expires_at_ms(&state, &quota) - now <= Gcra::span_ms(&quota));
                    passed.push((now, cost));
                    stored = Some(state);
                } else if cost > burst {
                    prop_assert_eq!(d.retry_after_ms, NEVER);
                } else {
                    let wait = d.retry_after_ms;
                    prop_assert!(wait > 0);
                    let later = Gcra::check(stored.as_ref(), now + wait, &quota, cost).expect("ok");
                    prop_assert!(later.decision.allowed, "waited {} ms", wait);
                    let early = Gcra::check(stored.as_ref(), now + wait - 1, &quota, cost)
                        .expect("in range");
                    prop_assert!(!early.decision.allowed, "{} ms was not needed", wait);
                }
            }
            passed.sort_unstable();
            for (i, &(start, _)) in passed.iter().enumerate() {
                let mut units = 0i128;
                for &(end, cost) in &passed[i..] {
                    units += cost as i128;
                    // units <= burst + (end - start) * limit / window
                    prop_assert!(
                        (units - burst as i128) * window_ms as i128
                            <= (end - start) as i128 * limit as i128,
                        "{} units in [{}, {}]", units, start - T0, end - T0
                    );
                }
            }
        }

        /// With limit <= 10^6 the stored nanoseconds reproduce the exact rational
        /// algorithm step for step, however fractional T is.
        #[test]
        fn rounding_to_nanoseconds_loses_nothing(
            limit in 1i64..=1_000_000,
            window_ms in 1i64..100_000,
            burst in 1i64..50,
            steps in steps(),
        ) {
            let quota = quota(limit, window_ms, burst);
            let mut exact = Exact { tat: None };
            let mut now = T0;
            let mut stored = None;
            for (step, cost) in steps {
                now += step;
                let hit = Gcra::check(stored.as_ref(), now, &quota, cost).expect("in range");
                let d = hit.decision;
                prop_assert_eq!((d.allowed, d.remaining, d.reset_after_ms), exact.check(now, &quota, cost));
                stored = hit.charged.or(stored);
            }
            // And a full bucket takes exactly `burst` unit hits at once.
            let mut stored = None;
            for n in 0..=burst {
                let hit = Gcra::check(stored.as_ref(), now + 1_000_000_000, &quota, 1).expect("ok");
                prop_assert_eq!(hit.decision.allowed, n < burst);
                stored = hit.charged.or(stored);
            }
        }

        /// Refunds never leave more than the capacity, and a refunded bucket is as good as
        /// an empty one, no better.
        #[test]
        fn refund_never_exceeds_capacity(
            limit in 1i64..1_000,
            window_ms in 1i64..10_000,
            burst in 1i64..30,
            ops in proptest::collection::vec((-2_000i64..2_000, 1i64..40, any::<bool>()), 1..100),
        ) {
            let quota = quota(limit, window_ms, burst);
            let mut now = T0;
            let mut stored: Option<BucketState> = None;
            for (step, amount, is_refund) in ops {
                now += step;
                if is_refund {
                    if let Some(state) = Gcra::refund(stored.as_ref(), now, &quota, amount) {
                        prop_assert!(state.tat_ns >= now * NS, "never below empty");
                        prop_assert!(stored.is_some_and(|s| state.tat_ns < s.tat_ns));
                        stored = Some(state);
                    }
                } else if let Some(state) = Gcra::check(stored.as_ref(), now, &quota, amount)
                    .expect("in range").charged {
                    stored = Some(state);
                }
                let view = Gcra::view(stored.as_ref(), now, &quota).expect("in range");
                prop_assert!(view.remaining >= 0 && view.remaining <= burst);
                let over = Gcra::check(stored.as_ref(), now, &quota, burst + 1).expect("ok");
                prop_assert!(!over.decision.allowed);
            }
        }

        /// Any parameters up to i64 bounds, any clock, any stored time: an answer or
        /// OutOfRange, never a panic, and every answer is in range.
        #[test]
        fn extreme_inputs_never_panic(
            limit in prop_oneof![Just(1i64), Just(i64::MAX), 1..=i64::MAX],
            window_ms in prop_oneof![Just(1i64), Just(MAX_WINDOW_MS), 1..=MAX_WINDOW_MS],
            burst in prop_oneof![Just(1i64), Just(i64::MAX), 1..=i64::MAX],
            cost in prop_oneof![Just(0i64), Just(i64::MAX), 0..=i64::MAX],
            now in prop_oneof![Just(T0), Just(i64::MAX), Just(i64::MIN), any::<i64>()],
            tat_ns in prop_oneof![Just(T0 * NS), Just(i64::MAX), Just(i64::MIN), any::<i64>()],
        ) {
            let quota = quota(limit, window_ms, burst);
            let state = BucketState { tat_ns };
            for stored in [None, Some(&state)] {
                if let Ok(hit) = Gcra::check(stored, now, &quota, cost) {
                    let d = hit.decision;
                    prop_assert!(d.remaining >= 0 && d.remaining <= burst);
                    prop_assert!(d.reset_after_ms >= 0 && d.retry_after_ms >= NEVER);
                    prop_assert_eq!(hit.charged.is_some(), d.allowed);
                }
                if let Ok(view) = Gcra::view(stored, now, &quota) {
                    prop_assert!(view.remaining >= 0 && view.reset_after_ms >= 0);
                }
                let _ = Gcra::refund(stored, now, &quota, cost.max(1));
            }
            prop_assert!(Gcra::used(&state, now, &quota) >= 0);
            let _ = Gcra::seeded(cost.min(burst), now, &quota);
            let _ = Gcra::expires_at_ms(&state, &quota);
            prop_assert!(Gcra::span_ms(&quota) >= 1);
        }

        #[test]
        fn encoding_round_trips(tat_ns in any::<i64>()) {
            let state = BucketState { tat_ns };
            let mut out = Bytes::new();
            Gcra::encode(&state, &mut out);
            let mut reader = Reader::new(&out);
            prop_assert_eq!(Gcra::decode(&mut reader), Some(state));
            prop_assert!(reader.is_empty());
        }

        #[test]
        fn junk_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..20)) {
            let mut reader = Reader::new(&bytes);
            let decoded = Gcra::decode(&mut reader);
            prop_assert_eq!(decoded.is_some(), bytes.len() >= 8);
        }
    }
}
