//! The arithmetic shared by [`gcra`](super::gcra) and [`token_bucket`](super::token_bucket):
//! they are one algorithm seen two ways, so it is written once, here.
//!
//! **The state** is one absolute time per tier, stored as `i64` nanoseconds since the Unix
//! epoch (fine until the year 2262): GCRA's theoretical arrival time (TAT), which is also
//! the instant a token bucket is full again. With `limit` L units per window (so the
//! emission interval is T = window / L) and a capacity of `burst` b units:
//!
//! ```text
//! fill(now)   = max(TAT - now, 0)          time the bucket needs to be full again
//! tokens(now) = b - fill(now) / T          units that could be taken now
//! a cost c fits at now  iff  fill(now) + c*T <= b*T;  then TAT' = max(TAT, now) + c*T
//! ```
//!
//! A TAT at or before `now` counts nothing: an expired-but-present key reads as empty. A
//! `now` before a stored TAT (the clock went back) only makes `fill` larger: elapsed time
//! below zero counts as zero, never as a free burst.
//!
//! **Exact arithmetic.** T is rarely a whole number of nanoseconds (3 per second is
//! 333 333 333.3 ns). Rounding T, or rounding each new TAT and reading it back as it is,
//! drifts: a bucket of 3 would refuse its third immediate hit, or pass a little more than
//! the rate. So everything is computed in *ticks* of 1/L ns, in `i128`: T is exactly
//! `window_ns` ticks, a cost c is `c * window_ns`, the tolerance b*T is `b * window_ns` and
//! `now` is `now_ms * 10^6 * L` ticks. Every TAT this module computes is a sum of whole
//! milliseconds (clock readings) and whole multiples of T, so it lies on a grid of
//! `10^6 * gcd(L, window_ms)` ticks. The stored nanoseconds are that TAT rounded up, and
//! reading them back takes the largest grid point not above them. When the grid points are
//! at least 1 ns apart, which holds whenever `L / gcd(L, window_ms) <= 1_000_000` (so for
//! every limit up to a million per window, whatever the window), that point *is* the exact
//! TAT: storing nanoseconds loses nothing. Otherwise (say 3 000 001 per second, where T is
//! 333.33322... ns) a hit may be charged up to 1 ns more than its exact share, that is at
//! most `limit / window_ns` of a unit, never less, so the guarantee below still holds.
//!
//! **Guarantee.** Over any interval of length t, at most `b + t / T` units are allowed (for
//! any order of clock readings, since the TAT never moves back except by a refund). A
//! denied hit that waits its `retry_after_ms` and retries is allowed if nothing else was
//! counted meanwhile, and it is the shortest such wait in whole milliseconds.

use super::algorithm::{Algorithm, OutOfRange, Quota, TierCheck, View};
use super::checked::{add, mul, sub, to_i64};
use super::codec::{put_i64, Bytes, Reader};
use super::decision::{Decision, NEVER};

/// Nanoseconds per millisecond.
const NS_PER_MS: i128 = 1_000_000;

/// The latest clock reading that needs computing: from this ms on, `now` is past every TAT
/// an `i64` of nanoseconds can hold, so any later reading gives the same answers.
const LATEST_MS: i64 = i64::MAX / 1_000_000 + 1;

/// The stored state of one bucket tier (GCRA or token bucket): 8 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BucketState {
    /// The theoretical arrival time, which is also the instant the bucket is full again:
    /// absolute Unix time in ns, the exact time rounded up to a whole ns.
    pub tat_ns: i64,
}

/// A quota in ticks of 1/L ns (see the module docs). All values are >= 1.
#[derive(Debug, Clone, Copy)]
struct Rate {
    /// L: ticks per ns.
    limit: i128,
    /// T, one unit's share of time: the window in ns.
    interval: i128,
    /// b*T, how far ahead of `now` the TAT may be after a hit.
    tolerance: i128,
    /// b, the capacity in units.
    burst: i64,
    /// Ticks per ms, L * 10^6.
    per_ms: i128,
    /// Spacing of the grid every computed TAT lies on.
    grid: i128,
}

/// `a / b` rounded down; `b` >= 1.
#[inline]
fn div_floor(a: i128, b: i128) -> i128 {
    a.div_euclid(b)
}

/// `a / b` rounded up; `b` >= 1. The `+ 1` only happens with a remainder, so `b` >= 2 and
/// the quotient is far from `i128::MAX`.
#[inline]
fn div_ceil(a: i128, b: i128) -> i128 {
    a.div_euclid(b) + i128::from(a.rem_euclid(b) != 0)
}

#[inline]
fn gcd(mut a: i128, mut b: i128) -> i128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

impl Rate {
    /// The quota in ticks. Parameters below 1 (never produced by the parsers) count as 1.
    /// Fails only for windows far beyond the 366 days the parsers accept.
    #[inline]
    fn new(quota: &Quota) -> Result<Rate, OutOfRange> {
        let limit = i128::from(quota.limit.max(1));
        let window_ms = i128::from(quota.window_ms.max(1));
        let burst = quota.burst.max(1);
        let interval = mul(window_ms, NS_PER_MS)?;
        Ok(Rate {
            limit,
            interval,
            tolerance: mul(interval, i128::from(burst))?,
            burst,
            per_ms: mul(limit, NS_PER_MS)?,
            grid: mul(gcd(limit, window_ms), NS_PER_MS)?,
        })
    }

    /// `now_ms` in ticks.
    #[inline]
    fn now(&self, now_ms: i64) -> Result<i128, OutOfRange> {
        mul(i128::from(now_ms.min(LATEST_MS)), self.per_ms)
    }

    /// The TAT a stored state stands for, in ticks (see the module docs).
    #[inline]
    fn load(&self, state: &BucketState) -> Result<i128, OutOfRange> {
        let stored = mul(i128::from(state.tat_ns), self.limit)?;
        let on_grid = mul(div_floor(stored, self.grid), self.grid)?;
        // Within the nanosecond that was rounded up: the exact TAT. Otherwise the value was
        // not computed with these parameters; the stored time itself is the safe reading.
        Ok(if on_grid > sub(stored, self.limit)? {
            on_grid
        } else {
            stored
        })
    }

    /// The state that stores `tat` (ticks), and the TAT it reads back as (>= `tat`).
    #[inline]
    fn store(&self, tat: i128) -> Result<(BucketState, i128), OutOfRange> {
        let state = BucketState {
            tat_ns: to_i64(div_ceil(tat, self.limit))?,
        };
        Ok((state, self.load(&state)?))
    }

    /// How far ahead of `now` the TAT is, >= 0 (0 for no state).
    #[inline]
    fn fill(&self, state: Option<&BucketState>, now: i128) -> Result<i128, OutOfRange> {
        match state {
            None => Ok(0),
            Some(state) => Ok(sub(self.load(state)?, now)?.max(0)),
        }
    }

    /// Whole units that fit on top of `fill`, within `0..=burst`.
    #[inline]
    fn remaining(&self, fill: i128) -> i64 {
        let units = div_floor(self.tolerance.saturating_sub(fill), self.interval);
        i64::try_from(units.clamp(0, i128::from(self.burst))).unwrap_or(self.burst)
    }

    /// `ticks` (>= 0) in whole ms, rounded up.
    #[inline]
    fn ceil_ms(&self, ticks: i128) -> Result<i64, OutOfRange> {
        to_i64(div_ceil(ticks, self.per_ms))
    }
}

/// One bucket algorithm, told apart from the other only by the id `ID` it is stored under.
///
/// GCRA and the token bucket are one algorithm seen two ways (a theoretical arrival time
/// is the instant a bucket is full again), so they share this one arithmetic: each is an
/// instance of this type, [`Gcra`](super::gcra::Gcra) `= Bucket<5>` and
/// [`Token`](super::token_bucket::Token) `= Bucket<4>`. The id is a const parameter rather
/// than a field so that each instance is its own type: the limiter stays monomorphised for
/// each, with no dispatch at run time, and the stored id cannot differ from the type.
///
/// # Example
///
/// The two instances decide alike; only their stored id tells them apart.
///
/// ```
/// use ratelimit_core::algorithm::{Algorithm, Quota};
/// use ratelimit_core::{gcra::Gcra, token_bucket::Token};
///
/// let quota = Quota { limit: 10, window_ms: 1_000, burst: 3, calendar: None };
/// let t0 = 1_796_083_200_000;
/// assert_eq!(Gcra::check(None, t0, &quota, 2), Token::check(None, t0, &quota, 2));
/// assert_eq!((Token::ID, Gcra::ID), (4, 5));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Bucket<const ID: u8>;

impl<const ID: u8> Algorithm for Bucket<ID> {
    type State<'a> = BucketState;
    const ID: u8 = ID;

    /// Checks whether `cost` units fit at `now_ms` and, when they do, returns the state
    /// with them counted. A cost of 0 checks without taking anything (allowed unless the
    /// bucket is over-full); a negative cost counts as 0.
    fn check<'a>(
        state: Option<&Self::State<'a>>,
        now_ms: i64,
        quota: &Quota,
        cost: i64,
    ) -> Result<TierCheck<Self::State<'a>>, OutOfRange> {
        let rate = Rate::new(quota)?;
        let now = rate.now(now_ms)?;
        let fill = rate.fill(state, now)?;
        let cost = cost.max(0);
        let needed = add(fill, mul(rate.interval, i128::from(cost))?)?;
        if needed <= rate.tolerance {
            // max(TAT, now) + c*T, with max(TAT, now) = now + fill.
            let (next, tat) = rate.store(add(now, needed)?)?;
            let fill = sub(tat, now)?;
            return Ok(TierCheck {
                decision: Decision {
                    allowed: true,
                    limit: rate.burst,
                    remaining: rate.remaining(fill),
                    reset_after_ms: rate.ceil_ms(fill)?,
                    retry_after_ms: 0,
                },
                charged: Some(next),
            });
        }
        // It fits once fill + c*T <= b*T: after `needed - tolerance` more ticks.
        let retry_after_ms = if cost > rate.burst {
            NEVER
        } else {
            rate.ceil_ms(sub(needed, rate.tolerance)?)?
        };
        Ok(TierCheck {
            decision: Decision {
                allowed: false,
                limit: rate.burst,
                remaining: rate.remaining(fill),
                reset_after_ms: rate.ceil_ms(fill)?,
                retry_after_ms,
            },
            charged: None,
        })
    }

    /// Units that could be taken at `now_ms`, and the ms until the bucket is full again.
    fn view(state: Option<&BucketState>, now_ms: i64, quota: &Quota) -> Result<View, OutOfRange> {
        let rate = Rate::new(quota)?;
        let fill = rate.fill(state, rate.now(now_ms)?)?;
        Ok(View {
            remaining: rate.remaining(fill),
            reset_after_ms: rate.ceil_ms(fill)?,
        })
    }

    /// The capacity: `burst`.
    fn capacity(quota: &Quota) -> i64 {
        quota.burst.max(1)
    }

    /// The longest a state made at `now` lasts: b*T rounded up to whole ms (`i64::MAX` if
    /// longer). The product of two `i64` cannot overflow an `i128`.
    fn span_ms(quota: &Quota) -> i64 {
        let burst_window = i128::from(Self::capacity(quota)) * i128::from(quota.window_ms.max(1));
        let span = div_ceil(burst_window, i128::from(quota.limit.max(1)));
        i64::try_from(span).unwrap_or(i64::MAX)
    }

    /// Moves the TAT back by `amount * T`, never before `now_ms` (never above capacity).
    /// `None` when nothing changes: no state, an empty bucket, or `amount` < 1.
    fn refund<'a>(
        state: Option<&Self::State<'a>>,
        now_ms: i64,
        quota: &Quota,
        amount: i64,
    ) -> Option<Self::State<'a>> {
        let state = state.filter(|_| amount >= 1)?;
        let rate = Rate::new(quota).ok()?;
        let now = rate.now(now_ms).ok()?;
        let tat = rate.load(state).ok()?;
        if tat <= now {
            return None;
        }
        let back = rate
            .interval
            .checked_mul(i128::from(amount))
            .unwrap_or(i128::MAX);
        let (next, _) = rate.store(tat.saturating_sub(back).max(now)).ok()?;
        (next != *state).then_some(next)
    }

    /// Units the state counts at `now_ms`: `fill / T` rounded up, >= 0. A clock reading so
    /// early that it cannot be computed counts as a full bucket, never as an empty one.
    fn used(state: &BucketState, now_ms: i64, quota: &Quota) -> i64 {
        let units = Rate::new(quota).and_then(|rate| {
            let fill = rate.fill(Some(state), rate.now(now_ms)?)?;
            Ok(div_ceil(fill, rate.interval))
        });
        units.map_or(i64::MAX, |units| i64::try_from(units).unwrap_or(i64::MAX))
    }

    /// The state that counts `used` units at `now_ms`: TAT = now + used * T.
    fn seeded<'a>(used: i64, now_ms: i64, quota: &Quota) -> Result<Self::State<'a>, OutOfRange> {
        let rate = Rate::new(quota)?;
        let tat = add(
            rate.now(now_ms)?,
            mul(rate.interval, i128::from(used.max(0)))?,
        )?;
        Ok(rate.store(tat)?.0)
    }

    /// The TAT in ms, rounded up: from then on the state is the same as no state.
    fn expires_at_ms(state: &BucketState, _quota: &Quota) -> i64 {
        // An i64 divided by 10^6 and rounded up fits an i64.
        i64::try_from(div_ceil(i128::from(state.tat_ns), NS_PER_MS)).unwrap_or(i64::MAX)
    }

    /// The ns by which the TAT falls short of the key's expiry (`expires_at_ms`, the TAT
    /// rounded up to a ms): 0 when the TAT is a whole ms, always below 10^6. With the
    /// expiry it gives the TAT back, so a single-tier key need not store the 8-byte time.
    fn to_short(state: &BucketState, expires_at_ms: i64) -> Option<i64> {
        let short = i128::from(expires_at_ms) * NS_PER_MS - i128::from(state.tat_ns);
        i64::try_from(short)
            .ok()
            .filter(|&ns| (0..1_000_000).contains(&ns))
    }

    /// The state [`to_short`](Self::to_short) stood for.
    fn from_short<'a>(short: i64, expires_at_ms: i64) -> Option<Self::State<'a>> {
        if !(0..1_000_000).contains(&short) {
            return None;
        }
        let tat_ns = i128::from(expires_at_ms) * NS_PER_MS - i128::from(short);
        Some(BucketState {
            tat_ns: i64::try_from(tat_ns).ok()?,
        })
    }

    /// Appends the TAT as 8 little-endian bytes.
    fn encode(state: &BucketState, out: &mut Bytes) {
        put_i64(out, state.tat_ns);
    }

    /// Reads 8 bytes written by [`encode`](Self::encode); `None` if they are missing.
    fn decode(reader: &mut Reader<'_>) -> Option<BucketState> {
        Some(BucketState {
            tat_ns: reader.i64()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gcra::Gcra;

    /// 2026-11-30T00:00:00Z.
    const T0: i64 = 1_796_083_200_000;

    #[test]
    fn rounds_toward_the_right_side_for_negative_values_too() {
        assert_eq!((div_floor(7, 2), div_ceil(7, 2)), (3, 4));
        assert_eq!((div_floor(-7, 2), div_ceil(-7, 2)), (-4, -3));
        assert_eq!((div_floor(6, 3), div_ceil(6, 3)), (2, 2));
        assert_eq!(div_ceil(i128::MAX, 1), i128::MAX);
        assert_eq!(gcd(1_000, 3), 1);
        assert_eq!(gcd(60_000, 100), 100);
    }

    #[test]
    fn a_fractional_interval_reads_back_exactly() {
        // 3 per second: T = 333 333 333.3 ns. After one unit the stored time is rounded up
        // to the next ns, and reads back as the exact third of a second.
        let rate = Rate::new(&Quota::new(3, 1_000)).expect("in range");
        let now = rate.now(T0).expect("in range");
        let exact = now + rate.interval;
        let (state, read) = rate.store(exact).expect("in range");
        assert_eq!(state.tat_ns, T0 * 1_000_000 + 333_333_334);
        assert_eq!(read, exact);
    }

    #[test]
    fn a_grid_finer_than_a_nanosecond_reads_back_late_never_early() {
        // 3 000 001 per second: the grid is 1/3 000 001 ms, finer than 1 ns.
        let rate = Rate::new(&Quota::new(3_000_001, 1_000)).expect("in range");
        let now = rate.now(T0).expect("in range");
        let exact = now + rate.interval;
        let (_, read) = rate.store(exact).expect("in range");
        assert!(read >= exact && read - exact < rate.limit, "within 1 ns");
    }

    #[test]
    fn a_time_from_other_parameters_reads_as_stored() {
        // 1 per second puts every TAT on whole ms; 1 ns past one is not on that grid.
        let rate = Rate::new(&Quota::new(1, 1_000)).expect("in range");
        let state = BucketState {
            tat_ns: T0 * 1_000_000 + 1,
        };
        let read = rate.load(&state).expect("in range");
        assert_eq!(read, i128::from(state.tat_ns) * rate.limit);
    }

    #[test]
    fn clock_readings_past_2262_answer_like_2262() {
        let quota = Quota::new(5, 1_000);
        let late = Gcra::view(None, i64::MAX, &quota).expect("reads");
        assert_eq!((late.remaining, late.reset_after_ms), (5, 0));
        assert_eq!(Gcra::check(None, i64::MAX, &quota, 1), Err(OutOfRange));
        let never = Gcra::check(None, i64::MAX, &quota, 6).expect("nothing to store");
        assert_eq!(never.decision.retry_after_ms, NEVER);
    }
}
