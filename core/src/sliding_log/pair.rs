//! One (gap, units) pair, the unit of the entries after the oldest: its largest size and
//! how to read the last one of a run of pairs from its end.
//!
//! Both `state` (which keeps the pairs as stored and appends to them) and `layout` (which
//! reads a stored header and checks it against the newest pair) need these. They lived in
//! `layout`, so `state` imported `layout` while `layout` imports `state` for the state it
//! decodes into. Here, below both, the imports point one way:
//! `layout -> state -> pair` (and `layout -> pair`).

use crate::codec::Reader;

/// Most bytes of one pair: two varints of at most 10 bytes.
pub(super) const MAX_PAIR_LEN: usize = 20;

/// The last pair of `pairs`, read from the end: its gap, its units and its length.
pub(super) fn last_pair(pairs: &[u8]) -> Option<(i64, i64, usize)> {
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
