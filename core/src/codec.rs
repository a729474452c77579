//! Byte-level building blocks of stored values: LEB128 varints for counts and
//! parameters, fixed 8-byte little-endian integers for absolute times.
//!
//! Reading never panics: malformed or truncated input gives `None`.

use smallvec::SmallVec;

/// Encoded bytes: inline when short (a fixed count, a GCRA time), so that encoding a
/// small state allocates nothing.
pub type Bytes = SmallVec<[u8; 32]>;

/// Appends `value` (>= 0) as an unsigned LEB128 varint (1 to 10 bytes).
pub fn put_varint(out: &mut Bytes, value: i64) {
    let mut rest = value.max(0) as u64;
    loop {
        // The mask keeps 7 bits, so the cast cannot truncate.
        let byte = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// Appends `value` as an unsigned LEB128 varint (1 to 19 bytes): for sums that may pass
/// `i64::MAX`, such as the units of a whole sliding log.
pub fn put_varint_u128(out: &mut Bytes, value: u128) {
    let mut rest = value;
    loop {
        // The mask keeps 7 bits, so the cast cannot truncate.
        let byte = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// The bytes [`put_varint`] writes for `value`.
pub fn varint_len(value: i64) -> usize {
    let bits = 64 - (value.max(0) as u64).leading_zeros() as usize;
    bits.div_ceil(7).max(1)
}

/// Appends `value` as 8 little-endian bytes.
pub fn put_i64(out: &mut Bytes, value: i64) {
    out.extend_from_slice(&value.to_le_bytes());
}

/// A cursor over a stored value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Starts reading `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Reader { bytes }
    }

    /// One byte.
    pub fn byte(&mut self) -> Option<u8> {
        let (&first, rest) = self.bytes.split_first()?;
        self.bytes = rest;
        Some(first)
    }

    /// A varint written by [`put_varint`], within `0..=i64::MAX`.
    pub fn varint(&mut self) -> Option<i64> {
        let mut value: u64 = 0;
        for shift in (0..64).step_by(7) {
            let byte = self.byte()?;
            let bits = u64::from(byte & 0x7f);
            if shift == 63 && bits > 1 {
                return None;
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return i64::try_from(value).ok();
            }
        }
        None
    }

    /// A varint written by [`put_varint_u128`]. The same loop as [`Reader::varint`] on 128
    /// bits: that one stays on 64, since every state's counts and times are read with it.
    pub fn varint_u128(&mut self) -> Option<u128> {
        let mut value: u128 = 0;
        for shift in (0..128).step_by(7) {
            let byte = self.byte()?;
            let bits = u128::from(byte & 0x7f);
            // The last group holds 2 bits (126 + 2 = 128): more would be lost.
            if shift == 126 && bits > 0b11 {
                return None;
            }
            value |= bits << shift;
            if byte & 0x80 == 0 {
                return Some(value);
            }
        }
        None
    }

    /// The next `len` bytes, as a slice of the input.
    pub fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        if len > self.bytes.len() {
            return None;
        }
        let (head, rest) = self.bytes.split_at(len);
        self.bytes = rest;
        Some(head)
    }

    /// How many bytes are left to read.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// A varint that must be >= 1.
    pub fn positive(&mut self) -> Option<i64> {
        self.varint().filter(|&v| v >= 1)
    }

    /// 8 little-endian bytes written by [`put_i64`].
    pub fn i64(&mut self) -> Option<i64> {
        let (head, rest) = self.bytes.split_first_chunk::<8>()?;
        self.bytes = rest;
        Some(i64::from_le_bytes(*head))
    }

    /// Whether everything was read.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn refuses_truncated_and_oversized_input() {
        assert_eq!(Reader::new(&[0x80]).varint(), None);
        assert_eq!(Reader::new(&[0xff; 11]).varint(), None);
        assert_eq!(Reader::new(&[1, 2, 3]).i64(), None);
        let mut over = vec![0xff; 9];
        over.push(0x01);
        assert_eq!(Reader::new(&over).varint(), None, "u64 above i64::MAX");
    }

    proptest! {
        #[test]
        fn round_trips(values in proptest::collection::vec((0..=i64::MAX, any::<i64>()), 0..20)) {
            let mut out = Bytes::new();
            for (v, t) in &values {
                put_varint(&mut out, *v);
                put_i64(&mut out, *t);
            }
            let mut reader = Reader::new(&out);
            for (v, t) in &values {
                prop_assert_eq!(reader.varint(), Some(*v));
                prop_assert_eq!(reader.i64(), Some(*t));
            }
            prop_assert!(reader.is_empty());
        }

        #[test]
        fn wide_varints_round_trip_and_lengths_match(wide in any::<u128>(), narrow in 0..=i64::MAX) {
            let mut out = Bytes::new();
            put_varint_u128(&mut out, wide);
            put_varint(&mut out, narrow);
            let mut reader = Reader::new(&out);
            prop_assert_eq!(reader.varint_u128(), Some(wide));
            prop_assert_eq!(reader.len(), varint_len(narrow));
            prop_assert_eq!(reader.take(varint_len(narrow)).map(<[u8]>::len), Some(varint_len(narrow)));
            prop_assert!(reader.is_empty());
            prop_assert_eq!(reader.take(1), None);
        }

        #[test]
        fn never_panics_on_junk(bytes in proptest::collection::vec(any::<u8>(), 0..40)) {
            let mut reader = Reader::new(&bytes);
            while reader.varint().is_some() {}
            let mut reader = Reader::new(&bytes);
            while reader.i64().is_some() {}
            let mut reader = Reader::new(&bytes);
            while reader.varint_u128().is_some() {}
        }
    }
}
