//! The state of one sliding-log tier, held the way it is stored, so that a check touches
//! only the entries it changes.
//!
//! The newest and the oldest entry, the entry count and the units of all entries are kept
//! apart; the entries after the oldest stay encoded as (gap, units) varint pairs, as in
//! the stored value. Dropping the oldest entries reads pairs from the front; logging a hit
//! writes one pair at the end (or rewrites the newest). A decoded state borrows its pairs
//! from the stored value, and the states made from it share them, so a check copies no
//! entry it leaves alone (only encoding the new value does).
//!
//! Pairs that are read are checked against the rest (times that increase, units where
//! they must be, the count and the units in all entries): a mismatch is [`Corrupt`].

use super::pair::{last_pair, MAX_PAIR_LEN};
use crate::codec::{put_varint, varint_len, Bytes, Reader};

/// Units logged at one ms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Entry {
    /// Absolute Unix time in ms the units were logged at.
    pub at_ms: i64,
    /// Units logged at that ms: >= 1, or 0 for the newest entry kept as a marker after a
    /// refund.
    pub units: i64,
}

/// Stored pairs that disagree with the rest of the state: bytes this module did not write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Corrupt;

/// Encoded (gap, units) pairs: a part of the stored value (borrowed, never copied), then
/// pairs written since. Both parts start and end on a pair.
#[derive(Debug, Clone)]
struct Pairs<'a> {
    stored: &'a [u8],
    from: usize,
    to: usize,
    tail: Bytes,
}

impl<'a> Pairs<'a> {
    fn empty() -> Self {
        Pairs {
            stored: &[],
            from: 0,
            to: 0,
            tail: Bytes::new(),
        }
    }

    /// Pairs as stored.
    fn stored(bytes: &'a [u8]) -> Self {
        Pairs {
            stored: bytes,
            from: 0,
            to: bytes.len(),
            tail: Bytes::new(),
        }
    }

    /// The two parts, in order.
    fn parts(&self) -> [&[u8]; 2] {
        let stored = self.stored.get(self.from..self.to).unwrap_or(&[]);
        [stored, &self.tail]
    }

    fn len(&self) -> usize {
        self.parts().iter().map(|p| p.len()).sum()
    }

    /// Takes the first pair off.
    fn pop_front(&mut self) -> Option<(i64, i64)> {
        let [shared, _] = self.parts();
        if !shared.is_empty() {
            let mut reader = Reader::new(shared);
            let pair = (reader.varint()?, reader.varint()?);
            self.from += shared.len() - reader.len();
            return Some(pair);
        }
        let mut reader = Reader::new(&self.tail);
        let pair = (reader.varint()?, reader.varint()?);
        let read = self.tail.len() - reader.len();
        self.tail.drain(..read);
        Some(pair)
    }

    /// The last pair, read from the end: its gap, its units and its length.
    fn last(&self) -> Option<(i64, i64, usize)> {
        let [stored, tail] = self.parts();
        last_pair(if tail.is_empty() { stored } else { tail })
    }

    /// Removes the last `len` bytes: the last pair.
    fn cut_last(&mut self, len: usize) {
        if self.tail.is_empty() {
            self.to = self.to.saturating_sub(len).max(self.from);
        } else {
            self.tail.truncate(self.tail.len().saturating_sub(len));
        }
    }

    fn push(&mut self, gap: i64, units: i64) -> usize {
        put_varint(&mut self.tail, gap);
        put_varint(&mut self.tail, units);
        varint_len(gap) + varint_len(units)
    }

    fn iter(&self) -> PairIter<'_> {
        let [shared, tail] = self.parts();
        PairIter {
            parts: [Reader::new(shared), Reader::new(tail)],
            at: 0,
        }
    }
}

/// The pairs in order; an unreadable pair ends them with `Corrupt`.
struct PairIter<'a> {
    parts: [Reader<'a>; 2],
    at: usize,
}

impl Iterator for PairIter<'_> {
    type Item = Result<(i64, i64), Corrupt>;

    fn next(&mut self) -> Option<Self::Item> {
        while let Some(part) = self.parts.get_mut(self.at) {
            if part.is_empty() {
                self.at += 1;
                continue;
            }
            let pair = part.varint().zip(part.varint());
            if pair.is_none() {
                self.at = self.parts.len();
            }
            return Some(pair.ok_or(Corrupt));
        }
        None
    }
}

/// One sliding-log tier: entries with strictly increasing times, never empty. Built only
/// by the log (checks, refunds, seeding, decoding), which keeps those rules.
#[derive(Debug, Clone)]
pub struct LogState<'a> {
    /// Entries, >= 1.
    count: usize,
    /// Units in all entries (an `i128`: entries of up to `i64::MAX` units each).
    total: i128,
    oldest: Entry,
    /// The same as `oldest` when there is one entry.
    newest: Entry,
    /// ms from the entry before the newest to the newest (0 with one entry).
    last_gap: i64,
    /// Bytes of the newest entry's pair (0 with one entry).
    last_pair_len: usize,
    /// The entries after the oldest.
    pairs: Pairs<'a>,
    /// Decoded from the layout before the header existed, and not changed since: written
    /// back the same way (see `layout`).
    pub(super) legacy: bool,
}

/// Equal when they hold the same entries, however their bytes are shared.
impl PartialEq for LogState<'_> {
    fn eq(&self, other: &Self) -> bool {
        let bytes = |s: &Self| {
            let [a, b] = s.pairs.parts();
            a.iter().chain(b.iter()).copied().collect::<Vec<u8>>()
        };
        (
            self.count,
            self.total,
            self.oldest,
            self.newest,
            self.last_gap,
        ) == (
            other.count,
            other.total,
            other.oldest,
            other.newest,
            other.last_gap,
        ) && bytes(self) == bytes(other)
    }
}

impl<'a> LogState<'a> {
    /// One entry.
    pub(super) fn single(entry: Entry) -> Self {
        LogState {
            count: 1,
            total: i128::from(entry.units.max(0)),
            oldest: entry,
            newest: entry,
            last_gap: 0,
            last_pair_len: 0,
            pairs: Pairs::empty(),
            legacy: false,
        }
    }

    #[cfg(test)]
    /// A state of the given entries, oldest first; `None` for none, or for times that do
    /// not strictly increase.
    pub(super) fn from_entries(entries: &[Entry]) -> Option<Self> {
        let (first, rest) = entries.split_first()?;
        let mut state = LogState::single(*first);
        for entry in rest {
            state.push(*entry)?;
        }
        Some(state)
    }

    /// A state read from stored parts that `layout` has checked against each other: the
    /// oldest and newest entries, the count, the units of all entries, and the pairs, whose
    /// last one (`last_gap`, the newest's units) takes `last_pair_len` bytes.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn from_stored(
        count: usize,
        total: i128,
        oldest: Entry,
        newest: Entry,
        last_gap: i64,
        last_pair_len: usize,
        pairs: &'a [u8],
    ) -> Self {
        LogState {
            count,
            total,
            oldest,
            newest,
            last_gap,
            last_pair_len,
            pairs: Pairs::stored(pairs),
            legacy: false,
        }
    }

    pub(super) fn count(&self) -> usize {
        self.count
    }

    pub(super) fn total(&self) -> i128 {
        self.total
    }

    pub(super) fn oldest(&self) -> Entry {
        self.oldest
    }

    pub(super) fn newest(&self) -> Entry {
        self.newest
    }

    /// The encoded pairs of the entries after the oldest, in two parts, in order.
    pub(super) fn pairs(&self) -> [&[u8]; 2] {
        self.pairs.parts()
    }

    pub(super) fn pairs_len(&self) -> usize {
        self.pairs.len()
    }

    /// The time of the newest entry that holds units: the newest, or the one before a
    /// marker (which always holds some).
    pub(super) fn newest_counted_ms(&self) -> Option<i64> {
        if self.newest.units > 0 {
            Some(self.newest.at_ms)
        } else if self.count > 1 {
            self.newest.at_ms.checked_sub(self.last_gap)
        } else {
            None
        }
    }

    #[cfg(test)]
    /// Every entry, oldest first, read and checked against the count, the units and the
    /// newest entry. Costs one step per entry.
    pub(super) fn read_entries(&self) -> Result<Vec<Entry>, Corrupt> {
        let mut entries = Vec::with_capacity(self.count.min(super::MAX_ENTRIES));
        entries.push(self.oldest);
        let mut total = i128::from(self.oldest.units);
        let mut at_ms = self.oldest.at_ms;
        for pair in self.pairs.iter() {
            let (gap, units) = pair?;
            if gap < 1 || entries.len() >= self.count {
                return Err(Corrupt);
            }
            at_ms = at_ms.checked_add(gap).ok_or(Corrupt)?;
            entries.push(Entry { at_ms, units });
            total += i128::from(units);
        }
        let ends_right = entries.len() == self.count
            && entries.last() == Some(&self.newest)
            && total == self.total
            && entries.iter().rev().skip(1).all(|e| e.units >= 1);
        if ends_right {
            Ok(entries)
        } else {
            Err(Corrupt)
        }
    }

    /// The entries, oldest first (stored entries that disagree with the header panic: a
    /// test's failure).
    #[cfg(test)]
    pub fn entries(&self) -> Vec<Entry> {
        self.read_entries()
            .expect("entries that agree with the header")
    }

    /// Drops the entries logged at or before `horizon`, from the oldest on, stopping at the
    /// first one after it. `false` when none is left (the state is then to be dropped).
    pub(super) fn drop_through(&mut self, horizon: i128) -> Result<bool, Corrupt> {
        if i128::from(self.newest.at_ms) <= horizon {
            return Ok(false);
        }
        while i128::from(self.oldest.at_ms) <= horizon {
            self.pop_oldest(|_, next| next)?;
        }
        Ok(true)
    }

    /// Removes the oldest entry; the next one becomes the oldest, with the units
    /// `merge(oldest units, its units)`. Checks what it reads against the rest.
    fn pop_oldest(&mut self, merge: impl Fn(i64, i64) -> i64) -> Result<(), Corrupt> {
        if self.count < 2 {
            return Err(Corrupt);
        }
        let (gap, units) = self.pairs.pop_front().ok_or(Corrupt)?;
        let at_ms = self.oldest.at_ms.checked_add(gap).ok_or(Corrupt)?;
        self.count -= 1;
        let last = self.count == 1;
        let fits = gap >= 1 && (units >= 1 || last) && (at_ms < self.newest.at_ms || last);
        if !fits {
            return Err(Corrupt);
        }
        let merged = merge(self.oldest.units, units);
        self.total += i128::from(merged) - i128::from(self.oldest.units) - i128::from(units);
        self.oldest = Entry {
            at_ms,
            units: merged,
        };
        if last {
            let agrees = at_ms == self.newest.at_ms
                && units == self.newest.units
                && self.pairs.len() == 0
                && self.total == i128::from(merged);
            if !agrees {
                return Err(Corrupt);
            }
            self.newest = self.oldest;
            self.last_gap = 0;
            self.last_pair_len = 0;
        } else if !self.header_agrees() {
            // Pairs that disagree with the header's span or pairs' length: written as they
            // stand, the state would no longer decode.
            return Err(Corrupt);
        }
        Ok(())
    }

    /// With two entries or more, whether the oldest entry, the newest one, the count, the
    /// units, and the bytes of the pairs agree as decoding requires of a stored header (see
    /// `layout`): between the oldest and the newest, each entry holds 1 to `i64::MAX` units,
    /// at least 1 ms and 2 to `MAX_PAIR_LEN` bytes (with no entry between, the newest gap
    /// is the whole span). Checked when dropping the oldest entry moves the oldest onto a
    /// pair that only now is read, so that what a check writes decodes again.
    pub(super) fn header_agrees(&self) -> bool {
        let Some(between) = self.count.checked_sub(2) else {
            return false;
        };
        let wide = i128::try_from(between).unwrap_or(i128::MAX);
        let between_units =
            self.total - i128::from(self.oldest.units) - i128::from(self.newest.units);
        let between_ms = i128::from(self.newest.at_ms)
            - i128::from(self.last_gap)
            - i128::from(self.oldest.at_ms);
        let between_len = self.pairs.len().checked_sub(self.last_pair_len);
        self.oldest.units >= 1
            && self.last_gap >= 1
            && between_len.is_some_and(|n| (2 * between..=MAX_PAIR_LEN * between).contains(&n))
            && (wide..=wide.saturating_mul(i128::from(i64::MAX))).contains(&between_units)
            && if between == 0 {
                between_ms == 0
            } else {
                between_ms >= wide
            }
    }

    /// Keeps at most `max` (>= 2) entries by merging the oldest into the next oldest.
    pub(super) fn cap(&mut self, max: usize) -> Result<(), Corrupt> {
        while self.count > max.max(2) {
            self.pop_oldest(|oldest, next| oldest.saturating_add(next))?;
        }
        Ok(())
    }

    /// Adds `units` to the newest entry; `None` past `i64::MAX`.
    pub(super) fn add_to_newest(&mut self, units: i64) -> Option<()> {
        let sum = self.newest.units.checked_add(units)?;
        self.total += i128::from(units);
        self.newest.units = sum;
        if self.count == 1 {
            self.oldest = self.newest;
        } else {
            self.pairs.cut_last(self.last_pair_len);
            self.last_pair_len = self.pairs.push(self.last_gap, sum);
        }
        Some(())
    }

    /// Logs `entry` after the newest; `None` unless it is later.
    pub(super) fn push(&mut self, entry: Entry) -> Option<()> {
        let gap = entry
            .at_ms
            .checked_sub(self.newest.at_ms)
            .filter(|&g| g >= 1)?;
        self.last_pair_len = self.pairs.push(gap, entry.units);
        self.last_gap = gap;
        self.newest = entry;
        self.count += 1;
        self.total += i128::from(entry.units.max(0));
        Some(())
    }

    /// Removes the newest entry and returns it (with two entries or more): the one before
    /// becomes the newest, read from the end of the pairs, and checked against the rest.
    /// One step, whatever the number of entries.
    pub(super) fn pop_newest(&mut self) -> Result<Entry, Corrupt> {
        if self.count < 2 {
            return Err(Corrupt);
        }
        let popped = self.newest;
        let before_ms = popped.at_ms.checked_sub(self.last_gap).ok_or(Corrupt)?;
        self.pairs.cut_last(self.last_pair_len);
        self.count -= 1;
        self.total -= i128::from(popped.units.max(0));
        if self.count == 1 {
            if before_ms != self.oldest.at_ms || !self.pairs.parts().iter().all(|p| p.is_empty()) {
                return Err(Corrupt);
            }
            self.newest = self.oldest;
            self.last_gap = 0;
            self.last_pair_len = 0;
        } else {
            let (gap, units, len) = self.pairs.last().ok_or(Corrupt)?;
            if gap < 1 || units < 1 || before_ms <= self.oldest.at_ms {
                return Err(Corrupt);
            }
            self.newest = Entry {
                at_ms: before_ms,
                units,
            };
            self.last_gap = gap;
            self.last_pair_len = len;
            // The entry read must agree with the header's count, units and span, as after
            // dropping the oldest: what a refund writes then decodes again.
            if !self.header_agrees() {
                return Err(Corrupt);
            }
        }
        Ok(popped)
    }

    /// Replaces the newest entry (a marker, without units) by `entry`, later than it.
    pub(super) fn replace_newest(&mut self, entry: Entry) -> Option<()> {
        if self.count == 1 {
            *self = LogState::single(entry);
            return Some(());
        }
        let before_ms = self.newest.at_ms.checked_sub(self.last_gap)?;
        self.pairs.cut_last(self.last_pair_len);
        self.total -= i128::from(self.newest.units);
        self.count -= 1;
        self.newest = Entry {
            at_ms: before_ms,
            units: 0,
        };
        self.push(entry)
    }

    /// The time of the oldest entry by which, counting from the oldest, `excess` units
    /// have been logged; `None` if all of them hold fewer. Reads from the oldest on, one
    /// step per entry passed.
    pub(super) fn first_reaching(&self, excess: i128) -> Result<Option<i64>, Corrupt> {
        let mut freed = i128::from(self.oldest.units);
        let mut at_ms = self.oldest.at_ms;
        let mut pairs = self.pairs.iter();
        for seen in 1..=self.count {
            if seen > 1 {
                let (gap, units) = pairs.next().ok_or(Corrupt)??;
                at_ms = at_ms.checked_add(gap).ok_or(Corrupt)?;
                freed += i128::from(units);
                let last = seen == self.count;
                let fits = gap >= 1
                    && (units >= 1 || last)
                    && (at_ms < self.newest.at_ms || (last && at_ms == self.newest.at_ms))
                    && (!last || units == self.newest.units);
                if !fits {
                    return Err(Corrupt);
                }
            }
            // What is left must still fit in the total: >= 1 unit per entry before the
            // newest, and the newest's.
            let after = i128::try_from(self.count - seen).unwrap_or(i128::MAX);
            let still = if after == 0 {
                0
            } else {
                after - 1 + i128::from(self.newest.units)
            };
            if freed + still > self.total || (after == 0 && freed != self.total) {
                return Err(Corrupt);
            }
            if freed >= excess {
                return Ok(Some(at_ms));
            }
        }
        Ok(None)
    }
}
