//! How state is written into a Redis string value. Two forms:
//!
//! - **Plain count** (single-tier fixed window, the common case): the count as a plain
//!   decimal integer; the window's end is the key's absolute expiry, so it is not stored
//!   twice. It is what `INCR` would have written: small, readable with `GET`, and a replica
//!   or an AOF replayed without the module stores it as an integer.
//! - **Short** (a single tier of an algorithm whose state the key's expiry nearly gives
//!   away: token and GCRA, whose theoretical arrival time *is* the expiry, to the ms): a
//!   tag byte `0xF8 | gcra << 2 | flags`, then varints `limit`, the window (in whole
//!   seconds when it is one, `seconds * 2 + 1`, else `ms * 2`), the burst if it is not the
//!   limit, and the state's short number if it is not 0 (for a bucket: the ns below the
//!   ms). 100 per hour fits in 4 bytes, which keeps the value inside Redis's smallest
//!   string allocation: the key costs what `SET k v PX t` costs.
//! - **Tiers** (every other algorithm, and multi-tier limits): byte [`FORMAT_V1`], the
//!   algorithm's id, the number of tiers, then per tier its parameters (varints `limit`,
//!   `window_ms`, `burst`) and the algorithm's state. A plain count starts with a digit, so
//!   the first byte tells the forms apart. Storing the parameters lets a key whose limit,
//!   window or algorithm changed be carried over instead of misread.
//!   Version 2 ([`FORMAT_V2`], written only when a tier is a calendar window) adds after
//!   each tier's burst a varint calendar code: 0 for a window of fixed length, else the
//!   period, the anchor and the zone's id ([`Calendar::code`]), so a changed zone or
//!   anchor is a changed rule. A calendar window never takes the plain count.
//!
//! # Example
//!
//! ```
//! use ratelimit_core::algorithm::{Algorithm, Quota};
//! use ratelimit_core::encoding::{classify, decode_count, encode_count, encode_short, StoredForm};
//! use ratelimit_core::gcra::Gcra;
//!
//! // A single-tier fixed window stores its count as INCR would.
//! let mut buf = [0u8; 20];
//! assert_eq!(encode_count(42, &mut buf), b"42");
//! assert_eq!(decode_count(b"42"), Some(42));
//! assert_eq!(classify(b"42"), Some(StoredForm::PlainCount(42)));
//!
//! // One GCRA tier of 100 per hour fits in 4 bytes: the key's expiry holds its time.
//! let quota = Quota::new(100, 3_600_000);
//! let value = encode_short::<Gcra>(&quota, 0).expect("GCRA has a short form");
//! assert_eq!(value.len(), 4);
//! assert_eq!(classify(&value), Some(StoredForm::Short { algorithm: Gcra::ID, quota, short: 0 }));
//!
//! // Text a user stored, or a count with a leading zero, is no state this crate wrote.
//! assert_eq!(classify(b"hello"), None);
//! assert_eq!(decode_count(b"042"), None);
//! ```

use super::algorithm::{Algorithm, Quota};
use super::calendar::Calendar;
use super::codec::{put_varint, Bytes, Reader};
use super::gcra::Gcra;
use super::token_bucket::Token;
use smallvec::SmallVec;

/// First byte of the tiers form, version 1. Never an ASCII digit.
pub const FORMAT_V1: u8 = 0x01;
/// First byte of the tiers form, version 2: each tier's parameters end with its calendar's
/// code (0 for a window of fixed length). Written only when a tier is a calendar window,
/// so that every other value keeps the bytes of version 1.
pub const FORMAT_V2: u8 = 0x02;

/// The short form's tag: `0xF8 | gcra << 2 | flags`, so 0xF8..=0xFF: bytes that never occur
/// in UTF-8 text, so that no text a user stored is mistaken for a state.
const SHORT_TAG: u8 = 0xF8;
const SHORT_GCRA: u8 = 0b100;
const SHORT_HAS_BURST: u8 = 0b01;
const SHORT_HAS_NUMBER: u8 = 0b10;

/// The most tiers one key holds.
pub const MAX_TIERS: usize = 8;

/// A stored value, told apart by its first byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredForm<'a> {
    /// A plain decimal count.
    PlainCount(i64),
    /// The short form: one tier's parameters and its state's short number (see
    /// [`Algorithm::to_short`]), to read with the key's expiry.
    Short {
        /// [`Algorithm::ID`] of the algorithm that wrote the value.
        algorithm: u8,
        /// The tier's parameters.
        quota: Quota,
        /// The state's short number.
        short: i64,
    },
    /// The tiers form: the algorithm id, the number of tiers, and a reader at the first
    /// tier.
    Tiers {
        /// [`Algorithm::ID`] of the algorithm that wrote the value.
        algorithm: u8,
        /// Number of tiers, 1..=[`MAX_TIERS`].
        count: usize,
        /// The tiers' bytes.
        body: TiersBody<'a>,
    },
}

/// The bytes of the tiers form after its header, and the version they are in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TiersBody<'a> {
    /// A reader at the first tier.
    pub reader: Reader<'a>,
    /// Version 2: each tier's parameters end with a calendar code.
    pub calendars: bool,
}

/// Tells what form `bytes` are in; `None` for a value this module did not write.
pub fn classify(bytes: &[u8]) -> Option<StoredForm<'_>> {
    match bytes.first()? {
        b'1'..=b'9' => decode_count(bytes).map(StoredForm::PlainCount),
        &version @ (FORMAT_V1 | FORMAT_V2) => {
            let mut body = Reader::new(&bytes[1..]);
            let algorithm = body.byte()?;
            let count = usize::from(body.byte()?);
            (1..=MAX_TIERS)
                .contains(&count)
                .then_some(StoredForm::Tiers {
                    algorithm,
                    count,
                    body: TiersBody {
                        reader: body,
                        calendars: version == FORMAT_V2,
                    },
                })
        }
        &tag @ SHORT_TAG..=0xFF => decode_short(tag, Reader::new(&bytes[1..])),
        _ => None,
    }
}

fn decode_short(tag: u8, mut body: Reader<'_>) -> Option<StoredForm<'_>> {
    let limit = body.positive()?;
    let window = body.positive()?;
    let window_ms = if window % 2 == 1 {
        (window / 2).checked_mul(1_000)?
    } else {
        window / 2
    };
    let burst = if tag & SHORT_HAS_BURST != 0 {
        body.positive()?
    } else {
        limit
    };
    let short = if tag & SHORT_HAS_NUMBER != 0 {
        body.positive()?
    } else {
        0
    };
    (window_ms >= 1 && body.is_empty()).then_some(StoredForm::Short {
        algorithm: if tag & SHORT_GCRA != 0 {
            Gcra::ID
        } else {
            Token::ID
        },
        quota: Quota {
            limit,
            window_ms,
            burst,
            calendar: None,
        },
        short,
    })
}

/// Writes one tier of algorithm `A` in the short form; `None` for an algorithm other than
/// the two buckets, which have no short form.
pub fn encode_short<A: Algorithm>(quota: &Quota, short: i64) -> Option<Bytes> {
    let mut tag = match A::ID {
        Gcra::ID => SHORT_TAG | SHORT_GCRA,
        Token::ID => SHORT_TAG,
        _ => return None,
    };
    let mut out = Bytes::new();
    if quota.burst != quota.limit {
        tag |= SHORT_HAS_BURST;
    }
    if short != 0 {
        tag |= SHORT_HAS_NUMBER;
    }
    out.push(tag);
    put_varint(&mut out, quota.limit);
    let window = if quota.window_ms % 1_000 == 0 {
        quota.window_ms / 1_000 * 2 + 1
    } else {
        quota.window_ms * 2
    };
    put_varint(&mut out, window);
    if quota.burst != quota.limit {
        put_varint(&mut out, quota.burst);
    }
    if short != 0 {
        put_varint(&mut out, short);
    }
    Some(out)
}

/// Tiers as stored: each one's parameters and state (inline up to two).
pub type StoredTiers<S> = SmallVec<[(Quota, S); 2]>;

/// Reads `count` tiers of algorithm `A` from `body`, which must hold exactly that.
pub fn decode_tiers<'a, A: Algorithm>(
    body: TiersBody<'a>,
    count: usize,
) -> Option<StoredTiers<A::State<'a>>> {
    let TiersBody {
        reader: mut body,
        calendars,
    } = body;
    let mut tiers = SmallVec::with_capacity(count);
    let mut any_calendar = false;
    for _ in 0..count {
        let mut quota = Quota {
            limit: body.positive()?,
            window_ms: body.positive()?,
            burst: body.positive()?,
            calendar: None,
        };
        if calendars {
            let code = body.varint()?;
            if code != 0 {
                let calendar = Calendar::from_code(code)?;
                // What encode_tiers writes: the period's nominal length.
                if quota.window_ms != calendar.period.nominal_ms() {
                    return None;
                }
                quota.calendar = Some(calendar);
                any_calendar = true;
            }
        }
        tiers.push((quota, A::decode(&mut body)?));
    }
    // Version 2 is written only for calendars.
    (body.is_empty() && any_calendar == calendars).then_some(tiers)
}

/// Writes tiers of algorithm `A` (parameters and states, pairwise) in the tiers form.
pub fn encode_tiers<A: Algorithm>(tiers: &[Quota], states: &[A::State<'_>]) -> Bytes {
    let mut out = Bytes::new();
    let count = tiers.len().min(states.len()).min(MAX_TIERS);
    let calendars = tiers[..count].iter().any(|q| q.calendar.is_some());
    out.push(if calendars { FORMAT_V2 } else { FORMAT_V1 });
    out.push(A::ID);
    // At most MAX_TIERS (8), so the count fits a byte.
    out.push(count as u8);
    for (quota, state) in tiers.iter().zip(states).take(count) {
        put_varint(&mut out, quota.limit);
        put_varint(&mut out, quota.window_ms);
        put_varint(&mut out, quota.burst);
        if calendars {
            put_varint(&mut out, quota.calendar.as_ref().map_or(0, Calendar::code));
        }
        A::encode(state, &mut out);
    }
    out
}

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
    use crate::fixed_window::{Fixed, WindowState};
    use proptest::prelude::*;

    #[test]
    fn text_is_never_read_as_the_short_form() {
        for text in [&b"Pay"[..], b"Tab", b"@x", b"_", "\u{e9}t\u{e9}".as_bytes()] {
            assert_eq!(classify(text), None, "{text:?}");
        }
        let token = encode_short::<Token>(&Quota::new(2, 1_000), 0).expect("short form");
        assert!(matches!(
            classify(&token),
            Some(StoredForm::Short { algorithm: 4, .. })
        ));
        assert_eq!(encode_short::<Fixed>(&Quota::new(2, 1_000), 0), None);
    }

    #[test]
    fn tells_the_forms_apart_and_refuses_foreign_values() {
        assert_eq!(classify(b"42"), Some(StoredForm::PlainCount(42)));
        for foreign in [
            &b""[..],
            b"hello",
            b"0",
            b"\x01",
            b"\x01\x01",
            b"\x01\x01\x00",
            b"\x01\x01\x09",
        ] {
            assert_eq!(classify(foreign), None, "{:?}", foreign);
        }
    }

    #[test]
    fn the_short_form_round_trips_and_stays_small() {
        let cases = [
            (Quota::new(100, 3_600_000), 0, 4),
            (Quota::new(10, 1_000), 0, 3),
            (Quota::new(3, 1), 333_334, 6),
            (
                Quota {
                    limit: 5,
                    window_ms: 1_500,
                    burst: 9,
                    calendar: None,
                },
                7,
                6,
            ),
        ];
        for (quota, short, len) in cases {
            let bytes = encode_short::<Gcra>(&quota, short).expect("GCRA has a short form");
            assert_eq!(bytes.len(), len, "{quota:?}");
            assert_eq!(
                classify(&bytes),
                Some(StoredForm::Short {
                    algorithm: 5,
                    quota,
                    short
                }),
                "{quota:?}"
            );
            let mut longer = bytes.clone();
            longer.push(1);
            assert_eq!(classify(&longer), None, "trailing bytes");
        }
    }

    #[test]
    fn tiers_round_trip_and_trailing_bytes_are_refused() {
        let tiers = vec![
            (
                Quota::new(10, 1_000),
                WindowState {
                    count: 3,
                    ends_at_ms: 5_000,
                },
            ),
            (
                Quota::new(1_000, 3_600_000),
                WindowState {
                    count: 70,
                    ends_at_ms: 3_600_000,
                },
            ),
        ];
        let (quotas, states): (Vec<Quota>, Vec<WindowState>) = tiers.iter().copied().unzip();
        let bytes = encode_tiers::<Fixed>(&quotas, &states);
        let Some(StoredForm::Tiers {
            algorithm,
            count,
            body,
        }) = classify(&bytes)
        else {
            panic!("not the tiers form: {bytes:?}");
        };
        assert_eq!((algorithm, count), (1, 2));
        assert_eq!(
            decode_tiers::<Fixed>(body, count).map(|t| t.to_vec()),
            Some(tiers)
        );
        let mut longer = bytes.clone();
        longer.push(0);
        let Some(StoredForm::Tiers { body, count, .. }) = classify(&longer) else {
            panic!("header still readable");
        };
        assert_eq!(decode_tiers::<Fixed>(body, count), None);
    }

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
