//! How state is written into a Redis string value.
//!
//! The fixed window stores only its count, as a plain decimal integer: the window's end is
//! the key's absolute expiry, so it need not be stored twice. A plain integer is what
//! `INCR` would have written, which keeps the value small, readable with `GET`, and lets a
//! replica or an AOF replayed without the module store it as an integer.

/// Longest decimal form of a positive `i64`.
pub const MAX_COUNT_LEN: usize = 19;

/// Reads a count the module wrote: canonical decimal (no sign, no leading zero), >= 1.
/// Anything else is `None`: a value this module did not write.
pub fn decode_count(bytes: &[u8]) -> Option<i64> {
    let canonical = !bytes.is_empty()
        && bytes.len() <= MAX_COUNT_LEN
        && bytes[0] != b'0'
        && bytes.iter().all(u8::is_ascii_digit);
    if !canonical {
        return None;
    }
    super::duration::parse_digits(bytes)
}

/// Writes `count` (>= 0) in decimal into `buf` and returns the used part.
pub fn encode_count(count: i64, buf: &mut [u8; 20]) -> &[u8] {
    let mut rest = count.unsigned_abs();
    let mut start = buf.len();
    loop {
        start -= 1;
        // `rest % 10` is below 10, so the cast cannot truncate.
        buf[start] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    &buf[start..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn refuses_what_the_module_never_writes() {
        for bad in [
            &b""[..],
            b"0",
            b"007",
            b"-3",
            b"+3",
            b"3 ",
            b"abc",
            b"9223372036854775808",
            b"12345678901234567890",
            b"1\0",
        ] {
            assert_eq!(decode_count(bad), None, "{:?}", bad);
        }
    }

    #[test]
    fn encodes_the_extremes() {
        let mut buf = [0u8; 20];
        assert_eq!(encode_count(0, &mut buf), b"0");
        assert_eq!(encode_count(i64::MAX, &mut buf), b"9223372036854775807");
    }

    proptest! {
        #[test]
        fn round_trips_every_positive_count(count in 1..=i64::MAX) {
            let mut buf = [0u8; 20];
            let bytes = encode_count(count, &mut buf);
            let expected = count.to_string();
            prop_assert_eq!(bytes, expected.as_bytes());
            prop_assert_eq!(decode_count(bytes), Some(count));
        }
    }
}
