//! Fixed window: at most `limit` units per window, windows aligned to multiples of the
//! window length since the Unix epoch (the `key:minute` pattern, kept in one key).
//!
//! The state is the count and the absolute time the window ends; the key expires exactly
//! then. A stored window that has not ended is authoritative, even if it ends later than
//! the window `now` falls in: that only happens when the clock went back (or the window
//! length changed), and honouring it never grants a second burst; the wait it imposes
//! ends when the stored window does.

use super::decision::{Decision, NEVER};

/// The stored state of one fixed-window key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowState {
    /// Units counted in the window, >= 1 for a stored state.
    pub count: i64,
    /// Absolute Unix time in ms at which the window ends and the key expires.
    pub ends_at_ms: i64,
}

/// `limit` units per `window_ms` milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Units allowed per window, >= 1.
    pub limit: i64,
    /// Window length in ms, >= 1.
    pub window_ms: i64,
}

/// The outcome of one hit: what to answer and, when allowed, the state to store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    /// The answer for the caller.
    pub decision: Decision,
    /// The state to write; `None` when nothing changes (a denied hit).
    pub new_state: Option<WindowState>,
}

/// `now_ms` is so far from the epoch that the window's end does not fit in an `i64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeOutOfRange;

/// The window `now_ms` counts in: the stored one while it has not ended, else a new,
/// empty window aligned to the epoch.
pub fn current_window(
    stored: Option<WindowState>,
    now_ms: i64,
    window_ms: i64,
) -> Result<WindowState, TimeOutOfRange> {
    match stored {
        Some(state) if state.ends_at_ms > now_ms => Ok(state),
        _ => {
            let start = now_ms - now_ms.rem_euclid(window_ms);
            let ends_at_ms = start.checked_add(window_ms).ok_or(TimeOutOfRange)?;
            Ok(WindowState {
                count: 0,
                ends_at_ms,
            })
        }
    }
}

/// Checks `cost` units against `quota` at `now_ms` and counts them when they fit.
pub fn hit(
    stored: Option<WindowState>,
    now_ms: i64,
    quota: Quota,
    cost: i64,
) -> Result<Hit, TimeOutOfRange> {
    let window = current_window(stored, now_ms, quota.window_ms)?;
    let until_end = window.ends_at_ms - now_ms;
    let fits = window
        .count
        .checked_add(cost)
        .filter(|&total| total <= quota.limit);
    Ok(match fits {
        Some(total) => Hit {
            decision: Decision {
                allowed: true,
                limit: quota.limit,
                remaining: quota.limit - total,
                reset_after_ms: until_end,
                retry_after_ms: 0,
            },
            new_state: Some(WindowState {
                count: total,
                ..window
            }),
        },
        None => Hit {
            decision: Decision {
                allowed: false,
                limit: quota.limit,
                remaining: quota.limit.saturating_sub(window.count).max(0),
                reset_after_ms: if window.count == 0 { 0 } else { until_end },
                retry_after_ms: if cost > quota.limit { NEVER } else { until_end },
            },
            new_state: None,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    const MINUTE: i64 = 60_000;
    /// 2026-11-30T00:00:00Z, a multiple of every window used below.
    const T0: i64 = 1_796_083_200_000;

    struct Case {
        at: i64,
        cost: i64,
        allowed: bool,
        remaining: i64,
        reset_after_ms: i64,
        retry_after_ms: i64,
    }

    #[rustfmt::skip]
    fn case(at: i64, cost: i64, allowed: bool, remaining: i64, reset: i64, retry: i64) -> Case {
        Case { at, cost, allowed, remaining, reset_after_ms: reset, retry_after_ms: retry }
    }

    /// Runs hits against one key, storing what the core returns as RL.HIT would.
    fn run(quota: Quota, cases: &[Case]) {
        let mut stored = None;
        for (n, c) in cases.iter().enumerate() {
            let hit = hit(stored, c.at, quota, c.cost).expect("time in range");
            let expected = Decision {
                allowed: c.allowed,
                limit: quota.limit,
                remaining: c.remaining,
                reset_after_ms: c.reset_after_ms,
                retry_after_ms: c.retry_after_ms,
            };
            assert_eq!(hit.decision, expected, "case {n} at {}", c.at - T0);
            assert_eq!(
                hit.new_state.is_some(),
                c.allowed,
                "case {n} writes iff allowed"
            );
            if let Some(state) = hit.new_state {
                stored = Some(state);
            }
        }
    }

    #[test]
    fn counts_up_to_the_limit_then_denies_until_the_window_ends() {
        #[rustfmt::skip]
        run(Quota { limit: 3, window_ms: MINUTE }, &[
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
        run(Quota { limit: 2, window_ms: MINUTE }, &[
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
        run(Quota { limit: 10, window_ms: 1_000 }, &[
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
        run(Quota { limit: 2, window_ms: 1_000 }, &[
            case(T0 + 1_500, 2, true,  0, 500,   0),
            // Back by one second: the stored window still counts, no second burst.
            case(T0 + 500,   1, false, 0, 1_500, 1_500),
            // The wait it announced is enough.
            case(T0 + 2_000, 1, true,  1, 1_000, 0),
        ]);
    }

    #[test]
    fn works_at_the_extremes_of_i64() {
        let quota = Quota {
            limit: i64::MAX,
            window_ms: 1_000,
        };
        let near_full = Some(WindowState {
            count: i64::MAX - 1,
            ends_at_ms: T0 + 1_000,
        });
        let hit = hit(near_full, T0, quota, i64::MAX).expect("in range");
        assert!(!hit.decision.allowed);
        assert_eq!(hit.decision.remaining, 1);
        assert_eq!(
            super::hit(None, i64::MAX - 10, quota, 1),
            Err(TimeOutOfRange)
        );
        let before_epoch = super::hit(None, -1_500, quota, 1).expect("in range");
        assert_eq!(before_epoch.new_state.map(|s| s.ends_at_ms), Some(-1_000));
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
            let quota = Quota { limit, window_ms };
            let mut now = T0;
            let mut stored: Option<WindowState> = None;
            let mut per_window: HashMap<i64, i64> = HashMap::new();
            for (step, cost) in steps {
                now += step;
                let hit = hit(stored, now, quota, cost).expect("in range");
                let d = hit.decision;
                prop_assert!(d.remaining >= 0 && d.remaining <= limit);
                prop_assert!(d.reset_after_ms >= 0);
                match hit.new_state {
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
                        let retry = super::hit(stored, now + d.retry_after_ms, quota, cost)
                            .expect("in range");
                        prop_assert!(retry.decision.allowed, "waited {} ms", d.retry_after_ms);
                    }
                }
            }
        }
    }
}
