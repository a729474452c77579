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

/// Runs `command` on three keys in one transaction whose server clock reads the same ms
/// before and after (retried until it does, so every call saw the same `now`): `m` by the
/// module, `l` by the library, and `x` by the module or the library as `library_on_x`
/// says. Returns the three replies (raw, errors included).
fn same_ms(
    con: &mut Connection,
    (command, args): Step<'_>,
    keys: [&str; 3],
    library_on_x: bool,
) -> [Value; 3] {
    let (module, library) = names(command);
    let args: Vec<&str> = args.split_whitespace().collect();
    for _ in 0..1_000 {
        let mut pipe = redis::pipe();
        pipe.atomic().cmd("TIME");
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
        pipe.cmd("TIME");
        let replies: Vec<Value> = pipe.query(con).expect("EXEC");
        let ms = |v: &Value| -> i64 {
            let (secs, micros): (i64, i64) = redis::from_redis_value(v.clone()).expect("TIME");
            secs * 1_000 + micros / 1_000
        };
        if ms(&replies[0]) == ms(&replies[4]) {
            return [replies[1].clone(), replies[2].clone(), replies[3].clone()];
        }
    }
    panic!("no transaction ran within one ms in 1000 tries");
}

/// Runs `steps` on the three keys of [`same_ms`] (the backend on `x` alternating) and
/// asserts that after each step the replies, the stored bytes and the expiries are equal.
fn assert_same_as_the_module(con: &mut Connection, tag: &str, steps: &[Step<'_>]) {
    let keys = [
        format!("{tag}:module"),
        format!("{tag}:library"),
        format!("{tag}:mixed"),
    ];
    let keys = [keys[0].as_str(), keys[1].as_str(), keys[2].as_str()];
    for (n, step) in steps.iter().enumerate() {
        let replies = same_ms(con, *step, keys, n % 2 == 0);
        let context = format!("{tag}, step {n} {step:?}: {replies:?}");
        assert_eq!(replies[0], replies[1], "library reply, {context}");
        assert_eq!(replies[0], replies[2], "mixed reply, {context}");
        let stored: Vec<_> = keys.iter().map(|k| stored(con, k.as_bytes())).collect();
        assert_eq!(stored[0], stored[1], "library bytes and expiry, {context}");
        assert_eq!(stored[0], stored[2], "mixed bytes and expiry, {context}");
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
