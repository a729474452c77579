//! RL.HIT refuses malformed calls, keys of other types and strings it did not write with
//! one exact, printable error each; the error is counted under its code in
//! `INFO errorstats`, nothing is written, and the server keeps answering.

use testkit::*;

use redis::Connection;
use std::collections::BTreeMap;

const ARITY: &str = "ERR wrong number of arguments for 'RL.HIT' command";
const LIMIT: &str = "ERR limit must be a positive integer";
const WINDOW_MALFORMED: &str = "ERR window must be a positive integer of seconds or an integer \
                                with a unit (ms, s, m, h, d), e.g. 250ms or 5m, or a calendar \
                                period: day, week, month or year";
const WINDOW_UNIT: &str = "ERR window has an unknown unit: use ms, s, m, h or d (a week is 7d), \
                           or a calendar period: day, week, month or year";
const WINDOW_ZERO: &str = "ERR window must be at least 1ms";
const WINDOW_TOO_LONG: &str = "ERR window must be at most 366d (ratelimit.max-window-ms)";
const COST: &str = "ERR COST must be a positive integer";
const COST_TWICE: &str = "ERR COST is given more than once";
const NOT_OURS: &str = "ERR key holds a string that is not a ratelimit state";
const MISSING_WINDOW: &str = "ERR each limit needs a window: limit window [limit window ...]";
const TOO_MANY_TIERS: &str = "ERR at most 8 tiers per key";
const BURST_NOT_APPLICABLE: &str = "ERR BURST applies to ALGO token or gcra with a single tier";
const ALGO_TWICE: &str = "ERR ALGO is given more than once";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// The rate-limit key every malformed call below is aimed at, so that "nothing written"
/// is checked on a key that really holds a count.
const GUARD: &[u8] = b"guard";

/// 2100-01-01T00:00:00Z: an expiry no test reaches, set on keys the module must not touch.
const FAR_EXPIRY_MS: i64 = 4_102_444_800_000;

fn unknown_option(quoted: &str) -> String {
    format!("ERR unknown option '{quoted}' (expected ALGO, BURST, COST, TZ or ANCHOR)")
}

/// `RL.HIT` with these arguments, as bytes.
fn rl_hit(args: &[Vec<u8>]) -> redis::Cmd {
    let mut cmd = redis::cmd("RL.HIT");
    for arg in args {
        cmd.arg(arg.as_slice());
    }
    cmd
}

/// Each malformed call (the arguments after `RL.HIT`) and its exact error reply.
fn malformed_calls() -> Vec<(Vec<Vec<u8>>, String)> {
    let junk = vec![b'x'; 1 << 20];
    let digits = vec![b'9'; 1 << 20];
    let nine_tiers: Vec<&[u8]> = std::iter::once(GUARD)
        .chain([&b"1"[..], b"1h"].repeat(9))
        .collect();
    let row = |args: &[&[u8]], error: &str| {
        let args = args.iter().map(|a| a.to_vec()).collect();
        (args, error.to_string())
    };
    vec![
        row(&[], ARITY),
        row(&[GUARD], ARITY),
        row(&[GUARD, b"5"], ARITY),
        row(&[GUARD, b"0", b"1h"], LIMIT),
        row(&[GUARD, b"-1", b"1h"], LIMIT),
        row(&[GUARD, b"+5", b"1h"], LIMIT),
        row(&[GUARD, b"1.5", b"1h"], LIMIT),
        row(&[GUARD, b"abc", b"1h"], LIMIT),
        row(&[GUARD, b"", b"1h"], LIMIT),
        row(&[GUARD, b"9223372036854775808", b"1h"], LIMIT),
        row(&[GUARD, &digits, b"1h"], LIMIT),
        row(&[GUARD, &junk, b"1h"], LIMIT),
        row(&[GUARD, b"5", b"0"], WINDOW_ZERO),
        row(&[GUARD, b"5", b"0ms"], WINDOW_ZERO),
        row(&[GUARD, b"5", b"-1"], WINDOW_MALFORMED),
        row(&[GUARD, b"5", b"1.5s"], WINDOW_MALFORMED),
        row(&[GUARD, b"5", b""], WINDOW_MALFORMED),
        row(&[GUARD, b"5", b"5 s"], WINDOW_MALFORMED),
        row(&[GUARD, b"5", &junk], WINDOW_MALFORMED),
        row(&[GUARD, b"5", b"10y"], WINDOW_UNIT),
        row(&[GUARD, b"5", b"5sec"], WINDOW_UNIT),
        row(&[GUARD, b"5", b"367d"], WINDOW_TOO_LONG),
        row(&[GUARD, b"5", b"9223372036854775807"], WINDOW_TOO_LONG),
        row(&[GUARD, b"5", &digits], WINDOW_TOO_LONG),
        row(&[GUARD, b"5", b"1h", b"COST"], COST),
        row(&[GUARD, b"5", b"1h", b"cost"], COST),
        row(&[GUARD, b"5", b"1h", b"COST", b"0"], COST),
        row(&[GUARD, b"5", b"1h", b"COST", b"-1"], COST),
        row(&[GUARD, b"5", b"1h", b"COST", b"x"], COST),
        row(
            &[GUARD, b"5", b"1h", b"COST", b"1", b"COST", b"1"],
            COST_TWICE,
        ),
        row(&[GUARD, b"5", b"1h", b"BURST", b"1"], BURST_NOT_APPLICABLE),
        row(
            &[GUARD, b"5", b"1h", b"10", b"1m", b"BURST", b"1"],
            BURST_NOT_APPLICABLE,
        ),
        // After the tiers, a word that starts with a letter is an option: an unknown one
        // is named, with the valid ones.
        row(&[GUARD, b"5", b"1h", b"extra"], &unknown_option("extra")),
        row(&[GUARD, b"5", b"1h", b"10"], MISSING_WINDOW),
        row(&nine_tiers, TOO_MANY_TIERS),
        row(&[GUARD, b"5", b"1h", b"10", b"COST", b"2"], MISSING_WINDOW),
        row(
            &[GUARD, b"5", b"1h", b"ALGO", b"fixed", b"ALGO", b"fixed"],
            ALGO_TWICE,
        ),
        row(
            &[GUARD, b"5", b"1h", b"COST", b"1", b"extra"],
            &unknown_option("extra"),
        ),
        // Quoted: at most 32 bytes, anything unprintable as '?', so the reply stays one
        // line of text whatever the client sent.
        row(
            &[GUARD, b"5", b"1h", b"COST", b"1", &junk],
            &unknown_option(&format!("{}...", "x".repeat(32))),
        ),
        row(
            &[GUARD, b"5", b"1h", b"COST", b"1", b"x\0\r\ny"],
            &unknown_option("x???y"),
        ),
        row(
            &[GUARD, b"5", b"1h", b"COST", b"1", b"a b\xff\r\n-ERR"],
            &unknown_option("a?b???-ERR"),
        ),
    ]
}

/// Creates the guard key through RL.HIT and returns its (value, PEXPIRETIME).
fn make_guard(con: &mut Connection) -> (Option<Vec<u8>>, i64) {
    // A year-long window, so that its end (which would expire the key mid-test) is as far
    // off as a window can be; should it be less than an hour away, take the 365-day
    // windows, whose edges lie elsewhere.
    for window in ["366d", "365d"] {
        let _: () = redis::cmd("DEL").arg(GUARD).query(con).expect("DEL");
        hit(con, GUARD, &["10", window]);
        hit(con, GUARD, &["10", window]);
        let now: (i64, i64) = redis::cmd("TIME").query(con).expect("TIME");
        let expiry = pexpiretime(con, GUARD);
        if expiry - now.0 * 1_000 > 3_600_000 {
            let state = (get_bytes(con, GUARD), expiry);
            assert_eq!(state.0.as_deref(), Some(&b"2"[..]), "guard counted");
            return state;
        }
    }
    panic!("both the 366d and the 365d windows end within the hour");
}

/// Asserts that the server answers and that `key` still holds `state`.
fn assert_alive_and_unchanged(
    con: &mut Connection,
    key: &[u8],
    state: &(Option<Vec<u8>>, i64),
    context: &str,
) {
    let pong: String = redis::cmd("PING").query(con).expect("PING");
    assert_eq!(pong, "PONG", "{context}");
    let now = (get_bytes(con, key), pexpiretime(con, key));
    assert_eq!(&now, state, "{context}: {key:?} changed");
}

/// Zeroes the error counters. Use one connection from here until [`error_stats`]: a new
/// connection may itself cause errors (redis-rs sends `CLIENT SETINFO`, which Redis 7.0
/// does not know).
fn reset_error_stats(con: &mut Connection) {
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(con)
        .expect("CONFIG RESETSTAT");
}

/// `INFO errorstats` as error code -> count.
fn error_stats(con: &mut Connection) -> BTreeMap<String, i64> {
    let info: String = redis::cmd("INFO")
        .arg("errorstats")
        .query(con)
        .expect("INFO errorstats");
    info.lines()
        .filter_map(|line| line.strip_prefix("errorstat_"))
        .map(|line| {
            let (code, count) = line
                .split_once(":count=")
                .unwrap_or_else(|| panic!("odd errorstats line {line:?}"));
            (code.to_string(), count.trim().parse().expect("count"))
        })
        .collect()
}

fn stats(pairs: &[(&str, i64)]) -> BTreeMap<String, i64> {
    pairs
        .iter()
        .map(|&(code, n)| (code.to_string(), n))
        .collect()
}

#[test]
fn malformed_calls_get_their_exact_error_and_write_nothing() {
    let calls = malformed_calls();
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let guard = make_guard(&mut con);
        reset_error_stats(&mut con);
        for (args, expected) in &calls {
            let shown: Vec<String> = args
                .iter()
                .map(|a| String::from_utf8_lossy(&a[..a.len().min(40)]).into_owned())
                .collect();
            let context = format!("{flavor:?} RL.HIT {shown:?}");
            assert_eq!(&error_text(&mut con, &rl_hit(args)), expected, "{context}");
            assert_alive_and_unchanged(&mut con, GUARD, &guard, &context);
        }
        // The arity error names the command as registered, however the client spelled it.
        let lower = redis::cmd("rl.hit").arg(GUARD).clone();
        assert_eq!(error_text(&mut con, &lower), ARITY, "{flavor:?}");
        let errors = calls.len() as i64 + 1;
        assert_eq!(
            error_stats(&mut con),
            stats(&[("ERR", errors)]),
            "{flavor:?}"
        );
        assert_alive_and_unchanged(&mut con, GUARD, &guard, &format!("{flavor:?} at the end"));
    });
}

#[test]
fn the_largest_limit_and_cost_are_accepted() {
    const MAX: &str = "9223372036854775807";
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let first = hit(&mut con, "max", &[MAX, "1h"]);
        assert!(first.allowed, "{flavor:?} {first:?}");
        assert_eq!(
            (first.limit, first.remaining),
            (i64::MAX, i64::MAX - 1),
            "{flavor:?}"
        );
        assert_eq!(
            get_bytes(&mut con, "max"),
            Some(b"1".to_vec()),
            "{flavor:?}"
        );
        // The whole limit in one hit fills the window to i64::MAX exactly...
        let all = hit(&mut con, "max-cost", &[MAX, "366d", "COST", MAX]);
        assert!(all.allowed, "{flavor:?} {all:?}");
        assert_eq!(all.remaining, 0, "{flavor:?}");
        assert_eq!(
            get_bytes(&mut con, "max-cost"),
            Some(MAX.as_bytes().to_vec())
        );
        // ...and one more unit does not overflow: it is refused until the window ends (the
        // 366-day window's end is months away, not inside this test).
        let more = hit(&mut con, "max-cost", &[MAX, "366d"]);
        assert!(!more.allowed, "{flavor:?} {more:?}");
        assert!(more.retry_after_ms > 0, "{flavor:?} {more:?}");
        assert_eq!(
            get_bytes(&mut con, "max-cost"),
            Some(MAX.as_bytes().to_vec())
        );
        let pong: String = redis::cmd("PING").query(&mut con).expect("PING");
        assert_eq!(pong, "PONG");
    });
}

/// `DUMP` and `PEXPIRETIME` of a key: equal before and after means untouched.
fn snapshot(con: &mut Connection, key: &str) -> (Option<Vec<u8>>, i64) {
    let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(con).expect("DUMP");
    (dump, pexpiretime(con, key))
}

#[test]
fn keys_of_other_types_get_wrongtype_and_stay_untouched() {
    let creators: [(&str, &[&str]); 5] = [
        ("list", &["RPUSH", "list", "a", "b"]),
        ("hash", &["HSET", "hash", "f", "v"]),
        ("set", &["SADD", "set", "m"]),
        ("zset", &["ZADD", "zset", "1", "m"]),
        ("stream", &["XADD", "stream", "1-1", "f", "v"]),
    ];
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let mut before = Vec::new();
        for (key, create) in creators {
            let _: redis::Value = redis::cmd(create[0])
                .arg(&create[1..])
                .query(&mut con)
                .expect("create");
            let _: () = redis::cmd("PEXPIREAT")
                .arg(key)
                .arg(FAR_EXPIRY_MS)
                .query(&mut con)
                .expect("PEXPIREAT");
            before.push(snapshot(&mut con, key));
        }
        reset_error_stats(&mut con);
        for ((key, _), before) in creators.iter().zip(&before) {
            for call in [&[*key, "5", "1h"][..], &[*key, "5", "1h", "COST", "2"]] {
                let text = error_text(&mut con, redis::cmd("RL.HIT").arg(call));
                assert_eq!(text, WRONGTYPE, "{flavor:?} {call:?}");
            }
            assert_eq!(&snapshot(&mut con, key), before, "{flavor:?} {key} touched");
        }
        let errors = 2 * creators.len() as i64;
        assert_eq!(
            error_stats(&mut con),
            stats(&[("WRONGTYPE", errors)]),
            "{flavor:?}"
        );
        let pong: String = redis::cmd("PING").query(&mut con).expect("PING");
        assert_eq!(pong, "PONG");
    });
}

#[test]
fn strings_the_module_did_not_write_are_refused_and_untouched() {
    // (value, with an expiry): each is something RL.HIT never stores, not a canonical
    // positive decimal. (A count without an expiry is a state that lost it: see
    // tests/lost_expiry.rs.)
    let strings: &[(&[u8], bool)] = &[
        (b"hello", false),
        (b"hello", true),
        (b"05", false),
        (b"007", true),
        (b"", true),
        (b"0", true),
        (b"-3", true),
        (b"+3", true),
        (b"3 ", true),
        (b"1\0", true),
        (b"9223372036854775808", true),
        // Short words: none may pass for a state's tag byte.
        (b"Pay", true),
        (b"Tab", true),
        (b"@home", true),
        ("\u{e9}t\u{e9}".as_bytes(), true),
    ];
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let mut before = Vec::new();
        for (i, (value, with_expiry)) in strings.iter().enumerate() {
            let key = format!("s:{i}");
            let mut set = redis::cmd("SET");
            set.arg(&key).arg(*value);
            if *with_expiry {
                set.arg("PXAT").arg(FAR_EXPIRY_MS);
            }
            let _: () = set.query(&mut con).expect("SET");
            before.push((get_bytes(&mut con, &key), pexpiretime(&mut con, &key)));
        }
        reset_error_stats(&mut con);
        for (i, ((value, _), before)) in strings.iter().zip(&before).enumerate() {
            let key = format!("s:{i}");
            let context = format!("{flavor:?} {:?}", String::from_utf8_lossy(value));
            let text = error_text(&mut con, redis::cmd("RL.HIT").arg(&key).arg("5").arg("1h"));
            assert_eq!(text, NOT_OURS, "{context}");
            assert_alive_and_unchanged(&mut con, key.as_bytes(), before, &context);
        }
        let errors = strings.len() as i64;
        assert_eq!(
            error_stats(&mut con),
            stats(&[("ERR", errors)]),
            "{flavor:?}"
        );
    });
}
