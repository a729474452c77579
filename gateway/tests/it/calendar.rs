//! A calendar limit in the gateway's rules: `"2/month"` with `tz` and `anchor` beside a
//! `"5/1s"` tier. The module counts it in one key that expires exactly at the local
//! billing boundary (computed here with chrono-tz), the third request of the month gets a
//! 429, and `RateLimit-Policy` names the calendar tier without a window length.

use testkit::gateway::*;

use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, TimeZone};
use chrono_tz::Tz;

const RULES: &str = r#"
[[rule]]
name = "monthly"
path = "/m"
limits = ["5/1s", "2/month"]
tz = "Pacific/Chatham"
anchor = 31
"#;

/// The next billing boundary (day 31, or the month's last day) in Chatham after `now_ms`.
fn billing_boundary(now_ms: i64) -> i64 {
    let tz: Tz = "Pacific/Chatham".parse().expect("an IANA name");
    let today = DateTime::from_timestamp_millis(now_ms)
        .expect("a time")
        .with_timezone(&tz)
        .date_naive();
    let last_day = |year: i32, month: u32| {
        let (ny, nm) = if month == 12 {
            (year + 1, 1)
        } else {
            (year, month + 1)
        };
        let first = NaiveDate::from_ymd_opt(ny, nm, 1).expect("a month");
        first.pred_opt().expect("a day")
    };
    let this_month = last_day(today.year(), today.month());
    let next = if today < this_month {
        this_month
    } else {
        last_day(
            this_month.year() + i32::from(this_month.month() == 12),
            this_month.month() % 12 + 1,
        )
    };
    tz.from_local_datetime(&next.and_time(NaiveTime::MIN))
        .earliest()
        .expect("a midnight")
        .timestamp_millis()
}

#[test]
fn a_monthly_limit_in_a_zone_resets_at_the_local_billing_day() {
    each_flavor(|flavor| {
        let (redis, _upstream, gateway) = stack(flavor, RULES);
        let f = format!("{flavor:?}");
        let mut con = redis.conn();
        let before = testkit::server_ms(&mut con);
        let first = gateway.get("/m");
        let after = testkit::server_ms(&mut con);
        assert_eq!(first.status, 200, "{f}: {first:?}");
        let policy = first.policy();
        assert_eq!(policy.len(), 2, "{f}: {policy:?}");
        assert_eq!((policy[0].q, policy[0].w), (5, Some(1)), "{f}");
        assert_eq!(
            (policy[1].q, policy[1].w),
            (2, None),
            "{f}: a month has no one length"
        );
        let limits = first.limits();
        assert_eq!(limits[1].r, 1, "{f}: {limits:?}");
        let stored = keys(&redis, "*");
        assert_eq!(stored.len(), 1, "{f}: {stored:?}");
        let end = billing_boundary(before);
        if billing_boundary(after) == end {
            let expiry = testkit::pexpiretime(&mut con, stored[0].as_str());
            assert_eq!(expiry, end, "{f}: the key expires at the billing boundary");
            // `t` is the seconds to the month's reset, rounded up.
            let t = limits[1].t;
            assert!(
                t * 1_000 >= end - after && (t - 1) * 1_000 < end - before,
                "{f}: t={t}"
            );
        }
        assert_eq!(gateway.get("/m").status, 200, "{f}");
        let third = gateway.get("/m");
        assert_eq!(third.status, 429, "{f}: {third:?}");
        assert_eq!(third.limits()[1].r, 0, "{f}");
    });
}
