//! Calendar windows through the limiter: what a key stores, when it expires, and how a
//! changed zone, anchor or period renews it from its usage.

use super::test_key::{fixed, Key, HOUR};
use super::{run, Action, AlgorithmKind, Limits, Write};
use crate::algorithm::Quota;
use crate::args::{parse_limits, Settings};
use crate::encoding::{classify, FORMAT_V1, FORMAT_V2};
use chrono::DateTime;

/// The limits of `RL.HIT key <args>`.
fn rule(args: &str) -> Limits {
    let words: Vec<&[u8]> = args.split(' ').map(str::as_bytes).collect();
    parse_limits(words.into_iter(), &Settings::default())
        .expect("a valid rule")
        .limits
}

fn at(text: &str) -> i64 {
    DateTime::parse_from_rfc3339(text)
        .expect("an RFC 3339 time")
        .timestamp_millis()
}

const HIT: Action = Action::Hit { cost: 1 };

#[test]
fn a_month_in_paris_expires_at_the_local_boundary_and_counts_like_fixed() {
    let month = rule("3 month TZ Europe/Paris");
    let mut key = Key::default();
    let now = at("2027-03-31T23:30:00+02:00");
    let first = key.run(&month, HIT, now);
    assert!(first.decision.allowed);
    assert_eq!(first.decision.reset_after_ms, 30 * 60_000);
    let (value, expiry) = key.value_and_expiry();
    assert_eq!(expiry, at("2027-04-01T00:00:00+02:00"));
    assert_eq!(value[0], FORMAT_V2, "the calendar is recorded: {value:?}");
    key.run(&month, HIT, now + 1);
    key.run(&month, HIT, now + 2);
    let denied = key.run(&month, HIT, now + 3);
    assert!(!denied.decision.allowed);
    assert_eq!(denied.decision.retry_after_ms, expiry - now - 3);
    assert_eq!(denied.write, Write::Nothing);
    // The next month starts empty and lasts 30 days (April).
    let april = key.run(&month, HIT, expiry);
    assert!(april.decision.allowed);
    assert_eq!(april.decision.remaining, 2);
    assert_eq!(april.decision.reset_after_ms, 30 * 24 * HOUR);
}

#[test]
fn tiers_mix_durations_and_calendars_in_one_value() {
    let limits = rule("2 1s 1000 day TZ America/New_York");
    let mut key = Key::default();
    // 2027-03-14 is 23 hours long in New York.
    let now = at("2027-03-14T00:00:00-05:00");
    let hit = key.run(&limits, HIT, now);
    assert_eq!(hit.tiers[0].reset_after_ms, 1_000);
    assert_eq!(hit.tiers[1].reset_after_ms, 23 * HOUR);
    let (value, expiry) = key.value_and_expiry();
    assert_eq!(expiry, now + 23 * HOUR);
    let Some(crate::encoding::StoredForm::Tiers { count, .. }) = classify(&value) else {
        panic!("the tiers form: {value:?}");
    };
    assert_eq!(count, 2);
    key.run(&limits, HIT, now + 1);
    let third = key.run(&limits, HIT, now + 2);
    assert!(!third.decision.allowed, "the second tier");
    assert_eq!(third.decision.remaining, 0);
    let later = key.run(&limits, HIT, now + 1_000);
    assert!(later.decision.allowed);
    assert_eq!(later.tiers[1].remaining, 997);
}

#[test]
fn a_changed_zone_anchor_or_period_renews_the_key_from_its_usage() {
    let now = at("2027-04-10T12:00:00Z");
    let mut key = Key::default();
    let paris = rule("10 month TZ Europe/Paris");
    key.run(&paris, Action::Hit { cost: 4 }, now);
    let (paris_value, paris_expiry) = key.value_and_expiry();
    assert_eq!(paris_expiry, at("2027-05-01T00:00:00+02:00"));
    for (args, expiry) in [
        (
            "10 month TZ Asia/Kathmandu",
            at("2027-05-01T00:00:00+05:45"),
        ),
        (
            "10 month TZ Asia/Kathmandu ANCHOR 15",
            at("2027-04-15T00:00:00+05:45"),
        ),
        (
            "10 month TZ Asia/Kathmandu ANCHOR 20",
            at("2027-04-20T00:00:00+05:45"),
        ),
        ("10 week TZ Asia/Kathmandu", at("2027-04-12T00:00:00+05:45")),
        ("10 1h", now + HOUR),
        ("10 day", at("2027-04-11T00:00:00Z")),
    ] {
        let limits = rule(args);
        let look = key.run(&limits, Action::Peek { cost: 1 }, now + 1);
        assert_eq!(
            look.decision.remaining, 5,
            "{args}: the 4 units still count"
        );
        let hit = key.run(&limits, HIT, now + 1);
        assert_eq!(hit.decision.remaining, 5, "{args}");
        let (_, got) = key.value_and_expiry();
        assert_eq!(got, expiry, "{args}");
        // Back to 4 used under the new rule, for the next one.
        key.run(&limits, Action::Refund { amount: 1 }, now + 1);
    }
    // The same rule again reads its own value without renewing.
    let mut again = Key::default();
    again.run(&paris, Action::Hit { cost: 4 }, now);
    assert_eq!(again.value_and_expiry(), (paris_value, paris_expiry));
    let same = again.run(&paris, Action::Refund { amount: 1 }, now + 1);
    assert!(
        same.decision.allowed,
        "a refund under the same rule gives back"
    );
}

#[test]
fn a_plain_count_renews_into_a_calendar_window_and_back() {
    let now = at("2027-04-10T12:00:00Z");
    let mut key = Key::default();
    key.run(&fixed(&[(10, 24 * HOUR)]), Action::Hit { cost: 3 }, now);
    let (value, _) = key.value_and_expiry();
    assert_eq!(value, b"3");
    let day = rule("10 day");
    let hit = key.run(&day, HIT, now + 1);
    assert_eq!(hit.decision.remaining, 6, "the plain count carried over");
    let (value, expiry) = key.value_and_expiry();
    assert_eq!(value[0], FORMAT_V2);
    assert_eq!(expiry, at("2027-04-11T00:00:00Z"));
    let back = key.run(&fixed(&[(10, 24 * HOUR)]), HIT, now + 2);
    assert_eq!(back.decision.remaining, 5);
    assert_eq!(key.value_and_expiry().0, b"5");
}

#[test]
fn values_of_fixed_length_keep_the_version_1_bytes() {
    let mut key = Key::default();
    let limits = fixed(&[(10, 1_000), (100, HOUR)]);
    let now = at("2027-04-10T12:00:00Z");
    key.run(&limits, HIT, now);
    let (value, _) = key.value_and_expiry();
    assert_eq!(value[0], FORMAT_V1);
    // A version 1 value written before calendars (the bytes of an older build) still
    // reads: two tiers, counts 1 and 1.
    let mut old = vec![FORMAT_V1, 1, 2];
    for (limit, window, end) in [(10u8, 1_000i64, now + 1_000), (100, HOUR, now + HOUR)] {
        old.push(limit);
        let mut varint = crate::codec::Bytes::new();
        crate::codec::put_varint(&mut varint, window);
        old.extend_from_slice(&varint);
        old.push(limit);
        old.push(1);
        old.extend_from_slice(&end.to_le_bytes());
    }
    assert_eq!(old, value);
    let hit = run(&limits, HIT, Some(&old), || Some(now + HOUR), now + 1).expect("answers");
    assert_eq!(hit.tiers[1].remaining, 98);
}

#[test]
fn calendar_values_that_lie_are_not_ours() {
    let now = at("2027-04-10T12:00:00Z");
    let mut key = Key::default();
    let month = rule("10 month ANCHOR 31");
    key.run(&month, HIT, now);
    let (value, expiry) = key.value_and_expiry();
    // Version 2 without a calendar, a calendar whose window is not its period's, and an
    // anchor on a day window are never written.
    let mut no_calendar = value.clone();
    let code_at = value.len() - 10;
    no_calendar.splice(code_at - 6..code_at, [0u8]);
    let mut wrong_window = value.clone();
    wrong_window[4] ^= 1;
    for lie in [no_calendar, wrong_window, value[..value.len() - 1].to_vec()] {
        let answer = run(&month, HIT, Some(&lie), || Some(expiry), now);
        assert_eq!(answer, Err(super::LimiterError::NotOurs), "{lie:?}");
        assert!(!super::is_state(&lie, Some(expiry)));
    }
    assert!(super::is_state(&value, Some(expiry)));
}

#[test]
fn a_calendar_key_that_lost_its_expiry_is_written_back_with_it() {
    let now = at("2027-04-10T12:00:00Z");
    let month = rule("10 month TZ Europe/Paris");
    let mut key = Key::default();
    key.run(&month, Action::Hit { cost: 10 }, now);
    let mut key = key.persisted();
    let denied = key.run(&month, HIT, now + 1);
    assert!(!denied.decision.allowed);
    let (_, expiry) = key.value_and_expiry();
    assert_eq!(expiry, at("2027-05-01T00:00:00+02:00"));
}

#[test]
fn every_algorithm_but_fixed_is_refused_and_fixed_is_the_default() {
    let limits = rule("10 week");
    assert_eq!(limits.algorithm, AlgorithmKind::Fixed);
    assert_eq!(limits.tiers[0].window_ms, 7 * 24 * HOUR);
    assert_ne!(limits.tiers[0], Quota::new(10, 7 * 24 * HOUR));
}

#[test]
fn a_day_that_the_clock_re_enters_still_counts_to_its_limit() {
    // America/St_Johns, 2009-11-01: the clock fell back from 00:01 to Saturday 23:01, so
    // Saturday's last hour came twice. A key written in the second one expires at the
    // second midnight, and its limit holds.
    let day = rule("1 day TZ America/St_Johns");
    let mut key = Key::default();
    let now = at("2009-10-31T23:30:00-03:30");
    let first = key.run(&day, HIT, now);
    assert!(first.decision.allowed);
    assert_eq!(first.decision.reset_after_ms, 30 * 60_000);
    let (_, expiry) = key.value_and_expiry();
    assert_eq!(expiry, at("2009-11-01T00:00:00-03:30"));
    let second = key.run(&day, HIT, now + 1);
    assert!(!second.decision.allowed, "one a day");
    assert_eq!(second.decision.retry_after_ms, expiry - now - 1);
}
