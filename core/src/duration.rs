//! Window durations as users write them: `60` (seconds), `250ms`, `10s`, `5m`, `1h`, `1d`.

/// Milliseconds in one second.
pub const SECOND_MS: i64 = 1_000;
/// Milliseconds in one day.
pub const DAY_MS: i64 = 86_400 * SECOND_MS;
/// The default longest window (the config `ratelimit.max-window-ms`): 366 days, so that
/// "per year" fits, leap years included.
pub const MAX_WINDOW_MS: i64 = 366 * DAY_MS;
/// The longest window the parser reads at all, whatever the config: ten times the default.
pub const LARGEST_WINDOW_MS: i64 = 10 * MAX_WINDOW_MS;

/// Why a duration was refused.
///
/// [`Display`](std::fmt::Display) says why in words about "a duration", without an error
/// code. The module never replies with it as it is: a refused window or ttl is an argument
/// error that names the argument and its config
/// ([`ArgError::Window`](crate::args::ArgError::Window),
/// [`LeaseArgError::Ttl`](crate::lease::args::LeaseArgError::Ttl)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DurationError {
    /// Not digits followed by an optional unit (empty, a sign, a fraction, spaces...).
    Malformed,
    /// Digits followed by something that is not `ms`, `s`, `m`, `h` or `d`.
    UnknownUnit,
    /// Zero.
    TooShort,
    /// Above [`LARGEST_WINDOW_MS`], including numbers too big for an `i64`.
    TooLong,
}

impl std::fmt::Display for DurationError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DurationError::Malformed => f.write_str(
                "a duration must be a positive integer of seconds or an integer with a unit \
                 (ms, s, m, h, d), e.g. 250ms or 5m",
            ),
            DurationError::UnknownUnit => {
                f.write_str("a duration has an unknown unit: use ms, s, m, h or d")
            }
            DurationError::TooShort => f.write_str("a duration must be at least 1ms"),
            DurationError::TooLong => write!(
                f,
                "a duration must be at most {}d",
                LARGEST_WINDOW_MS / DAY_MS
            ),
        }
    }
}

impl std::error::Error for DurationError {}

/// Parses a duration into milliseconds, within `1..=LARGEST_WINDOW_MS`.
///
/// # Example
///
/// ```
/// use ratelimit_core::duration::{parse_duration_ms, DurationError};
///
/// assert_eq!(parse_duration_ms(b"250ms"), Ok(250));
/// assert_eq!(parse_duration_ms(b"5m"), Ok(300_000));
/// assert_eq!(parse_duration_ms(b"60"), Ok(60_000), "bare digits are seconds");
/// assert_eq!(parse_duration_ms(b"1.5s"), Err(DurationError::Malformed));
/// assert_eq!(parse_duration_ms(b"2w"), Err(DurationError::UnknownUnit));
/// assert_eq!(parse_duration_ms(b"0ms"), Err(DurationError::TooShort));
/// ```
pub fn parse_duration_ms(text: &[u8]) -> Result<i64, DurationError> {
    let digits_end = text
        .iter()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(text.len());
    if digits_end == 0 {
        return Err(DurationError::Malformed);
    }
    let (digits, unit) = text.split_at(digits_end);
    let unit_ms = unit_in_ms(unit)?;
    let amount = parse_digits(digits).ok_or(DurationError::TooLong)?;
    let total = amount.checked_mul(unit_ms).ok_or(DurationError::TooLong)?;
    match total {
        0 => Err(DurationError::TooShort),
        ms if ms > LARGEST_WINDOW_MS => Err(DurationError::TooLong),
        ms => Ok(ms),
    }
}

fn unit_in_ms(unit: &[u8]) -> Result<i64, DurationError> {
    if !unit.iter().all(u8::is_ascii_alphabetic) {
        return Err(DurationError::Malformed);
    }
    // Compared in place: lowering a copy would allocate on every call.
    const UNITS: [(&[u8], i64); 6] = [
        (b"", SECOND_MS),
        (b"s", SECOND_MS),
        (b"ms", 1),
        (b"m", 60 * SECOND_MS),
        (b"h", 3_600 * SECOND_MS),
        (b"d", DAY_MS),
    ];
    UNITS
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case(unit))
        .map(|&(_, ms)| ms)
        .ok_or(DurationError::UnknownUnit)
}

/// Parses ASCII digits (already checked) into an `i64`; `None` on overflow.
pub(crate) fn parse_digits(digits: &[u8]) -> Option<i64> {
    digits.iter().try_fold(0i64, |acc, &d| {
        acc.checked_mul(10)?.checked_add(i64::from(d - b'0'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_every_unit_and_bare_seconds() {
        let cases: &[(&[u8], i64)] = &[
            (b"60", 60_000),
            (b"250ms", 250),
            (b"1ms", 1),
            (b"10s", 10_000),
            (b"5m", 300_000),
            (b"1h", 3_600_000),
            (b"1d", 86_400_000),
            (b"366d", MAX_WINDOW_MS),
            (b"3660d", LARGEST_WINDOW_MS),
            (b"2H", 7_200_000),
            (b"3MS", 3),
        ];
        for (text, ms) in cases {
            assert_eq!(parse_duration_ms(text), Ok(*ms), "{:?}", text);
        }
    }

    #[test]
    fn refuses_bad_durations_with_the_reason() {
        use DurationError::*;
        let cases: &[(&[u8], DurationError)] = &[
            (b"", Malformed),
            (b"-5", Malformed),
            (b"+5", Malformed),
            (b"1.5s", Malformed),
            (b" 5s", Malformed),
            (b"5 s", Malformed),
            (b"s", Malformed),
            (b"5w", UnknownUnit),
            (b"5sec", UnknownUnit),
            (b"0", TooShort),
            (b"0ms", TooShort),
            (b"3661d", TooLong),
            (b"9223372036854775807", TooLong),
            (b"9223372036854775808ms", TooLong),
            (b"99999999999999999999999d", TooLong),
        ];
        for (text, err) in cases {
            assert_eq!(parse_duration_ms(text), Err(*err), "{:?}", text);
        }
    }

    #[test]
    fn errors_say_why_in_words() {
        use DurationError::*;
        let texts = [
            (
                Malformed,
                "a duration must be a positive integer of seconds or an integer with a unit \
                 (ms, s, m, h, d), e.g. 250ms or 5m",
            ),
            (
                UnknownUnit,
                "a duration has an unknown unit: use ms, s, m, h or d",
            ),
            (TooShort, "a duration must be at least 1ms"),
            (TooLong, "a duration must be at most 3660d"),
        ];
        for (err, text) in texts {
            assert_eq!(err.to_string(), text);
            let _: Box<dyn std::error::Error> = Box::new(err);
        }
    }
}
