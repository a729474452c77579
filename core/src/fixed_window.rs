//! Fixed window: at most `limit` units per window, windows aligned to multiples of the
//! window length since the Unix epoch (the `key:minute` pattern, kept in one key).
//!
//! The state is the count and the absolute time the window ends; the key expires exactly
//! then. A stored window that has not ended is used as it is, even if it ends later than
//! the window `now` falls in (the clock went back): that never grants a second burst.
//! A state lasting more than one window from now is renewed by `limiter`, so no wait is
//! ever longer than one window.
//!
//! A calendar window (`day`, `week`, `month`, `year` in a zone, see `calendar`) is a fixed
//! window whose ends are the calendar's boundaries: the count and the end are stored the
//! same way, and only where a new window ends differs.

use super::algorithm::{Algorithm, OutOfRange, Quota, TierCheck, View};
use super::calendar::period_end;
use super::codec::{put_i64, put_varint, Bytes, Reader};
use super::decision::{Decision, NEVER};
use super::duration::DAY_MS;

/// The fixed-window algorithm.
///
/// # Example
///
/// Two per minute: the third hit waits for the window to end.
///
/// ```
/// use ratelimit_core::algorithm::{Algorithm, Quota};
/// use ratelimit_core::fixed_window::{Fixed, WindowState};
///
/// let quota = Quota::new(2, 60_000);
/// let t0 = 1_796_083_200_000; // a whole minute since the epoch
/// let first = Fixed::check(None, t0 + 10_000, &quota, 1)?;
/// assert_eq!(first.charged, Some(WindowState { count: 1, ends_at_ms: t0 + 60_000 }));
/// let second = Fixed::check(first.charged.as_ref(), t0 + 20_000, &quota, 1)?;
/// assert_eq!(second.decision.remaining, 0);
/// let third = Fixed::check(second.charged.as_ref(), t0 + 30_000, &quota, 1)?;
/// assert!(!third.decision.allowed);
/// assert_eq!(third.decision.retry_after_ms, 30_000, "until the window ends");
/// # Ok::<(), ratelimit_core::algorithm::OutOfRange>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Fixed;

/// The stored state of one fixed-window tier.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowState {
    /// Units counted in the window, >= 0.
    pub count: i64,
    /// Absolute Unix time in ms at which the window ends and the key expires.
    pub ends_at_ms: i64,
}

/// The end of the epoch-aligned window of `window_ms` (>= 1) that `now_ms` falls in.
pub fn aligned_end(now_ms: i64, window_ms: i64) -> Result<i64, OutOfRange> {
    if window_ms < 1 {
        return Err(OutOfRange);
    }
    let start = now_ms
        .checked_sub(now_ms.rem_euclid(window_ms))
        .ok_or(OutOfRange)?;
    start.checked_add(window_ms).ok_or(OutOfRange)
}

/// The end of the window of `quota` that `now_ms` falls in: aligned to the epoch, or for
/// a calendar window the next boundary of its calendar.
fn window_end(now_ms: i64, quota: &Quota) -> Result<i64, OutOfRange> {
    match &quota.calendar {
        None => aligned_end(now_ms, quota.window_ms),
        Some(calendar) => period_end(now_ms, calendar),
    }
}

/// The window `now_ms` counts in: the stored one while it has not ended, else a new,
/// empty window aligned to the epoch (or the calendar).
fn current_window(
    stored: Option<&WindowState>,
    now_ms: i64,
    quota: &Quota,
) -> Result<WindowState, OutOfRange> {
    match stored {
        Some(state) if state.ends_at_ms > now_ms => Ok(*state),
        _ => Ok(WindowState {
            count: 0,
            ends_at_ms: window_end(now_ms, quota)?,
        }),
    }
}

impl Algorithm for Fixed {
    type State<'a> = WindowState;
    const ID: u8 = 1;

    fn check<'a>(
        state: Option<&Self::State<'a>>,
        now_ms: i64,
        quota: &Quota,
        cost: i64,
    ) -> Result<TierCheck<Self::State<'a>>, OutOfRange> {
        let window = current_window(state, now_ms, quota)?;
        let until_end = window.ends_at_ms - now_ms;
        let fits = window
            .count
            .checked_add(cost)
            .filter(|&total| total <= quota.limit);
        Ok(match fits {
            Some(total) => TierCheck {
                decision: Decision {
                    allowed: true,
                    limit: quota.limit,
                    remaining: quota.limit - total,
                    reset_after_ms: until_end,
                    retry_after_ms: 0,
                },
                charged: Some(WindowState {
                    count: total,
                    ..window
                }),
            },
            None => {
                let now = Self::view(Some(&window), now_ms, quota)?;
                TierCheck {
                    decision: Decision {
                        allowed: false,
                        limit: quota.limit,
                        remaining: now.remaining,
                        reset_after_ms: now.reset_after_ms,
                        retry_after_ms: if cost > quota.limit { NEVER } else { until_end },
                    },
                    charged: None,
                }
            }
        })
    }

    fn view(state: Option<&WindowState>, now_ms: i64, quota: &Quota) -> Result<View, OutOfRange> {
        let window = current_window(state, now_ms, quota)?;
        Ok(View {
            remaining: quota.limit.saturating_sub(window.count).max(0),
            reset_after_ms: if window.count == 0 {
                0
            } else {
                window.ends_at_ms - now_ms
            },
        })
    }

    fn refund<'a>(
        state: Option<&Self::State<'a>>,
        now_ms: i64,
        _quota: &Quota,
        amount: i64,
    ) -> Option<Self::State<'a>> {
        let state = state.filter(|s| s.ends_at_ms > now_ms && s.count > 0)?;
        Some(WindowState {
            count: state.count - amount.min(state.count),
            ..*state
        })
    }

    fn used(state: &WindowState, now_ms: i64, _quota: &Quota) -> i64 {
        if state.ends_at_ms > now_ms {
            state.count
        } else {
            0
        }
    }

    fn seeded<'a>(used: i64, now_ms: i64, quota: &Quota) -> Result<Self::State<'a>, OutOfRange> {
        Ok(WindowState {
            count: used,
            ends_at_ms: window_end(now_ms, quota)?,
        })
    }

    /// A calendar period may last a day longer than its nominal length when its zone's
    /// offset changes (a 25-hour day, a zone that moved across the date line).
    fn span_ms(quota: &Quota) -> i64 {
        match quota.calendar {
            None => quota.window_ms,
            Some(_) => quota.window_ms.saturating_add(DAY_MS),
        }
    }

    fn expires_at_ms(state: &WindowState, _quota: &Quota) -> i64 {
        state.ends_at_ms
    }

    fn from_plain_count<'a>(count: i64, expires_at_ms: i64) -> Option<Self::State<'a>> {
        Some(WindowState {
            count,
            ends_at_ms: expires_at_ms,
        })
    }

    /// A window that ends on a multiple of this window length (a longer window's ends
    /// generally do not). Never for a calendar window: a plain count does not record the
    /// zone or the anchor.
    fn fits_unrecorded(state: &WindowState, quota: &Quota) -> bool {
        quota.calendar.is_none() && state.ends_at_ms.rem_euclid(quota.window_ms) == 0
    }

    fn to_plain_count(state: &WindowState) -> Option<i64> {
        (state.count >= 1).then_some(state.count)
    }

    fn encode(state: &WindowState, out: &mut Bytes) {
        put_varint(out, state.count);
        put_i64(out, state.ends_at_ms);
    }

    fn decode(reader: &mut Reader<'_>) -> Option<WindowState> {
        Some(WindowState {
            count: reader.varint()?,
            ends_at_ms: reader.i64()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::{self, case, Case};
    use proptest::prelude::*;
    use std::collections::HashMap;

    const MINUTE: i64 = 60_000;
    /// 2026-11-30T00:00:00Z, a multiple of every window used below.
    const T0: i64 = 1_796_083_200_000;

    /// Runs `cases` against one key (see `scenario`).
    fn run(quota: Quota, cases: &[Case]) -> Option<<Fixed as Algorithm>::State<'static>> {
        scenario::run::<Fixed>(quota, cases)
    }

    #[test]
    fn counts_up_to_the_limit_then_denies_until_the_window_ends() {
        #[rustfmt::skip]
        run(Quota::new(3, MINUTE), &[
            case(T0,              1, true,  2, MINUTE,          0),
            case(T0 + 10_000,     1, true,  1, MINUTE - 10_000, 0),
            case(T0 + 20_000,     1, true,  0, MINUTE - 20_000, 0),
            case(T0 + 30_000,     1, false, 0, MINUTE - 30_000, MINUTE - 30_000),
            case(T0 + MINUTE - 1, 1, false, 0, 1,               1),
            // The window edge: a new window starts exactly at its end.
            case(T0 + MINUTE,     1, true,  2, MINUTE,          0),
        ]);
    }

    #[test]
    fn windows_are_aligned_to_the_epoch_not_to_the_first_hit() {
        #[rustfmt::skip]
        run(Quota::new(2, MINUTE), &[
            case(T0 + 59_000, 1, true, 1, 1_000,  0),
            case(T0 + 59_999, 1, true, 0, 1,      0),
            // The 2x burst across an edge that fixed windows allow by design.
            case(T0 + 60_000, 1, true, 1, MINUTE, 0),
            case(T0 + 60_001, 1, true, 0, MINUTE - 1, 0),
        ]);
    }

    #[test]
    fn costs_above_one_count_whole_or_not_at_all() {
        #[rustfmt::skip]
        run(Quota::new(10, 1_000), &[
            case(T0,       4,  true,  6,  1_000, 0),
            case(T0 + 1,   7,  false, 6,  999,   999),
            case(T0 + 2,   6,  true,  0,  998,   0),
            case(T0 + 3,   11, false, 0,  997,   NEVER),
            case(T0 + 1_000, 11, false, 10, 0,   NEVER),
            case(T0 + 1_000, 10, true,  0, 1_000, 0),
        ]);
    }

    #[test]
    fn a_clock_that_goes_back_keeps_the_stored_window() {
        #[rustfmt::skip]
        run(Quota::new(2, 1_000), &[
            case(T0 + 1_500, 2, true,  0, 500,   0),
            // Back by one second: the stored window still counts, no second burst.
            case(T0 + 500,   1, false, 0, 1_500, 1_500),
            // The wait it announced is enough.
            case(T0 + 2_000, 1, true,  1, 1_000, 0),
        ]);
    }

    #[test]
    fn works_at_the_extremes_of_i64() {
        let quota = Quota::new(i64::MAX, 1_000);
        let near_full = Some(WindowState {
            count: i64::MAX - 1,
            ends_at_ms: T0 + 1_000,
        });
        let hit = Fixed::check(near_full.as_ref(), T0, &quota, i64::MAX).expect("in range");
        assert!(!hit.decision.allowed);
        assert_eq!(hit.decision.remaining, 1);
        assert_eq!(
            Fixed::check(None, i64::MAX - 10, &quota, 1),
            Err(OutOfRange)
        );
        let before_epoch = Fixed::check(None, -1_500, &quota, 1).expect("in range");
        assert_eq!(before_epoch.charged.map(|s| s.ends_at_ms), Some(-1_000));
    }

    proptest! {
        /// Over random sequences of time steps (some backwards) and costs: no window ever
        /// holds more than the limit, a denied hit that waits its retry time and retries
        /// alone is allowed, and a cost within the limit is never refused for ever.
        #[test]
        fn never_more_than_limit_per_window_and_retry_after_works(
            limit in 1i64..20,
            window_ms in 1i64..5_000,
            steps in proptest::collection::vec((-3_000i64..3_000, 1i64..25), 1..200),
        ) {
            let quota = Quota::new(limit, window_ms);
            let mut now = T0;
            let mut stored: Option<WindowState> = None;
            let mut per_window: HashMap<i64, i64> = HashMap::new();
            for (step, cost) in steps {
                now += step;
                let hit = Fixed::check(stored.as_ref(), now, &quota, cost).expect("in range");
                let d = hit.decision;
                prop_assert!(d.remaining >= 0 && d.remaining <= limit);
                prop_assert!(d.reset_after_ms >= 0);
                match hit.charged {
                    Some(state) => {
                        prop_assert!(d.allowed);
                        let total = per_window.entry(state.ends_at_ms).or_default();
                        *total += cost;
                        prop_assert_eq!(*total, state.count);
                        prop_assert!(state.count <= limit);
                        prop_assert!(state.ends_at_ms > now);
                        stored = Some(state);
                    }
                    None if cost > limit => prop_assert_eq!(d.retry_after_ms, NEVER),
                    None => {
                        prop_assert!(d.retry_after_ms > 0);
                        let retry = Fixed::check(stored.as_ref(), now + d.retry_after_ms, &quota, cost)
                            .expect("in range");
                        prop_assert!(retry.decision.allowed, "waited {} ms", d.retry_after_ms);
                    }
                }
            }
        }
    }
}
