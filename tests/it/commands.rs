//! RL.HIT against real Redis and Valkey servers: the fixed-window semantics, every reply
//! field, RESP2 and RESP3, atomicity under concurrent clients, transactions and scripts,
//! binary keys, and what the server says about the command.

use testkit::*;

use redis::{Connection, Value};
use std::collections::HashSet;
use std::time::Duration;

const HOUR_MS: i64 = 3_600_000;
const DAY_MS: i64 = 24 * HOUR_MS;

/// Where the window of `window_ms` that holds `now_ms` ends: windows are aligned to
/// multiples of their length since the Unix epoch.
fn window_end(now_ms: i64, window_ms: i64) -> i64 {
    now_ms - now_ms.rem_euclid(window_ms) + window_ms
}

/// What one attempt observed, with the server clock read just before and just after it.
struct InWindow<T> {
    observed: T,
    before: i64,
    after: i64,
    /// The end of the one window that both clock readings fall in.
    end: i64,
}

impl<T> InWindow<T> {
    /// Asserts that `ms` is the time from some instant of the attempt to the window's end,
    /// which is what reset_after_ms and retry_after_ms must be.
    fn assert_until_end(&self, ms: i64, what: &str) {
        let (low, high) = (self.end - self.after, self.end - self.before);
        assert!(
            (low..=high).contains(&ms),
            "{what} = {ms}, expected within [{low}, {high}]"
        );
    }
}

/// Runs `attempt` until the server clock shows the same window of `window_ms` before and
/// after it, so that no window edge fell inside; the attempt gets its number (for fresh
/// key names) and the window's end. The attempt must only record: a test asserts on what
/// it returns, once the window is known to be one.
fn in_one_window<T>(
    server: &Server,
    window_ms: i64,
    mut attempt: impl FnMut(u32, i64) -> T,
) -> InWindow<T> {
    for n in 0..3 {
        let before = server.time_ms();
        let end = window_end(before, window_ms);
        let observed = attempt(n, end);
        let after = server.time_ms();
        if window_end(after, window_ms) == end {
            return InWindow {
                observed,
                before,
                after,
                end,
            };
        }
    }
    panic!("three attempts in a row straddled a window edge of {window_ms} ms");
}

/// One hit and the key's state right after it.
#[derive(Debug)]
struct Step {
    reply: Reply,
    value: Option<Vec<u8>>,
    expires_at: i64,
}

fn hit_and_read(con: &mut Connection, key: &str, args: &[&str]) -> Step {
    let reply = hit(con, key, args);
    Step {
        reply,
        value: get_bytes(con, key),
        expires_at: pexpiretime(con, key),
    }
}

fn decimal(count: i64) -> Option<Vec<u8>> {
    Some(count.to_string().into_bytes())
}

#[test]
fn counts_up_to_the_limit_then_denies_without_writing() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let run = in_one_window(&server, HOUR_MS, |n, _| {
            let key = format!("user:{n}");
            (0..4)
                .map(|_| hit_and_read(&mut con, &key, &["3", "1h"]))
                .collect::<Vec<_>>()
        });
        // The key expires when the hour-aligned window the hits fell in ends.
        let expiry = run.observed[0].expires_at;
        assert_eq!(expiry % HOUR_MS, 0, "{flavor:?} expiry {expiry}");
        assert!(
            run.before < expiry && expiry <= run.after + HOUR_MS,
            "{flavor:?} expiry {expiry} not in ({}, {}]",
            run.before,
            run.after + HOUR_MS
        );
        for (counted, step) in (1..=3).zip(&run.observed) {
            let r = step.reply;
            let context = format!("{flavor:?} hit {counted}: {step:?}");
            assert!(r.allowed, "{context}");
            assert_eq!(r.limit, 3, "{context}");
            assert_eq!(r.remaining, 3 - counted, "{context}");
            assert_eq!(r.retry_after_ms, 0, "{context}");
            run.assert_until_end(r.reset_after_ms, &context);
            assert_eq!(step.value, decimal(counted), "{context}");
            assert_eq!(step.expires_at, run.end, "{context}");
        }
        let denied = &run.observed[3];
        let context = format!("{flavor:?} hit 4: {denied:?}");
        let r = denied.reply;
        assert!(!r.allowed, "{context}");
        assert_eq!((r.limit, r.remaining), (3, 0), "{context}");
        run.assert_until_end(r.reset_after_ms, &context);
        // Both times are read at the same instant: the wait ends with the window.
        assert_eq!(r.retry_after_ms, r.reset_after_ms, "{context}");
        assert_eq!(denied.value, decimal(3), "{context}: value unchanged");
        assert_eq!(denied.expires_at, run.end, "{context}: expiry unchanged");
    });
}

#[test]
fn cost_counts_whole_units_and_a_cost_above_the_limit_never_fits() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let run = in_one_window(&server, HOUR_MS, |n, _| {
            let key = format!("cost:{n}");
            let steps: Vec<Step> = [
                ["10", "1h", "COST", "4"],
                ["10", "1h", "COST", "7"],
                ["10", "1h", "cost", "6"], // the option name is case-insensitive
                ["10", "1h", "COST", "11"],
            ]
            .iter()
            .map(|args| hit_and_read(&mut con, &key, args))
            .collect();
            let fresh = format!("cost-fresh:{n}");
            (
                steps,
                hit_and_read(&mut con, &fresh, &["10", "1h", "COST", "11"]),
            )
        });
        let (steps, fresh) = &run.observed;
        // (allowed, remaining, value after) for COST 4, 7, 6, 11 against a limit of 10.
        let expected = [(true, 6, 4), (false, 6, 4), (true, 0, 10), (false, 0, 10)];
        for (step, (allowed, remaining, value)) in steps.iter().zip(expected) {
            let context = format!("{flavor:?} {step:?}");
            let r = step.reply;
            assert_eq!(
                (r.allowed, r.limit, r.remaining),
                (allowed, 10, remaining),
                "{context}"
            );
            assert_eq!(step.value, decimal(value), "{context}");
            assert_eq!(step.expires_at, run.end, "{context}");
            run.assert_until_end(r.reset_after_ms, &context);
        }
        // A cost that fits the limit but not what is left: wait for the window's end.
        run.assert_until_end(steps[1].reply.retry_after_ms, "retry after COST 7");
        // A cost above the limit can never succeed: -1, however long one waits.
        assert_eq!(steps[3].reply.retry_after_ms, -1, "{flavor:?}");
        // On an empty key the same refusal counts nothing and creates no key.
        let r = fresh.reply;
        assert_eq!(
            [
                r.allowed as i64,
                r.limit,
                r.remaining,
                r.reset_after_ms,
                r.retry_after_ms
            ],
            [0, 10, 10, 0, -1],
            "{flavor:?}"
        );
        assert_eq!((&fresh.value, fresh.expires_at), (&None, -2), "{flavor:?}");
    });
}

#[test]
fn a_denied_hit_leaves_a_watch_intact_and_an_allowed_one_breaks_it() {
    // Rewriting the same value and expiry would look unchanged to GET and PEXPIRETIME;
    // WATCH tells whether the key was written at all. A 366-day window: its end is
    // months away, not inside this test.
    let calls: [(&str, &[&str], bool); 4] = [
        ("denied", &["1", "366d"], true),
        ("cost above the limit", &["1", "366d", "COST", "2"], true),
        ("malformed", &["1", "366d", "COST", "0"], true),
        ("allowed under a higher limit", &["2", "366d"], false),
    ];
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let (mut hitter, mut watcher) = (server.conn(), server.conn());
        assert!(hit(&mut hitter, "watched", &["1", "366d"]).allowed);
        for (what, args, survives) in calls {
            let outcome = watch_survives(&mut watcher, "watched", || {
                let _ = redis::cmd("RL.HIT")
                    .arg("watched")
                    .arg(args)
                    .query::<Value>(&mut hitter);
            });
            assert_eq!(outcome, survives, "{flavor:?} {what}: transaction executed");
        }
    });
}

#[test]
fn every_window_unit_expires_the_key_at_an_epoch_aligned_end() {
    let windows: &[(&str, i64)] = &[
        ("3600", HOUR_MS), // bare seconds
        ("3600s", HOUR_MS),
        ("60m", HOUR_MS),
        ("1h", HOUR_MS),
        ("3600000ms", HOUR_MS),
        ("2H", 2 * HOUR_MS),
        ("1d", DAY_MS),
        ("366d", 366 * DAY_MS),
    ];
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        for &(window, window_ms) in windows {
            let run = in_one_window(&server, window_ms, |n, _| {
                hit_and_read(&mut con, &format!("w:{window}:{n}"), &["5", window])
            });
            let step = &run.observed;
            let context = format!("{flavor:?} window {window}: {step:?}");
            assert!(step.reply.allowed, "{context}");
            assert_eq!(step.reply.remaining, 4, "{context}");
            assert_eq!(step.value, decimal(1), "{context}");
            assert_eq!(step.expires_at, run.end, "{context}");
            assert_eq!(step.expires_at % window_ms, 0, "{context}");
            assert!(
                run.before < step.expires_at && step.expires_at <= run.after + window_ms,
                "{context}"
            );
            run.assert_until_end(step.reply.reset_after_ms, &context);
        }
    });
}

#[test]
fn a_count_stored_by_set_pxat_is_taken_as_the_window() {
    // A replica or an AOF replay holds exactly what `SET key count PXAT end` stores; the
    // module must carry on counting from it. A stored end that is not a multiple of the
    // window belongs to another window length: the count is carried into the current
    // aligned window (never a fresh burst, never a wait beyond it).
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let run = in_one_window(&server, HOUR_MS, |n, end| {
            let ends = [end, server.time_ms() + HOUR_MS / 2];
            ends.map(|stored_end| {
                let key = format!("set:{n}:{stored_end}");
                let _: () = redis::cmd("SET")
                    .arg(&key)
                    .arg("9")
                    .arg("PXAT")
                    .arg(stored_end)
                    .query(&mut con)
                    .expect("SET");
                (stored_end, end, hit_and_read(&mut con, &key, &["12", "1h"]))
            })
        });
        for (stored_end, aligned_end, step) in &run.observed {
            let context = format!("{flavor:?} stored end {stored_end}: {step:?}");
            assert!(step.reply.allowed, "{context}");
            assert_eq!(step.reply.remaining, 2, "{context}");
            // 9 -> 10 also checks that the value grows by a digit in place.
            assert_eq!(step.value, decimal(10), "{context}");
            assert_eq!(step.expires_at, *aligned_end, "{context}");
        }
    });
}

#[test]
fn a_short_window_allows_again_after_retry_after_ms() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        for round in 0..3 {
            // Whatever windows pass meanwhile, a window of 300 ms holding 3 hits is full
            // after a handful of back-to-back hits.
            let denied = (0..100)
                .map(|_| hit(&mut con, "short", &["3", "300ms"]))
                .find(|r| !r.allowed)
                .unwrap_or_else(|| panic!("{flavor:?} round {round}: never denied"));
            let context = format!("{flavor:?} round {round}: {denied:?}");
            assert_eq!((denied.limit, denied.remaining), (3, 0), "{context}");
            assert!(
                denied.retry_after_ms > 0 && denied.retry_after_ms <= 300,
                "{context}"
            );
            assert_eq!(denied.retry_after_ms, denied.reset_after_ms, "{context}");
            let retry_after_ms = u64::try_from(denied.retry_after_ms).expect("positive");
            std::thread::sleep(Duration::from_millis(retry_after_ms));
            // Any window from then on is a new one, and this is its first hit.
            let again = hit(&mut con, "short", &["3", "300ms"]);
            assert!(again.allowed, "{context}: then {again:?}");
            assert_eq!(again.remaining, 2, "{context}: then {again:?}");
        }
    });
}

/// The RESP3 reply of RL.HIT, checked to be a map of the five names, in order, to
/// integers, and decoded.
fn hit_resp3(con: &mut Connection, key: &str, args: &[&str]) -> Reply {
    let value: Value = redis::cmd("RL.HIT")
        .arg(key)
        .arg(args)
        .query(con)
        .expect("RL.HIT replies");
    let Value::Map(pairs) = &value else {
        panic!("RESP3 reply is not a map: {value:?}");
    };
    let names: Vec<&Value> = pairs.iter().map(|(name, _)| name).collect();
    let expected: Vec<Value> = FIELDS
        .iter()
        .map(|name| Value::SimpleString(name.to_string()))
        .collect();
    assert_eq!(names, expected.iter().collect::<Vec<_>>(), "{value:?}");
    let integers: Vec<i64> = pairs
        .iter()
        .map(|(_, v)| match v {
            Value::Int(n) => *n,
            other => panic!("field value {other:?} is not an integer in {value:?}"),
        })
        .collect();
    decode_reply(&integers)
}

/// The RESP2 reply of RL.HIT, checked to be a flat array of five integers, and decoded.
fn hit_resp2_checked(con: &mut Connection, key: &str, args: &[&str]) -> Reply {
    let value: Value = redis::cmd("RL.HIT")
        .arg(key)
        .arg(args)
        .query(con)
        .expect("RL.HIT replies");
    let Value::Array(items) = &value else {
        panic!("RESP2 reply is not an array: {value:?}");
    };
    let integers: Vec<i64> = items
        .iter()
        .map(|v| match v {
            Value::Int(n) => *n,
            other => panic!("element {other:?} is not an integer in {value:?}"),
        })
        .collect();
    decode_reply(&integers)
}

#[test]
fn resp3_answers_a_map_with_the_same_integers_as_resp2() {
    // The same calls against two keys, one per protocol, must give the same answers;
    // times may differ by the moment of the call, so they are bounded, not compared.
    let calls: [&[&str]; 5] = [
        &["2", "1h"],
        &["2", "1h"],
        &["2", "1h"],
        &["2", "1h", "COST", "3"],
        &["2", "1h", "COST", "2"],
    ];
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con2 = server.conn();
        let mut con3 = server.conn_resp3();
        let run = in_one_window(&server, HOUR_MS, |n, _| {
            let (key2, key3) = (format!("resp2:{n}"), format!("resp3:{n}"));
            calls
                .iter()
                .map(|args| {
                    let resp2 = hit_resp2_checked(&mut con2, &key2, args);
                    (resp2, hit_resp3(&mut con3, &key3, args))
                })
                .collect::<Vec<_>>()
        });
        for (args, (resp2, resp3)) in calls.iter().zip(&run.observed) {
            let context = format!("{flavor:?} {args:?}: RESP2 {resp2:?}, RESP3 {resp3:?}");
            assert_eq!(
                (resp2.allowed, resp2.limit, resp2.remaining),
                (resp3.allowed, resp3.limit, resp3.remaining),
                "{context}"
            );
            for (t2, t3) in [
                (resp2.reset_after_ms, resp3.reset_after_ms),
                (resp2.retry_after_ms, resp3.retry_after_ms),
            ] {
                if t2 <= 0 || t3 <= 0 {
                    assert_eq!(t2, t3, "{context}: 0 and -1 are exact");
                } else {
                    run.assert_until_end(t2, &context);
                    run.assert_until_end(t3, &context);
                }
            }
        }
        // And the answers themselves are right: two allowed, then all three refused.
        let allowed: Vec<bool> = run.observed.iter().map(|(r, _)| r.allowed).collect();
        assert_eq!(allowed, [true, true, false, false, false], "{flavor:?}");
        assert_eq!(run.observed[3].1.retry_after_ms, -1, "{flavor:?}");
    });
}

/// Runs `per_thread` on 8 threads at once, each with its own connection, and gathers
/// every reply they saw.
fn from_eight_clients<T: Send>(
    server: &Server,
    per_thread: impl Fn(&mut Connection) -> Vec<T> + Sync,
) -> Vec<T> {
    std::thread::scope(|scope| {
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let mut con = server.conn();
                let per_thread = &per_thread;
                scope.spawn(move || per_thread(&mut con))
            })
            .collect();
        threads
            .into_iter()
            .flat_map(|t| t.join().expect("client thread"))
            .collect()
    })
}

/// Asserts that exactly 5,000 of the 8,000 replies were allowed, that each allowed hit
/// saw its own count (remaining 4999 down to 0, each once), and that the key holds 5000.
fn assert_exactly_5000_counted(flavor: Flavor, replies: &[Reply], value: &Option<Vec<u8>>) {
    assert_eq!(replies.len(), 8_000, "{flavor:?}");
    let mut remaining: Vec<i64> = replies
        .iter()
        .filter(|r| r.allowed)
        .map(|r| r.remaining)
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..5_000).collect::<Vec<_>>(), "{flavor:?}");
    assert!(
        replies
            .iter()
            .all(|r| r.limit == 5_000 && (r.allowed || r.remaining == 0)),
        "{flavor:?}: every denial says nothing remains"
    );
    assert_eq!(value, &decimal(5_000), "{flavor:?}");
}

#[test]
fn eight_concurrent_clients_count_exactly_the_limit() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let run = in_one_window(&server, HOUR_MS, |n, _| {
            let key = format!("concurrent:{n}");
            let replies = from_eight_clients(&server, |con| {
                (0..1_000)
                    .map(|_| hit(con, &key, &["5000", "1h"]))
                    .collect()
            });
            (replies, get_bytes(&mut server.conn(), &key))
        });
        let (replies, value) = &run.observed;
        assert_exactly_5000_counted(flavor, replies, value);
    });
}

#[test]
fn eight_clients_sending_transactions_count_exactly_the_limit() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let run = in_one_window(&server, HOUR_MS, |n, _| {
            let key = format!("multi:{n}");
            let transactions = from_eight_clients(&server, |con| {
                (0..100)
                    .map(|_| {
                        let mut pipe = redis::pipe();
                        pipe.atomic();
                        for _ in 0..10 {
                            pipe.cmd("RL.HIT").arg(&key).arg("5000").arg("1h");
                        }
                        let replies: Vec<Vec<i64>> = pipe.query(con).expect("EXEC");
                        replies.iter().map(|r| decode_reply(r)).collect::<Vec<_>>()
                    })
                    .collect()
            });
            (transactions, get_bytes(&mut server.conn(), &key))
        });
        // Inside one MULTI/EXEC no other client's hit comes between two of its hits.
        for transaction in &run.observed.0 {
            for pair in transaction.windows(2) {
                let context = format!("{flavor:?} consecutive in one EXEC: {pair:?}");
                match (pair[0].allowed, pair[1].allowed) {
                    (true, true) => {
                        assert_eq!(pair[1].remaining, pair[0].remaining - 1, "{context}")
                    }
                    (true, false) => assert_eq!(pair[0].remaining, 0, "{context}"),
                    (false, next) => assert!(!next, "{context}: allowed after a denial"),
                }
            }
        }
        let (transactions, value) = &run.observed;
        assert_exactly_5000_counted(flavor, &transactions.concat(), value);
    });
}

#[test]
fn eight_clients_calling_from_lua_count_exactly_the_limit() {
    const SCRIPT: &str = "return redis.call('RL.HIT', KEYS[1], ARGV[1], ARGV[2])";
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let run = in_one_window(&server, HOUR_MS, |n, _| {
            let key = format!("lua:{n}");
            let replies = from_eight_clients(&server, |con| {
                (0..1_000)
                    .map(|_| {
                        let reply: Vec<i64> = redis::cmd("EVAL")
                            .arg(SCRIPT)
                            .arg(1)
                            .arg(&key)
                            .arg("5000")
                            .arg("1h")
                            .query(con)
                            .expect("EVAL");
                        decode_reply(&reply)
                    })
                    .collect()
            });
            (replies, get_bytes(&mut server.conn(), &key))
        });
        let (replies, value) = &run.observed;
        assert_exactly_5000_counted(flavor, replies, value);
    });
}

#[test]
fn keys_with_any_bytes_are_separate_counters() {
    // Keys that a C string, a text protocol or a careless copy would mix up.
    let keys: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"\0".to_vec(),
        b"\0\0".to_vec(),
        b"a".to_vec(),
        b"a\0".to_vec(),
        b"a\0b".to_vec(),
        vec![0xff],
        vec![0xff, 0xfe, 0x80],
        b"\r\n".to_vec(),
        b"a\r\nb".to_vec(),
        b"*1\r\n$4\r\nPING\r\n".to_vec(),
    ];
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let run = in_one_window(&server, HOUR_MS, |_, _| {
            let _: () = redis::cmd("FLUSHALL").query(&mut con).expect("FLUSHALL");
            // Key i gets i + 1 hits, so every key ends with a count of its own.
            let replies: Vec<Vec<Reply>> = keys
                .iter()
                .enumerate()
                .map(|(i, key)| {
                    (0..=i)
                        .map(|_| hit(&mut con, key, &["100", "1h"]))
                        .collect()
                })
                .collect();
            let stored: Vec<(Option<Vec<u8>>, i64)> = keys
                .iter()
                .map(|key| (get_bytes(&mut con, key), pexpiretime(&mut con, key)))
                .collect();
            let dbsize: i64 = redis::cmd("DBSIZE").query(&mut con).expect("DBSIZE");
            (replies, stored, dbsize)
        });
        let (replies, stored, dbsize) = &run.observed;
        assert_eq!(*dbsize, keys.len() as i64, "{flavor:?}: one key each");
        for (i, key) in keys.iter().enumerate() {
            let context = format!("{flavor:?} key {key:?}");
            let last = replies[i].last().expect("at least one hit");
            assert!(last.allowed, "{context}");
            assert_eq!(last.limit - last.remaining, i as i64 + 1, "{context}");
            assert_eq!(stored[i], (decimal(i as i64 + 1), run.end), "{context}");
        }
    });
}

/// The text of a bulk or simple string reply.
fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("{other:?} is not a string"),
    }
}

#[test]
fn command_info_and_getkeys_show_one_key_at_position_one() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let info: Value = redis::cmd("COMMAND")
            .arg("INFO")
            .arg("RL.HIT")
            .query(&mut con)
            .expect("COMMAND INFO");
        let Value::Array(commands) = &info else {
            panic!("{flavor:?}: COMMAND INFO replied {info:?}");
        };
        let [Value::Array(fields)] = commands.as_slice() else {
            panic!("{flavor:?}: COMMAND INFO replied {info:?}");
        };
        assert_eq!(text(&fields[0]), "RL.HIT", "{flavor:?}");
        // Arity -1: the server passes any number of arguments; the module checks them.
        assert_eq!(fields[1], Value::Int(-1), "{flavor:?}");
        let Value::Array(flags) = &fields[2] else {
            panic!("{flavor:?}: flags are {:?}", fields[2]);
        };
        let flags: HashSet<String> = flags.iter().map(text).collect();
        // Both servers add `module` to every module command's flags. Not `fast`: with
        // `ALGO log` a call decodes up to 10,000 entries.
        let expected: HashSet<String> = ["write", "denyoom", "module"].map(String::from).into();
        assert_eq!(flags, expected, "{flavor:?}");
        assert_eq!(
            fields[3..6],
            [Value::Int(1), Value::Int(1), Value::Int(1)],
            "{flavor:?}: first key, last key, step"
        );
        for call in [
            &["RL.HIT", "k", "5", "1m"][..],
            &["rl.hit", "k", "5", "1m", "COST", "2"],
        ] {
            let keys: Vec<String> = redis::cmd("COMMAND")
                .arg("GETKEYS")
                .arg(call)
                .query(&mut con)
                .expect("COMMAND GETKEYS");
            assert_eq!(keys, ["k"], "{flavor:?} {call:?}");
        }
    });
}
