//! How a sliding-log tier is stored. Two layouts; the first byte tells them apart.
//!
//! - **Header** (written since the log decides at constant cost): byte 0, then varints
//!   the entry count, the units of all entries (up to 128 bits), then the oldest entry's
//!   time as 8 bytes and its units as a varint, varints the ms from the oldest to the
//!   newest entry (up to 128 bits) and the byte length of the pairs, then per further entry
//!   the ms since the previous one and its units, both varints. The header gives a check
//!   what it needs without reading the entries; the length lets the next tier be found
//!   without reading them either.
//! - **Plain** (written before, still read): the entry count as a varint (>= 1, so never a
//!   first byte 0), the oldest entry's time as 8 bytes and its units as a varint, then the
//!   same pairs. Read in one step per entry; written back the same way only while the state
//!   is unchanged, so that a value is never rewritten longer than it was.
//!
//! Reading checks every header field against the others and against the newest pair (read
//! from the end: the last byte of a varint is below 0x80, the others are not), so that no
//! header makes a check read out of bounds or believe more entries, units or time than
//! the pairs can hold. Pairs in between are checked when a check reads them (see `state`).

use super::pair::last_pair;
use super::state::{Entry, LogState};
use super::MAX_ENTRIES;
use crate::codec::{put_i64, put_varint, put_varint_u128, Bytes, Reader};

/// The first byte of the header layout: a count of 0, which the plain layout never writes.
const HEADER: u8 = 0;

/// Appends `state` in the header layout, or in the plain one for a state read from it and
/// not changed since.
pub(super) fn encode(state: &LogState<'_>, out: &mut Bytes) {
    let oldest = state.oldest();
    let count = i64::try_from(state.count()).unwrap_or(i64::MAX);
    // One allocation for a long log, not one per doubling: the header takes at most 77.
    out.reserve(77 + state.pairs_len());
    if state.legacy {
        put_varint(out, count);
        put_i64(out, oldest.at_ms);
        put_varint(out, oldest.units);
    } else {
        out.push(HEADER);
        put_varint(out, count);
        // A state's units are never negative: the cast keeps the value.
        put_varint_u128(out, state.total().max(0) as u128);
        put_i64(out, oldest.at_ms);
        put_varint(out, oldest.units);
        let span = i128::from(state.newest().at_ms) - i128::from(oldest.at_ms);
        put_varint_u128(out, span.max(0) as u128);
        put_varint(out, i64::try_from(state.pairs_len()).unwrap_or(i64::MAX));
    }
    for part in state.pairs() {
        out.extend_from_slice(part);
    }
}

/// Reads a state in either layout; `None` for bytes this module did not write.
pub(super) fn decode<'a>(reader: &mut Reader<'a>) -> Option<LogState<'a>> {
    let mut peek = reader.clone();
    if peek.byte()? == HEADER {
        *reader = peek;
        decode_header(reader)
    } else {
        decode_plain(reader)
    }
}

fn decode_header<'a>(reader: &mut Reader<'a>) -> Option<LogState<'a>> {
    let count = usize::try_from(reader.positive()?).ok()?;
    if count > MAX_ENTRIES {
        return None;
    }
    let total = i128::try_from(reader.varint_u128()?).ok()?;
    let oldest_ms = reader.i64()?;
    let oldest_units = reader.varint()?;
    let span = i128::try_from(reader.varint_u128()?).ok()?;
    let pairs_len = usize::try_from(reader.varint()?).ok()?;
    let pairs = reader.take(pairs_len)?;
    let oldest = Entry {
        at_ms: oldest_ms,
        units: oldest_units,
    };
    if count == 1 {
        let alone = span == 0 && pairs.is_empty() && total == i128::from(oldest_units);
        return alone.then(|| LogState::single(oldest));
    }
    // A span up to i128::MAX: the sum may pass the 128 bits before it is refused.
    let newest_ms = i128::from(oldest_ms)
        .checked_add(span)
        .and_then(|at| i64::try_from(at).ok())?;
    let (last_gap, newest_units, last_pair_len) = last_pair(pairs)?;
    let state = LogState::from_stored(
        count,
        total,
        oldest,
        Entry {
            at_ms: newest_ms,
            units: newest_units,
        },
        last_gap,
        last_pair_len,
        pairs,
    );
    // The relations between the header and the pairs are checked in one place, which the
    // drop of the oldest entry re-checks too.
    state.header_agrees().then_some(state)
}

/// The plain layout, entry by entry: refuses an empty log, more than the entries a state
/// keeps, times that do not strictly increase, and entries without units other than the
/// newest.
fn decode_plain<'a>(reader: &mut Reader<'a>) -> Option<LogState<'a>> {
    let count = usize::try_from(reader.positive()?).ok()?;
    if count > MAX_ENTRIES {
        return None;
    }
    let at_ms = reader.i64()?;
    let units = if count > 1 {
        reader.positive()?
    } else {
        reader.varint()?
    };
    let mut state = LogState::single(Entry { at_ms, units });
    for n in 1..count {
        let at_ms = state.newest().at_ms.checked_add(reader.positive()?)?;
        let units = if n + 1 < count {
            reader.positive()?
        } else {
            reader.varint()?
        };
        state.push(Entry { at_ms, units })?;
    }
    state.legacy = true;
    Some(state)
}

#[cfg(test)]
mod tests {
    use super::super::{Log, LogState};
    use super::*;
    use crate::algorithm::{Algorithm, OutOfRange, Quota, TierCheck};
    use crate::encoding::{classify, decode_tiers, StoredForm};
    use crate::limiter::{is_state, run, Action, AlgorithmKind, Limits, Outcome, Write};
    use proptest::prelude::*;

    /// 2026-11-30T00:00:00Z.
    const T0: i64 = 1_796_083_200_000;
    const HOUR: i64 = 3_600_000;

    /// Values the module wrote before the header (commit 9d64c70), after hits at T0 (1
    /// unit), T0 + 5 (2, then 1), T0 + 700 (1) and T0 + 1_004 (1): `10 1s ALGO log`...
    const PLAIN_ONE_TIER: &[u8] = &[
        1, 3, 1, 10, 232, 7, 10, 3, 5, 176, 230, 46, 162, 1, 0, 0, 3, 183, 5, 1, 176, 2, 1,
    ];
    /// ... and `10 1s 20 1h ALGO log`.
    const PLAIN_TWO_TIERS: &[u8] = &[
        1, 3, 2, 10, 232, 7, 10, 3, 5, 176, 230, 46, 162, 1, 0, 0, 3, 183, 5, 1, 176, 2, 1, 20,
        128, 221, 219, 1, 20, 4, 0, 176, 230, 46, 162, 1, 0, 0, 1, 5, 3, 183, 5, 1, 176, 2, 1,
    ];

    fn entry(at_ms: i64, units: i64) -> Entry {
        Entry { at_ms, units }
    }

    fn log_limits(tiers: &[Quota]) -> Limits {
        Limits {
            algorithm: AlgorithmKind::Log,
            tiers: tiers.iter().copied().collect(),
        }
    }

    fn tiers_of(value: &[u8]) -> Vec<(Quota, LogState<'_>)> {
        let Some(StoredForm::Tiers { body, count, .. }) = classify(value) else {
            panic!("not the tiers form: {value:?}");
        };
        decode_tiers::<Log>(body, count)
            .expect("log tiers")
            .to_vec()
    }

    fn encoded(state: &LogState) -> Bytes {
        let mut bytes = Bytes::new();
        encode(state, &mut bytes);
        bytes
    }

    /// A stored value, its tiers' parameters and their entries.
    type Case<'a> = (&'a [u8], Vec<Quota>, Vec<&'a [Entry]>);

    #[test]
    fn values_in_the_plain_layout_are_read_and_rewritten_with_the_header() {
        let second = Quota::new(10, 1_000);
        let hour = Quota::new(20, HOUR);
        let recent = [entry(T0 + 5, 3), entry(T0 + 700, 1), entry(T0 + 1_004, 1)];
        let all = [entry(T0, 1), recent[0], recent[1], recent[2]];
        let cases: [Case<'_>; 2] = [
            (PLAIN_ONE_TIER, vec![second], vec![&recent]),
            (PLAIN_TWO_TIERS, vec![second, hour], vec![&recent, &all]),
        ];
        for (value, quotas, entries) in cases {
            let expiry = Some(T0 + HOUR + 1_004);
            assert!(is_state(value, expiry) && is_state(value, None));
            let tiers = tiers_of(value);
            let read: Vec<Vec<Entry>> = tiers.iter().map(|(_, s)| s.entries()).collect();
            assert_eq!(read, entries);
            assert_eq!(tiers.iter().map(|(q, _)| *q).collect::<Vec<_>>(), quotas);
            // Unchanged, a tier is written back as it was read.
            for (state, plain) in tiers.iter().map(|(_, s)| s).zip([&value[7..23]]) {
                assert_eq!(&encoded(state)[..], plain);
            }
            let limits = log_limits(&quotas);
            let look = run(
                &limits,
                Action::Peek { cost: 1 },
                Some(value),
                || expiry,
                T0 + 1_004,
            );
            let look = look.expect("a state");
            assert_eq!(look.tiers[0].remaining, 10 - 5 - 1);
            // At T0 + 1_005 the 3 units of T0 + 5 have left the second's window.
            let hit = run(
                &limits,
                Action::Hit { cost: 1 },
                Some(value),
                || expiry,
                T0 + 1_005,
            );
            let hit = hit.expect("a state");
            assert_eq!(hit.tiers[0].remaining, 10 - 2 - 1);
            if let [_, hour_tier] = &hit.tiers[..] {
                assert_eq!(hour_tier.remaining, 20 - 6 - 1);
            }
            let Write::Set { value: new, .. } = hit.write else {
                panic!("an allowed hit writes");
            };
            assert!(is_state(&new, None));
            for (_, state) in tiers_of(&new) {
                assert!(!state.legacy, "written with the header");
                assert_eq!(encoded(&state)[0], HEADER);
                assert_eq!(state.entries().last(), Some(&entry(T0 + 1_005, 1)));
            }
        }
    }

    /// A header state of four entries, the newest a marker.
    fn four() -> LogState<'static> {
        let entries = [
            entry(T0, 1),
            entry(T0 + 1, 2),
            entry(T0 + 3, 1),
            entry(T0 + 10, 0),
        ];
        LogState::from_entries(&entries).expect("increasing")
    }

    /// The header layout of `fields` (count, total, oldest time, oldest units, span, pairs'
    /// length) and `pairs`.
    fn with_header(fields: [i64; 6], pairs: &[u8]) -> Bytes {
        let mut out = Bytes::from_slice(&[HEADER]);
        put_varint(&mut out, fields[0]);
        put_varint(&mut out, fields[1]);
        put_i64(&mut out, fields[2]);
        put_varint(&mut out, fields[3]);
        put_varint(&mut out, fields[4]);
        put_varint(&mut out, fields[5]);
        out.extend_from_slice(pairs);
        out
    }

    #[test]
    fn a_header_that_disagrees_with_its_pairs_is_not_a_state() {
        let bytes = encoded(&four());
        // (1, 2), (2, 1), (7, 0): 6 bytes.
        let pairs = [1, 2, 2, 1, 7, 0];
        let good = [4, 4, T0, 1, 10, 6];
        assert_eq!(&bytes[..], &with_header(good, &pairs)[..]);
        assert_eq!(decode(&mut Reader::new(&bytes)), Some(four()));
        let bad_fields = [
            [5, 4, T0, 1, 10, 6],       // more entries than the pairs hold
            [9, 4, T0, 1, 10, 6],       // far more
            [4, 1, T0, 1, 10, 6],       // fewer units than entries need
            [4, 2, T0, 1, 10, 6],       // fewer than the oldest's, the newest's and 1 between
            [4, 4, T0, 0, 10, 6],       // an oldest entry without units
            [4, 4, T0, 1, 8, 6],        // less time than the newest gap and 1 ms per entry between
            [4, 4, T0, 1, 6, 6],        // a newest gap beyond the span
            [4, 4, T0, 1, 10, 5],       // pairs cut short
            [4, 4, T0, 1, 10, 7],       // more pairs than there are bytes
            [1, 4, T0, 1, 10, 6],       // one entry, with pairs
            [1, 1, T0, 1, 10, 0],       // one entry, with a span
            [1, 2, T0, 1, 0, 0],        // one entry, units that disagree
            [2, 2, T0, 1, 10, 2],       // two entries: the gap must be the span
            [2, 2, T0, 1, 7, 4],        // two entries: one pair only
            [4, 4, i64::MAX, 1, 10, 6], // a newest time past the clock's range
        ];
        for fields in bad_fields {
            let value = with_header(fields, &pairs[..pairs.len().min(fields[5] as usize)]);
            assert_eq!(decode(&mut Reader::new(&value)), None, "{fields:?}");
        }
        let mut too_many = with_header([MAX_ENTRIES as i64 + 1, 4, T0, 1, 10, 6], &pairs);
        assert_eq!(decode(&mut Reader::new(&too_many)), None);
        too_many.truncate(3);
        assert_eq!(decode(&mut Reader::new(&too_many)), None);
        for cut in 0..bytes.len() {
            assert_eq!(
                decode(&mut Reader::new(&bytes[..cut])),
                None,
                "cut at {cut}"
            );
        }
        // A newest pair that is not one: a gap of 0, a varint left open.
        for pairs in [[1, 2, 2, 1, 0, 0], [1, 2, 2, 1, 7, 0x80]] {
            assert_eq!(decode(&mut Reader::new(&with_header(good, &pairs))), None);
        }
    }

    /// What no header check can see, an entry between the oldest and the newest that
    /// disagrees with the units or times in the header, is found when a check reads that
    /// entry: the check is then refused, never answered from the header.
    #[test]
    fn pairs_that_disagree_with_the_header_are_refused_when_read() {
        let quota = Quota::new(10, 5);
        // The entry at T0 + 1 holds 3 units, not the 2 the header's total counts.
        let lying = with_header([4, 4, T0, 1, 10, 6], &[1, 3, 2, 1, 7, 0]);
        let state = decode(&mut Reader::new(&lying)).expect("header agrees with itself");
        // At T0 + 6 the entries up to T0 + 1 have left: dropping them reads the lie.
        assert_eq!(Log::check(Some(&state), T0 + 6, &quota, 1), Err(OutOfRange));
        assert_eq!(Log::view(Some(&state), T0 + 6, &quota), Err(OutOfRange));
        assert_eq!(Log::refund(Some(&state), T0 + 9, &quota, 1), None);
        assert_eq!(
            Log::used(&state, T0 + 6, &quota),
            4,
            "counts all, never less"
        );
        // A retry that reads past the lie.
        let full = Quota::new(4, HOUR);
        assert_eq!(Log::check(Some(&state), T0 + 10, &full, 4), Err(OutOfRange));
        assert!(state.read_entries().is_err());
    }

    /// A refund reads only the entries it gives units back from, from the newest on, as a
    /// check reads only those it drops: its cost follows the units given back, not the
    /// log's length (a full log of 10,000 entries in 8 tiers was decoded and rewritten
    /// whole, about 1 ms a key, 16 ms for RL.MREFUND over 16 keys). Here the entry at
    /// T0 + 1 holds 3 units where the header counts 2: a refund that stops before it
    /// does not see it, one that reaches it is refused.
    #[test]
    fn a_refund_reads_only_the_entries_it_gives_back_from() {
        let quota = Quota::new(10, HOUR);
        let lying = with_header([4, 6, T0, 1, 10, 6], &[1, 3, 2, 1, 7, 2]);
        let state = decode(&mut Reader::new(&lying)).expect("header agrees with itself");
        let back = Log::refund(Some(&state), T0 + 20, &quota, 1).expect("from the newest");
        assert_eq!(Log::used(&back, T0 + 20, &quota), 5);
        assert_eq!((back.count(), back.newest()), (4, entry(T0 + 10, 1)));
        let back = Log::refund(Some(&state), T0 + 20, &quota, 2).expect("all of the newest");
        assert_eq!(Log::used(&back, T0 + 20, &quota), 4);
        assert_eq!((back.count(), back.newest()), (4, entry(T0 + 10, 0)));
        let bytes = encoded(&back);
        assert_eq!(decode(&mut Reader::new(&bytes)), Some(back));
        // Emptying T0 + 3 makes T0 + 1 the entry before the newest: read, and refused.
        assert_eq!(
            Log::refund(Some(&state), T0 + 20, &quota, 3),
            None,
            "reads the lie"
        );
    }

    /// Pairs between the oldest and the newest that agree with the header's count and
    /// units but not with its span or its pairs' length: a check that drops the oldest
    /// reads one of them, and must then refuse rather than write a value that is no longer
    /// a state (RL.RESET would not delete it; every later command would call it not ours).
    #[test]
    fn dropping_into_pairs_that_disagree_with_the_header_writes_no_unreadable_value() {
        let (quota, short) = (Quota::new(10, 100), Quota::new(10, 9));
        let lying = [
            // The entry between at T0 + 3, the newest 5 ms later: T0 + 8, not the T0 + 10
            // of the header's span.
            with_header([3, 3, T0, 1, 10, 4], &[3, 1, 5, 1]),
            // The pairs read from the front: (1, 129), then the newest's 1 alone.
            with_header([3, 7, T0, 1, 200, 4], &[0x81, 0x01, 5, 1]),
            // Two between, read from the front as (1, 1) and (129, 5), then the newest's 1
            // alone.
            with_header([4, 8, T0, 1, 200, 6], &[1, 1, 0x81, 0x01, 5, 1]),
        ];
        for value in &lying {
            let state = decode(&mut Reader::new(value)).expect("a header that agrees with itself");
            for now in (T0..T0 + 20)
                .chain(T0 + 100..T0 + 120)
                .chain(T0 + 250..T0 + 260)
            {
                for (quota, cost) in [(quota, 1), (quota, 2), (short, 1)] {
                    if let Ok(TierCheck {
                        charged: Some(charged),
                        ..
                    }) = Log::check(Some(&state), now, &quota, cost)
                    {
                        let bytes = encoded(&charged);
                        let again = decode(&mut Reader::new(&bytes));
                        assert_eq!(again, Some(charged), "{value:?} at T0 + {}", now - T0);
                    }
                }
                for amount in [1, 2, 5, 100] {
                    if let Some(back) = Log::refund(Some(&state), now, &quota, amount) {
                        let bytes = encoded(&back);
                        let again = decode(&mut Reader::new(&bytes));
                        assert_eq!(again, Some(back), "{value:?} at T0 + {}", now - T0);
                    }
                }
            }
            // The same through the limiter, as RL.HIT runs it on the key: what it stores,
            // RL.RESET must still see as a state.
            let stored = crate::encoding::encode_tiers::<Log>(&[short], &[state]);
            assert!(is_state(&stored, None));
            for now in T0..T0 + 20 {
                let hit = run(
                    &log_limits(&[short]),
                    Action::Hit { cost: 1 },
                    Some(&stored),
                    || None,
                    now,
                );
                if let Ok(Outcome {
                    write: Write::Set { value: new, .. },
                    ..
                }) = hit
                {
                    assert!(
                        is_state(&new, None),
                        "{value:?}: RL.HIT at T0 + {} wrote {new:?}",
                        now - T0
                    );
                }
            }
        }
    }

    /// The header layout with every field as wide as the decoder reads it: count, total,
    /// oldest time, oldest units, span, pairs' length (varints of up to 128 bits where the
    /// decoder reads 128).
    fn with_wide_header(
        count: u64,
        total: u128,
        oldest_ms: i64,
        units: u64,
        span: u128,
        len: u64,
        pairs: &[u8],
    ) -> Bytes {
        let mut out = Bytes::from_slice(&[HEADER]);
        put_varint_u128(&mut out, count.into());
        put_varint_u128(&mut out, total);
        put_i64(&mut out, oldest_ms);
        put_varint_u128(&mut out, units.into());
        put_varint_u128(&mut out, span);
        put_varint_u128(&mut out, len.into());
        out.extend_from_slice(pairs);
        out
    }

    /// The plain layout: the count, the oldest time and then `rest` (its units and pairs).
    fn plain(count: u64, oldest_ms: i64, rest: &[u8]) -> Bytes {
        let mut out = Bytes::new();
        put_varint_u128(&mut out, count.into());
        put_i64(&mut out, oldest_ms);
        out.extend_from_slice(rest);
        out
    }

    /// Every call a command makes on a decoded tier, at clock readings and parameters from
    /// small to extreme: none may panic, nor allow what an empty log would not.
    fn try_everything(state: &LogState) {
        let nows = [
            i64::MIN,
            -1,
            0,
            T0,
            T0 + 5,
            state.newest().at_ms,
            state.oldest().at_ms,
            i64::MAX - 1,
            i64::MAX,
        ];
        let quotas = [
            Quota::new(1, 1),
            Quota::new(10, 1_000),
            Quota::new(10_000, HOUR),
            Quota::new(i64::MAX, i64::MAX),
        ];
        for now in nows {
            for quota in quotas {
                for cost in [1, 2, quota.limit, i64::MAX] {
                    if let Ok(hit) = Log::check(Some(state), now, &quota, cost) {
                        let empty = Log::check(None, now, &quota, cost).map(|h| h.decision.allowed);
                        assert!(
                            !hit.decision.allowed || empty == Ok(true),
                            "allowed beyond empty"
                        );
                        assert!((0..=quota.limit).contains(&hit.decision.remaining));
                        if let Some(charged) = hit.charged {
                            let _ = encoded(&charged);
                            let _ = Log::expires_at_ms(&charged, &quota);
                        }
                    }
                    let _ = Log::refund(Some(state), now, &quota, cost);
                }
                let _ = Log::view(Some(state), now, &quota);
                assert!(Log::used(state, now, &quota) >= 0);
            }
        }
        let _ = Log::expires_at_ms(state, &Quota::new(1, i64::MAX));
        let _ = encoded(state);
        let _ = state.read_entries();
    }

    /// A span near the top of its 128 bits with a positive oldest time: the newest time is
    /// past any clock, so the value is refused, never an overflow (a panic where overflow
    /// is checked: debug builds, the fuzzers).
    #[test]
    fn a_span_past_the_arithmetic_is_refused_not_overflowed() {
        let pairs = [1, 1];
        for (oldest_ms, span) in [
            (1, i128::MAX as u128),
            (T0, i128::MAX as u128),
            (i64::MAX, i128::MAX as u128 - i64::MAX as u128 + 1),
            (T0, u128::MAX),
            (i64::MIN, i128::MAX as u128),
        ] {
            let value = with_wide_header(2, 2, oldest_ms, 1, span, 2, &pairs);
            assert_eq!(
                decode(&mut Reader::new(&value)),
                None,
                "{oldest_ms} + {span}"
            );
        }
    }

    /// Each header field at its worst: refused, or a state that every call answers
    /// without a panic and without allowing more than an empty log.
    #[test]
    fn every_header_field_at_its_worst() {
        let max = i64::MAX as u64;
        let wide_max = i64::MAX as u128;
        // i64::MAX as a varint.
        let top = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        let cases: Vec<Bytes> = vec![
            // count: the cap, above it, the top of the varint; with 2 pairs' bytes.
            with_wide_header(MAX_ENTRIES as u64, 4, T0, 1, 10, 6, &[1, 2, 2, 1, 7, 0]),
            with_wide_header(MAX_ENTRIES as u64 + 1, 4, T0, 1, 10, 6, &[1, 2, 2, 1, 7, 0]),
            with_wide_header(max, 4, T0, 1, 10, 6, &[1, 2, 2, 1, 7, 0]),
            with_wide_header(u64::MAX, 4, T0, 1, 10, 6, &[1, 2, 2, 1, 7, 0]),
            // total: the top of i128, above it, the top of u128; just enough, far too much.
            with_wide_header(4, i128::MAX as u128, T0, 1, 10, 6, &[1, 2, 2, 1, 7, 0]),
            with_wide_header(4, i128::MAX as u128 + 1, T0, 1, 10, 6, &[1, 2, 2, 1, 7, 0]),
            with_wide_header(4, u128::MAX, T0, 1, 10, 6, &[1, 2, 2, 1, 7, 0]),
            with_wide_header(4, 2 * wide_max + 1, T0, 1, 10, 6, &[1, 2, 2, 1, 7, 0]),
            with_wide_header(1, u128::MAX, T0, max, 0, 0, &[]),
            with_wide_header(1, wide_max, i64::MAX, max, 0, 0, &[]),
            with_wide_header(1, wide_max, i64::MIN, max, 0, 0, &[]),
            // times: both ends of i64, spans from one end to the other.
            with_wide_header(2, 2, i64::MIN, 1, wide_max, 10, &[&top[..], &[1]].concat()),
            with_wide_header(
                3,
                3,
                i64::MIN,
                1,
                2 * wide_max,
                20,
                &[&top[..], &[1], &top, &[1]].concat(),
            ),
            with_wide_header(
                2,
                2 * wide_max,
                i64::MAX - 1,
                max,
                1,
                10,
                &[&[1], &top[..]].concat(),
            ),
            // units: the oldest's and the newest's at the top of i64, a marker newest.
            with_wide_header(2, 2 * wide_max, T0, max, 5, 10, &[&[5], &top[..]].concat()),
            with_wide_header(2, wide_max, T0, max, 5, 2, &[5, 0]),
            with_wide_header(
                3,
                3 * wide_max,
                T0,
                max,
                5,
                20,
                &[&[1], &top[..], &[4], &top].concat(),
            ),
            // a gap written in 10 bytes (1, not in its shortest form).
            with_wide_header(
                2,
                2,
                T0,
                1,
                1,
                11,
                &[
                    0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 1,
                ],
            ),
            // pairs' length: past the bytes, the top of i64, the top of the varint.
            with_wide_header(2, 2, T0, 1, 1, max, &[1, 1]),
            with_wide_header(2, 2, T0, 1, 1, u64::MAX, &[1, 1]),
            with_wide_header(2, 2, T0, 1, 1, 3, &[1, 1]),
            // pairs: runs of continuation bytes, 10-byte varints, varints past i64.
            with_wide_header(2, 2, T0, 1, 1, 20, &[0x80; 20]),
            with_wide_header(
                2,
                2,
                T0,
                1,
                1,
                21,
                &[
                    &[0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00][..],
                    &[0x80; 10],
                    &[1],
                ]
                .concat(),
            ),
            with_wide_header(
                3,
                3,
                T0,
                1,
                2,
                12,
                &[
                    &[1, 0x81][..],
                    &[0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00],
                    &[1],
                ]
                .concat(),
            ),
            with_wide_header(
                2,
                2,
                T0,
                1,
                1,
                11,
                &[
                    1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
                ],
            ),
            with_wide_header(
                MAX_ENTRIES as u64,
                2 * MAX_ENTRIES as u128,
                T0,
                1,
                MAX_ENTRIES as u128,
                2 * (MAX_ENTRIES as u64 - 1),
                &[1, 2].repeat(MAX_ENTRIES - 1),
            ),
            // The plain layout: the most entries, each with the most units, the times from
            // the bottom of i64; and a count above the cap.
            plain(
                MAX_ENTRIES as u64,
                i64::MIN,
                &[
                    &top[..],
                    &[&[1u8][..], &top].concat().repeat(MAX_ENTRIES - 1),
                ]
                .concat(),
            ),
            plain(MAX_ENTRIES as u64 + 1, T0, &[1, 1].repeat(MAX_ENTRIES + 1)),
            plain(max, T0, &[1, 1].repeat(MAX_ENTRIES + 1)),
            plain(2, i64::MAX, &[1, 1, 1]),
            plain(2, i64::MIN, &[&[1u8][..], &top, &top, &[0]].concat()),
        ];
        for value in &cases {
            // Every cut of the short values; the long ones whole.
            let cuts = if value.len() < 200 { 0 } else { value.len() };
            for cut in cuts..=value.len() {
                if let Some(state) = decode(&mut Reader::new(&value[..cut])) {
                    try_everything(&state);
                }
            }
        }
    }

    proptest! {
        /// Any change to the bytes of a valid value: decoding never panics, nor does any
        /// check, look or refund on what decodes, and what a check writes decodes again.
        #[test]
        fn damaged_values_never_panic(
            entries in proptest::collection::vec((1i64..300, 0i64..200), 1..40),
            damage in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
            now in T0 - 1_000..T0 + 20_000,
            cost in 1i64..50,
        ) {
            let mut at = T0;
            let list: Vec<Entry> = entries
                .iter()
                .enumerate()
                .map(|(n, (gap, units))| {
                    at += gap;
                    entry(at, if n + 1 == entries.len() { *units } else { units + 1 })
                })
                .collect();
            let state = LogState::from_entries(&list).expect("increasing");
            let mut bytes = encoded(&state);
            for (index, byte) in damage {
                let at = index.index(bytes.len());
                bytes[at] = byte;
            }
            if let Some(read) = decode(&mut Reader::new(&bytes)) {
                for quota in [Quota::new(100, 1_000), Quota::new(5_000, HOUR), Quota::new(3, 7)] {
                    // What a check writes is read back as a state (RL.RESET trusts that).
                    if let Ok(TierCheck { charged: Some(charged), .. }) =
                        Log::check(Some(&read), now, &quota, cost)
                    {
                        let bytes = encoded(&charged);
                        let again = decode(&mut Reader::new(&bytes));
                        prop_assert_eq!(again, Some(charged));
                    }
                    let _ = Log::view(Some(&read), now, &quota);
                    let _ = Log::refund(Some(&read), now, &quota, cost);
                    let _ = Log::used(&read, now, &quota);
                }
                let _ = read.read_entries();
            }
        }
    }
}
