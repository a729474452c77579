//! Calendar windows on real servers: `day`, `week`, `month` and `year` in a zone (`TZ`),
//! a month with a billing day (`ANCHOR`), alone and in tiers, through RL.HIT, RL.PEEK,
//! RL.REFUND, RL.MHIT and policies; the reply's `reset_after_ms` and the key's
//! `PEXPIRETIME` against the next local boundary computed here with chrono-tz from the
//! server's clock; refused options that write nothing; a changed zone or anchor renewing
//! the key from its usage; a replica and an AOF reload holding the primary's bytes.
//!
//! The module reads the real clock, so the DST days, February 29th and the month ends are
//! proven in the core's unit tests (`core/src/calendar.rs`), with time passed in.

use testkit::policy::*;
use testkit::*;

use chrono::{DateTime, Datelike, NaiveDate, NaiveTime, TimeZone};
use chrono_tz::Tz;
use redis::Connection;

const ZONES: [&str; 4] = [
    "Europe/Paris",
    "Pacific/Chatham",
    "Asia/Kathmandu",
    "America/New_York",
];

/// The first instant of local `date` in `tz` (none of the zones above skips a midnight).
fn local_midnight(tz: Tz, date: NaiveDate) -> i64 {
    tz.from_local_datetime(&date.and_time(NaiveTime::MIN))
        .earliest()
        .expect("a midnight that exists")
        .timestamp_millis()
}

/// The end of the calendar window `period` (with `anchor` for a month) that `now_ms` falls
/// in, in `zone`: computed here from the local date, apart from the module's code.
fn boundary(now_ms: i64, period: &str, anchor: u32, zone: &str) -> i64 {
    let tz: Tz = zone.parse().expect("an IANA name");
    let today = DateTime::from_timestamp_millis(now_ms)
        .expect("a time")
        .with_timezone(&tz)
        .date_naive();
    let month_start =
        |year: i32, month: u32| NaiveDate::from_ymd_opt(year, month, 1).expect("a month");
    let following = |year: i32, month: u32| {
        if month == 12 {
            (year + 1, 1)
        } else {
            (year, month + 1)
        }
    };
    let billing = |year: i32, month: u32| {
        let (ny, nm) = following(year, month);
        let last = month_start(ny, nm).pred_opt().expect("a day").day();
        NaiveDate::from_ymd_opt(year, month, anchor.max(1).min(last)).expect("a day")
    };
    let next = match period {
        "day" => today.succ_opt().expect("a day"),
        "week" => {
            let mut day = today.succ_opt().expect("a day");
            while day.weekday() != chrono::Weekday::Mon {
                day = day.succ_opt().expect("a day");
            }
            day
        }
        "month" => {
            let this = billing(today.year(), today.month());
            if today < this {
                this
            } else {
                let (ny, nm) = following(today.year(), today.month());
                billing(ny, nm)
            }
        }
        "year" => month_start(today.year() + 1, 1),
        other => panic!("no period {other}"),
    };
    local_midnight(tz, next)
}

/// The key's boundary when `before` and `after` (server clock readings around a call) fall
/// in the same window; `None` when the call straddled a boundary.
fn settled(before: i64, after: i64, period: &str, anchor: u32, zone: &str) -> Option<i64> {
    let end = boundary(before, period, anchor, zone);
    (boundary(after, period, anchor, zone) == end).then_some(end)
}

fn exists(con: &mut Connection, key: &[u8]) -> bool {
    redis::cmd("EXISTS")
        .arg(key)
        .query::<i64>(con)
        .expect("EXISTS")
        == 1
}

#[test]
fn reset_after_and_expiry_are_the_next_local_boundary() {
    each_flavor(|flavor| {
        let server = Server::start(ServerConfig::new(flavor));
        let mut con = server.conn();
        let mut n = 0;
        for zone in ZONES {
            for (period, anchor) in [
                ("day", 0),
                ("week", 0),
                ("month", 0),
                ("month", 31),
                ("month", 12),
                ("year", 0),
            ] {
                n += 1;
                let name = key("calendar", n);
                let mut spec = format!("5 {period} TZ {zone}");
                if anchor > 0 {
                    spec.push_str(&format!(" ANCHOR {anchor}"));
                }
                let before = server_ms(&mut con);
                let reply = rl(&mut con, "RL.HIT", &name, &spec);
                let after = server_ms(&mut con);
                let Some(end) = settled(before, after, period, anchor, zone) else {
                    continue;
                };
                let context = format!("{flavor:?} {spec}");
                assert!(reply.allowed, "{context}");
                assert_eq!(reply.remaining, 4, "{context}");
                assert_eq!(pexpiretime(&mut con, &name), end, "{context}");
                assert!(
                    end - after <= reply.reset_after_ms && reply.reset_after_ms <= end - before,
                    "{context}: reset_after_ms {} for an end {} ms after {before}",
                    reply.reset_after_ms,
                    end - before
                );
                // A look and a second hit agree on the same end.
                let look = rl(&mut con, "RL.PEEK", &name, &spec);
                assert_eq!(look.remaining, 3, "{context}");
                let second = rl(&mut con, "RL.HIT", &name, &format!("{spec} COST 4"));
                assert!(second.allowed, "{context}");
                assert_eq!(second.remaining, 0, "{context}");
                let denied = rl(&mut con, "RL.HIT", &name, &spec);
                assert!(!denied.allowed, "{context}");
                let now = server_ms(&mut con);
                assert!(
                    denied.retry_after_ms >= end - now && denied.retry_after_ms <= end - after,
                    "{context}"
                );
                assert_eq!(pexpiretime(&mut con, &name), end, "{context}");
            }
        }
    });
}

#[test]
fn tiers_mix_calendar_windows_with_durations() {
    each_flavor(|flavor| {
        let server = Server::start(ServerConfig::new(flavor));
        let mut con = server.conn();
        let name = key("tiers", 0);
        let spec = "10 1s 1000 month TZ Europe/Paris";
        let before = server_ms(&mut con);
        let reply = rl(&mut con, "RL.HIT", &name, spec);
        let after = server_ms(&mut con);
        assert!(reply.allowed, "{flavor:?}");
        assert_eq!(reply.remaining, 9, "{flavor:?}: the 1s tier binds");
        if let Some(end) = settled(before, after, "month", 0, "Europe/Paris") {
            assert_eq!(
                pexpiretime(&mut con, &name),
                end,
                "{flavor:?}: the month's end"
            );
            assert!(reply.reset_after_ms >= end - after, "{flavor:?}");
        }
        let value = get_bytes(&mut con, &name).expect("a value");
        assert_eq!(value[0], 0x02, "{flavor:?}: the tiers form with calendars");
        // Eleven at once are more than the second's ten: refused whole.
        let big = rl(&mut con, "RL.HIT", &name, &format!("{spec} COST 11"));
        assert!(!big.allowed, "{flavor:?}");
        assert_eq!(big.retry_after_ms, -1, "{flavor:?}");
        // A refund gives back in both tiers.
        let refund = rl(&mut con, "RL.REFUND", &name, spec);
        assert!(refund.allowed, "{flavor:?}");
        assert_eq!(refund.remaining, 10, "{flavor:?}");
        assert!(
            !exists(&mut con, &name),
            "{flavor:?}: an emptied key is deleted"
        );
        // RL.MHIT: a calendar spec beside a duration spec.
        let other = key("tiers", 1);
        let before = server_ms(&mut con);
        let (allowed, binding, keys): (i64, i64, Vec<Vec<i64>>) = redis::cmd("RL.MHIT")
            .arg(2)
            .arg(&name)
            .arg(&other)
            .arg(&[
                "SPEC",
                "5",
                "week",
                "TZ",
                "Asia/Kathmandu",
                "SPEC",
                "5",
                "1h",
            ])
            .query(&mut con)
            .expect("RL.MHIT");
        assert_eq!((allowed, binding), (1, 0), "{flavor:?}");
        assert_eq!((keys[0][2], keys[1][2]), (4, 4), "{flavor:?}: {keys:?}");
        let after = server_ms(&mut con);
        if let Some(end) = settled(before, after, "week", 0, "Asia/Kathmandu") {
            assert_eq!(pexpiretime(&mut con, &name), end, "{flavor:?}");
        }
        // RL.RESET knows a calendar key for a state of its own.
        let reset: i64 = redis::cmd("RL.RESET")
            .arg(&name)
            .query(&mut con)
            .expect("RL.RESET");
        assert_eq!(reset, 1, "{flavor:?}");
        assert!(!exists(&mut con, &name), "{flavor:?}");
    });
}

#[test]
fn refused_options_name_the_problem_and_write_nothing() {
    each_flavor(|flavor| {
        let server = Server::start(ServerConfig::new(flavor));
        let mut con = server.conn();
        let name = key("refused", 0);
        rl(&mut con, "RL.HIT", &name, "5 month TZ Europe/Paris");
        let before = stored(&mut con, &name);
        let fresh = key("refused", 1);
        #[rustfmt::skip]
        let cases: [(&str, &str); 11] = [
            ("5 month TZ Mars/Olympus", "ERR TZ must be an IANA time zone name, e.g. Europe/Paris"),
            ("5 month TZ +02:00", "ERR TZ must be an IANA time zone name, e.g. Europe/Paris"),
            ("5 month TZ", "ERR TZ must be an IANA time zone name, e.g. Europe/Paris"),
            ("5 month TZ UTC TZ Europe/Paris", "ERR TZ is given more than once"),
            ("5 1d TZ Europe/Paris", "ERR TZ applies to calendar windows: day, week, month or year"),
            ("5 month ANCHOR 0", "ERR ANCHOR must be a day of the month from 1 to 31"),
            ("5 month ANCHOR 32", "ERR ANCHOR must be a day of the month from 1 to 31"),
            ("5 month ANCHOR x1", "ERR ANCHOR must be a day of the month from 1 to 31"),
            ("5 month ANCHOR 3 ANCHOR 3", "ERR ANCHOR is given more than once"),
            ("5 week ANCHOR 3", "ERR ANCHOR applies to a month window"),
            ("5 month ALGO gcra", "ERR calendar windows (day, week, month, year) count as ALGO fixed, not ALGO gcra"),
        ];
        for (spec, expected) in cases {
            for target in [&name, &fresh] {
                for command in ["RL.HIT", "RL.PEEK", "RL.REFUND"] {
                    let words: Vec<&str> = spec.split(' ').collect();
                    let cmd = redis::cmd(command).arg(target).arg(&words).clone();
                    assert_eq!(
                        error_text(&mut con, &cmd),
                        expected,
                        "{flavor:?} {command} {spec}"
                    );
                }
            }
            assert_eq!(
                stored(&mut con, &name),
                before,
                "{flavor:?} {spec}: unchanged"
            );
            assert!(
                !exists(&mut con, &fresh),
                "{flavor:?} {spec}: nothing written"
            );
        }
        let cmd = redis::cmd("RL.MHIT")
            .arg(1)
            .arg(&fresh)
            .arg(&["SPEC", "5", "month", "TZ", "Nowhere"])
            .clone();
        let text = error_text(&mut con, &cmd);
        assert!(
            text.ends_with("TZ must be an IANA time zone name, e.g. Europe/Paris"),
            "{flavor:?}: {text}"
        );
        assert!(!exists(&mut con, &fresh), "{flavor:?}");
        // A zone name of 1 MB: no IANA name is that long, refused without reading it all.
        let huge = format!("Europe/{}", "x".repeat(1 << 20));
        let cmd = redis::cmd("RL.HIT")
            .arg(&name)
            .arg(&["5", "month", "TZ", &huge])
            .clone();
        assert_eq!(
            error_text(&mut con, &cmd),
            "ERR TZ must be an IANA time zone name, e.g. Europe/Paris",
            "{flavor:?}"
        );
        assert_eq!(stored(&mut con, &name), before, "{flavor:?}: unchanged");
    });
}

#[test]
fn a_changed_zone_or_anchor_renews_the_key_from_its_usage() {
    each_flavor(|flavor| {
        let server = Server::start(ServerConfig::new(flavor));
        let mut con = server.conn();
        let name = key("renew", 0);
        rl(&mut con, "RL.HIT", &name, "10 month TZ Europe/Paris COST 4");
        for (spec, zone, anchor) in [
            ("10 month TZ Asia/Kathmandu", "Asia/Kathmandu", 0),
            ("10 month TZ Asia/Kathmandu ANCHOR 20", "Asia/Kathmandu", 20),
            (
                "10 month TZ Pacific/Chatham ANCHOR 20",
                "Pacific/Chatham",
                20,
            ),
        ] {
            let before = server_ms(&mut con);
            let reply = rl(&mut con, "RL.HIT", &name, spec);
            let after = server_ms(&mut con);
            assert!(reply.allowed, "{flavor:?} {spec}");
            assert_eq!(
                reply.remaining, 5,
                "{flavor:?} {spec}: the 4 units still count"
            );
            if let Some(end) = settled(before, after, "month", anchor, zone) {
                assert_eq!(pexpiretime(&mut con, &name), end, "{flavor:?} {spec}");
            }
            rl(&mut con, "RL.REFUND", &name, spec);
        }
    });
}

#[test]
fn calendar_policies_survive_a_restart() {
    each_flavor(|flavor| {
        let server = Server::start(policy_config(flavor));
        let mut con = server.conn();
        policy_set(&mut con, b"billing", "1000 month ANCHOR 5 TZ europe/paris");
        policy_set(
            &mut con,
            b"daily",
            "10 1s 100 day TZ Asia/Kathmandu MODE shadow",
        );
        let billing = words("1000 month ALGO fixed TZ Europe/Paris ANCHOR 5 MODE enforce");
        assert_eq!(
            policy_get(&mut con, b"billing"),
            Some(billing.clone()),
            "{flavor:?}"
        );
        let before = server_ms(&mut con);
        let reply = hit_policy(&mut con, "rl:billing", b"billing");
        let after = server_ms(&mut con);
        assert_eq!(reply.remaining, 999, "{flavor:?}");
        if let Some(end) = settled(before, after, "month", 5, "Europe/Paris") {
            assert_eq!(pexpiretime(&mut con, "rl:billing"), end, "{flavor:?}");
        }
        // The same rule spelt out reads the policy's key as its own.
        let spelt = rl(
            &mut con,
            "RL.HIT",
            b"rl:billing",
            "1000 month TZ Europe/Paris ANCHOR 5",
        );
        assert_eq!(spelt.remaining, 998, "{flavor:?}");
        let cmd = policy_cmd(&["SET", "bad", "5", "month", "TZ", "Mars/Olympus"]);
        assert_eq!(
            error_text(&mut con, &cmd),
            "ERR TZ must be an IANA time zone name, e.g. Europe/Paris",
            "{flavor:?}"
        );
        let expected = all_policies(&server);
        let server = server.save_and_restart();
        assert_eq!(
            all_policies(&server),
            expected,
            "{flavor:?} after a restart"
        );
        let mut con = server.conn();
        assert_eq!(
            hit_policy(&mut con, "rl:billing", b"billing").remaining,
            997,
            "{flavor:?}"
        );
    });
}

#[test]
fn a_replica_and_the_aof_hold_the_primarys_calendar_keys() {
    each_flavor(|flavor| {
        let (primary, replica) = primary_with_replica_configs(
            ServerConfig::new(flavor).arg("appendonly", "yes"),
            ServerConfig::new(flavor),
        );
        let mut con = primary.conn();
        let mut names = Vec::new();
        for (n, zone) in ZONES.iter().enumerate() {
            for (m, spec) in [
                format!("3 day TZ {zone}"),
                format!("3 1s 100 week TZ {zone}"),
                format!("3 month TZ {zone} ANCHOR 31"),
                format!("3 year TZ {zone}"),
            ]
            .iter()
            .enumerate()
            {
                let name = key("replicated", n * 10 + m);
                for _ in 0..4 {
                    rl(&mut con, "RL.HIT", &name, spec);
                }
                rl(&mut con, "RL.REFUND", &name, spec);
                names.push(name);
            }
        }
        wait_for_replicas(&mut con, 1);
        let on_primary: Vec<_> = names.iter().map(|n| stored(&mut con, n)).collect();
        let mut on_replica = replica.conn();
        let replicated: Vec<_> = names.iter().map(|n| stored(&mut on_replica, n)).collect();
        assert_eq!(on_primary, replicated, "{flavor:?}");
        assert!(
            on_primary
                .iter()
                .all(|(value, expiry)| value.is_some() && *expiry > 0),
            "{flavor:?}"
        );
        assert_eq!(
            replica.command_calls("RL.HIT"),
            None,
            "{flavor:?}: effects, not commands"
        );
        drop(replica);
        let primary = primary.restart_on_the_aof();
        let mut con = primary.conn();
        let reloaded: Vec<_> = names.iter().map(|n| stored(&mut con, n)).collect();
        assert_eq!(on_primary, reloaded, "{flavor:?} after the AOF");
    });
}
