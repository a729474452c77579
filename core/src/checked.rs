//! [`OutOfRange`], the error of a computation that leaves `i64`, and checked `i128`
//! arithmetic that returns it.
//!
//! It lives on its own, below every other module, because both `algorithm` (the trait
//! and `Quota`, which holds a `Calendar`) and `calendar` (`period_end`) need it: kept in
//! `algorithm`, it made `calendar` import `algorithm` while `algorithm` imports
//! `calendar`. Now the imports point one way: `algorithm -> calendar -> checked`.
//! `algorithm` re-exports [`OutOfRange`], so its public path stays
//! `ratelimit_core::algorithm::OutOfRange`.

/// A computation left the range of `i64` (times near the ends of the clock's range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OutOfRange;

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a computation left the range of a 64-bit integer")
    }
}

impl std::error::Error for OutOfRange {}

/// `value` as an `i64`.
pub(crate) fn to_i64(value: i128) -> Result<i64, OutOfRange> {
    i64::try_from(value).map_err(|_| OutOfRange)
}

/// `a * b`.
pub(crate) fn mul(a: i128, b: i128) -> Result<i128, OutOfRange> {
    a.checked_mul(b).ok_or(OutOfRange)
}

/// `a + b`.
pub(crate) fn add(a: i128, b: i128) -> Result<i128, OutOfRange> {
    a.checked_add(b).ok_or(OutOfRange)
}

/// `a - b`.
pub(crate) fn sub(a: i128, b: i128) -> Result<i128, OutOfRange> {
    a.checked_sub(b).ok_or(OutOfRange)
}
