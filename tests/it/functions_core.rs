//! The Functions library (`functions/ratelimit.lua`) on Redis 7.0 and Valkey 8.1: it loads
//! where MODULE is disabled and answers its version; bad input gets the module's errors;
//! what it cannot do (policies, zones other than UTC, numbers beyond 2^53, logs longer
//! than it reads) is refused with a test each; RESET, RESP3 callers, a replica's bytes,
//! and routing in a Cluster. The same-ms comparisons with the module are in
//! `functions_same_ms.rs`.

use redis::Value;
use testkit::functions::*;
use testkit::*;

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
fn bad_input_gets_the_module_errors() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        foreign_keys(&mut con);
        redis::cmd("SET")
            .arg("zero")
            .arg("07")
            .exec(&mut con)
            .expect("SET");
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
            (
                "1001 1m ALGO log",
                "ERR ALGO log allows a limit of at most 1000 in the functions library",
            ),
            ("9007199254740992 1m", too_large),
            ("5 1m COST 9007199254740992", too_large),
        ];
        for (args, prefix) in cases {
            let args: Vec<&str> = args.split_whitespace().collect();
            let text = error_text(&mut con, &fcall_cmd("rl_hit", &["k"], &args));
            assert!(text.starts_with(prefix), "{args:?}: {text}");
            assert_eq!(stored(&mut con, b"k"), (None, -2), "{args:?} wrote");
        }
        let text = error_text(
            &mut con,
            &fcall_cmd(
                "rl_mhit",
                &["a", "b"],
                &["SPEC", "1", "1s", "SPEC", "POLICY", "x"],
            ),
        );
        assert!(
            text.starts_with("ERR SPEC 1 (key 'b'): POLICY needs the module"),
            "{text}"
        );
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

/// A log longer than the library reads in a call (one the module wrote under a limit above
/// the library's) is refused as such, and left for the module, which reads it.
#[test]
fn a_log_longer_than_the_library_reads_is_refused_and_kept() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        let varint = |mut v: u64, out: &mut Vec<u8>| loop {
            let low = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                out.push(low);
                break;
            }
            out.push(low | 0x80);
        };
        // One log tier of 5000 per hour holding 1002 entries, a ms apart, a unit each.
        let now = server_ms(&mut con);
        let mut value = vec![0x01, 3, 1];
        for param in [5_000, 3_600_000, 5_000] {
            varint(param, &mut value);
        }
        let pairs: Vec<u8> = [1u8, 1].repeat(1_001);
        value.push(0);
        varint(1_002, &mut value);
        varint(1_002, &mut value);
        value.extend_from_slice(&(now - 2_000).to_le_bytes());
        varint(1, &mut value);
        varint(1_001, &mut value);
        varint(pairs.len() as u64, &mut value);
        value.extend_from_slice(&pairs);
        redis::cmd("SET")
            .arg("long")
            .arg(&value)
            .arg("PXAT")
            .arg(now + 3_600_000)
            .exec(&mut con)
            .expect("SET");
        let text = error_text(
            &mut con,
            &fcall_cmd("rl_peek", &["long"], &["500", "1h", "ALGO", "log"]),
        );
        assert!(
            text.starts_with("ERR key holds an ALGO log of more than 1001 entries"),
            "{text}"
        );
        assert_eq!(get_bytes(&mut con, "long"), Some(value));
        let module = rl(&mut con, "RL.PEEK", b"long", "5000 1h ALGO log");
        assert_eq!(module.remaining, 5_000 - 1_002 - 1, "the module reads it");
    });
}

#[test]
fn reset_deletes_states_like_the_module() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
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

/// `CONFIG SET maxmemory bytes`.
fn set_maxmemory(con: &mut redis::Connection, bytes: u64) {
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(bytes)
        .query(con)
        .expect("CONFIG SET maxmemory");
}

/// A reply without its reset_after_ms, which moves with the ms each backend ran in: in
/// every array of five integers (RL.REFUND's, and each key's in RL.MREFUND's), the fourth.
fn but_reset(reply: Value) -> Value {
    match reply {
        Value::Array(mut fields)
            if fields.len() == 5 && fields.iter().all(|f| matches!(f, Value::Int(_))) =>
        {
            fields[3] = Value::Nil;
            Value::Array(fields)
        }
        Value::Array(fields) => Value::Array(fields.into_iter().map(but_reset).collect()),
        other => other,
    }
}

#[test]
fn over_maxmemory_hits_are_refused_and_refunds_and_resets_still_run_as_in_the_module() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        for (key, other) in [("m", "m2"), ("l", "l2")] {
            hit(&mut con, key, &["5", "1h", "COST", "3"]);
            hit(&mut con, other, &["5", "1h"]);
        }
        set_maxmemory(&mut con, 1);
        let by_module = error_text(&mut con, redis::cmd("RL.HIT").arg("m").arg(5).arg("1h"));
        let by_library = error_text(&mut con, &fcall_cmd("rl_hit", &["l"], &["5", "1h"]));
        assert!(by_module.starts_with("OOM"), "{flavor:?}: {by_module}");
        assert_eq!(by_library, by_module, "{flavor:?}");
        // A refund, a refund on several keys and a reset give memory back: neither backend
        // refuses them.
        let module_refund: Value = redis::cmd("RL.REFUND")
            .arg("m")
            .arg(5)
            .arg("1h")
            .query(&mut con)
            .expect("RL.REFUND over maxmemory");
        let library_refund: Value = fcall_cmd("rl_refund", &["l"], &["5", "1h"])
            .query(&mut con)
            .expect("rl_refund over maxmemory");
        assert_eq!(
            but_reset(library_refund),
            but_reset(module_refund),
            "{flavor:?}"
        );
        let module_several: Value = redis::cmd("RL.MREFUND")
            .arg(1)
            .arg("m")
            .arg("SPEC")
            .arg(5)
            .arg("1h")
            .query(&mut con)
            .expect("RL.MREFUND over maxmemory");
        let library_several: Value = fcall_cmd("rl_mrefund", &["l"], &["SPEC", "5", "1h"])
            .query(&mut con)
            .expect("rl_mrefund over maxmemory");
        assert_eq!(
            but_reset(library_several),
            but_reset(module_several),
            "{flavor:?}"
        );
        let reset: i64 = fcall_cmd("rl_reset", &["l2"], &[])
            .query(&mut con)
            .expect("rl_reset over maxmemory");
        assert_eq!(reset, 1, "{flavor:?}");
        set_maxmemory(&mut con, 0);
        assert_eq!(
            get_bytes(&mut con, "l"),
            get_bytes(&mut con, "m"),
            "{flavor:?}"
        );
        assert_eq!(get_bytes(&mut con, "l2"), None, "{flavor:?}");
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

#[test]
fn several_keys_bad_input_gets_the_module_errors() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        foreign_keys(&mut con);
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

/// In a Redis Cluster with the library on every primary, a call reaches the node that owns
/// its key (FCALL's declared keys), every key's state is on its owner, several keys under
/// one hash tag go together, and keys of different slots are refused by the server.
#[test]
fn functions_route_by_their_keys_in_a_cluster() {
    each_flavor(|flavor| {
        let cluster = testkit::cluster::Cluster::start(flavor, 3, 0);
        for primary in cluster.primaries() {
            assert_eq!(primary.load_functions(), "ratelimit");
        }
        let mut client = cluster.client();
        let keys: Vec<String> = (0..24).map(|n| format!("rl:cluster:{n}")).collect();
        for key in &keys {
            let reply: Vec<i64> = fcall_cmd("rl_hit", &[key], &["3", "1h"])
                .query(&mut client)
                .unwrap_or_else(|e| panic!("rl_hit {key}: {e}"));
            assert_eq!(reply[..3], [1, 3, 2], "{key}");
        }
        let owners: std::collections::HashSet<u16> = keys
            .iter()
            .map(|key| {
                let owner = cluster.owner_of(key.as_str());
                let mut con = owner.conn();
                assert_eq!(
                    get_bytes(&mut con, key.as_str()),
                    Some(b"1".to_vec()),
                    "{key}"
                );
                owner.port()
            })
            .collect();
        assert_eq!(owners.len(), 3, "the keys spread over every primary");
        let together = ["rl:{alice}:login", "rl:{alice}:api"];
        let reply: Value = fcall_cmd(
            "rl_mhit",
            &together,
            &["SPEC", "3", "1h", "SPEC", "5", "1h"],
        )
        .query(&mut client)
        .expect("rl_mhit under one tag");
        let (allowed, binding, _): (i64, i64, Vec<Vec<i64>>) =
            redis::from_redis_value(reply).expect("several keys' reply");
        assert_eq!((allowed, binding), (1, 0));
        let owner = cluster.owner_of(together[0]);
        let mut con = owner.conn();
        let apart = error_text(
            &mut con,
            &fcall_cmd(
                "rl_mhit",
                &[keys[0].as_str(), keys[1].as_str()],
                &["SPEC", "3", "1h", "SPEC", "3", "1h"],
            ),
        );
        assert!(apart.starts_with("CROSSSLOT"), "{apart}");
    });
}
