//! Envoy's time units, and the tier `requests_per_unit` per unit makes.

use crate::rules::Tier;
use ratelimit_core::calendar::Period;

/// The time units of Envoy's `RateLimitResponse.RateLimit.Unit`. A month and a year are
/// calendar windows (in UTC, or the descriptor's `tz`), never 30 or 365 days.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// `SECOND`: a 1 s window.
    Second,
    /// `MINUTE`: a 60 s window.
    Minute,
    /// `HOUR`: a 3,600 s window.
    Hour,
    /// `DAY`: a 24 h window.
    Day,
    /// `WEEK`: a 7-day window.
    Week,
    /// `MONTH`: a calendar month.
    Month,
    /// `YEAR`: a calendar year.
    Year,
}

impl Unit {
    /// From the YAML (`second`, `SECOND`, ...); `None` for anything else.
    pub(crate) fn parse(text: &str) -> Option<Unit> {
        Some(match text.to_ascii_lowercase().as_str() {
            "second" => Unit::Second,
            "minute" => Unit::Minute,
            "hour" => Unit::Hour,
            "day" => Unit::Day,
            "week" => Unit::Week,
            "month" => Unit::Month,
            "year" => Unit::Year,
            _ => return None,
        })
    }

    /// From Envoy's enum number; `None` for UNKNOWN (0) and numbers it does not define.
    pub fn from_proto(value: i32) -> Option<Unit> {
        Some(match value {
            1 => Unit::Second,
            2 => Unit::Minute,
            3 => Unit::Hour,
            4 => Unit::Day,
            5 => Unit::Month,
            6 => Unit::Year,
            7 => Unit::Week,
            _ => return None,
        })
    }

    /// Envoy's enum number.
    pub(crate) fn proto(self) -> i32 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 2,
            Unit::Hour => 3,
            Unit::Day => 4,
            Unit::Month => 5,
            Unit::Year => 6,
            Unit::Week => 7,
        }
    }

    /// The window's length; a calendar period's nominal one.
    pub(crate) fn window_ms(self) -> u64 {
        let nominal = |period: Period| u64::try_from(period.nominal_ms()).unwrap_or(u64::MAX);
        match self {
            Unit::Second => 1_000,
            Unit::Minute => 60_000,
            Unit::Hour => 3_600_000,
            Unit::Day => 86_400_000,
            Unit::Week => 7 * 86_400_000,
            Unit::Month => nominal(Period::Month),
            Unit::Year => nominal(Period::Year),
        }
    }

    /// The calendar period this unit counts in: always for a month and a year, and for a
    /// day and a week when the descriptor names a time zone (`zoned`). Otherwise a day and
    /// a week are fixed windows of 24 h and 7 days, as in envoyproxy/ratelimit.
    pub(crate) fn calendar(self, zoned: bool) -> Option<Period> {
        match self {
            Unit::Month => Some(Period::Month),
            Unit::Year => Some(Period::Year),
            Unit::Day if zoned => Some(Period::Day),
            Unit::Week if zoned => Some(Period::Week),
            _ => None,
        }
    }

    pub(super) fn name(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// The tier `requests_per_unit` per this unit.
    pub(super) fn tier(self, requests_per_unit: u32, zoned: bool) -> Tier {
        Tier {
            limit: u64::from(requests_per_unit),
            window_ms: self.window_ms(),
            period: self.calendar(zoned),
        }
    }
}
