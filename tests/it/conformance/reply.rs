//! A reply as the suite compares it, and the match of a reply against the table's
//! expectation, with the clock readings that make time-dependent fields exact.

use super::table::Expect;
use std::collections::HashMap;

/// A RESP2 reply, reduced to what the table can say about it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Got {
    Int(i64),
    Nil,
    Bytes(Vec<u8>),
    Array(Vec<Got>),
    Error(String),
    /// Anything else (a RESP3 type, a client-side failure), as text.
    Other(String),
}

impl Got {
    pub fn of(result: redis::RedisResult<redis::Value>) -> Got {
        match result {
            Ok(value) => Got::from_value(value),
            Err(err) => match err.code() {
                Some(code) => Got::Error(
                    format!("{code} {}", err.detail().unwrap_or(""))
                        .trim()
                        .to_string(),
                ),
                None => Got::Other(format!("client error: {err}")),
            },
        }
    }

    fn from_value(value: redis::Value) -> Got {
        use redis::Value;
        match value {
            Value::Int(n) => Got::Int(n),
            Value::Nil => Got::Nil,
            Value::BulkString(bytes) => Got::Bytes(bytes),
            Value::SimpleString(text) => Got::Bytes(text.into_bytes()),
            Value::Okay => Got::Bytes(b"OK".to_vec()),
            Value::Array(items) => Got::Array(items.into_iter().map(Got::from_value).collect()),
            Value::ServerError(err) => Got::Error(
                format!("{} {}", err.code(), err.details().unwrap_or(""))
                    .trim()
                    .to_string(),
            ),
            other => Got::Other(format!("{other:?}")),
        }
    }
}

impl std::fmt::Display for Got {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Got::Int(n) => write!(f, "{n}"),
            Got::Nil => write!(f, "nil"),
            Got::Bytes(bytes) => write!(f, "{:?}", String::from_utf8_lossy(bytes)),
            Got::Array(items) => {
                let parts: Vec<String> = items.iter().map(ToString::to_string).collect();
                write!(f, "[{}]", parts.join(", "))
            }
            Got::Error(e) => write!(f, "(error) {e}"),
            Got::Other(text) => write!(f, "{text}"),
        }
    }
}

/// The server's clock around one call, in ms: when the scenario began, just before the call
/// and just after its reply. The server read its clock for the call somewhere in
/// `before_ms..=after_ms`.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    pub start_ms: i64,
    pub before_ms: i64,
    pub after_ms: i64,
}

/// The end of the epoch-aligned window of `window_ms` that holds `now_ms`.
pub fn aligned_end(now_ms: i64, window_ms: i64) -> i64 {
    now_ms - now_ms.rem_euclid(window_ms) + window_ms
}

/// When the calendar period after the one holding `now_ms` starts: the next local midnight
/// that begins a day, a week (Monday), a month (on the anchor day, or the month's last day
/// when it is shorter) or a year, in `tz`.
pub fn next_period_start(now_ms: i64, period: &str, anchor: u32, tz: chrono_tz::Tz) -> i64 {
    use chrono::{DateTime, Datelike, Days, NaiveDate, TimeZone};
    let today = DateTime::from_timestamp_millis(now_ms)
        .expect("a time chrono can hold")
        .with_timezone(&tz)
        .date_naive();
    let billing = |year: i32, month: u32| {
        (1..=anchor.max(1))
            .rev()
            .find_map(|day| NaiveDate::from_ymd_opt(year, month, day))
            .expect("a day of the month")
    };
    let next = match period {
        "day" => today + Days::new(1),
        "week" => today + Days::new(7 - u64::from(today.weekday().num_days_from_monday())),
        "month" => {
            let this_month = billing(today.year(), today.month());
            if today < this_month {
                this_month
            } else if today.month() == 12 {
                billing(today.year() + 1, 1)
            } else {
                billing(today.year(), today.month() + 1)
            }
        }
        _ => NaiveDate::from_ymd_opt(today.year() + 1, 1, 1).expect("a new year's day"),
    };
    let midnight = next.and_hms_opt(0, 0, 0).expect("midnight");
    tz.from_local_datetime(&midnight)
        .earliest()
        .expect("midnight exists in the zones the table names")
        .timestamp_millis()
}

/// Whether `got` is what `expect` allows, keeping the ids it names in `captures`;
/// otherwise why not.
pub fn check(
    expect: &Expect,
    got: &Got,
    clock: &Clock,
    captures: &mut HashMap<String, Vec<u8>>,
) -> Result<(), String> {
    match (expect, got) {
        (Expect::Array(want), Got::Array(have)) => {
            if want.len() != have.len() {
                return Err(format!("{} elements, not {}", have.len(), want.len()));
            }
            for (i, (w, h)) in want.iter().zip(have).enumerate() {
                check(w, h, clock, captures).map_err(|e| format!("element {i}: {e}"))?;
            }
            Ok(())
        }
        (Expect::Error(want), Got::Error(have)) if want == have => Ok(()),
        (Expect::Text(want), Got::Bytes(have)) if want.as_bytes() == have.as_slice() => Ok(()),
        (Expect::Nil, Got::Nil) => Ok(()),
        (Expect::Id(name), Got::Bytes(id)) if (1..=64).contains(&id.len()) => {
            if let Some(name) = name {
                captures.insert(name.clone(), id.clone());
            }
            Ok(())
        }
        (_, Got::Int(n)) => check_int(expect, *n, clock),
        _ => Err(format!("{got} is not {expect}")),
    }
}

fn check_int(expect: &Expect, n: i64, clock: &Clock) -> Result<(), String> {
    let moments = clock.before_ms..=clock.after_ms;
    let fits = match *expect {
        Expect::Int(want) => n == want,
        Expect::Range(low, high) => (low..=high).contains(&n),
        // The call read some instant of the interval: one of them must give this value.
        Expect::Edge { window_ms, plus_ms } => moments
            .clone()
            .any(|t| aligned_end(t, window_ms) - t + plus_ms == n),
        Expect::End { window_ms } => moments.clone().any(|t| aligned_end(t, window_ms) == n),
        Expect::Since { ms } => (ms - (clock.after_ms - clock.start_ms)..=ms).contains(&n),
        Expect::Calendar {
            ref period,
            anchor,
            ref zone,
        } => {
            let tz: chrono_tz::Tz = zone.parse().map_err(|e| format!("zone {zone:?}: {e}"))?;
            moments
                .clone()
                .any(|t| next_period_start(t, period, anchor, tz) - t == n)
        }
        _ => false,
    };
    if fits {
        return Ok(());
    }
    let detail = match *expect {
        Expect::Edge { window_ms, plus_ms } => format!(
            " (from {} to {})",
            aligned_end(clock.after_ms, window_ms) - clock.after_ms + plus_ms,
            aligned_end(clock.before_ms, window_ms) - clock.before_ms + plus_ms
        ),
        Expect::Since { ms } => {
            format!(" (from {} to {ms})", ms - (clock.after_ms - clock.start_ms))
        }
        _ => String::new(),
    };
    Err(format!("{n} is not {expect}{detail}"))
}
