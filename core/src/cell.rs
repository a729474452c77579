//! The pure part of `CL.THROTTLE key max_burst count_per_period period [quantity]`, the
//! command of the redis-cell module, answered by [`Gcra`](super::gcra::Gcra).
//!
//! **Mapping.** `count_per_period` units per `period` seconds with a capacity of
//! `max_burst + 1` units is the quota `limit = count_per_period`, `window = period * 1000`
//! ms, `burst = max_burst + 1`; `quantity` (default 1) is the cost. A quantity of 0 checks
//! without taking anything. The reply is redis-cell's five integers:
//!
//! ```text
//! [limited (1 = denied), limit (= max_burst + 1), remaining, retry_after_s, reset_after_s]
//! ```
//!
//! with both times in seconds rounded up, `retry_after_s` -1 when allowed and when the
//! quantity can never fit (it is above `max_burst + 1`), `reset_after_s` the time until the
//! bucket is full again. These are the decision's fields, so redis-cell's numbers come out:
//! `CL.THROTTLE user123 15 30 60` on a new key answers `[0, 16, 15, -1, 2]`.
//!
//! **Where it differs from redis-cell**, each time towards exactness or a clear error:
//! - The emission interval is exact (redis-cell truncates `period / count` to whole ns
//!   through an `f64`, granting slightly more than the rate); times are rounded up to whole
//!   ms, then to seconds, so a wait is never announced short.
//! - Arguments are checked: `max_burst` >= 0, `count_per_period` >= 1, `period` in 1 s ..=
//!   366 days, `quantity` >= 0, plain decimal digits only (no sign). redis-cell accepts any
//!   `i64` (a zero rate is its only refusal) and misbehaves on negative values. Errors are
//!   `ERR ...` naming the argument, not `Cell error: ...`.
//! - A quantity of 0 writes nothing (redis-cell rewrites the same time).
//! - Changed parameters: redis-cell reuses the stored time under the new rate; through
//!   `limiter` the key is carried over from its usage instead (see `limiter`).

use super::algorithm::Quota;
use super::args::ArgError;
use super::decision::{Decision, NEVER};
use super::duration::{parse_digits, MAX_WINDOW_MS, SECOND_MS};
use super::limiter::{Action, AlgorithmKind, Limits};
use std::borrow::Cow;

/// The longest `period` accepted, in seconds: 366 days, the longest window of RL.HIT.
pub const MAX_PERIOD_S: i64 = MAX_WINDOW_MS / SECOND_MS;

/// The parsed arguments of CL.THROTTLE after the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Throttle {
    /// `limit` = count_per_period, `window_ms` = period * 1000, `burst` = max_burst + 1.
    pub quota: Quota,
    /// Units to take, >= 0; 0 only looks.
    pub quantity: i64,
}

/// Why the arguments of CL.THROTTLE were refused. As for [`ArgError`],
/// [`Display`](std::fmt::Display) gives the reply's text without its error code and
/// [`ThrottleArgError::message`] the reply (`ERR ` and that text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThrottleArgError {
    /// An error RL.HIT has too: only [`ArgError::WrongArity`] (not 3 or 4 arguments after
    /// the key), answered with Redis's standard arity error.
    Common(ArgError),
    /// `max_burst` is not an integer from 0 to `i64::MAX - 1`.
    MaxBurst,
    /// `count_per_period` is not an integer >= 1.
    CountPerPeriod,
    /// `period` is not an integer >= 1.
    Period,
    /// `period` is above [`MAX_PERIOD_S`].
    PeriodTooLong,
    /// `quantity` is not an integer >= 0.
    Quantity,
}

impl From<ArgError> for ThrottleArgError {
    fn from(err: ArgError) -> Self {
        ThrottleArgError::Common(err)
    }
}

impl ThrottleArgError {
    /// The error reply: `ERR ` and then the [`Display`](std::fmt::Display) text.
    pub fn message(&self) -> Cow<'static, str> {
        format!("ERR {self}").into()
    }

    /// The text after `ERR `: borrowed where it is fixed, so that Display copies nothing.
    pub(crate) fn reason(&self) -> Cow<'static, str> {
        match self {
            ThrottleArgError::Common(err) => err.reason(),
            ThrottleArgError::MaxBurst => {
                format!("max_burst must be an integer from 0 to {}", i64::MAX - 1).into()
            }
            ThrottleArgError::CountPerPeriod => {
                "count_per_period must be a positive integer".into()
            }
            ThrottleArgError::Period => "period must be a positive integer of seconds".into(),
            ThrottleArgError::PeriodTooLong => {
                format!("period must be at most {MAX_PERIOD_S} seconds (366 days)").into()
            }
            ThrottleArgError::Quantity => "quantity must be a non-negative integer".into(),
        }
    }
}

/// The reply's text without the `ERR ` that only a reply carries (see
/// [`ThrottleArgError::message`]).
impl std::fmt::Display for ThrottleArgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason())
    }
}

impl std::error::Error for ThrottleArgError {}

/// Parses `max_burst count_per_period period [quantity]`, the arguments of CL.THROTTLE
/// after the key.
pub fn parse_throttle(args: &[&[u8]]) -> Result<Throttle, ThrottleArgError> {
    let (max_burst, count, period, quantity) = match args {
        [b, c, p] => (b, c, p, None),
        [b, c, p, q] => (b, c, p, Some(q)),
        _ => return Err(ArgError::WrongArity.into()),
    };
    let burst = parse_integer(max_burst)
        .and_then(|n| n.checked_add(1))
        .ok_or(ThrottleArgError::MaxBurst)?;
    let limit = parse_integer(count)
        .filter(|&n| n >= 1)
        .ok_or(ThrottleArgError::CountPerPeriod)?;
    let window_ms = match parse_period_s(period)? {
        s if s > MAX_PERIOD_S => return Err(ThrottleArgError::PeriodTooLong),
        s => s * SECOND_MS,
    };
    let quantity = match quantity {
        None => 1,
        Some(q) => parse_integer(q).ok_or(ThrottleArgError::Quantity)?,
    };
    Ok(Throttle {
        quota: Quota {
            limit,
            window_ms,
            burst,
            calendar: None,
        },
        quantity,
    })
}

/// An integer >= 0 in plain decimal digits; `None` also above `i64::MAX`.
fn parse_integer(text: &[u8]) -> Option<i64> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    parse_digits(text)
}

/// `period` in seconds, >= 1; digits too big for an `i64` are too long, not malformed.
fn parse_period_s(text: &[u8]) -> Result<i64, ThrottleArgError> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return Err(ThrottleArgError::Period);
    }
    match parse_digits(text) {
        None => Err(ThrottleArgError::PeriodTooLong),
        Some(0) => Err(ThrottleArgError::Period),
        Some(s) => Ok(s),
    }
}

impl Throttle {
    /// What CL.THROTTLE asks the limiter: GCRA on one tier; a quantity of 0 only looks
    /// (nothing is written), any other quantity is a hit of that cost.
    pub fn request(&self) -> (Limits, Action) {
        let limits = Limits {
            algorithm: AlgorithmKind::Gcra,
            tiers: smallvec::smallvec![self.quota],
        };
        let action = match self.quantity {
            0 => Action::Peek { cost: 0 },
            cost => Action::Hit { cost },
        };
        (limits, action)
    }
}

/// redis-cell's reply for `decision`: `[limited, limit, remaining, retry_after_s,
/// reset_after_s]`, times in seconds rounded up, `retry_after_s` -1 when allowed or never.
pub fn cell_reply(decision: &Decision) -> [i64; 5] {
    let seconds = |ms: i64| {
        let ms = ms.max(0);
        ms / SECOND_MS + i64::from(ms % SECOND_MS != 0)
    };
    let retry_after_s = if decision.allowed || decision.retry_after_ms == NEVER {
        -1
    } else {
        seconds(decision.retry_after_ms)
    };
    [
        i64::from(!decision.allowed),
        decision.limit,
        decision.remaining,
        retry_after_s,
        seconds(decision.reset_after_ms),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algorithm::{Algorithm, OutOfRange, TierCheck};
    use crate::bucket::BucketState;
    use crate::gcra::Gcra;
    use proptest::prelude::*;

    /// Answers CL.THROTTLE for one key holding `state` at `now_ms`: [`Gcra::check`] with the
    /// quantity as cost. For a quantity of 0 nothing is charged (`charged` is `None` even
    /// though the decision is allowed), so nothing is written.
    fn throttle(
        state: Option<&BucketState>,
        now_ms: i64,
        throttle: &Throttle,
    ) -> Result<TierCheck<BucketState>, OutOfRange> {
        let mut answer = Gcra::check(state, now_ms, &throttle.quota, throttle.quantity)?;
        if throttle.quantity == 0 {
            answer.charged = None;
        }
        Ok(answer)
    }

    /// 2026-11-30T00:00:00Z.
    const T0: i64 = 1_796_083_200_000;

    fn parse(args: &[&str]) -> Result<Throttle, ThrottleArgError> {
        let bytes: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        parse_throttle(&bytes)
    }

    #[test]
    fn the_readme_example() {
        // CL.THROTTLE user123 15 30 60 on a new key.
        let args = parse(&["15", "30", "60"]).expect("valid");
        assert_eq!(
            args.quota,
            Quota {
                limit: 30,
                window_ms: 60_000,
                burst: 16,
                calendar: None,
            }
        );
        assert_eq!(args.quantity, 1);
        let hit = throttle(None, T0, &args).expect("in range");
        assert_eq!(cell_reply(&hit.decision), [0, 16, 15, -1, 2]);
        assert!(hit.charged.is_some());
    }

    #[test]
    fn redis_cells_own_sequence() {
        // max_burst 4 (limit 5), 1 per second; the sequence redis-cell's tests run.
        // (ms after T0, quantity, reply, reset_after_ms, retry_after_ms)
        #[rustfmt::skip]
        let steps: [(i64, i64, [i64; 5], i64, i64); 15] = [
            // A quantity above the limit never fits.
            (0,     6, [1, 5, 5, -1, 0], 0,     NEVER),
            (0,     1, [0, 5, 4, -1, 1], 1_000, 0),
            (0,     1, [0, 5, 3, -1, 2], 2_000, 0),
            (0,     1, [0, 5, 2, -1, 3], 3_000, 0),
            (0,     1, [0, 5, 1, -1, 4], 4_000, 0),
            (0,     1, [0, 5, 0, -1, 5], 5_000, 0),
            (0,     1, [1, 5, 0, 1, 5],  5_000, 1_000),
            (3_000, 1, [0, 5, 2, -1, 3], 3_000, 0),
            (3_100, 1, [0, 5, 1, -1, 4], 3_900, 0),
            (4_000, 1, [0, 5, 1, -1, 4], 4_000, 0),
            (8_000, 1, [0, 5, 4, -1, 1], 1_000, 0),
            (9_500, 1, [0, 5, 4, -1, 1], 1_000, 0),
            // Quantity 0 only looks.
            (9_500, 0, [0, 5, 4, -1, 1], 1_000, 0),
            (9_500, 2, [0, 5, 2, -1, 3], 3_000, 0),
            (9_500, 5, [1, 5, 2, 3, 3],  3_000, 3_000),
        ];
        let mut stored = None;
        for (n, (at, quantity, reply, reset_ms, retry_ms)) in steps.into_iter().enumerate() {
            let q = quantity.to_string();
            let args = parse(&["4", "1", "1", &q]).expect("valid");
            let hit = throttle(stored.as_ref(), T0 + at, &args).expect("in range");
            assert_eq!(cell_reply(&hit.decision), reply, "step {n}");
            assert_eq!(hit.decision.reset_after_ms, reset_ms, "step {n}");
            assert_eq!(hit.decision.retry_after_ms, retry_ms, "step {n}");
            assert_eq!(
                hit.charged.is_some(),
                reply[0] == 0 && quantity > 0,
                "step {n}"
            );
            stored = hit.charged.or(stored);
        }
    }

    #[test]
    fn quantity_zero_looks_even_at_a_full_bucket_and_writes_nothing() {
        let full = parse(&["0", "1", "10", "1"]).expect("valid");
        let state = throttle(None, T0, &full).expect("ok").charged;
        let look = parse(&["0", "1", "10", "0"]).expect("valid");
        let seen = throttle(state.as_ref(), T0 + 2_500, &look).expect("in range");
        assert_eq!(cell_reply(&seen.decision), [0, 1, 0, -1, 8]);
        assert_eq!(seen.charged, None);
        let denied = throttle(state.as_ref(), T0 + 2_500, &full).expect("in range");
        assert_eq!(cell_reply(&denied.decision), [1, 1, 0, 8, 8]);
    }

    #[test]
    fn replies_round_times_up_to_seconds() {
        let decision = |allowed, reset, retry| Decision {
            allowed,
            limit: 3,
            remaining: 1,
            reset_after_ms: reset,
            retry_after_ms: retry,
        };
        assert_eq!(cell_reply(&decision(true, 0, 0)), [0, 3, 1, -1, 0]);
        assert_eq!(cell_reply(&decision(true, 1, 0)), [0, 3, 1, -1, 1]);
        assert_eq!(cell_reply(&decision(false, 1_000, 1)), [1, 3, 1, 1, 1]);
        assert_eq!(cell_reply(&decision(false, 1_001, 1_000)), [1, 3, 1, 1, 2]);
        assert_eq!(cell_reply(&decision(false, 2_000, 1_001)), [1, 3, 1, 2, 2]);
        assert_eq!(cell_reply(&decision(false, 0, NEVER)), [1, 3, 1, -1, 0]);
        let far = cell_reply(&decision(false, i64::MAX, i64::MAX));
        assert_eq!(far[3..], [i64::MAX / 1_000 + 1, i64::MAX / 1_000 + 1]);
    }

    #[test]
    fn accepts_the_bounds() {
        let max = "9223372036854775807";
        let biggest = parse(&["9223372036854775806", max, "31622400", max]).expect("valid");
        assert_eq!(
            biggest,
            Throttle {
                quota: Quota {
                    limit: i64::MAX,
                    window_ms: MAX_WINDOW_MS,
                    burst: i64::MAX,
                    calendar: None,
                },
                quantity: i64::MAX,
            }
        );
        // The whole capacity at once: exact, even with such numbers.
        let hit = throttle(None, T0, &biggest).expect("in range");
        assert!(hit.decision.allowed);
        assert_eq!(cell_reply(&hit.decision), [0, i64::MAX, 0, -1, 31_622_400]);
        let smallest = parse(&["0", "1", "1", "0"]).expect("valid");
        assert_eq!(
            smallest.quota,
            Quota {
                limit: 1,
                window_ms: 1_000,
                burst: 1,
                calendar: None,
            }
        );
        assert_eq!(smallest.quantity, 0);
    }

    #[test]
    fn refuses_each_malformed_argument_by_name() {
        use ThrottleArgError::*;
        let arity = Common(ArgError::WrongArity);
        let cases: &[(&[&str], ThrottleArgError)] = &[
            (&[], arity.clone()),
            (&["1"], arity.clone()),
            (&["1", "2"], arity.clone()),
            (&["1", "2", "3", "4", "5"], arity),
            (&["-1", "1", "1"], MaxBurst),
            (&["+1", "1", "1"], MaxBurst),
            (&["1.5", "1", "1"], MaxBurst),
            (&["x", "1", "1"], MaxBurst),
            (&["", "1", "1"], MaxBurst),
            (&["9223372036854775807", "1", "1"], MaxBurst),
            (&["99999999999999999999", "1", "1"], MaxBurst),
            (&["1", "0", "1"], CountPerPeriod),
            (&["1", "-5", "1"], CountPerPeriod),
            (&["1", "2.0", "1"], CountPerPeriod),
            (&["1", "9223372036854775808", "1"], CountPerPeriod),
            (&["1", "1", "0"], Period),
            (&["1", "1", "-1"], Period),
            (&["1", "1", "60s"], Period),
            (&["1", "1", " 60"], Period),
            (&["1", "1", "31622401"], PeriodTooLong),
            (&["1", "1", "9223372036854775807"], PeriodTooLong),
            (&["1", "1", "99999999999999999999"], PeriodTooLong),
            (&["1", "1", "1", "-1"], Quantity),
            (&["1", "1", "1", "one"], Quantity),
            (&["1", "1", "1", "9223372036854775808"], Quantity),
        ];
        for (args, err) in cases {
            assert_eq!(parse(args).as_ref(), Err(err), "{args:?}");
            assert!(err.message().starts_with("ERR "), "{err:?}");
        }
        assert_eq!(
            MaxBurst.message(),
            "ERR max_burst must be an integer from 0 to 9223372036854775806"
        );
        assert_eq!(
            PeriodTooLong.message(),
            "ERR period must be at most 31622400 seconds (366 days)"
        );
    }

    proptest! {
        #[test]
        fn never_panics_and_errors_are_printable(
            args in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..24), 0..6)
        ) {
            let refs: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
            match parse_throttle(&refs) {
                Err(err) => {
                    let msg = err.message();
                    prop_assert!(msg.starts_with("ERR "));
                    prop_assert!(msg.bytes().all(|b| b.is_ascii_graphic() || b == b' '));
                }
                Ok(args) => {
                    let _ = throttle(None, T0, &args);
                }
            }
        }

        /// The reply always has redis-cell's shape, whatever the numbers.
        #[test]
        fn replies_keep_redis_cells_shape(
            max_burst in 0i64..1_000,
            count in 1i64..1_000_000,
            period in 1i64..=MAX_PERIOD_S,
            steps in proptest::collection::vec((0i64..5_000, 0i64..1_200), 1..50),
        ) {
            let mut now = T0;
            let mut stored = None;
            for (step, quantity) in steps {
                now += step;
                let args = Throttle {
                    quota: Quota { limit: count, window_ms: period * 1_000, burst: max_burst + 1, calendar: None },
                    quantity,
                };
                let hit = throttle(stored.as_ref(), now, &args).expect("in range");
                let [limited, limit, remaining, retry, reset] = cell_reply(&hit.decision);
                prop_assert_eq!(limited, i64::from(!hit.decision.allowed));
                prop_assert_eq!(limit, max_burst + 1);
                prop_assert!((0..=limit).contains(&remaining));
                prop_assert!(reset >= 0);
                if limited == 0 || quantity > limit {
                    prop_assert_eq!(retry, -1);
                } else {
                    prop_assert!(retry >= 1);
                }
                stored = hit.charged.or(stored);
            }
        }
    }
}
