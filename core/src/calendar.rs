//! Calendar windows: `day`, `week`, `month` and `year`, aligned to the calendar of a time
//! zone (`TZ <IANA name>`, UTC by default), a week starting on Monday (ISO 8601), a month
//! optionally resetting on a billing day (`ANCHOR <day>`).
//!
//! The zone rules come from the tz database that `chrono-tz` carries; nothing here knows a
//! zone's offsets. A window ends at the first instant of the local day that starts the
//! next period: a 23-hour day in spring and a 25-hour day in autumn are one day each, and a
//! midnight that a zone skips (a spring gap at 00:00) starts the day at the end of the gap.
//! Time is passed in, as ms since the Unix epoch.
//!
//! A zone is identified in stored values by [`Zone::id`], a 32-bit hash of its IANA name:
//! small enough to store in every key, stable across versions of the database (names never
//! change meaning), and checked free of collisions over every name the database carries.
//!
//! # Example
//!
//! ```
//! use ratelimit_core::calendar::{period_end, Calendar, Period, Zone};
//!
//! let paris = Zone::from_name(b"Europe/Paris").expect("an IANA name");
//! let month = Calendar { period: Period::Month, anchor: 0, zone: paris };
//! // 2027-03-31T21:59:59.999Z is 23:59:59.999 in Paris (summer time, +02:00).
//! let now_ms = 1_806_530_399_999;
//! // April starts at 2027-03-31T22:00:00Z in Paris.
//! assert_eq!(period_end(now_ms, &month), Ok(now_ms + 1));
//! ```

use crate::checked::OutOfRange;
use crate::duration::DAY_MS;
use chrono::{DateTime, Datelike, Days, LocalResult, NaiveDate, NaiveTime, Offset, TimeZone};
use chrono_tz::{GapInfo, Tz, TZ_VARIANTS};
use std::sync::OnceLock;

/// A calendar period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    /// From local midnight to the next.
    Day,
    /// From Monday's local midnight to the next Monday's.
    Week,
    /// From the first (or the anchor day) of a month to that of the next.
    Month,
    /// From January 1st to the next.
    Year,
}

impl Period {
    /// Every period with its name in commands.
    pub const ALL: [(Period, &'static str); 4] = [
        (Period::Day, "day"),
        (Period::Week, "week"),
        (Period::Month, "month"),
        (Period::Year, "year"),
    ];

    /// The period named `name` (case-insensitive).
    pub fn from_name(name: &[u8]) -> Option<Period> {
        Self::ALL
            .iter()
            .find(|(_, known)| name.eq_ignore_ascii_case(known.as_bytes()))
            .map(|(period, _)| *period)
    }

    /// The period's name in commands.
    pub fn name(self) -> &'static str {
        match self {
            Period::Day => "day",
            Period::Week => "week",
            Period::Month => "month",
            Period::Year => "year",
        }
    }

    /// The period's longest length without offset changes: what `ratelimit.max-window-ms`
    /// is checked against, and a tier's `window_ms`.
    pub fn nominal_ms(self) -> i64 {
        match self {
            Period::Day => DAY_MS,
            Period::Week => 7 * DAY_MS,
            Period::Month => 31 * DAY_MS,
            Period::Year => 366 * DAY_MS,
        }
    }

    fn code(self) -> u64 {
        match self {
            Period::Day => 1,
            Period::Week => 2,
            Period::Month => 3,
            Period::Year => 4,
        }
    }

    fn from_code(code: u64) -> Option<Period> {
        Self::ALL
            .iter()
            .map(|(period, _)| *period)
            .find(|period| period.code() == code)
    }
}

/// The longest zone name [`Zone::from_name`] reads.
pub const MAX_ZONE_NAME_LEN: usize = 64;

/// A time zone of the tz database, identified by the hash of its IANA name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Zone {
    id: u32,
}

/// FNV-1a, 32 bits: a zone's identity in stored values.
const fn name_hash(name: &[u8]) -> u32 {
    let mut hash = 0x811c_9dc5u32;
    let mut at = 0;
    while at < name.len() {
        hash = (hash ^ name[at] as u32).wrapping_mul(0x0100_0193);
        at += 1;
    }
    hash
}

/// Every zone of the database by its id, sorted, built on first use.
fn zones_by_id() -> &'static [(u32, Tz)] {
    static ZONES: OnceLock<Vec<(u32, Tz)>> = OnceLock::new();
    ZONES.get_or_init(|| {
        let mut zones: Vec<(u32, Tz)> = TZ_VARIANTS
            .iter()
            .map(|tz| (name_hash(tz.name().as_bytes()), *tz))
            .collect();
        zones.sort_unstable_by_key(|(id, _)| *id);
        zones
    })
}

impl Zone {
    /// UTC, the zone of a calendar window without `TZ`.
    pub const UTC: Zone = Zone {
        id: name_hash(b"UTC"),
    };

    /// The zone with the IANA name `name` (`Europe/Paris`, `UTC`), matched exactly or,
    /// failing that, ignoring ASCII case; `None` for a name the database does not carry.
    pub fn from_name(name: &[u8]) -> Option<Zone> {
        // No IANA name is longer (the longest has 32 bytes): a huge argument is refused
        // before it is validated, hashed or compared with every name.
        if name.len() > MAX_ZONE_NAME_LEN {
            return None;
        }
        let text = std::str::from_utf8(name).ok()?;
        let tz = text.parse::<Tz>().ok().or_else(|| {
            TZ_VARIANTS
                .iter()
                .find(|tz| tz.name().as_bytes().eq_ignore_ascii_case(name))
                .copied()
        })?;
        Some(Zone {
            id: name_hash(tz.name().as_bytes()),
        })
    }

    /// The number stored for this zone.
    pub fn id(self) -> u32 {
        self.id
    }

    /// The zone with the stored number `id`, which need not be one this database carries
    /// (a value written by a newer one): such a zone compares unequal to every known zone,
    /// so a request renews the key from its usage.
    pub fn from_id(id: u32) -> Zone {
        Zone { id }
    }

    /// The zone's rules; `None` for an id this database does not carry.
    fn tz(self) -> Option<Tz> {
        let zones = zones_by_id();
        let at = zones.binary_search_by_key(&self.id, |(id, _)| *id).ok()?;
        zones.get(at).map(|(_, tz)| *tz)
    }

    /// The zone's IANA name; `None` for an id this database does not carry.
    pub fn name(self) -> Option<&'static str> {
        self.tz().map(|tz| tz.name())
    }
}

/// A calendar window: a period in a zone, for a month possibly an anchor day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Calendar {
    /// Day, week, month or year.
    pub period: Period,
    /// For a month, the day it resets on (2..=31; the last day of a shorter month); 0 for
    /// the first, and for every other period.
    pub anchor: u8,
    /// The zone whose calendar it follows.
    pub zone: Zone,
}

impl Calendar {
    /// The number stored for this calendar (never 0: 0 stands for no calendar).
    pub fn code(&self) -> i64 {
        let code =
            self.period.code() | u64::from(self.anchor & 0x1f) << 3 | u64::from(self.zone.id) << 8;
        // 40 bits at most: always positive.
        code as i64
    }

    /// The calendar [`code`](Self::code) gave `code` for.
    pub fn from_code(code: i64) -> Option<Calendar> {
        let code = u64::try_from(code).ok()?;
        let period = Period::from_code(code & 0b111)?;
        let anchor = ((code >> 3) & 0x1f) as u8;
        let zone = u32::try_from(code >> 8).ok()?;
        let valid_anchor = anchor == 0 || (period == Period::Month && anchor >= 2);
        valid_anchor.then_some(Calendar {
            period,
            anchor,
            zone: Zone::from_id(zone),
        })
    }
}

/// The end of the period of `calendar` that `now_ms` falls in: the first instant of the
/// local day that starts the next period, as ms since the epoch.
pub fn period_end(now_ms: i64, calendar: &Calendar) -> Result<i64, OutOfRange> {
    let tz = calendar.zone.tz().ok_or(OutOfRange)?;
    let now = DateTime::from_timestamp_millis(now_ms).ok_or(OutOfRange)?;
    // Checked: near chrono's last representable day, an offset east of UTC would carry
    // the local time past it (`date_naive` panics there).
    let offset = tz.offset_from_utc_datetime(&now.naive_utc()).fix();
    let today = now
        .naive_utc()
        .checked_add_offset(offset)
        .ok_or(OutOfRange)?
        .date();
    let next = match calendar.period {
        Period::Day => today.succ_opt(),
        Period::Week => {
            let to_monday = 7 - u64::from(today.weekday().num_days_from_monday());
            today.checked_add_days(Days::new(to_monday))
        }
        Period::Month => next_billing_day(today, calendar.anchor),
        Period::Year => today
            .year()
            .checked_add(1)
            .and_then(|year| NaiveDate::from_ymd_opt(year, 1, 1)),
    }
    .ok_or(OutOfRange)?;
    first_instant(&tz, next, now_ms)
}

/// The days of `month` (1..=12) in `year`.
fn days_in_month(year: i32, month: u32) -> Option<u32> {
    let (next_year, next_month) = if month == 12 {
        (year.checked_add(1)?, 1)
    } else {
        (year, month + 1)
    };
    let first_of_next = NaiveDate::from_ymd_opt(next_year, next_month, 1)?;
    Some(first_of_next.pred_opt()?.day())
}

/// The day a month bills on: the anchor, or its last day when it is shorter.
fn billing_day(year: i32, month: u32, anchor: u8) -> Option<NaiveDate> {
    let day = u32::from(anchor.max(1)).min(days_in_month(year, month)?);
    NaiveDate::from_ymd_opt(year, month, day)
}

/// The first billing day after `today`.
fn next_billing_day(today: NaiveDate, anchor: u8) -> Option<NaiveDate> {
    let (year, month) = (today.year(), today.month());
    let this_month = billing_day(year, month, anchor)?;
    if today < this_month {
        return Some(this_month);
    }
    let (year, month) = if month == 12 {
        (year.checked_add(1)?, 1)
    } else {
        (year, month + 1)
    };
    billing_day(year, month, anchor)
}

/// The first instant of local `date` in `tz` after `now_ms`: its midnight; when the clock
/// goes back across it, the earlier one unless it has passed (the clock went back from
/// after it to the day before, which then ends at the later one); the end of the gap when
/// the zone skips it.
fn first_instant(tz: &Tz, date: NaiveDate, now_ms: i64) -> Result<i64, OutOfRange> {
    let midnight = date.and_time(NaiveTime::MIN);
    let start = match tz.from_local_datetime(&midnight) {
        LocalResult::Single(start) => start.timestamp_millis(),
        LocalResult::Ambiguous(earlier, later) => {
            let earlier = earlier.timestamp_millis();
            if earlier > now_ms {
                earlier
            } else {
                later.timestamp_millis()
            }
        }
        LocalResult::None => {
            let gap = GapInfo::new(&midnight, tz).ok_or(OutOfRange)?;
            gap.end.ok_or(OutOfRange)?.timestamp_millis()
        }
    };
    // Never an end that has passed: no window would count.
    if start > now_ms {
        Ok(start)
    } else {
        Err(OutOfRange)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_zone_name_fits_the_cap_and_a_longer_one_is_refused() {
        for tz in TZ_VARIANTS {
            assert!(tz.name().len() <= MAX_ZONE_NAME_LEN, "{}", tz.name());
            assert!(
                Zone::from_name(tz.name().as_bytes()).is_some(),
                "{}",
                tz.name()
            );
        }
        let padded = format!("Europe/Paris{}", " ".repeat(MAX_ZONE_NAME_LEN));
        assert_eq!(Zone::from_name(padded.as_bytes()), None);
        assert_eq!(Zone::from_name(&vec![b'a'; 100 * 1024 * 1024]), None);
    }
    use chrono::{NaiveDateTime, Utc};
    use proptest::prelude::*;

    const HOUR: i64 = 3_600_000;

    fn zone(name: &str) -> Zone {
        Zone::from_name(name.as_bytes()).expect("an IANA name")
    }

    fn cal(period: Period, anchor: u8, name: &str) -> Calendar {
        Calendar {
            period,
            anchor,
            zone: zone(name),
        }
    }

    /// Ms since the epoch of an RFC 3339 time with its offset.
    fn at(text: &str) -> i64 {
        DateTime::parse_from_rfc3339(text)
            .expect("an RFC 3339 time")
            .timestamp_millis()
    }

    fn end(now: &str, calendar: Calendar) -> i64 {
        period_end(at(now), &calendar).expect("in range")
    }

    #[test]
    fn zone_ids_are_unique_and_utc_is_the_constant() {
        let mut ids: Vec<u32> = TZ_VARIANTS
            .iter()
            .map(|tz| name_hash(tz.name().as_bytes()))
            .collect();
        ids.sort_unstable();
        let before = ids.len();
        ids.dedup();
        assert_eq!(ids.len(), before, "two IANA names hash alike");
        assert_eq!(Zone::UTC, zone("UTC"));
        assert_eq!(Zone::UTC.name(), Some("UTC"));
        assert_eq!(zone("europe/PARIS"), zone("Europe/Paris"));
        assert_eq!(zone("Europe/Paris").name(), Some("Europe/Paris"));
        for bad in [
            &b"Mars/Olympus"[..],
            b"",
            b"Europe/Paris ",
            b"\xff",
            b"+02:00",
        ] {
            assert_eq!(Zone::from_name(bad), None, "{bad:?}");
        }
        assert_eq!(Zone::from_id(7).name(), None);
    }

    #[test]
    fn codes_round_trip_and_refuse_what_is_never_written() {
        for (period, _) in Period::ALL {
            let calendar = cal(period, 0, "Pacific/Chatham");
            assert_eq!(Calendar::from_code(calendar.code()), Some(calendar));
        }
        let billing = cal(Period::Month, 31, "Asia/Kathmandu");
        assert_eq!(Calendar::from_code(billing.code()), Some(billing));
        assert!(billing.code() > 0);
        for bad in [0, -1, 5, 6, 7, 2 | 5 << 3, 3 | 1 << 3, i64::MAX] {
            assert_eq!(Calendar::from_code(bad), None, "{bad:#x}");
        }
    }

    #[test]
    fn a_day_in_paris_lasts_23_hours_in_spring_and_25_in_autumn() {
        let day = cal(Period::Day, 0, "Europe/Paris");
        // 2027-03-28: clocks go from 02:00 to 03:00.
        let spring_start = at("2027-03-28T00:00:00+01:00");
        let spring_end = end("2027-03-28T12:00:00+02:00", day);
        assert_eq!(spring_end, at("2027-03-29T00:00:00+02:00"));
        assert_eq!(spring_end - spring_start, 23 * HOUR);
        assert_eq!(end("2027-03-27T23:59:59.999+01:00", day), spring_start);
        // 2027-10-31: clocks go from 03:00 back to 02:00.
        let autumn_start = at("2027-10-31T00:00:00+02:00");
        let autumn_end = end("2027-10-31T02:30:00+01:00", day);
        assert_eq!(autumn_end, at("2027-11-01T00:00:00+01:00"));
        assert_eq!(autumn_end - autumn_start, 25 * HOUR);
        // Both 02:30s belong to the same day.
        assert_eq!(end("2027-10-31T02:30:00+02:00", day), autumn_end);
    }

    #[test]
    fn a_day_in_new_york_lasts_23_hours_in_spring_and_25_in_autumn() {
        let day = cal(Period::Day, 0, "America/New_York");
        // 2027-03-14 and 2027-11-07.
        let spring = end("2027-03-14T01:59:59-05:00", day) - at("2027-03-14T00:00:00-05:00");
        assert_eq!(spring, 23 * HOUR);
        let autumn = end("2027-11-07T01:30:00-05:00", day) - at("2027-11-07T00:00:00-04:00");
        assert_eq!(autumn, 25 * HOUR);
        assert_eq!(
            end("2027-11-07T01:30:00-04:00", day),
            at("2027-11-08T00:00:00-05:00")
        );
    }

    #[test]
    fn a_skipped_midnight_starts_the_day_at_the_end_of_the_gap() {
        // America/Havana springs forward at 00:00 (to 01:00) on 2027-03-14.
        let day = cal(Period::Day, 0, "America/Havana");
        let end = end("2027-03-13T12:00:00-05:00", day);
        assert_eq!(end, at("2027-03-14T01:00:00-04:00"));
        // An ambiguous midnight: America/Havana falls back at 01:00 to 00:00 on 2027-11-07,
        // so the day ends at the first 00:00.
        let autumn = period_end(at("2027-11-07T00:30:00-05:00"), &day).expect("in range");
        assert_eq!(autumn, at("2027-11-08T00:00:00-05:00"));
    }

    #[test]
    fn a_week_ends_at_monday_local_midnight() {
        let week = cal(Period::Week, 0, "Europe/Paris");
        // 2028-01-03 is a Monday.
        let monday = at("2028-01-03T00:00:00+01:00");
        assert_eq!(end("2027-12-29T10:00:00+01:00", week), monday);
        assert_eq!(end("2028-01-02T23:59:59.999+01:00", week), monday);
        assert_eq!(
            end("2028-01-03T00:00:00+01:00", week),
            monday + 7 * 24 * HOUR
        );
        // Sunday 23:30 in Paris is already Monday in UTC, not yet in Paris.
        assert_eq!(end("2028-01-02T22:30:00Z", week), monday);
        let utc = cal(Period::Week, 0, "UTC");
        assert_eq!(end("2028-01-02T23:30:00Z", utc), at("2028-01-03T00:00:00Z"));
    }

    #[test]
    fn months_end_on_their_last_day_leap_years_included() {
        let month = cal(Period::Month, 0, "UTC");
        assert_eq!(
            end("2028-02-29T23:59:59.999Z", month),
            at("2028-03-01T00:00:00Z")
        );
        assert_eq!(
            end("2028-02-01T00:00:00Z", month),
            at("2028-03-01T00:00:00Z")
        );
        assert_eq!(
            end("2027-02-28T12:00:00Z", month),
            at("2027-03-01T00:00:00Z")
        );
        assert_eq!(
            end("2027-04-30T12:00:00Z", month),
            at("2027-05-01T00:00:00Z")
        );
        assert_eq!(
            end("2027-12-31T23:59:59.999Z", month),
            at("2028-01-01T00:00:00Z")
        );
        let paris = cal(Period::Month, 0, "Europe/Paris");
        // 2027-03-31T23:30 in Paris is 21:30 UTC: the month ends at 22:00 UTC.
        assert_eq!(
            end("2027-03-31T21:30:00Z", paris),
            at("2027-03-31T22:00:00Z")
        );
    }

    #[test]
    fn an_anchor_bills_on_its_day_or_the_last_of_a_shorter_month() {
        let on_31 = cal(Period::Month, 31, "UTC");
        // March 31st to April 30th (April has 30 days), then May 31st.
        assert_eq!(
            end("2027-03-31T00:00:00Z", on_31),
            at("2027-04-30T00:00:00Z")
        );
        assert_eq!(
            end("2027-04-29T23:59:59Z", on_31),
            at("2027-04-30T00:00:00Z")
        );
        assert_eq!(
            end("2027-04-30T00:00:00Z", on_31),
            at("2027-05-31T00:00:00Z")
        );
        assert_eq!(
            end("2027-03-30T12:00:00Z", on_31),
            at("2027-03-31T00:00:00Z")
        );
        // February: the 28th, or the 29th in a leap year.
        assert_eq!(
            end("2027-02-01T00:00:00Z", on_31),
            at("2027-02-28T00:00:00Z")
        );
        assert_eq!(
            end("2028-02-01T00:00:00Z", on_31),
            at("2028-02-29T00:00:00Z")
        );
        assert_eq!(
            end("2028-02-29T00:00:00Z", on_31),
            at("2028-03-31T00:00:00Z")
        );
        let on_30 = cal(Period::Month, 30, "UTC");
        assert_eq!(
            end("2028-01-30T00:00:00Z", on_30),
            at("2028-02-29T00:00:00Z")
        );
        assert_eq!(
            end("2028-02-29T00:00:00Z", on_30),
            at("2028-03-30T00:00:00Z")
        );
        // Across a year boundary, in a zone.
        let on_15 = cal(Period::Month, 15, "Asia/Kathmandu");
        assert_eq!(
            end("2027-12-20T00:00:00+05:45", on_15),
            at("2028-01-15T00:00:00+05:45")
        );
        assert_eq!(
            end("2027-12-14T23:59:59+05:45", on_15),
            at("2027-12-15T00:00:00+05:45")
        );
    }

    #[test]
    fn a_year_ends_on_january_first_local_midnight() {
        let year = cal(Period::Year, 0, "Pacific/Chatham");
        // Chatham is at +13:45 in January (summer).
        assert_eq!(
            end("2027-06-01T00:00:00+12:45", year),
            at("2028-01-01T00:00:00+13:45")
        );
        assert_eq!(
            end("2027-12-31T23:59:59.999+13:45", year),
            at("2028-01-01T00:00:00+13:45")
        );
        assert_eq!(
            end("2028-01-01T00:00:00+13:45", year),
            at("2029-01-01T00:00:00+13:45")
        );
        let utc = cal(Period::Year, 0, "UTC");
        let leap = end("2028-01-01T00:00:00Z", utc) - at("2028-01-01T00:00:00Z");
        assert_eq!(leap, 366 * 24 * HOUR);
    }

    #[test]
    fn a_midnight_the_clock_goes_back_across_ends_after_now() {
        // America/St_Johns fell back at 00:01 to 23:01 until 2011: on 2009-11-01 the local
        // 00:00 came first at -02:30, then the clock read Saturday 23:01 again, and 00:00
        // came again at -03:30. During that second Saturday hour, the day ends at the
        // second midnight, not at the first, which has passed.
        let day = cal(Period::Day, 0, "America/St_Johns");
        let second_midnight = at("2009-11-01T00:00:00-03:30");
        for now in ["2009-10-31T23:01:00-03:30", "2009-10-31T23:59:59.999-03:30"] {
            assert_eq!(end(now, day), second_midnight, "{now}");
        }
        assert_eq!(
            end("2009-10-31T23:30:00-02:30", day),
            at("2009-11-01T00:00:00-02:30")
        );
        // Antarctica/Casey went from +11 to +08 at 02:00 on 2010-03-05.
        let month = cal(Period::Month, 0, "Antarctica/Casey");
        assert_eq!(
            end(
                "2010-03-04T23:30:00+08:00",
                cal(Period::Day, 0, "Antarctica/Casey")
            ),
            at("2010-03-05T00:00:00+08:00")
        );
        assert_eq!(
            end("2010-03-04T23:30:00+08:00", month),
            at("2010-04-01T00:00:00+08:00")
        );
    }

    #[test]
    fn times_at_the_limits_of_the_calendar_are_errors_not_panics() {
        let max = DateTime::<Utc>::MAX_UTC.timestamp_millis();
        let min = DateTime::<Utc>::MIN_UTC.timestamp_millis();
        for tz in TZ_VARIANTS.iter() {
            let zone = zone(tz.name());
            for (period, anchor) in [
                (Period::Day, 0),
                (Period::Week, 0),
                (Period::Month, 0),
                (Period::Month, 31),
                (Period::Year, 0),
            ] {
                let calendar = Calendar {
                    period,
                    anchor,
                    zone,
                };
                for base in [max, min] {
                    for hours in -30..=30 {
                        let now = base.saturating_add(hours * HOUR);
                        if let Ok(end) = period_end(now, &calendar) {
                            assert!(end > now, "{} {period:?} {now}", tz.name());
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn out_of_range_times_are_errors() {
        let day = cal(Period::Day, 0, "UTC");
        assert_eq!(period_end(i64::MAX, &day), Err(OutOfRange));
        assert_eq!(period_end(i64::MIN, &day), Err(OutOfRange));
        let unknown = Calendar {
            zone: Zone::from_id(7),
            ..day
        };
        assert_eq!(period_end(0, &unknown), Err(OutOfRange));
    }

    fn zones() -> impl Strategy<Value = Zone> {
        prop::sample::select(vec![
            "UTC",
            "Europe/Paris",
            "America/New_York",
            "Pacific/Chatham",
            "Asia/Kathmandu",
            "Australia/Lord_Howe",
            "America/Havana",
            "Pacific/Apia",
        ])
        .prop_map(zone)
    }

    fn periods() -> impl Strategy<Value = (Period, u8)> {
        prop_oneof![
            Just((Period::Day, 0)),
            Just((Period::Week, 0)),
            Just((Period::Year, 0)),
            prop_oneof![Just(0u8), 2u8..=31].prop_map(|anchor| (Period::Month, anchor)),
        ]
    }

    proptest! {
        /// Over 2000 to 2099: the end lies after now and within the period's length plus a
        /// day, the end's own period ends later, the local time at the end is midnight (or
        /// the end of a gap), and no instant between now and the end is a boundary.
        #[test]
        fn ends_are_the_next_local_boundary(
            now in 946_684_800_000i64..4_102_444_800_000,
            zone in zones(),
            (period, anchor) in periods(),
        ) {
            let calendar = Calendar { period, anchor, zone };
            let end = period_end(now, &calendar).expect("in range");
            prop_assert!(end > now);
            prop_assert!(end - now <= period.nominal_ms() + DAY_MS);
            let next = period_end(end, &calendar).expect("in range");
            prop_assert!(next > end);
            prop_assert_eq!(period_end(end - 1, &calendar), Ok(end));
            prop_assert_eq!(period_end(now + (end - now) / 2, &calendar), Ok(end));
            let tz = zone.tz().expect("known");
            let local: NaiveDateTime = DateTime::<Utc>::from_timestamp_millis(end)
                .expect("in range")
                .with_timezone(&tz)
                .naive_local();
            let before: NaiveDateTime = DateTime::<Utc>::from_timestamp_millis(end - 1)
                .expect("in range")
                .with_timezone(&tz)
                .naive_local();
            prop_assert!(local.date() > before.date(), "{local} after {before}");
            let expected_day = match period {
                Period::Month if anchor > 1 => {
                    u32::from(anchor).min(days_in_month(local.year(), local.month()).expect("a month"))
                }
                Period::Day | Period::Week => local.day(),
                Period::Month | Period::Year => 1,
            };
            prop_assert_eq!(local.day(), expected_day);
            if period == Period::Week {
                prop_assert_eq!(local.weekday(), chrono::Weekday::Mon);
            }
            if period == Period::Year {
                prop_assert_eq!(local.month(), 1);
            }
        }
    }
}
