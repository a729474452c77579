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

use super::state::{Entry, LogState};
use super::MAX_ENTRIES;
use crate::codec::{put_i64, put_varint, put_varint_u128, Bytes, Reader};

/// The first byte of the header layout: a count of 0, which the plain layout never writes.
const HEADER: u8 = 0;

/// Most bytes of one pair: two varints of at most 10 bytes.
const MAX_PAIR_LEN: usize = 20;

/// Appends `state` in the header layout, or in the plain one for a state read from it and
/// not changed since.
pub(super) fn encode(state: &LogState, out: &mut Bytes) {
    let oldest = state.oldest();
    let count = i64::try_from(state.count()).unwrap_or(i64::MAX);
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
pub(super) fn decode(reader: &mut Reader<'_>) -> Option<LogState> {
    let mut peek = reader.clone();
    if peek.byte()? == HEADER {
        *reader = peek;
        decode_header(reader)
    } else {
        decode_plain(reader)
    }
}

fn decode_header(reader: &mut Reader<'_>) -> Option<LogState> {
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
    let newest_ms = i64::try_from(i128::from(oldest_ms) + span).ok()?;
    let (last_gap, newest_units, last_pair_len) = last_pair(pairs)?;
    // The entries between the oldest and the newest: each holds >= 1 unit and >= 1 ms, and
    // takes 2 to 20 bytes.
    let between = count - 2;
    let between_len = pairs.len() - last_pair_len;
    let between_units = total - i128::from(oldest_units) - i128::from(newest_units);
    let between_ms = span - i128::from(last_gap);
    let wide = |n: usize| i128::try_from(n).unwrap_or(i128::MAX);
    let agrees = oldest_units >= 1
        && last_gap >= 1
        && (2 * between..=MAX_PAIR_LEN * between).contains(&between_len)
        && (wide(between)..=wide(between) * i128::from(i64::MAX)).contains(&between_units)
        && if between == 0 {
            between_ms == 0
        } else {
            between_ms >= wide(between)
        };
    agrees.then(|| {
        LogState::from_stored(
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
        )
    })
}

/// The last pair of `pairs`, read from the end: its gap, its units and its length.
fn last_pair(pairs: &[u8]) -> Option<(i64, i64, usize)> {
    let units_at = varint_start(pairs, pairs.len())?;
    let gap_at = varint_start(pairs, units_at)?;
    let mut reader = Reader::new(pairs.get(gap_at..)?);
    let pair = (reader.varint()?, reader.varint()?);
    reader
        .is_empty()
        .then_some((pair.0, pair.1, pairs.len() - gap_at))
}

/// Where the varint that ends at `end` starts: its last byte is below 0x80, the (at most
/// nine) before it are not.
fn varint_start(bytes: &[u8], end: usize) -> Option<usize> {
    let last = end.checked_sub(1)?;
    if *bytes.get(last)? >= 0x80 {
        return None;
    }
    let mut start = last;
    while start > 0 && end - start < 10 && bytes.get(start - 1).is_some_and(|&b| b >= 0x80) {
        start -= 1;
    }
    Some(start)
}

/// The plain layout, entry by entry: refuses an empty log, more than the entries a state
/// keeps, times that do not strictly increase, and entries without units other than the
/// newest.
fn decode_plain(reader: &mut Reader<'_>) -> Option<LogState> {
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
