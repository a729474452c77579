//! Sliding window counter: the fixed window's two last counts, weighted so that the limit
//! applies to a window that slides with the clock (Cloudflare's approximation).
//!
//! **How it counts.** Windows are aligned to multiples of the window length since the Unix
//! epoch, as in the fixed window (a key that `limiter` renewed from its usage is aligned to
//! the renewal time instead, until it lapses; see [`Algorithm::seeded`]). The state keeps
//! the previous window's count `prev`, the current window's count `curr` and the absolute
//! end of the current window. At `now`, `elapsed` ms into the current window of length
//! `W`, the units in the sliding window `(now - W, now]` are estimated by assuming the
//! previous window's units were spread evenly over it:
//!
//! ```text
//! estimate = prev * (W - elapsed) / W + curr
//! ```
//!
//! A cost fits when `estimate + cost <= limit`, decided in exact integer arithmetic
//! (`prev * (W - elapsed) + (curr + cost) * W <= limit * W`, in `i128`), so rounding never
//! lets through more than the even-spread estimate allows. When a window ends, `curr`
//! becomes `prev`; a window later nothing is left.
//!
//! **Guarantee.** The estimate never exceeds the limit, and no fixed window ever holds more
//! than `limit`. In any window-long interval at most `2 * limit` units can pass (when the
//! previous window's units were bunched at its end rather than spread). How close the
//! answers are to the exact sliding log's depends on the traffic: steady traffic suits the
//! even-spread assumption, bursts and idle gaps are its worst case (see the accuracy
//! report in `accuracy.rs`). Retrying after the announced `retry_after_ms` succeeds if nothing else
//! was counted meanwhile.
//!
//! **Time.** A `now` before the current window's start (the clock went back) counts as
//! zero elapsed: the previous window weighs fully, never a free burst. The state is the
//! same as no state from the end of the current window when `curr` is 0, else one window
//! later; that is the key's expiry, at most two windows after a write
//! ([`Algorithm::span_ms`] is `2 * window`).
//!
//! **Memory.** Two varint counts and one 8-byte time: 10 bytes for counts below 128, at
//! most 28, per tier (plus the tier's parameters in the stored value). Constant, whatever
//! the traffic.
//!
//! **When to choose it.** When a limit should hold over any window-long interval without
//! the fixed window's double burst at window edges, at the fixed window's cost, and an
//! approximation is fine. Use the sliding log when the limit must be exact.

use super::algorithm::{Algorithm, OutOfRange, Quota, TierCheck, View};
use super::checked::{add, mul, sub, to_i64};
use super::codec::{put_i64, put_varint, Bytes, Reader};
use super::decision::{Decision, NEVER};
use super::fixed_window::aligned_end;

/// The sliding-window-counter algorithm.
///
/// # Example
///
/// Ten per minute, all ten taken in one minute: halfway through the next, the previous
/// minute still weighs half, so five more fit and a sixth does not.
///
/// ```
/// use ratelimit_core::algorithm::{Algorithm, Quota};
/// use ratelimit_core::sliding_window::Sliding;
///
/// let quota = Quota::new(10, 60_000);
/// let t0 = 1_796_083_200_000; // a whole minute since the epoch
/// let full = Sliding::check(None, t0 + 1_000, &quota, 10)?.charged;
/// let half_later = t0 + 90_000;
/// assert!(!Sliding::check(full.as_ref(), half_later, &quota, 6)?.decision.allowed);
/// let five = Sliding::check(full.as_ref(), half_later, &quota, 5)?;
/// assert!(five.decision.allowed);
/// assert_eq!(five.decision.remaining, 0);
/// # Ok::<(), ratelimit_core::algorithm::OutOfRange>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Sliding;

/// The stored state of one sliding-window-counter tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingState {
    /// Units counted in the window before the current one, >= 0.
    pub prev: i64,
    /// Units counted in the current window, >= 0.
    pub curr: i64,
    /// Absolute Unix time in ms at which the current window ends.
    pub ends_at_ms: i64,
}

/// A state as it stands at one moment: rolled over to the window that moment counts in.
#[derive(Debug, Clone, Copy)]
struct Seen {
    prev: i128,
    curr: i128,
    ends_at_ms: i128,
    /// Ms since the current window began, in `0..window` (0 while the clock is behind).
    elapsed: i128,
    window: i128,
}

impl Seen {
    /// `stored` as it stands at `now_ms`: as it is while its window has not ended (also when
    /// the clock went back), rolled over once during the next window, empty after that.
    fn at(stored: Option<&SlidingState>, now_ms: i64, window_ms: i64) -> Result<Seen, OutOfRange> {
        if window_ms < 1 {
            return Err(OutOfRange);
        }
        let now = i128::from(now_ms);
        let window = i128::from(window_ms);
        if let Some(state) = stored {
            let end = i128::from(state.ends_at_ms);
            let (prev, curr) = (i128::from(state.prev.max(0)), i128::from(state.curr.max(0)));
            if now < end {
                return Ok(Seen {
                    prev,
                    curr,
                    ends_at_ms: end,
                    elapsed: (now - (end - window)).max(0),
                    window,
                });
            }
            if now < end + window {
                return Ok(Seen {
                    prev: curr,
                    curr: 0,
                    ends_at_ms: end + window,
                    elapsed: now - end,
                    window,
                });
            }
        }
        let end = aligned_end(now_ms, window_ms)?;
        Ok(Seen {
            prev: 0,
            curr: 0,
            ends_at_ms: i128::from(end),
            elapsed: now - (i128::from(end) - window),
            window,
        })
    }

    /// `prev` times its weight, in unit-ms: `prev * (window - elapsed)`.
    fn weighted_prev(&self) -> Result<i128, OutOfRange> {
        mul(self.prev, self.window - self.elapsed)
    }

    /// The most units that fit now: `floor(limit - prev * (W - elapsed) / W) - curr`,
    /// possibly negative.
    fn allowance(&self, limit: i64) -> Result<i128, OutOfRange> {
        let room = sub(mul(i128::from(limit), self.window)?, self.weighted_prev()?)?;
        sub(room.div_euclid(self.window), self.curr)
    }

    /// Units counted now, rounded up: `ceil(prev * (W - elapsed) / W) + curr`.
    fn used(&self) -> Result<i128, OutOfRange> {
        let weighted = self.weighted_prev()?;
        add(-(-weighted).div_euclid(self.window), self.curr)
    }

    fn remaining(&self, limit: i64) -> Result<i64, OutOfRange> {
        to_i64(self.allowance(limit)?.min(i128::from(limit)).max(0))
    }

    /// When the state becomes the same as no state: a window after the current one ends
    /// if `curr` counts anything, else when the current one ends (`prev`'s weight is 0).
    fn expires_at(&self) -> i128 {
        if self.curr > 0 {
            self.ends_at_ms + self.window
        } else {
            self.ends_at_ms
        }
    }

    fn reset_after(&self, now_ms: i64) -> Result<i64, OutOfRange> {
        if self.prev == 0 && self.curr == 0 {
            return Ok(0);
        }
        to_i64(self.expires_at() - i128::from(now_ms))
    }

    fn view(&self, now_ms: i64, limit: i64) -> Result<View, OutOfRange> {
        Ok(View {
            remaining: self.remaining(limit)?,
            reset_after_ms: self.reset_after(now_ms)?,
        })
    }

    fn state(&self) -> Result<SlidingState, OutOfRange> {
        Ok(SlidingState {
            prev: to_i64(self.prev)?,
            curr: to_i64(self.curr)?,
            ends_at_ms: to_i64(self.ends_at_ms)?,
        })
    }

    /// The shortest wait after which `cost` (`<= limit`, not fitting now) fits if nothing
    /// else is counted. The estimate only falls as time passes, so this is the first
    /// moment it fits: later in the current window as `prev`'s weight shrinks; else in the
    /// next window as the current count's weight shrinks; else once both windows are gone.
    fn retry_after(&self, now_ms: i64, limit: i64, cost: i64) -> Result<i64, OutOfRange> {
        let (limit, cost, w) = (i128::from(limit), i128::from(cost), self.window);
        let start = self.ends_at_ms - w;
        // In the current window, `cost` fits at `elapsed = e` when
        // prev * (W - e) <= (limit - curr - cost) * W, i.e. W - e <= floor(spare * W / prev).
        let spare = limit - self.curr - cost;
        if spare >= 0 && self.prev > 0 {
            let keep = mul(spare, w)? / self.prev;
            let e = w - keep.min(w);
            if e < w {
                return to_i64(start + e - i128::from(now_ms));
            }
        }
        // In the next window `curr` becomes the previous count: it fits at `e` when
        // curr * (W - e) <= (limit - cost) * W. At `e = W` both windows are gone.
        let keep = if self.curr > 0 {
            mul(limit - cost, w)? / self.curr
        } else {
            w
        };
        to_i64(self.ends_at_ms + w - keep.min(w) - i128::from(now_ms))
    }
}

impl Algorithm for Sliding {
    type State<'a> = SlidingState;
    const ID: u8 = 2;

    /// `cost` below 1 is refused with `OutOfRange` (the parser never passes one).
    fn check<'a>(
        state: Option<&Self::State<'a>>,
        now_ms: i64,
        quota: &Quota,
        cost: i64,
    ) -> Result<TierCheck<Self::State<'a>>, OutOfRange> {
        if cost < 1 {
            return Err(OutOfRange);
        }
        let seen = Seen::at(state, now_ms, quota.window_ms)?;
        if i128::from(cost) <= seen.allowance(quota.limit)? {
            let charged = Seen {
                curr: add(seen.curr, i128::from(cost))?,
                ..seen
            };
            let now = charged.view(now_ms, quota.limit)?;
            return Ok(TierCheck {
                decision: Decision {
                    allowed: true,
                    limit: quota.limit,
                    remaining: now.remaining,
                    reset_after_ms: now.reset_after_ms,
                    retry_after_ms: 0,
                },
                charged: Some(charged.state()?),
            });
        }
        let now = seen.view(now_ms, quota.limit)?;
        Ok(TierCheck {
            decision: Decision {
                allowed: false,
                limit: quota.limit,
                remaining: now.remaining,
                reset_after_ms: now.reset_after_ms,
                retry_after_ms: if cost > quota.limit {
                    NEVER
                } else {
                    seen.retry_after(now_ms, quota.limit, cost)?
                },
            },
            charged: None,
        })
    }

    fn view(state: Option<&SlidingState>, now_ms: i64, quota: &Quota) -> Result<View, OutOfRange> {
        Seen::at(state, now_ms, quota.window_ms)?.view(now_ms, quota.limit)
    }

    fn span_ms(quota: &Quota) -> i64 {
        quota.window_ms.saturating_mul(2)
    }

    /// Gives back from the current window's count only; the previous window's units are
    /// history.
    fn refund<'a>(
        state: Option<&Self::State<'a>>,
        now_ms: i64,
        quota: &Quota,
        amount: i64,
    ) -> Option<Self::State<'a>> {
        if amount < 1 {
            return None;
        }
        let seen = Seen::at(Some(state?), now_ms, quota.window_ms).ok()?;
        if seen.curr <= 0 {
            return None;
        }
        Seen {
            curr: seen.curr - seen.curr.min(i128::from(amount)),
            ..seen
        }
        .state()
        .ok()
    }

    fn used(state: &SlidingState, now_ms: i64, quota: &Quota) -> i64 {
        match Seen::at(Some(state), now_ms, quota.window_ms).and_then(|seen| seen.used()) {
            Ok(used) => i64::try_from(used).unwrap_or(i64::MAX),
            // Times beyond the arithmetic: count everything, never less.
            Err(OutOfRange) => state.prev.max(0).saturating_add(state.curr.max(0)),
        }
    }

    /// The units become the previous window's count, and the current window starts at
    /// `now_ms` with nothing counted: at `now_ms` (0 ms into it) they weigh fully, and
    /// their weight falls to 0 by `now_ms + window`, as the trait asks. (Counting them in
    /// the aligned window `now_ms` falls in would hold them for up to two windows.) The
    /// key's windows are then aligned to `now_ms` rather than to the epoch until it
    /// lapses, which changes nothing else.
    fn seeded<'a>(used: i64, now_ms: i64, quota: &Quota) -> Result<Self::State<'a>, OutOfRange> {
        if quota.window_ms < 1 {
            return Err(OutOfRange);
        }
        Ok(SlidingState {
            prev: used.max(0),
            curr: 0,
            ends_at_ms: now_ms.checked_add(quota.window_ms).ok_or(OutOfRange)?,
        })
    }

    fn expires_at_ms(state: &SlidingState, quota: &Quota) -> i64 {
        if state.curr > 0 {
            state.ends_at_ms.saturating_add(quota.window_ms.max(0))
        } else {
            state.ends_at_ms
        }
    }

    /// `prev` and `curr` as varints, then the current window's end as 8 bytes.
    fn encode(state: &SlidingState, out: &mut Bytes) {
        put_varint(out, state.prev);
        put_varint(out, state.curr);
        put_i64(out, state.ends_at_ms);
    }

    fn decode(reader: &mut Reader<'_>) -> Option<SlidingState> {
        Some(SlidingState {
            prev: reader.varint()?,
            curr: reader.varint()?,
            ends_at_ms: reader.i64()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{self, case, op, Case, Op};
    use proptest::prelude::*;
    use std::collections::HashMap;

    const SECOND: i64 = 1_000;
    const YEAR: i64 = 366 * 86_400_000;
    /// 2026-11-30T00:00:00Z, a multiple of every window used in the tables.
    const T0: i64 = 1_796_083_200_000;

    /// Runs `cases` against one key (see `scenario`).
    fn run(quota: Quota, cases: &[Case]) -> Option<<Sliding as Algorithm>::State<'static>> {
        scenario::run::<Sliding>(quota, cases)
    }

    #[test]
    fn the_previous_window_weighs_less_as_the_current_one_goes_on() {
        #[rustfmt::skip]
        let last = run(Quota::new(10, SECOND), &[
            case(T0,         5,  true,  5,  2_000, 0),
            case(T0 + 500,   5,  true,  0,  1_500, 0),
            // Full: in the next window the 10 weigh 10 * (1000 - e) / 1000, so 1 fits at
            // e = 100 (weight 9.0) and not at e = 99 (9.01).
            case(T0 + 999,   1,  false, 0,  1_001, 101),
            case(T0 + 1_099, 1,  false, 0,  901,   1),
            case(T0 + 1_100, 1,  true,  0,  1_900, 0),
            // e = 500: the 10 weigh 5, plus 1 counted: 4 fit.
            case(T0 + 1_500, 3,  true,  1,  1_500, 0),
            // 2 fit once the weight is 4.0: at e = 600.
            case(T0 + 1_500, 2,  false, 1,  1_500, 100),
            case(T0 + 1_599, 2,  false, 1,  1_401, 1),
            case(T0 + 1_600, 2,  true,  0,  1_400, 0),
            // Next window: prev = 6 weighs 6 * 1/1000 at e = 999, rounded up to a unit.
            case(T0 + 2_999, 10, false, 9,  1,     1),
            // The window edge: the 6 weigh nothing once their window is two windows back.
            case(T0 + 3_000, 10, true,  0,  2_000, 0),
            // Two windows later everything is gone.
            case(T0 + 5_000, 11, false, 10, 0,     NEVER),
            case(T0 + 5_000, 10, true,  0,  2_000, 0),
        ]);
        assert_eq!(
            last,
            Some(SlidingState {
                prev: 0,
                curr: 10,
                ends_at_ms: T0 + 6_000
            })
        );
    }

    #[test]
    fn windows_are_aligned_to_the_epoch_and_roll_over_once() {
        let quota = Quota::new(4, SECOND);
        let stored = run(quota, &[case(T0 + 900, 4, true, 0, 1_100, 0)]);
        assert_eq!(
            stored,
            Some(SlidingState {
                prev: 0,
                curr: 4,
                ends_at_ms: T0 + 1_000
            })
        );
        // At T0 + 1_250 the 4 weigh 3: one fits.
        let hit = Sliding::check(stored.as_ref(), T0 + 1_250, &quota, 1).expect("in range");
        assert_eq!(
            hit.charged,
            Some(SlidingState {
                prev: 4,
                curr: 1,
                ends_at_ms: T0 + 2_000
            })
        );
        assert_eq!(hit.decision.remaining, 0);
        // Unlike the fixed window, no double burst across the edge.
        let burst = Sliding::check(hit.charged.as_ref(), T0 + 1_250, &quota, 1).expect("in range");
        assert!(!burst.decision.allowed);
    }

    #[test]
    fn never_more_than_the_exact_estimate_allows() {
        // prev = 1 at e = 1 of 3 weighs 2/3: with curr = 0 and limit 1 nothing more fits,
        // although 2/3 rounds down to 0.
        let quota = Quota::new(1, 3);
        let state = SlidingState {
            prev: 1,
            curr: 0,
            ends_at_ms: 3,
        };
        let hit = Sliding::check(Some(&state), 1, &quota, 1).expect("in range");
        assert!(!hit.decision.allowed);
        assert_eq!(hit.decision.remaining, 0);
        assert_eq!(
            hit.decision.retry_after_ms, 2,
            "fits at e = 3, the next window"
        );
        assert_eq!(Sliding::used(&state, 1, &quota), 1, "2/3 rounded up");
        assert_eq!(Sliding::used(&state, 3, &quota), 0);
    }

    #[test]
    fn a_clock_that_goes_back_counts_no_time_passed() {
        #[rustfmt::skip]
        run(Quota::new(4, SECOND), &[
            case(T0 + 1_500, 4, true,  0, 1_500, 0),
            // Back before the window's start: elapsed counts as 0, the 4 still count, and
            // the wait runs from the stored window: 1 fits at T0 + 2_250 (weight 3).
            case(T0 + 200,   1, false, 0, 2_800, 2_050),
            case(T0 + 2_249, 1, false, 0, 751,   1),
            case(T0 + 2_250, 1, true,  0, 1_750, 0),
        ]);
    }

    #[test]
    fn refund_gives_back_from_the_current_window_only() {
        let quota = Quota::new(10, SECOND);
        let state = SlidingState {
            prev: 3,
            curr: 2,
            ends_at_ms: T0 + 1_000,
        };
        let back = Sliding::refund(Some(&state), T0 + 500, &quota, 5);
        assert_eq!(back, Some(SlidingState { curr: 0, ..state }));
        assert_eq!(Sliding::refund(back.as_ref(), T0 + 500, &quota, 1), None);
        // After the edge the 2 are the previous window's: nothing to give back.
        assert_eq!(Sliding::refund(Some(&state), T0 + 1_000, &quota, 1), None);
        assert_eq!(Sliding::refund(None, T0, &quota, 1), None);
        let one = Sliding::refund(Some(&state), T0 + 999, &quota, 1);
        assert_eq!(one, Some(SlidingState { curr: 1, ..state }));
    }

    #[test]
    fn expiry_is_when_the_state_reads_as_none() {
        let quota = Quota::new(10, SECOND);
        let counted = SlidingState {
            prev: 3,
            curr: 2,
            ends_at_ms: T0 + 1_000,
        };
        assert_eq!(Sliding::expires_at_ms(&counted, &quota), T0 + 2_000);
        let only_prev = SlidingState { curr: 0, ..counted };
        assert_eq!(Sliding::expires_at_ms(&only_prev, &quota), T0 + 1_000);
        assert_eq!(Sliding::span_ms(&quota), 2 * SECOND);
    }

    #[test]
    fn seeded_counts_the_units_now_and_lets_them_go_within_one_window() {
        let quota = Quota::new(10, SECOND);
        let seeded = Sliding::seeded(7, T0 + 10, &quota).expect("in range");
        assert_eq!(
            seeded,
            SlidingState {
                prev: 7,
                curr: 0,
                ends_at_ms: T0 + 1_010
            }
        );
        assert_eq!(Sliding::used(&seeded, T0 + 10, &quota), 7);
        assert_eq!(
            Sliding::used(&seeded, T0 + 510, &quota),
            4,
            "3.5 rounded up"
        );
        assert_eq!(Sliding::used(&seeded, T0 + 1_010, &quota), 0);
        assert_eq!(Sliding::expires_at_ms(&seeded, &quota), T0 + 1_010);
        // A full seed: the whole limit is free again exactly one window later.
        let full = Sliding::seeded(10, T0 + 10, &quota).expect("in range");
        let denied = Sliding::check(Some(&full), T0 + 10, &quota, 10).expect("in range");
        assert_eq!(denied.decision.retry_after_ms, SECOND);
        assert_eq!(denied.decision.reset_after_ms, SECOND);
        let hit = Sliding::check(Some(&full), T0 + 1_010, &quota, 10).expect("in range");
        assert!(hit.decision.allowed);
        // One unit fits once the 10 weigh 9: a tenth of a window later.
        let one = Sliding::check(Some(&full), T0 + 10, &quota, 1).expect("in range");
        assert_eq!(one.decision.retry_after_ms, 100);
    }

    #[test]
    fn works_at_the_extremes_of_i64() {
        let quota = Quota::new(i64::MAX, YEAR);
        let full = SlidingState {
            prev: i64::MAX,
            curr: i64::MAX - 1,
            ends_at_ms: T0 + YEAR,
        };
        let hit = Sliding::check(Some(&full), T0 + 1, &quota, i64::MAX).expect("in range");
        assert!(!hit.decision.allowed);
        assert!(hit.decision.retry_after_ms > 0);
        assert_eq!(Sliding::used(&full, T0 + 1, &quota), i64::MAX);
        let fresh = Sliding::check(None, T0, &quota, i64::MAX).expect("in range");
        assert!(fresh.decision.allowed);
        assert_eq!(
            Sliding::check(None, i64::MAX - 10, &quota, 1),
            Err(OutOfRange)
        );
        assert_eq!(
            Sliding::check(None, i64::MIN, &Quota::new(1, 3), 1),
            Err(OutOfRange)
        );
        let before_epoch = Sliding::check(None, -1_500, &Quota::new(1, 1_000), 1).expect("ok");
        assert_eq!(before_epoch.charged.map(|s| s.ends_at_ms), Some(-1_000));
        assert_eq!(
            Sliding::check(None, T0, &Quota::new(1, 0), 1),
            Err(OutOfRange)
        );
        assert_eq!(Sliding::check(None, T0, &quota, 0), Err(OutOfRange));
    }

    #[test]
    fn encodes_compactly_and_refuses_truncated_bytes() {
        let state = SlidingState {
            prev: 3,
            curr: 100,
            ends_at_ms: T0,
        };
        let mut out = Bytes::new();
        Sliding::encode(&state, &mut out);
        assert_eq!(out.len(), 10);
        assert_eq!(Sliding::decode(&mut Reader::new(&out)), Some(state));
        for cut in 0..out.len() {
            assert_eq!(Sliding::decode(&mut Reader::new(&out[..cut])), None);
        }
    }

    /// What the current and previous windows hold by an independent account: counts per
    /// window end, the window `now` counts in being the later of the last written one and
    /// the one `now` falls in.
    struct Model {
        per_window: HashMap<i64, i64>,
        written_end: Option<i64>,
    }

    impl Model {
        fn at(&self, now: i64, window: i64) -> (i64, i64, i64, i64) {
            let end = aligned_end(now, window).expect("in range");
            let end = self.written_end.map_or(end, |w| w.max(end));
            let prev = self.per_window.get(&(end - window)).copied().unwrap_or(0);
            let curr = self.per_window.get(&end).copied().unwrap_or(0);
            let elapsed = (now - (end - window)).max(0);
            (prev, curr, end, elapsed)
        }
    }

    fn fits(prev: i64, curr: i64, elapsed: i64, window: i64, limit: i64, cost: i64) -> bool {
        let (w, e) = (i128::from(window), i128::from(elapsed));
        i128::from(prev) * (w - e) + (i128::from(curr) + i128::from(cost)) * w
            <= i128::from(limit) * w
    }

    proptest! {
        /// Over random sequences of time steps (some backwards), costs and refunds: every
        /// decision is the one an independent account of the windows gives, the estimate
        /// never exceeds the limit, a denied hit retried after exactly `retry_after_ms` is
        /// allowed and 1 ms earlier is not, and a written state reads as no state from its
        /// expiry.
        #[test]
        fn the_estimate_never_exceeds_the_limit_and_retry_after_is_exact(
            limit in 1i64..20,
            window in 1i64..5_000,
            steps in proptest::collection::vec((-3_000i64..3_000, op()), 1..200),
        ) {
            let quota = Quota::new(limit, window);
            let mut now = T0;
            let mut stored: Option<SlidingState> = None;
            let mut model = Model { per_window: HashMap::new(), written_end: None };
            let mut latest = i64::MIN;
            for (step, op) in steps {
                now += step;
                let (prev, curr, end, elapsed) = model.at(now, window);
                let written = match op {
                    Op::Hit(cost) => {
                        let hit = Sliding::check(stored.as_ref(), now, &quota, cost)
                            .expect("in range");
                        let d = hit.decision;
                        prop_assert_eq!(d.allowed, fits(prev, curr, elapsed, window, limit, cost));
                        prop_assert!(d.remaining >= 0 && d.remaining <= limit);
                        prop_assert!(d.reset_after_ms >= 0);
                        if let Some(state) = hit.charged {
                            *model.per_window.entry(end).or_default() += cost;
                            Some(state)
                        } else {
                            let view = Sliding::view(stored.as_ref(), now, &quota).expect("ok");
                            prop_assert_eq!(view.remaining, d.remaining);
                            prop_assert!(d.remaining < cost);
                            if cost > limit {
                                prop_assert_eq!(d.retry_after_ms, NEVER);
                            } else {
                                let wait = d.retry_after_ms;
                                prop_assert!(wait > 0);
                                let allowed_at = |at: i64| {
                                    Sliding::check(stored.as_ref(), at, &quota, cost)
                                        .expect("in range")
                                        .decision
                                        .allowed
                                };
                                prop_assert!(allowed_at(now + wait), "waited {} ms", wait);
                                prop_assert!(!allowed_at(now + wait - 1), "waited {} ms", wait - 1);
                            }
                            None
                        }
                    }
                    Op::Refund(amount) => {
                        let back = Sliding::refund(stored.as_ref(), now, &quota, amount);
                        prop_assert_eq!(back.is_some(), curr > 0);
                        if back.is_some() {
                            *model.per_window.entry(end).or_default() -= amount.min(curr);
                        }
                        back
                    }
                };
                if let Some(state) = written {
                    model.written_end = Some(end);
                    let (prev, curr, end, elapsed) = model.at(now, window);
                    prop_assert_eq!(state, SlidingState { prev, curr, ends_at_ms: end });
                    prop_assert!(curr >= 0);
                    if matches!(op, Op::Hit(_)) {
                        prop_assert!(fits(prev, curr, elapsed, window, limit, 0), "over the limit");
                    }
                    // At the latest time anything was written the estimate is within the
                    // limit. (At an earlier time, reached by a clock going back, it may be
                    // above it: such a clock is refused everything until it catches up.)
                    latest = latest.max(now);
                    let (prev, curr, _, elapsed) = model.at(latest, window);
                    prop_assert!(fits(prev, curr, elapsed, window, limit, 0), "over at the latest");
                    let used = Sliding::used(&state, now, &quota);
                    let view = Sliding::view(Some(&state), now, &quota).expect("ok");
                    prop_assert_eq!(view.remaining, (limit - used).max(0));
                    let expiry = Sliding::expires_at_ms(&state, &quota);
                    prop_assert!(expiry > now);
                    prop_assert_eq!(
                        Sliding::view(Some(&state), expiry, &quota),
                        Sliding::view(None, expiry, &quota)
                    );
                    prop_assert_eq!(Sliding::used(&state, expiry, &quota), 0);
                    if view.reset_after_ms > 0 {
                        prop_assert_eq!(view.reset_after_ms, expiry - now);
                    }
                    let mut bytes = Bytes::new();
                    Sliding::encode(&state, &mut bytes);
                    prop_assert_eq!(Sliding::decode(&mut Reader::new(&bytes)), Some(state));
                    stored = Some(state);
                }
            }
        }

        /// Any stored state, clock reading and parameters: answers or `OutOfRange`,
        /// never a panic or an overflow.
        #[test]
        fn never_panics_at_any_time_or_size(
            prev in 0..=i64::MAX,
            curr in 0..=i64::MAX,
            ends_at_ms in any::<i64>(),
            now in any::<i64>(),
            limit in prop_oneof![1..=i64::MAX, 1i64..10],
            window in prop_oneof![1..=YEAR, 1..=i64::MAX],
            cost in prop_oneof![1..=i64::MAX, 1i64..10],
        ) {
            let quota = Quota::new(limit, window);
            let state = SlidingState { prev, curr, ends_at_ms };
            for stored in [None, Some(&state)] {
                if let Ok(hit) = Sliding::check(stored, now, &quota, cost) {
                    prop_assert!(hit.decision.remaining >= 0);
                    if let Some(charged) = hit.charged {
                        let _ = Sliding::expires_at_ms(&charged, &quota);
                        let _ = Sliding::refund(Some(&charged), now, &quota, cost);
                    }
                }
                let _ = Sliding::view(stored, now, &quota);
                let _ = Sliding::refund(stored, now, &quota, cost);
            }
            prop_assert!(Sliding::used(&state, now, &quota) >= 0);
            let _ = Sliding::seeded(limit, now, &quota);
            let _ = Sliding::expires_at_ms(&state, &quota);
            let _ = Sliding::span_ms(&quota);
            let mut bytes = Bytes::new();
            Sliding::encode(&state, &mut bytes);
            prop_assert_eq!(Sliding::decode(&mut Reader::new(&bytes)), Some(state));
        }

        #[test]
        fn decoding_junk_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut reader = Reader::new(&bytes);
            while Sliding::decode(&mut reader).is_some() {}
        }
    }
}
