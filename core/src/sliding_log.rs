//! Sliding log: the exact limit. Every counted hit is logged with its time, and a cost
//! fits when the units logged in the last window, plus the cost, stay within the limit.
//!
//! **Guarantee.** Never more than `limit` units in any half-open interval of `window` ms
//! (`[t, t + window)`), measured on the times the hits were logged at. A unit logged at
//! `t` counts at every `now` with `t <= now < t + window`. `retry_after_ms` is exact: the
//! moment enough of the oldest units leave the window for the cost to fit.
//!
//! **State.** The entries (time in ms, units), oldest first, one per distinct ms (hits in
//! the same ms are merged). Entries that have left the window are dropped whenever a hit
//! is logged. Every entry holds at least one unit, except that the newest may hold none:
//! after a refund emptied it, it is kept as a marker of the latest time a hit was logged
//! at (see below). So a state holds at most `limit + 1` entries; whatever the limit, it
//! never keeps more than `MAX_LOG_LIMIT + 1` of them: beyond that (only possible with a
//! limit above [`MAX_LOG_LIMIT`], which the argument parser refuses) the oldest entries are
//! merged into the next oldest, which makes them count longer, never shorter.
//!
//! **Time.** A `now` earlier than the newest entry (the clock went back) counts as the
//! newest entry's time: no time has passed. So entries "in the future" still count, a hit
//! is logged at that newest time, and the logged times never go backwards for a key: the
//! guarantee above holds on them however the clock moves. Never a free burst; the wait is
//! at most the clock's step back plus one window. The key expires one window after the
//! newest entry.
//!
//! **Memory.** Per tier a header (see `layout`): the entry count, the units of all
//! entries, the oldest entry's time as 8 bytes and its units, the ms from the oldest to
//! the newest entry and the byte length of the entries (18 bytes for one entry, about 20
//! for a full log of a one-hour window). Then per further entry the ms since the previous
//! entry and its units, both varints. With fewer than 128 units per entry, an entry takes
//! 2 bytes when it follows the previous one by less than 128 ms, 3 bytes under 16.4 s, 4
//! under 35 min, 5 under 74 h, 6 beyond (at most 5 + 10 bytes in all). A key holds one
//! entry per distinct ms with hits in the last window, at most `limit` (+1): with every
//! unit in its own ms, a full key at the 10 000 cap holds 20 to 40 KB.
//!
//! **Cost per call.** A check reads the header, drops the entries that left the window
//! from the oldest on (each is dropped once by the hit that writes it away), and writes
//! the new entry at the end: the entries in between are copied as bytes, never decoded.
//! A denied check reads, from the oldest on, only the entries that must leave for the cost
//! to fit. So a call costs the same on a full log as on a short one, plus a copy of its
//! bytes, except: a look or a denied hit pays for the entries that left the window since
//! the last write (it writes nothing, so the next call drops them again); a denied cost
//! of `n` units reads the oldest entries holding them; a refund reads and rewrites all
//! entries; and a value in the plain layout written before the header is read entry by
//! entry, until the first hit that counts writes it with the header.
//!
//! **When to choose it.** When the limit must be exact over every window-long interval
//! (logins, payments, paid API quotas) and limits are modest. For large limits or many keys
//! the sliding window counter gives nearly the same answers in constant memory.

mod layout;
mod pair;
#[cfg(test)]
mod reference;
mod state;

pub use self::state::{Entry, LogState};

use self::state::Corrupt;
use super::algorithm::{Algorithm, OutOfRange, Quota, TierCheck, View};
use super::checked::to_i64;
use super::codec::{Bytes, Reader};
use super::decision::{Decision, NEVER};
use smallvec::SmallVec;

/// The largest `limit` the argument parser accepts for the sliding log: the number of
/// entries a key may need, and so its memory, grow with the limit.
pub const MAX_LOG_LIMIT: i64 = 10_000;

/// The most entries a state keeps: `MAX_LOG_LIMIT` units in distinct ms, plus the marker.
const MAX_ENTRIES: usize = MAX_LOG_LIMIT as usize + 1;

/// The sliding-log algorithm.
///
/// # Example
///
/// Two per second, exactly: after hits at 0 and 500 ms, a third fits when the first is a
/// whole second old.
///
/// ```
/// use ratelimit_core::algorithm::{Algorithm, Quota};
/// use ratelimit_core::sliding_log::Log;
///
/// let quota = Quota::new(2, 1_000);
/// let t0 = 1_796_083_200_000;
/// let first = Log::check(None, t0, &quota, 1)?.charged;
/// let second = Log::check(first.as_ref(), t0 + 500, &quota, 1)?.charged;
/// let early = Log::check(second.as_ref(), t0 + 900, &quota, 1)?.decision;
/// assert_eq!((early.allowed, early.retry_after_ms), (false, 100));
/// assert!(Log::check(second.as_ref(), t0 + 1_000, &quota, 1)?.decision.allowed);
/// # Ok::<(), ratelimit_core::algorithm::OutOfRange>(())
/// ```
#[derive(Debug, Clone, Copy)]
pub struct Log;

/// Stored entries that disagree with their header cannot be answered from: the same error
/// as a time beyond the arithmetic, never a guess.
impl From<Corrupt> for OutOfRange {
    fn from(_: Corrupt) -> Self {
        OutOfRange
    }
}

/// A log as it stands at one moment.
#[derive(Debug, Clone)]
struct Seen<'a> {
    /// The time the moment counts as: `now`, or the newest entry's time if that is later.
    at_ms: i64,
    /// The entries still in the window at `at_ms`, if any.
    live: Option<LogState<'a>>,
    /// Their units.
    used: i128,
    window: i64,
}

impl<'a> Seen<'a> {
    fn at(state: Option<&LogState<'a>>, now_ms: i64, window_ms: i64) -> Result<Self, OutOfRange> {
        if window_ms < 1 {
            return Err(OutOfRange);
        }
        let at_ms = state.map_or(now_ms, |s| s.newest().at_ms.max(now_ms));
        let horizon = i128::from(at_ms) - i128::from(window_ms);
        let live = match state {
            Some(state) => {
                // Shares the stored pairs: dropping from the front copies nothing.
                let mut live = state.clone();
                live.drop_through(horizon)?.then_some(live)
            }
            None => None,
        };
        let used = live.as_ref().map_or(0, LogState::total);
        Ok(Seen {
            at_ms,
            live,
            used,
            window: window_ms,
        })
    }

    fn remaining(&self, limit: i64) -> i64 {
        let left = (i128::from(limit) - self.used).clamp(0, i128::from(limit.max(0)));
        i64::try_from(left).unwrap_or(0)
    }

    /// `used` as an `i64`, saturating.
    fn used_i64(&self) -> i64 {
        i64::try_from(self.used).unwrap_or(i64::MAX)
    }

    /// Until the newest counted unit leaves the window: then the whole limit is free.
    fn reset_after(&self, now_ms: i64) -> Result<i64, OutOfRange> {
        reset_after(self.live.as_ref(), self.window, now_ms)
    }

    fn view(&self, now_ms: i64, limit: i64) -> Result<View, OutOfRange> {
        Ok(View {
            remaining: self.remaining(limit),
            reset_after_ms: self.reset_after(now_ms)?,
        })
    }

    /// The wait until enough of the oldest units have left the window for `cost`
    /// (`<= limit`, not fitting now) to fit. A unit logged at `t` leaves at `t + window`.
    fn retry_after(&self, now_ms: i64, limit: i64, cost: i64) -> Result<i64, OutOfRange> {
        let excess = self.used + i128::from(cost) - i128::from(limit);
        let reached = match &self.live {
            Some(live) => live.first_reaching(excess)?,
            None => None,
        };
        let leaves_at = i128::from(reached.unwrap_or(self.at_ms)) + i128::from(self.window);
        to_i64(leaves_at - i128::from(now_ms))
    }
}

/// Until the newest unit `live` counts leaves the window.
fn reset_after(
    live: Option<&LogState<'_>>,
    window_ms: i64,
    now_ms: i64,
) -> Result<i64, OutOfRange> {
    match live.and_then(LogState::newest_counted_ms) {
        Some(at_ms) => to_i64(i128::from(at_ms) + i128::from(window_ms) - i128::from(now_ms)),
        None => Ok(0),
    }
}

/// `live` with `cost` units logged at `at_ms` (not before its newest entry): merged into
/// the newest entry at that ms, or after it, in place of a marker.
fn logged(live: Option<LogState<'_>>, at_ms: i64, cost: i64) -> Result<LogState<'_>, OutOfRange> {
    let entry = Entry { at_ms, units: cost };
    let Some(mut state) = live else {
        return Ok(LogState::single(entry));
    };
    let newest = state.newest();
    let done = if newest.at_ms == at_ms {
        state.add_to_newest(cost)
    } else if newest.units == 0 {
        // A marker stays only if the new units are logged at its time.
        state.replace_newest(entry)
    } else {
        state.push(entry)
    };
    done.ok_or(OutOfRange)?;
    state.cap(MAX_ENTRIES)?;
    // Changed: written with the header from now on.
    state.legacy = false;
    Ok(state)
}

impl Algorithm for Log {
    type State<'a> = LogState<'a>;
    const ID: u8 = 3;

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
        let total = seen.used + i128::from(cost);
        if total > i128::from(quota.limit) {
            let now = seen.view(now_ms, quota.limit)?;
            return Ok(TierCheck {
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
            });
        }
        // The key expires a window after the new entry: that time must exist.
        seen.at_ms.checked_add(quota.window_ms).ok_or(OutOfRange)?;
        let charged = logged(seen.live, seen.at_ms, cost)?;
        let reset_after_ms = reset_after(Some(&charged), quota.window_ms, now_ms)?;
        Ok(TierCheck {
            decision: Decision {
                allowed: true,
                limit: quota.limit,
                remaining: to_i64(i128::from(quota.limit) - total)?,
                reset_after_ms,
                retry_after_ms: 0,
            },
            charged: Some(charged),
        })
    }

    fn view(state: Option<&LogState>, now_ms: i64, quota: &Quota) -> Result<View, OutOfRange> {
        Seen::at(state, now_ms, quota.window_ms)?.view(now_ms, quota.limit)
    }

    /// Takes units off the newest entries in the window first. An entry left with no
    /// units is dropped, except the newest, which stays as a marker of the latest time a
    /// hit was logged at. Reads only the entries it takes units from, from the end.
    fn refund<'a>(
        state: Option<&Self::State<'a>>,
        now_ms: i64,
        quota: &Quota,
        amount: i64,
    ) -> Option<Self::State<'a>> {
        if amount < 1 {
            return None;
        }
        let state = state?;
        let seen = Seen::at(Some(state), now_ms, quota.window_ms).ok()?;
        if seen.used == 0 {
            return None;
        }
        let live_count = seen.live.as_ref()?.count();
        // Nothing is dropped by time here: a refund logs no time, so entries that left the
        // window only at `now` may count again if the clock goes back; the next check,
        // which logs its time, drops them.
        let mut kept = Some(state.clone());
        // The newest entries, newest first, until they hold `amount` units or every entry
        // in the window is taken.
        let mut taken: SmallVec<[Entry; 4]> = SmallVec::new();
        let mut held = 0i128;
        while held < i128::from(amount) && taken.len() < live_count {
            let Some(rest) = kept.as_mut() else { break };
            let entry = if rest.count() > 1 {
                rest.pop_newest().ok()?
            } else {
                let only = rest.newest();
                kept = None;
                only
            };
            held += i128::from(entry.units.max(0));
            taken.push(entry);
        }
        let newest_ms = taken.first()?.at_ms;
        let mut left = amount;
        for entry in &mut taken {
            let take = entry.units.clamp(0, left);
            entry.units -= take;
            left -= take;
        }
        let mut back = taken
            .iter()
            .rev()
            .filter(|e| e.units > 0 || e.at_ms == newest_ms);
        let mut refunded = match kept {
            Some(rest) => rest,
            None => LogState::single(*back.next()?),
        };
        for entry in back {
            refunded.push(*entry)?;
        }
        refunded.legacy = false;
        Some(refunded)
    }

    fn used(state: &LogState, now_ms: i64, quota: &Quota) -> i64 {
        match Seen::at(Some(state), now_ms, quota.window_ms) {
            Ok(seen) => seen.used_i64(),
            // A window beyond the arithmetic, or entries that disagree with their header:
            // count everything, never less.
            Err(OutOfRange) => i64::try_from(state.total()).unwrap_or(i64::MAX),
        }
    }

    /// One entry at `now_ms` with all `used` units (a marker when `used` is 0).
    fn seeded<'a>(used: i64, now_ms: i64, quota: &Quota) -> Result<Self::State<'a>, OutOfRange> {
        if quota.window_ms < 1 || now_ms.checked_add(quota.window_ms).is_none() {
            return Err(OutOfRange);
        }
        Ok(LogState::single(Entry {
            at_ms: now_ms,
            units: used.max(0),
        }))
    }

    /// Twice the window: a state written at `now_ms` expires one window after its newest
    /// entry, which is ahead of `now_ms` when the clock went back. Up to a window back,
    /// the log's own rule (no time passed) applies; beyond that `limiter` renews the key,
    /// as for the other algorithms.
    fn span_ms(quota: &Quota) -> i64 {
        quota.window_ms.saturating_mul(2)
    }

    /// One window after the newest entry.
    fn expires_at_ms(state: &LogState, quota: &Quota) -> i64 {
        state.newest().at_ms.saturating_add(quota.window_ms.max(0))
    }

    /// The header layout (see `layout`), or the plain one for a state read from it and
    /// not changed since.
    fn encode(state: &LogState, out: &mut Bytes) {
        layout::encode(state, out);
    }

    /// Reads either layout. Refuses an empty log, more than the entries a state keeps,
    /// times that do not strictly increase, entries without units other than the newest,
    /// and a header that disagrees with itself or with the newest entry.
    fn decode<'a>(reader: &mut Reader<'a>) -> Option<Self::State<'a>> {
        layout::decode(reader)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{put_i64, put_varint};
    use crate::scenario::{self, case, op, Case, Op};
    use proptest::prelude::*;

    const SECOND: i64 = 1_000;
    const YEAR: i64 = 366 * 86_400_000;
    /// 2026-11-30T00:00:00Z.
    const T0: i64 = 1_796_083_200_000;

    fn entry(at_ms: i64, units: i64) -> Entry {
        Entry { at_ms, units }
    }

    /// A state of these entries, built as a check would.
    fn logged(entries: &[Entry]) -> LogState<'static> {
        LogState::from_entries(entries).expect("times that increase")
    }

    /// Runs `cases` against one key (see `scenario`).
    fn run(quota: Quota, cases: &[Case]) -> Option<<Log as Algorithm>::State<'static>> {
        scenario::run::<Log>(quota, cases)
    }

    #[test]
    fn counts_exactly_over_the_last_window() {
        #[rustfmt::skip]
        let last = run(Quota::new(3, SECOND), &[
            case(T0,         1, true,  2, 1_000, 0),
            case(T0 + 100,   1, true,  1, 1_000, 0),
            case(T0 + 100,   1, true,  0, 1_000, 0),
            // Full until the unit logged at T0 leaves, at T0 + 1_000.
            case(T0 + 999,   1, false, 0, 101,   1),
            // The window edge: a unit logged at t counts while now < t + window.
            case(T0 + 1_000, 1, true,  0, 1_000, 0),
            // 2 units must leave: both logged at T0 + 100.
            case(T0 + 1_000, 2, false, 0, 1_000, 100),
            case(T0 + 1_099, 2, false, 0, 901,   1),
            case(T0 + 1_100, 2, true,  0, 1_000, 0),
            case(T0 + 1_100, 4, false, 0, 1_000, NEVER),
            case(T0 + 3_100, 3, true,  0, 1_000, 0),
        ]);
        assert_eq!(last.expect("stored").entries(), &[entry(T0 + 3_100, 3)]);
    }

    #[test]
    fn keeps_one_entry_per_ms_and_drops_what_left_the_window() {
        let quota = Quota::new(10, SECOND);
        let mut stored = None;
        for (at, cost) in [
            (T0, 1),
            (T0 + 5, 2),
            (T0 + 5, 1),
            (T0 + 700, 1),
            (T0 + 1_004, 1),
        ] {
            stored = Log::check(stored.as_ref(), at, &quota, cost)
                .expect("in range")
                .charged;
        }
        let state = stored.expect("allowed");
        assert_eq!(
            state.entries(),
            &[entry(T0 + 5, 3), entry(T0 + 700, 1), entry(T0 + 1_004, 1)]
        );
        assert_eq!(Log::used(&state, T0 + 1_004, &quota), 5);
        assert_eq!(Log::used(&state, T0 + 1_005, &quota), 2);
        assert_eq!(Log::expires_at_ms(&state, &quota), T0 + 2_004);
        let mut bytes = Bytes::new();
        Log::encode(&state, &mut bytes);
        // Header: tag, count, total, oldest time and units, span (999 ms), pairs' length:
        // 1 + 1 + 1 + 8 + 1 + 2 + 1; then (gap, units) twice: 3 + 3. The plain layout of
        // before took the same 6 bytes for the two entries after the oldest.
        assert_eq!(bytes.len(), 21);
        assert_eq!(Log::decode(&mut Reader::new(&bytes)), Some(state));
    }

    #[test]
    fn a_clock_that_goes_back_counts_no_time_passed() {
        #[rustfmt::skip]
        let last = run(Quota::new(2, SECOND), &[
            case(T0 + 1_000, 2, true,  0, 1_000, 0),
            // Back by half a window: the units logged "in the future" still count.
            case(T0 + 500,   1, false, 0, 1_500, 1_500),
            case(T0 + 1_999, 1, false, 0, 1,     1),
            case(T0 + 2_000, 1, true,  1, 1_000, 0),
            // Back again: logged at the newest time, T0 + 2_000, so it counts until
            // T0 + 3_000.
            case(T0 + 1_900, 1, true,  0, 1_100, 0),
            case(T0 + 1_950, 1, false, 0, 1_050, 1_050),
        ]);
        assert_eq!(last.expect("stored").entries(), &[entry(T0 + 2_000, 2)]);
    }

    #[test]
    fn refund_takes_from_the_newest_entries_and_keeps_the_latest_time() {
        let quota = Quota::new(5, SECOND);
        let state = logged(&[entry(T0, 1), entry(T0 + 10, 2)]);
        let back = Log::refund(Some(&state), T0 + 20, &quota, 2).expect("something to give");
        assert_eq!(back.entries(), &[entry(T0, 1), entry(T0 + 10, 0)]);
        assert_eq!(Log::used(&back, T0 + 20, &quota), 1);
        let all = Log::refund(Some(&back), T0 + 20, &quota, 5).expect("something to give");
        assert_eq!(all.entries(), &[entry(T0 + 10, 0)]);
        assert_eq!(Log::refund(Some(&all), T0 + 20, &quota, 1), None);
        assert_eq!(Log::refund(None, T0, &quota, 1), None);
        assert_eq!(
            Log::refund(Some(&state), T0 + 1_010, &quota, 1),
            None,
            "all left"
        );
        assert_eq!(Log::expires_at_ms(&all, &quota), T0 + 1_010);
        let view = Log::view(Some(&all), T0 + 20, &quota).expect("in range");
        assert_eq!(
            view,
            View {
                remaining: 5,
                reset_after_ms: 0
            }
        );
        // The marker keeps the latest time: a clock back to T0 + 5 logs at T0 + 10.
        let hit = Log::check(Some(&all), T0 + 5, &quota, 1).expect("in range");
        assert_eq!(
            hit.charged.expect("allowed").entries(),
            &[entry(T0 + 10, 1)]
        );
        let one = Log::refund(Some(&state), T0 + 20, &quota, 1).expect("something");
        assert_eq!(one.entries(), &[entry(T0, 1), entry(T0 + 10, 1)]);
    }

    #[test]
    fn seeded_counts_the_units_at_now_for_one_window() {
        let quota = Quota::new(5, SECOND);
        let seeded = Log::seeded(4, T0 + 7, &quota).expect("in range");
        assert_eq!(seeded.entries(), &[entry(T0 + 7, 4)]);
        assert_eq!(Log::used(&seeded, T0 + 1_006, &quota), 4);
        assert_eq!(Log::used(&seeded, T0 + 1_007, &quota), 0);
        assert_eq!(Log::span_ms(&quota), 2 * SECOND);
        let zero = Log::seeded(0, T0, &quota).expect("in range");
        assert_eq!(Log::view(Some(&zero), T0, &quota).expect("ok").remaining, 5);
    }

    #[test]
    fn a_limit_above_the_cap_keeps_the_entries_bounded_and_never_allows_more() {
        let limit = MAX_ENTRIES as i64 + 500;
        let quota = Quota::new(limit, 100 * SECOND);
        let mut stored = None;
        for n in 0..limit {
            let hit = Log::check(stored.as_ref(), T0 + n, &quota, 1).expect("in range");
            assert!(hit.decision.allowed, "hit {n}");
            stored = hit.charged;
        }
        let state = stored.expect("allowed");
        assert_eq!(state.entries().len(), MAX_ENTRIES);
        assert_eq!(
            state.entries()[0],
            entry(T0 + 500, 501),
            "the oldest merged"
        );
        assert_eq!(Log::used(&state, T0 + limit, &quota), limit);
        let denied = Log::check(Some(&state), T0 + limit, &quota, 1).expect("in range");
        assert!(!denied.decision.allowed);
        // The merged units count until the entry they were merged into leaves: later than
        // exactly, never earlier.
        assert_eq!(denied.decision.retry_after_ms, 500 + 100 * SECOND - limit);
    }

    #[test]
    fn works_at_the_extremes_of_i64() {
        let quota = Quota::new(i64::MAX, YEAR);
        let full = logged(&[entry(T0, i64::MAX), entry(T0 + 1, i64::MAX)]);
        let hit = Log::check(Some(&full), T0 + 2, &quota, i64::MAX).expect("in range");
        assert!(!hit.decision.allowed);
        assert_eq!(hit.decision.retry_after_ms, YEAR - 1);
        assert_eq!(Log::used(&full, T0 + 2, &quota), i64::MAX);
        assert!(
            Log::check(None, T0, &quota, i64::MAX)
                .expect("ok")
                .decision
                .allowed
        );
        assert_eq!(Log::check(None, i64::MAX - 10, &quota, 1), Err(OutOfRange));
        assert!(Log::check(None, i64::MIN, &quota, 1).is_ok());
        assert_eq!(Log::check(None, T0, &Quota::new(1, 0), 1), Err(OutOfRange));
        assert_eq!(Log::check(None, T0, &quota, 0), Err(OutOfRange));
    }

    #[test]
    fn decode_refuses_what_encode_never_writes() {
        let mut valid = Bytes::new();
        put_varint(&mut valid, 2);
        put_i64(&mut valid, T0);
        put_varint(&mut valid, 1);
        put_varint(&mut valid, 5);
        put_varint(&mut valid, 0);
        assert!(
            Log::decode(&mut Reader::new(&valid)).is_some(),
            "a marker last is fine"
        );
        let mut bad: Vec<Bytes> = vec![Bytes::from_slice(&[0]), Bytes::new()];
        for fields in [
            [2, 0, 1, 1], // units 0 before the newest
            [2, 1, 0, 1], // a gap of 0
        ] {
            let mut bytes = Bytes::new();
            put_varint(&mut bytes, fields[0]);
            put_i64(&mut bytes, T0);
            for f in &fields[1..] {
                put_varint(&mut bytes, *f);
            }
            bad.push(bytes);
        }
        let mut too_many = Bytes::new();
        put_varint(&mut too_many, MAX_ENTRIES as i64 + 1);
        bad.push(too_many);
        let mut overflow = Bytes::new();
        put_varint(&mut overflow, 2);
        put_i64(&mut overflow, i64::MAX);
        put_varint(&mut overflow, 1);
        put_varint(&mut overflow, 1);
        put_varint(&mut overflow, 1);
        bad.push(overflow);
        for bytes in bad {
            assert_eq!(Log::decode(&mut Reader::new(&bytes)), None, "{bytes:?}");
        }
        for cut in 0..valid.len() {
            assert_eq!(Log::decode(&mut Reader::new(&valid[..cut])), None);
        }
    }

    /// Every allowed hit (net of refunds) at the time it was logged, kept for ever: the
    /// independent account the property tests compare with.
    #[derive(Default)]
    struct Model {
        hits: Vec<(i64, i64)>,
        /// The latest time a hit was logged at.
        clock: Option<i64>,
    }

    impl Model {
        fn logs_at(&self, now: i64) -> i64 {
            self.clock.map_or(now, |c| c.max(now))
        }

        fn in_window(&self, at: i64, window: i64) -> i64 {
            self.hits
                .iter()
                .filter(|(t, _)| *t > at - window)
                .map(|(_, u)| u)
                .sum()
        }

        /// The most units in any `[t, t + window)`, by brute force over every hit.
        fn worst_interval(&self, window: i64) -> i64 {
            self.hits
                .iter()
                .map(|(start, _)| {
                    self.hits
                        .iter()
                        .filter(|(t, _)| *t >= *start && *t < start + window)
                        .map(|(_, u)| u)
                        .sum::<i64>()
                })
                .max()
                .unwrap_or(0)
        }
    }

    proptest! {
        /// Over random sequences of time steps (some backwards), costs and refunds: every
        /// decision is the one the full history of hits gives, no window-long interval
        /// ever holds more than the limit, and a denied hit retried after exactly
        /// `retry_after_ms` is allowed and 1 ms earlier is not.
        #[test]
        fn never_more_than_limit_in_any_window_and_retry_after_is_exact(
            limit in 1i64..20,
            window in 1i64..5_000,
            steps in proptest::collection::vec((-3_000i64..3_000, op()), 1..200),
        ) {
            let quota = Quota::new(limit, window);
            let mut now = T0;
            let mut stored: Option<LogState> = None;
            let mut model = Model::default();
            for (step, op) in steps {
                now += step;
                let at = model.logs_at(now);
                let before = model.in_window(at, window);
                let written = match op {
                    Op::Hit(cost) => {
                        let hit = Log::check(stored.as_ref(), now, &quota, cost).expect("in range");
                        let d = hit.decision;
                        prop_assert_eq!(d.allowed, before + cost <= limit);
                        prop_assert!(d.remaining >= 0 && d.remaining <= limit);
                        prop_assert!(d.reset_after_ms >= 0);
                        if hit.charged.is_some() {
                            model.hits.push((at, cost));
                            model.clock = Some(at);
                            prop_assert_eq!(d.remaining, limit - before - cost);
                            prop_assert_eq!(d.reset_after_ms, at + window - now);
                        } else if cost > limit {
                            prop_assert_eq!(d.retry_after_ms, NEVER);
                        } else {
                            prop_assert_eq!(d.remaining, limit - before);
                            let wait = d.retry_after_ms;
                            prop_assert!(wait > 0);
                            let later = Log::check(stored.as_ref(), now + wait, &quota, cost)
                                .expect("in range");
                            prop_assert!(later.decision.allowed, "waited {} ms", wait);
                            let early = Log::check(stored.as_ref(), now + wait - 1, &quota, cost)
                                .expect("in range");
                            prop_assert!(!early.decision.allowed, "waited {} ms", wait - 1);
                        }
                        hit.charged
                    }
                    Op::Refund(amount) => {
                        let back = Log::refund(stored.as_ref(), now, &quota, amount);
                        prop_assert_eq!(back.is_some(), before > 0);
                        let mut left = amount;
                        for (t, units) in model.hits.iter_mut().rev() {
                            if *t <= at - window || left == 0 {
                                break;
                            }
                            let take = (*units).min(left);
                            *units -= take;
                            left -= take;
                        }
                        back
                    }
                };
                if let Some(state) = written {
                    let entries = state.entries();
                    prop_assert!(!entries.is_empty());
                    prop_assert!(entries.windows(2).all(|p| p[0].at_ms < p[1].at_ms));
                    prop_assert!(entries.iter().rev().skip(1).all(|e| e.units >= 1));
                    prop_assert!(entries.len() as i64 <= limit + 1);
                    prop_assert_eq!(Log::used(&state, now, &quota), model.in_window(at, window));
                    prop_assert_eq!(entries.last().map(|e| e.at_ms), model.clock);
                    let expiry = Log::expires_at_ms(&state, &quota);
                    prop_assert!(expiry > now);
                    let at_expiry = Log::view(Some(&state), expiry, &quota);
                    prop_assert_eq!(at_expiry, Log::view(None, expiry, &quota));
                    let mut bytes = Bytes::new();
                    Log::encode(&state, &mut bytes);
                    prop_assert_eq!(Log::decode(&mut Reader::new(&bytes)), Some(state.clone()));
                    stored = Some(state);
                }
            }
            prop_assert!(model.worst_interval(window) <= limit);
        }

        /// Any valid state, clock reading and parameters: answers or `OutOfRange`, never a
        /// panic or an overflow.
        #[test]
        fn never_panics_at_any_time_or_size(
            first in any::<i64>(),
            rest in proptest::collection::vec((1..=i64::MAX, 1..=i64::MAX), 0..6),
            now in any::<i64>(),
            limit in prop_oneof![1..=i64::MAX, 1i64..10],
            window in prop_oneof![1..=YEAR, 1..=i64::MAX],
            cost in prop_oneof![1..=i64::MAX, 1i64..10],
        ) {
            let mut entries = vec![entry(first, 1)];
            for (gap, units) in rest {
                let Some(at_ms) = entries.last().and_then(|e| e.at_ms.checked_add(gap)) else {
                    break;
                };
                entries.push(entry(at_ms, units));
            }
            let state = logged(&entries);
            let quota = Quota::new(limit, window);
            for stored in [None, Some(&state)] {
                if let Ok(hit) = Log::check(stored, now, &quota, cost) {
                    prop_assert!(hit.decision.remaining >= 0);
                    if let Some(charged) = hit.charged {
                        let _ = Log::expires_at_ms(&charged, &quota);
                        let _ = Log::refund(Some(&charged), now, &quota, cost);
                    }
                }
                let _ = Log::view(stored, now, &quota);
                let _ = Log::refund(stored, now, &quota, cost);
            }
            prop_assert!(Log::used(&state, now, &quota) >= 0);
            let _ = Log::seeded(limit, now, &quota);
            let _ = Log::expires_at_ms(&state, &quota);
            let mut bytes = Bytes::new();
            Log::encode(&state, &mut bytes);
            prop_assert_eq!(Log::decode(&mut Reader::new(&bytes)), Some(state));
        }

        /// Random walks with huge steps, limits and costs.
        #[test]
        fn sequences_at_extreme_values_never_panic(
            limit in prop_oneof![1i64..5, Just(i64::MAX)],
            window in prop_oneof![1i64..5, Just(YEAR)],
            steps in proptest::collection::vec(
                (any::<i64>(), prop_oneof![1i64..5, Just(i64::MAX)], any::<bool>()),
                1..40,
            ),
        ) {
            let quota = Quota::new(limit, window);
            let mut now = T0;
            let mut stored: Option<LogState> = None;
            for (step, cost, refund) in steps {
                now = now.saturating_add(step);
                if refund {
                    if let Some(state) = Log::refund(stored.as_ref(), now, &quota, cost) {
                        stored = Some(state);
                    }
                } else if let Ok(hit) = Log::check(stored.as_ref(), now, &quota, cost) {
                    if let Some(state) = hit.charged {
                        stored = Some(state);
                    }
                }
            }
        }

        #[test]
        fn decoding_junk_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..60)) {
            let mut reader = Reader::new(&bytes);
            while let Some(state) = Log::decode(&mut reader) {
                let entries = state.entries();
                prop_assert!(!entries.is_empty());
                prop_assert!(entries.windows(2).all(|p| p[0].at_ms < p[1].at_ms));
            }
        }
    }
}
