//! The Functions library (`functions/ratelimit.lua`) against the module on the same Redis
//! 7.0 and Valkey 8.1 servers: the same replies, stored bytes and expiries for the same
//! calls at the same millisecond, keys written by one continued by the other, the same
//! errors for bad input, and what the library refuses (policies, zones other than UTC,
//! numbers beyond 2^53) with a test each. Also: it loads where MODULE is disabled, answers
//! RESP2 arrays under RESP3 too, and a replica holds the bytes it wrote.

use redis::{Connection, Value};
use testkit::functions::*;
use testkit::*;

/// One call of a sequence: the command (`hit`, `peek`, `refund`) and its arguments after
/// the key.
type Step<'a> = (&'a str, &'a str);

/// The module's command and the library's function for `command`.
fn names(command: &str) -> (String, String) {
    (
        format!("RL.{}", command.to_uppercase()),
        format!("rl_{command}"),
    )
}

/// What one key answered and then held: the reply (raw, errors included), the value and
/// its absolute expiry.
type Seen = (Value, Option<Vec<u8>>, i64);

/// The module's clock, read through a fixed window of 366 days on `PROBE`: its
/// `reset_after_ms` is the window's end minus the module's `now`.
const PROBE: &str = "functions-core:clock-probe";
const PROBE_WINDOW_MS: i64 = 366 * 86_400_000;

/// Runs `command` on three keys in one transaction during which the server's clock stays
/// in one ms (retried until it does, so every call saw the same `now`): `m` by the module,
/// `l` by the library, and `x` by the module or the library as `library_on_x` says.
/// Returns each key's reply and what it held right after, read in the transaction.
///
/// Every attempt first puts the three keys back as they were before the step (`before`:
/// the value and absolute expiry, -1 for none), so an attempt whose clock moved leaves
/// nothing behind.
///
/// Valkey answers `TIME` inside a transaction (and a function's `TIME`) with the time the
/// transaction started, while the module reads the running clock: the transaction is
/// taken when `TIME` and the module's clock, read before and after the calls, agree.
fn same_ms(
    con: &mut Connection,
    (command, args): Step<'_>,
    keys: [&str; 3],
    library_on_x: bool,
    before: &(Option<Vec<u8>>, i64),
) -> [Seen; 3] {
    let (module, library) = names(command);
    let args: Vec<&str> = args.split_whitespace().collect();
    let probe = |pipe: &mut redis::Pipeline| {
        pipe.cmd("RL.HIT")
            .arg(PROBE)
            .arg("9007199254740991")
            .arg("366d");
    };
    for _ in 0..1_000 {
        let mut pipe = redis::pipe();
        pipe.atomic().ignore_errors();
        for key in keys {
            match before {
                (None, _) => pipe.cmd("DEL").arg(key).ignore(),
                (Some(value), -1) => pipe.cmd("SET").arg(key).arg(value).ignore(),
                (Some(value), at) => pipe
                    .cmd("SET")
                    .arg(key)
                    .arg(value)
                    .arg("PXAT")
                    .arg(*at)
                    .ignore(),
            };
        }
        pipe.cmd("TIME");
        probe(&mut pipe);
        pipe.cmd(&module).arg(keys[0]).arg(&args);
        pipe.cmd("FCALL")
            .arg(&library)
            .arg(1)
            .arg(keys[1])
            .arg(&args);
        if library_on_x {
            pipe.cmd("FCALL")
                .arg(&library)
                .arg(1)
                .arg(keys[2])
                .arg(&args);
        } else {
            pipe.cmd(&module).arg(keys[2]).arg(&args);
        }
        for key in keys {
            pipe.cmd("GET").arg(key).cmd("PEXPIRETIME").arg(key);
        }
        probe(&mut pipe);
        pipe.cmd("TIME");
        let replies: Vec<Value> = pipe.query(con).expect("EXEC");
        let time = |v: &Value| -> i64 {
            let (secs, micros): (i64, i64) = redis::from_redis_value(v.clone()).expect("TIME");
            secs * 1_000 + micros / 1_000
        };
        let start = time(&replies[0]);
        let end = start - start.rem_euclid(PROBE_WINDOW_MS) + PROBE_WINDOW_MS;
        let module_clock = |v: &Value| -> i64 {
            let reply: Vec<i64> = redis::from_redis_value(v.clone()).expect("probe");
            end - reply[3]
        };
        let clocks = [
            start,
            module_clock(&replies[1]),
            module_clock(&replies[11]),
            time(&replies[12]),
        ];
        if clocks.iter().all(|&c| c == start) {
            let seen = |n: usize| -> Seen {
                let value = redis::from_redis_value(replies[5 + 2 * n].clone()).expect("GET");
                let expiry =
                    redis::from_redis_value(replies[6 + 2 * n].clone()).expect("PEXPIRETIME");
                (replies[2 + n].clone(), value, expiry)
            };
            return [seen(0), seen(1), seen(2)];
        }
    }
    panic!("no transaction ran within one ms in 1000 tries");
}

/// Runs `steps` on the three keys of [`same_ms`] (the backend on `x` alternating) and
/// asserts that each step's replies, and the stored bytes and expiries after it, are equal.
fn assert_same_as_the_module(con: &mut Connection, tag: &str, steps: &[Step<'_>]) {
    let keys = [
        format!("{tag}:module"),
        format!("{tag}:library"),
        format!("{tag}:mixed"),
    ];
    let keys = [keys[0].as_str(), keys[1].as_str(), keys[2].as_str()];
    let mut before = (None, -2);
    for (n, step) in steps.iter().enumerate() {
        if step.0 == "persist" {
            // The key loses its expiry (PERSIST): both backends count its units again.
            before.1 = -1;
            continue;
        }
        let [module, library, mixed] = same_ms(con, *step, keys, n % 2 == 0, &before);
        let context = format!("{tag}, step {n} {step:?}");
        assert_eq!(module, library, "module, library: {context}");
        assert_eq!(module, mixed, "module, mixed: {context}");
        before = (module.1, module.2);
    }
}

/// A server with the module and the library.
fn both(flavor: Flavor) -> Server {
    let server = ServerConfig::new(flavor).start();
    assert_eq!(server.load_functions(), "ratelimit");
    server
}

#[test]
fn functions_load_where_modules_cannot_and_answer_the_version() {
    each_flavor(|flavor| {
        let server = ServerConfig::managed(flavor).start();
        let mut con = server.conn();
        let refused = error_text(
            &mut con,
            redis::cmd("MODULE")
                .arg("LOAD")
                .arg(module_path().to_string_lossy().as_ref()),
        );
        assert!(refused.contains("MODULE command not allowed"), "{refused}");
        assert_eq!(server.load_functions(), "ratelimit");
        let version: String = redis::cmd("FCALL_RO")
            .arg("rl_version")
            .arg(0)
            .query(&mut con)
            .expect("rl_version");
        assert_eq!(version, env!("CARGO_PKG_VERSION"));
        let first = fhit(&mut con, "user:42", &["2", "1m"]);
        assert_eq!((first.allowed, first.limit, first.remaining), (true, 2, 1));
        fhit(&mut con, "user:42", &["2", "1m"]);
        let third = fhit(&mut con, "user:42", &["2", "1m"]);
        assert!(!third.allowed);
        assert!(third.retry_after_ms > 0 && third.retry_after_ms <= 60_000);
        // Loading again replaces the library (a new version over an old one).
        assert_eq!(server.load_functions(), "ratelimit");
    });
}

#[test]
fn fixed_windows_answer_store_and_expire_as_the_module_does() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        let hour = window_clear_of_edges(&mut con) / 60_000;
        let one = &format!("3 {hour}m");
        let two = &format!("3 {hour}m 5 {}m", hour * 2);
        let cost2 = &format!("{one} COST 2");
        let big = &format!("{one} COST 4");
        let steps: &[Step<'_>] = &[
            ("peek", one),
            ("refund", one),
            ("hit", one),
            ("hit", cost2),
            ("hit", one),
            ("peek", one),
            ("hit", big),
            ("refund", cost2),
            ("hit", one),
            // Another rule on the same key: renewed from its usage.
            ("hit", two),
            ("hit", two),
            ("peek", two),
            ("hit", two),
            ("refund", two),
            ("refund", cost2),
            ("hit", "1 1s"),
            ("hit", "1 1s"),
        ];
        assert_same_as_the_module(&mut con, "fixed", steps);
    });
}

/// Every bucket and sliding shape: single tiers (the short form for the buckets, with and
/// without the ns below the ms), tiers, BURST, COST, refunds, looks, a lost expiry and
/// changes of rule and of algorithm, which renew the key from its usage.
#[test]
fn every_algorithm_answers_stores_and_expires_as_the_module_does() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        let minutes = window_clear_of_edges(&mut con) / 60_000;
        for algo in ["sliding", "token", "gcra", "fixed"] {
            let burst = if algo == "token" || algo == "gcra" {
                " BURST 4"
            } else {
                ""
            };
            let rules = [
                format!("3 1s ALGO {algo}"),
                format!("3 1ms ALGO {algo}"),
                format!("7 250ms ALGO {algo}{burst}"),
                format!("5 {minutes}m 9 {}m ALGO {algo}", minutes * 2),
                format!("1000000 1s ALGO {algo}"),
            ];
            for (n, rule) in rules.iter().enumerate() {
                let cost = format!("{rule} COST 2");
                let big = format!("{rule} COST 99");
                let other = if algo == "gcra" { "token" } else { "gcra" };
                let switched = format!("3 1s ALGO {other}");
                let steps: Vec<Step<'_>> = vec![
                    ("peek", rule),
                    ("refund", rule),
                    ("hit", rule),
                    ("hit", &cost),
                    ("peek", &cost),
                    ("hit", rule),
                    ("hit", rule),
                    ("hit", &big),
                    ("refund", &cost),
                    ("hit", rule),
                    ("persist", ""),
                    ("peek", rule),
                    ("hit", rule),
                    ("hit", "2 1s ALGO fixed"),
                    ("hit", rule),
                    ("hit", &switched),
                    ("peek", rule),
                    ("hit", rule),
                    ("refund", rule),
                ];
                assert_same_as_the_module(&mut con, &format!("{algo}:{n}"), &steps);
            }
        }
    });
}

/// Calendar windows in UTC: the tiers form of version 2 (each tier's calendar code), the
/// same ends, renewals between calendars and durations.
#[test]
fn utc_calendar_windows_answer_and_store_as_the_module_does() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        for (n, rule) in [
            "3 day",
            "3 WEEK",
            "3 month",
            "3 month ANCHOR 31 TZ UTC",
            "3 year TZ utc",
            "2 1s 3 month 4 year ANCHOR 5",
        ]
        .into_iter()
        .enumerate()
        {
            let cost = format!("{rule} COST 2");
            let steps: Vec<Step<'_>> = vec![
                ("peek", rule),
                ("hit", rule),
                ("hit", &cost),
                ("hit", rule),
                ("refund", rule),
                ("hit", "3 1h"),
                ("hit", rule),
                ("persist", ""),
                ("hit", rule),
                ("refund", &cost),
            ];
            assert_same_as_the_module(&mut con, &format!("calendar:{n}"), &steps);
        }
    });
}

/// A seeded xorshift: the junk of [`junk_and_damaged_states_read_as_the_module_reads_them`]
/// is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Values of every form, whole, cut short, with a byte changed or added, or random bytes
/// behind a plausible first byte, with and without an expiry: each backend either reads
/// them the same way (the same reply and the same bytes written) or refuses them the same
/// way. The library may refuse with its own error a number beyond 2^53 or an exact log,
/// which the module reads; that is counted, never a different answer.
#[test]
fn junk_and_damaged_states_read_as_the_module_reads_them() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        let shapes = [
            "3 1h",
            "3 1s ALGO gcra",
            "3 1ms ALGO token BURST 5",
            "3 1h 5 2h",
            "3 1h ALGO sliding",
            "3 1h 5 2h ALGO gcra",
            "3 day 4 month ANCHOR 9",
        ];
        let mut valid = Vec::new();
        for (n, shape) in shapes.iter().enumerate() {
            let key = format!("junk:shape:{n}");
            let args: Vec<&str> = shape.split_whitespace().collect();
            hit(&mut con, key.as_str(), &args);
            valid.push(stored(&mut con, key.as_bytes()));
        }
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let firsts = [b'1', b'9', 0x01, 0x02, 0xf8, 0xfa, 0xfc, 0xff];
        let (mut same, mut refused) = (0, 0);
        for n in 0..240 {
            let (base, expiry) = valid[rng.below(valid.len())].clone();
            let mut value = base.unwrap_or_default();
            match n % 5 {
                0 => {}
                1 => value.truncate(rng.below(value.len().max(1))),
                2 => {
                    let at = rng.below(value.len().max(1));
                    if let Some(byte) = value.get_mut(at) {
                        *byte = rng.next() as u8;
                    }
                }
                3 => value.push(rng.next() as u8),
                _ => {
                    value = (0..rng.below(24)).map(|_| rng.next() as u8).collect();
                    value.insert(0, firsts[rng.below(firsts.len())]);
                }
            }
            let expiry = if n % 3 == 0 { -1 } else { expiry };
            let rule = shapes[rng.below(shapes.len())];
            let command = ["hit", "peek", "refund", "reset"][rng.below(4)];
            let args = if command == "reset" { "" } else { rule };
            let before = (Some(value.clone()), expiry);
            let [module, library, _] = same_ms(
                &mut con,
                (command, args),
                ["junk:module", "junk:library", "junk:mixed"],
                true,
                &before,
            );
            if let Value::ServerError(err) = &library.0 {
                let text = format!("{} {}", err.code(), err.details().unwrap_or(""));
                if text.contains("functions library handles values up to")
                    || text.contains("ALGO log")
                {
                    refused += 1;
                    continue;
                }
            }
            assert_eq!(
                module, library,
                "{command} {args} on {value:?} (expiry {expiry})"
            );
            same += 1;
        }
        println!("{flavor:?}: {same} read alike, {refused} refused by the library alone");
        assert!(same > refused * 4, "{same} alike, {refused} refused");
    });
}

#[test]
fn bad_input_gets_the_module_errors() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        redis::cmd("SET")
            .arg("text")
            .arg("hello")
            .exec(&mut con)
            .expect("SET");
        redis::cmd("SET")
            .arg("zero")
            .arg("07")
            .exec(&mut con)
            .expect("SET");
        redis::cmd("HSET")
            .arg("hash")
            .arg("f")
            .arg("v")
            .exec(&mut con)
            .expect("HSET");
        let cases: &[(&str, &str, &str)] = &[
            ("hit", "k", ""),
            ("hit", "k", "5"),
            ("hit", "k", "0 1m"),
            ("hit", "k", "-1 1m"),
            ("hit", "k", "1.5 1m"),
            ("hit", "k", "9223372036854775808 1m"),
            ("hit", "k", "COST 1"),
            ("hit", "k", "5 0"),
            ("hit", "k", "5 -1"),
            ("hit", "k", "5 1y"),
            ("hit", "k", "5 1w"),
            ("hit", "k", "5 367d"),
            ("hit", "k", "5 9223372036854775807"),
            ("hit", "k", "5 99999999999999999999999d"),
            ("hit", "k", "5 1m 10"),
            ("hit", "k", "5 1m 10 COST 1"),
            ("hit", "k", "5 1m COST"),
            ("hit", "k", "5 1m COST 0"),
            ("hit", "k", "5 1m COST x"),
            ("hit", "k", "5 1m COST 1 COST 1"),
            ("hit", "k", "5 1m ALGO"),
            ("hit", "k", "5 1m ALGO leaky"),
            ("hit", "k", "5 1m ALGO fixed ALGO fixed"),
            ("hit", "k", "5 1m BURST 0"),
            ("hit", "k", "5 1m BURST 2"),
            ("hit", "k", "5 1m COSTS 2"),
            ("hit", "k", "5 1m extra"),
            ("hit", "k", "5 1m MODE shadow"),
            ("hit", "k", "1 1s 1 1s 1 1s 1 1s 1 1s 1 1s 1 1s 1 1s 1 1s"),
            ("hit", "k", "5 1m TZ UTC"),
            ("hit", "k", "5 1m ANCHOR 5"),
            ("hit", "k", "5 1m ANCHOR 0"),
            ("hit", "k", "5 month ANCHOR 32"),
            ("hit", "k", "5 day ANCHOR 5"),
            ("hit", "k", "5 month ALGO gcra"),
            ("hit", "k", "5 1s 5 week ALGO sliding"),
            ("hit", "k", "5 month BURST 3"),
            ("hit", "k", "5 months"),
            ("hit", "k", "month 5"),
            ("hit", "k", "5 month TZ UTC TZ UTC"),
            ("hit", "text", "5 1m"),
            ("hit", "zero", "5 1m"),
            ("hit", "hash", "5 1m"),
            ("peek", "hash", "5 1m"),
            ("refund", "text", "5 1m"),
            ("peek", "k", "5"),
            ("refund", "k", "5 1m COST -1"),
        ];
        for (command, key, args) in cases {
            let args: Vec<&str> = args.split_whitespace().collect();
            let (module, library) = names(command);
            let expected = error_text(&mut con, redis::cmd(&module).arg(key).arg(&args));
            let got = error_text(&mut con, &fcall_cmd(&library, &[key], &args));
            assert_eq!(got, expected, "{command} {key} {args:?}");
        }
        for key in ["text", "hash"] {
            let module = error_text(&mut con, redis::cmd("RL.RESET").arg(key));
            let library = error_text(&mut con, &fcall_cmd("rl_reset", &[key], &[]));
            assert_eq!(library, module, "RESET {key}");
        }
        let arity = error_text(&mut con, &fcall_cmd("rl_hit", &[], &["5", "1m"]));
        assert_eq!(arity, "ERR wrong number of arguments for 'RL.HIT' command");
    });
}

#[test]
fn what_the_library_cannot_do_is_refused_and_writes_nothing() {
    each_flavor(|flavor| {
        let server = ServerConfig::managed(flavor).start();
        server.load_functions();
        let mut con = server.conn();
        let too_large = "ERR the functions library handles values up to 9007199254740991: \
                         use the module for larger limits, windows, costs or stored counts";
        let cases: &[(&str, &str)] = &[
            ("POLICY login", "ERR POLICY needs the module"),
            ("POLICY login COST 2", "ERR POLICY needs the module"),
            (
                "5 month TZ Europe/Paris",
                "ERR TZ other than UTC needs the module",
            ),
            ("5 day TZ Etc/UTC", "ERR TZ other than UTC needs the module"),
            ("5 1m ALGO log", "ERR ALGO log needs the module"),
            ("5 1m ALGO LOG COST 2", "ERR ALGO log needs the module"),
            ("9007199254740992 1m", too_large),
            ("5 1m COST 9007199254740992", too_large),
        ];
        for (args, prefix) in cases {
            let args: Vec<&str> = args.split_whitespace().collect();
            let text = error_text(&mut con, &fcall_cmd("rl_hit", &["k"], &args));
            assert!(text.starts_with(prefix), "{args:?}: {text}");
            assert_eq!(stored(&mut con, b"k"), (None, -2), "{args:?} wrote");
        }
        // The largest exact integer works.
        let max = fhit(&mut con, "k", &["9007199254740991", "1m"]);
        assert_eq!(max.remaining, 9_007_199_254_740_990);
        // A stored count beyond 2^53 (written by the module) is refused, never rounded.
        redis::cmd("SET")
            .arg("big")
            .arg("9007199254740993")
            .arg("PX")
            .arg(60_000)
            .exec(&mut con)
            .expect("SET");
        let text = error_text(&mut con, &fcall_cmd("rl_hit", &["big"], &["5", "1m"]));
        assert_eq!(text, too_large);
        assert_eq!(
            get_bytes(&mut con, "big"),
            Some(b"9007199254740993".to_vec())
        );
    });
}

/// A key the module wrote with ALGO log is refused as such by every function, and left as
/// it is.
#[test]
fn a_sliding_log_written_by_the_module_is_refused_and_kept() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        hit(&mut con, "log", &["5", "1h", "ALGO", "log"]);
        hit(&mut con, "logs", &["5", "1h", "7", "2h", "ALGO", "log"]);
        for key in ["log", "logs"] {
            let before = stored(&mut con, key.as_bytes());
            for (function, args) in [
                ("rl_hit", &["5", "1h"][..]),
                ("rl_peek", &["5", "1h", "ALGO", "gcra"]),
                ("rl_refund", &["5", "1h", "ALGO", "sliding"]),
                ("rl_reset", &[]),
            ] {
                let text = error_text(&mut con, &fcall_cmd(function, &[key], args));
                assert!(
                    text.starts_with(
                        "ERR key holds an ALGO log state, which only the module reads"
                    ),
                    "{function} {key}: {text}"
                );
            }
            assert_eq!(stored(&mut con, key.as_bytes()), before, "{key}");
        }
    });
}

#[test]
fn reset_deletes_states_like_the_module() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        hit(&mut con, "a", &["5", "1m"]);
        fhit(&mut con, "b", &["5", "1m", "7", "1h"]);
        for key in ["a", "b", "missing"] {
            let expected = i64::from(key != "missing");
            let deleted: i64 = fcall_cmd("rl_reset", &[key], &[])
                .query(&mut con)
                .expect("rl_reset");
            assert_eq!(deleted, expected, "{key}");
            assert_eq!(get_bytes(&mut con, key), None);
        }
        let arity = error_text(&mut con, &fcall_cmd("rl_reset", &["a"], &["x"]));
        assert_eq!(
            arity,
            "ERR wrong number of arguments for 'RL.RESET' command"
        );
    });
}

#[test]
fn resp3_callers_get_the_resp2_array() {
    each_flavor(|flavor| {
        let server = ServerConfig::managed(flavor).start();
        server.load_functions();
        let mut con = server.conn_resp3();
        let reply: Value = fcall_cmd("rl_hit", &["k"], &["5", "1m"])
            .query(&mut con)
            .expect("rl_hit");
        let Value::Array(items) = &reply else {
            panic!("not an array under RESP3: {reply:?}");
        };
        let ints: Vec<i64> = items
            .iter()
            .map(|v| redis::from_redis_value(v.clone()).expect("integer"))
            .collect();
        assert_eq!(ints[..3], [1, 5, 4], "{reply:?}");
    });
}

#[test]
fn a_replica_holds_the_bytes_the_library_wrote() {
    each_flavor(|flavor| {
        let (primary, replica) = primary_with_replica(flavor);
        primary.load_functions();
        let mut con = primary.conn();
        let mut rcon = replica.conn();
        fhit(&mut con, "one", &["5", "1h"]);
        fhit(&mut con, "tiers", &["5", "1h", "9", "2h"]);
        wait_for_replicas(&mut con, 1);
        for key in ["one", "tiers"] {
            assert_eq!(
                stored(&mut rcon, key.as_bytes()),
                stored(&mut con, key.as_bytes()),
                "{key}"
            );
        }
        // A look on the replica (FCALL_RO) reads the same state.
        let look: Vec<i64> = redis::cmd("FCALL_RO")
            .arg("rl_peek")
            .arg(1)
            .arg("one")
            .arg(&["5", "1h"])
            .query(&mut rcon)
            .expect("rl_peek on the replica");
        assert_eq!(look[..3], [1, 5, 3]);
    });
}

/// A key's value and absolute expiry (-1 none, -2 no key).
type Held = (Option<Vec<u8>>, i64);

/// Runs `RL.M<command>` on `m1 m2` and `FCALL rl_m<command>` on `l1 l2` with `args` after
/// the keys, in one transaction during which the clock stays in one ms (as [`same_ms`],
/// the keys first put back as `before`); returns both replies and what the four keys hold.
fn same_ms_several(
    con: &mut Connection,
    command: &str,
    args: &str,
    before: &[Held; 2],
) -> ((Value, Value), [Held; 4]) {
    let (module, library) = names(&format!("m{command}"));
    let args: Vec<&str> = args.split_whitespace().collect();
    let keys = ["several:m1", "several:m2", "several:l1", "several:l2"];
    for _ in 0..1_000 {
        let mut pipe = redis::pipe();
        pipe.atomic();
        for (n, key) in keys.iter().enumerate() {
            match &before[n % 2] {
                (None, _) => pipe.cmd("DEL").arg(key).ignore(),
                (Some(value), -1) => pipe.cmd("SET").arg(key).arg(value).ignore(),
                (Some(value), at) => pipe
                    .cmd("SET")
                    .arg(key)
                    .arg(value)
                    .arg("PXAT")
                    .arg(*at)
                    .ignore(),
            };
        }
        pipe.cmd("TIME");
        pipe.cmd("RL.HIT")
            .arg(PROBE)
            .arg("9007199254740991")
            .arg("366d");
        pipe.cmd(&module).arg(2).arg(&keys[..2]).arg(&args);
        pipe.cmd("FCALL")
            .arg(&library)
            .arg(2)
            .arg(&keys[2..])
            .arg(&args);
        for key in keys {
            pipe.cmd("GET").arg(key).cmd("PEXPIRETIME").arg(key);
        }
        pipe.cmd("RL.HIT")
            .arg(PROBE)
            .arg("9007199254740991")
            .arg("366d");
        pipe.cmd("TIME");
        let r: Vec<Value> = pipe.query(con).expect("EXEC");
        let time = |v: &Value| -> i64 {
            let (secs, micros): (i64, i64) = redis::from_redis_value(v.clone()).expect("TIME");
            secs * 1_000 + micros / 1_000
        };
        let start = time(&r[0]);
        let end = start - start.rem_euclid(PROBE_WINDOW_MS) + PROBE_WINDOW_MS;
        let module_clock = |v: &Value| -> i64 {
            let reply: Vec<i64> = redis::from_redis_value(v.clone()).expect("probe");
            end - reply[3]
        };
        let clocks = [
            start,
            module_clock(&r[1]),
            module_clock(&r[12]),
            time(&r[13]),
        ];
        if clocks.iter().all(|&c| c == start) {
            let held = |n: usize| -> Held {
                (
                    redis::from_redis_value(r[4 + 2 * n].clone()).expect("GET"),
                    redis::from_redis_value(r[5 + 2 * n].clone()).expect("PEXPIRETIME"),
                )
            };
            return (
                (r[2].clone(), r[3].clone()),
                [held(0), held(1), held(2), held(3)],
            );
        }
    }
    panic!("no transaction ran within one ms in 1000 tries");
}

#[test]
fn several_keys_answer_and_store_as_the_module_does() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        let minutes = window_clear_of_edges(&mut con) / 60_000;
        let a = format!("SPEC 3 {minutes}m");
        let b = "SPEC 2 1s ALGO gcra BURST 3";
        let c = format!("SPEC 4 {minutes}m 6 {}m ALGO sliding", minutes * 2);
        let steps: Vec<(&str, String)> = vec![
            ("peek", format!("{a} {b}")),
            ("refund", format!("{a} {b}")),
            ("hit", format!("{a} {b}")),
            ("hit", format!("{a} COST 2 {b}")),
            // The first key is full: nothing is counted in the second.
            ("hit", format!("{a} {b}")),
            ("peek", format!("{a} {b} COST 9")),
            ("refund", format!("{a} COST 2 {b}")),
            ("hit", format!("{a} {b} COST 3")),
            ("hit", format!("{b} {c}")),
            ("hit", format!("{c} {c} COST 4")),
            ("refund", format!("{c} COST 2 {c}")),
        ];
        let mut before: [Held; 2] = [(None, -2), (None, -2)];
        for (n, (command, args)) in steps.iter().enumerate() {
            let ((module, library), held) = same_ms_several(&mut con, command, args, &before);
            let context = format!("step {n} {command} {args}");
            assert_eq!(module, library, "{context}");
            assert_eq!(held[..2], held[2..], "{context}");
            before = [held[0].clone(), held[1].clone()];
        }
    });
}

#[test]
fn several_keys_bad_input_gets_the_module_errors() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        redis::cmd("SET")
            .arg("text")
            .arg("hello")
            .exec(&mut con)
            .expect("SET");
        redis::cmd("HSET")
            .arg("hash")
            .arg("f")
            .arg("v")
            .exec(&mut con)
            .expect("HSET");
        let cases: &[(&[&str], &str)] = &[
            (&["a", "b"], "SPEC 1 1s"),
            (&["a", "b"], "1 1s"),
            (&["a", "b"], "SPEC 1 1s SPEC 1 1s SPEC 1 1s"),
            (&["a", "a"], "SPEC 1 1s SPEC 1 1s"),
            (&["a", "SPEC"], "1 1s SPEC 1 1s"),
            (&["a"], "SPEC"),
            (&["a"], "SPEC 0 1s"),
            (&["a", "b"], "SPEC 1 1s SPEC 5 1m COSTS 2"),
            (&["a", "b"], "SPEC 1 1s SPEC"),
            (&["a", "text"], "SPEC 1 1s SPEC 1 1s"),
            (&["a", "hash"], "SPEC 1 1s SPEC 1 1s"),
            (&["a"], "SPEC 1 1s 1 1s 1 1s 1 1s 1 1s 1 1s 1 1s 1 1s 1 1s"),
            (
                &[
                    "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "n", "o", "p",
                    "q",
                ],
                "SPEC 1 1s",
            ),
        ];
        for (keys, args) in cases {
            let args: Vec<&str> = args.split_whitespace().collect();
            for command in ["hit", "peek", "refund"] {
                let (module, library) = names(&format!("m{command}"));
                let expected = error_text(
                    &mut con,
                    redis::cmd(&module).arg(keys.len()).arg(*keys).arg(&args),
                );
                let got = error_text(&mut con, &fcall_cmd(&library, keys, &args));
                assert_eq!(got, expected, "{command} {keys:?} {args:?}");
            }
        }
    });
}
