//! RL.MHIT, RL.MPEEK and RL.MREFUND on Redis 7.0 and Valkey 8.1: several keys, each with
//! its own rule and cost, counted in all of them or in none. A denied call writes and
//! propagates nothing (bytes, expiries and `master_repl_offset` unchanged, not even a
//! renewal); an allowed one reaches the replica as the same `SET ... PXAT` effects RL.HIT
//! sends; 8 clients at once get exactly the binding key's limit; RL.MPEEK counts nothing;
//! bad input is refused with an error naming the key and writes nothing.

use testkit::policy::{policy_config, policy_set};
use testkit::*;

use redis::{Connection, Value};

const HOUR_MS: i64 = 3_600_000;

/// A several-keys call's RESP2 reply: `[allowed, binding, [[five integers], ...]]`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Several {
    allowed: bool,
    binding: usize,
    keys: Vec<Reply>,
}

/// `command numkeys keys... SPEC rule SPEC rule ...`, each rule split on spaces.
fn several_cmd(command: &str, keys: &[&str], rules: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(command);
    cmd.arg(keys.len()).arg(keys);
    for rule in rules {
        cmd.arg("SPEC")
            .arg(rule.split_whitespace().collect::<Vec<_>>());
    }
    cmd
}

fn several(con: &mut Connection, command: &str, keys: &[&str], rules: &[&str]) -> Several {
    let (allowed, binding, replies): (i64, usize, Vec<Vec<i64>>) =
        several_cmd(command, keys, rules)
            .query(con)
            .unwrap_or_else(|e| panic!("{command} {keys:?} {rules:?}: {e}"));
    assert!(allowed == 0 || allowed == 1);
    assert_eq!(replies.len(), keys.len());
    Several {
        allowed: allowed == 1,
        binding,
        keys: replies.iter().map(|r| decode_reply(r)).collect(),
    }
}

fn mhit(con: &mut Connection, keys: &[&str], rules: &[&str]) -> Several {
    several(con, "RL.MHIT", keys, rules)
}

/// A primary (that never pings, so that only writes move its replication offset) and its
/// replica.
fn quiet_primary_with_replica(flavor: Flavor) -> (Server, Server) {
    primary_with_replica_configs(
        ServerConfig::new(flavor).arg("repl-ping-replica-period", "3600"),
        ServerConfig::new(flavor),
    )
}

/// Every key's value and absolute expiry.
fn snapshot(con: &mut Connection, keys: &[&str]) -> Vec<(Option<Vec<u8>>, i64)> {
    keys.iter().map(|k| stored(con, k.as_bytes())).collect()
}

#[test]
fn counts_in_every_key_or_in_none_and_a_denial_propagates_nothing() {
    each_flavor(|flavor| {
        let (primary, replica) = quiet_primary_with_replica(flavor);
        stay_clear_of_window_edges(&primary, HOUR_MS, 60_000);
        let mut con = primary.conn();
        let keys = ["rl:{u1}:user", "rl:{u1}:burst", "rl:{u1}:log"];
        let rules = ["10 1h", "3 1h ALGO gcra COST 1", "20 1h ALGO log COST 2"];
        for n in 0..3 {
            let out = mhit(&mut con, &keys, &rules);
            assert!(out.allowed, "{flavor:?} call {n}");
            assert_eq!(out.keys[0].remaining, 9 - n, "{flavor:?}");
            assert_eq!(out.keys[2].remaining, 18 - 2 * n, "{flavor:?}");
            assert_eq!(out.binding, 1, "{flavor:?}: the gcra key has least left");
        }
        wait_for_replicas(&mut con, 1);
        let before = snapshot(&mut con, &keys);
        let offset = primary.master_repl_offset();
        // The gcra key is full: nothing is counted anywhere.
        let denied = mhit(&mut con, &keys, &rules);
        assert!(!denied.allowed, "{flavor:?}");
        assert_eq!(denied.binding, 1, "{flavor:?}");
        assert!(denied.keys[1].retry_after_ms > 0, "{flavor:?}");
        let user = denied.keys[0];
        assert!(user.allowed, "{flavor:?}: alone it would allow");
        assert_eq!(user.remaining, 7, "{flavor:?}: and reports what it has now");
        assert_eq!(denied.keys[2].remaining, 14, "{flavor:?}");
        assert_eq!(snapshot(&mut con, &keys), before, "{flavor:?}");
        // A key whose rule changed is renewed by RL.HIT even when denied; in a denied
        // several-keys call it is not written either.
        let changed = ["10 30m", "3 1h ALGO gcra COST 1", "20 1h ALGO log COST 2"];
        assert!(!mhit(&mut con, &keys, &changed).allowed, "{flavor:?}");
        assert_eq!(snapshot(&mut con, &keys), before, "{flavor:?}");
        assert_eq!(primary.master_repl_offset(), offset, "{flavor:?}");
        // The replica holds the primary's exact bytes and expiries, set by plain SETs.
        wait_for_replicas(&mut con, 1);
        assert_eq!(snapshot(&mut replica.conn(), &keys), before, "{flavor:?}");
        assert_eq!(replica.command_calls("set"), Some(9), "{flavor:?}");
        assert_eq!(replica.command_calls("rl.mhit"), None, "{flavor:?}");
    });
}

#[test]
fn eight_concurrent_clients_get_exactly_the_binding_keys_limit() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        stay_clear_of_window_edges(&server, HOUR_MS, 120_000);
        let keys = ["rl:{c}:wide", "rl:{c}:binding", "rl:{c}:sliding"];
        let rules = ["1000 1h", "200 1h", "5000 1h ALGO sliding COST 3"];
        let replies: Vec<Several> = std::thread::scope(|scope| {
            let threads: Vec<_> = (0..8)
                .map(|_| {
                    let mut con = server.conn();
                    scope.spawn(move || {
                        (0..50)
                            .map(|_| mhit(&mut con, &keys, &rules))
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            threads
                .into_iter()
                .flat_map(|t| t.join().expect("client thread"))
                .collect()
        });
        assert_eq!(replies.len(), 400, "{flavor:?}");
        let allowed: Vec<&Several> = replies.iter().filter(|r| r.allowed).collect();
        assert_eq!(allowed.len(), 200, "{flavor:?}: exactly the binding limit");
        let mut remaining: Vec<i64> = allowed.iter().map(|r| r.keys[1].remaining).collect();
        remaining.sort_unstable();
        assert_eq!(remaining, (0..200).collect::<Vec<_>>(), "{flavor:?}");
        assert!(replies.iter().all(|r| r.binding == 1), "{flavor:?}");
        let mut con = server.conn();
        assert_eq!(
            get_bytes(&mut con, keys[0]),
            Some(b"200".to_vec()),
            "{flavor:?}"
        );
        assert_eq!(
            get_bytes(&mut con, keys[1]),
            Some(b"200".to_vec()),
            "{flavor:?}"
        );
        let sliding = rl(&mut con, "RL.PEEK", keys[2].as_bytes(), rules[2]);
        assert_eq!(
            sliding.remaining,
            5000 - 603,
            "{flavor:?}: 200 counted, 3 each"
        );
    });
}

#[test]
fn mpeek_answers_what_mhit_would_and_counts_nothing() {
    each_flavor(|flavor| {
        let (primary, replica) = quiet_primary_with_replica(flavor);
        stay_clear_of_window_edges(&primary, HOUR_MS, 60_000);
        let mut con = primary.conn();
        let keys = ["rl:{p}:a", "rl:{p}:b"];
        let rules = ["4 1h COST 2", "5 1h ALGO token"];
        let offset = primary.master_repl_offset();
        let look = several(&mut con, "RL.MPEEK", &keys, &rules);
        assert_eq!(snapshot(&mut con, &keys), vec![(None, -2); 2], "{flavor:?}");
        assert_eq!(primary.master_repl_offset(), offset, "{flavor:?}");
        for n in 0..3 {
            let look_again = several(&mut con, "RL.MPEEK", &keys, &rules);
            let hit = mhit(&mut con, &keys, &rules);
            assert_eq!(look_again.allowed, hit.allowed, "{flavor:?} {n}");
            assert_eq!(look_again.binding, hit.binding, "{flavor:?} {n}");
            for (l, h) in look_again.keys.iter().zip(&hit.keys) {
                assert_eq!((l.allowed, l.remaining), (h.allowed, h.remaining), "{n}");
            }
        }
        assert!(look.allowed, "{flavor:?}");
        // Read-only: it answers on the replica too.
        wait_for_replicas(&mut con, 1);
        let on_replica = several(&mut replica.conn(), "RL.MPEEK", &keys, &rules);
        assert!(!on_replica.allowed, "{flavor:?}: the 4 units of a are used");
        assert_eq!(on_replica.binding, 0, "{flavor:?}");
    });
}

#[test]
fn mrefund_gives_back_in_every_key() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        stay_clear_of_window_edges(&server, HOUR_MS, 60_000);
        let mut con = server.conn();
        let keys = ["rl:{r}:a", "rl:{r}:b"];
        let rules = ["5 1h COST 3", "5 1h COST 1"];
        mhit(&mut con, &keys, &rules);
        mhit(&mut con, &keys, &["5 1h COST 1", "5 1h COST 1"]);
        let back = several(&mut con, "RL.MREFUND", &keys, &rules);
        assert!(back.allowed, "{flavor:?}");
        assert_eq!(
            (back.keys[0].remaining, back.keys[1].remaining),
            (4, 4),
            "{flavor:?}"
        );
        assert_eq!(back.binding, 0, "{flavor:?}: first of the least remaining");
        assert_eq!(
            get_bytes(&mut con, keys[0]),
            Some(b"1".to_vec()),
            "{flavor:?}"
        );
        assert_eq!(
            get_bytes(&mut con, keys[1]),
            Some(b"1".to_vec()),
            "{flavor:?}"
        );
    });
}

/// The RESP3 reply's field names and values, one level deep.
fn map_of(value: &Value) -> Vec<(String, Value)> {
    let Value::Map(pairs) = value else {
        panic!("not a map: {value:?}");
    };
    pairs
        .iter()
        .map(|(name, v)| match name {
            Value::SimpleString(name) => (name.clone(), v.clone()),
            other => panic!("field name {other:?}"),
        })
        .collect()
}

#[test]
fn replies_a_map_in_resp3_and_nested_arrays_in_resp2() {
    each_flavor(|flavor| {
        let server = policy_config(flavor).start();
        stay_clear_of_window_edges(&server, HOUR_MS, 60_000);
        let mut con = server.conn();
        policy_set(&mut con, b"spec", "1 1h MODE shadow");
        let keys = ["rl:{m}:tiers", "rl:{m}:shadow"];
        let rules = ["10 1m 100 1h", "POLICY spec COST 2"];
        // RESP2: [allowed, binding, [[5 integers], [5 integers]]].
        let out = mhit(&mut con, &keys, &rules);
        assert!(out.allowed, "{flavor:?}: a shadow policy never denies");
        assert_eq!(
            out.keys[0],
            decode_reply(&out.keys[0].values()),
            "{flavor:?}"
        );
        let mut resp3 = server.conn_resp3();
        let value: Value = several_cmd("RL.MHIT", &keys, &rules)
            .query(&mut resp3)
            .expect("RL.MHIT");
        let top = map_of(&value);
        let names: Vec<&str> = top.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["allowed", "binding", "keys"], "{flavor:?}");
        assert_eq!(top[0].1, Value::Int(1), "{flavor:?}");
        assert_eq!(
            top[1].1,
            Value::Int(1),
            "{flavor:?}: the shadow key has 0 left"
        );
        let Value::Array(per_key) = &top[2].1 else {
            panic!("keys is an array: {value:?}");
        };
        let tiers = map_of(&per_key[0]);
        let names: Vec<&str> = tiers.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, [&FIELDS[..], &["tiers"]].concat(), "{flavor:?}");
        assert_eq!(tiers[2].1, Value::Int(8), "{flavor:?}: two calls counted");
        let shadow = map_of(&per_key[1]);
        let names: Vec<&str> = shadow.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [&FIELDS[..], &["shadow_denied"]].concat(),
            "{flavor:?}"
        );
        assert_eq!(shadow[0].1, Value::Int(1), "{flavor:?}");
        assert_eq!(shadow[5].1, Value::Int(1), "{flavor:?}: cost 2 > limit 1");
        assert_eq!(
            get_bytes(&mut con, keys[1]),
            None,
            "{flavor:?}: never counted"
        );
    });
}

#[test]
fn bad_input_is_refused_by_name_and_writes_nothing() {
    each_flavor(|flavor| {
        let (primary, _replica) = quiet_primary_with_replica(flavor);
        let mut con = primary.conn();
        redis::cmd("LPUSH")
            .arg("rl:{b}:list")
            .arg("x")
            .exec(&mut con)
            .expect("LPUSH");
        redis::cmd("SET")
            .arg("rl:{b}:text")
            .arg("hello")
            .exec(&mut con)
            .expect("SET");
        wait_for_replicas(&mut con, 1);
        let offset = primary.master_repl_offset();
        let fresh = "rl:{b}:fresh";
        #[rustfmt::skip]
        let cases: &[(&[&str], &str)] = &[
            (&["RL.MHIT"], "ERR wrong number of arguments for 'RL.MHIT' command"),
            (&["RL.MPEEK"], "ERR wrong number of arguments for 'RL.MPEEK' command"),
            (&["RL.MHIT", "0", "SPEC", "1", "1s"], "ERR numkeys must be an integer from 1 to 16"),
            (&["RL.MHIT", "17", fresh], "ERR numkeys must be an integer from 1 to 16"),
            (&["RL.MHIT", "2", fresh], "ERR numkeys is 2 but fewer keys follow"),
            (&["RL.MHIT", "1", fresh, "5", "1m"], "ERR each key needs a rule: numkeys key [key ...] SPEC rule [SPEC rule ...]"),
            (&["RL.MHIT", "2", fresh, "rl:{b}:x", "SPEC", "5", "1m"], "ERR give one SPEC per key, in key order (2 keys)"),
            (&["RL.MHIT", "2", fresh, fresh, "SPEC", "5", "1m", "SPEC", "5", "1m"], "ERR key 'rl:{b}:fresh' is given twice (indexes 0 and 1): name each key once, with the sum of its costs"),
            (&["RL.MHIT", "2", fresh, "rl:{b}:x", "SPEC", "5", "1m", "SPEC", "5", "1y"], "ERR SPEC 1 (key 'rl:{b}:x'): window has an unknown unit: use ms, s, m, h or d (a week is 7d), or a calendar period: day, week, month or year"),
            (&["RL.MREFUND", "1", fresh, "SPEC", "5", "1m", "COST", "0"], "ERR SPEC 0 (key 'rl:{b}:fresh'): COST must be a positive integer"),
            (&["RL.MPEEK", "2", fresh, "rl:{b}:x", "SPEC", "5", "1m", "SPEC", "POLICY", "nope"], "ERR SPEC 1 (key 'rl:{b}:x'): no such policy 'nope'"),
            (&["RL.MHIT", "2", fresh, "rl:{b}:list", "SPEC", "5", "1m", "SPEC", "5", "1m"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
            (&["RL.MHIT", "2", fresh, "rl:{b}:text", "SPEC", "5", "1m", "SPEC", "5", "1m"], "ERR SPEC 1 (key 'rl:{b}:text'): key holds a string that is not a ratelimit state"),
        ];
        for (args, expected) in cases {
            let mut cmd = redis::cmd(args[0]);
            cmd.arg(&args[1..]);
            assert_eq!(&error_text(&mut con, &cmd), expected, "{flavor:?} {args:?}");
        }
        let dbsize: i64 = redis::cmd("DBSIZE").query(&mut con).expect("DBSIZE");
        assert_eq!(dbsize, 2, "{flavor:?}: no key was created");
        assert_eq!(primary.master_repl_offset(), offset, "{flavor:?}");
    });
}

#[test]
fn key_specs_name_every_key_and_only_them() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let call = "3 a b c SPEC 1 1s SPEC POLICY spec SPEC 2 1m COST 2";
        for command in ["RL.MHIT", "RL.MPEEK", "RL.MREFUND"] {
            let keys: Vec<String> = redis::cmd("COMMAND")
                .arg("GETKEYS")
                .arg(command)
                .arg(call.split(' ').collect::<Vec<_>>())
                .query(&mut con)
                .expect("COMMAND GETKEYS");
            assert_eq!(keys, ["a", "b", "c"], "{flavor:?} {command}");
        }
    });
}
