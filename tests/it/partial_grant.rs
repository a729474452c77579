//! RL.TAKE, the partial grant, against real Redis and Valkey servers, for every algorithm:
//! it grants what is left up to `UPTO`, then part, then nothing; all tiers or none; the
//! units given back with RL.REFUND can be taken again in the same window; a grant reaches
//! replicas and the AOF as the bytes and absolute expiry the primary holds, and a grant of
//! nothing sends nothing; Cluster routes it by its key; bad input is refused with an ERR
//! that names the argument.

use testkit::cluster::Cluster;
use testkit::policy::{policy_config, policy_set};
use testkit::*;

use redis::{Connection, Value};

/// `RL.TAKE key <spec split on spaces>` (RESP2): RL.HIT's five fields and the granted count.
fn take(con: &mut Connection, key: &[u8], spec: &str) -> (Reply, i64) {
    let args: Vec<&str> = spec.split_whitespace().collect();
    let values: Vec<i64> = redis::cmd("RL.TAKE")
        .arg(key)
        .arg(&args)
        .query(con)
        .unwrap_or_else(|e| panic!("RL.TAKE {key:?} {spec}: {e}"));
    let [fields @ .., granted] = values.as_slice() else {
        panic!("RL.TAKE replied nothing");
    };
    assert_eq!(values.len(), 6, "six integers: {values:?}");
    let reply = decode_reply(fields);
    assert_eq!(
        reply.allowed,
        *granted > 0,
        "allowed means granted: {values:?}"
    );
    (reply, *granted)
}

/// A long window (about an hour, clear of its edges for two minutes) and a limit for it.
const LIMIT: i64 = 10;

/// The rule of `algorithm` with limit [`LIMIT`] per `window_ms`.
fn rule(algorithm: &str, window_ms: i64) -> String {
    format!("{LIMIT} {window_ms}ms ALGO {algorithm}")
}

#[test]
fn grants_what_is_left_then_part_then_nothing_for_every_algorithm() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let window_ms = window_clear_of_edges(&mut con);
        for algorithm in ALGORITHMS {
            let what = format!("{flavor:?} {algorithm}");
            let full = key("take", 0);
            let rule = rule(algorithm, window_ms);
            let upto = |n: i64| format!("{rule} UPTO {n}");
            let mut granted = Vec::new();
            for _ in 0..3 {
                let (reply, g) = take(&mut con, &full, &upto(4));
                assert_eq!(reply.limit, LIMIT, "{what}");
                assert_eq!(reply.retry_after_ms, 0, "{what}");
                granted.push((g, reply.remaining));
            }
            assert_eq!(granted, [(4, 6), (4, 2), (2, 0)], "{what}");
            let before = stored(&mut con, &full);
            let (none, g) = take(&mut con, &full, &upto(4));
            assert_eq!(g, 0, "{what}");
            assert!(!none.allowed && none.retry_after_ms > 0, "{what}: {none:?}");
            assert_eq!(
                stored(&mut con, &full),
                before,
                "{what}: a grant of 0 writes nothing"
            );
            // What RL.HIT answers now: the same denial.
            let hit = rl(&mut con, "RL.HIT", &full, &rule);
            assert!(!hit.allowed, "{what}");
            // More than the limit on an empty key: the limit.
            let (_, whole) = take(&mut con, &key("take", 1), &upto(i64::MAX));
            assert_eq!(whole, LIMIT, "{what}");
            redis::cmd("FLUSHALL").exec(&mut con).expect("FLUSHALL");
        }
    });
}

#[test]
fn tiers_grant_all_or_nothing_and_resp3_says_each_tier() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let window_ms = window_clear_of_edges(&mut con);
        let tiers = format!("3 {window_ms}ms 5 {}ms", 2 * window_ms);
        let key = testkit::key("tiers", 0);
        let (first, g) = take(&mut con, &key, &format!("{tiers} UPTO 10"));
        assert_eq!((g, first.limit, first.remaining), (3, 3, 0), "{flavor:?}");
        let (_, g) = take(&mut con, &key, &format!("{tiers} UPTO 10"));
        assert_eq!(
            g, 0,
            "{flavor:?}: the first tier is full; the second counts nothing"
        );
        // RESP3: the map names `granted`, and each tier's remaining shows the 3 counted
        // in both.
        let mut con3 = server.conn_resp3();
        let value: Value = redis::cmd("RL.TAKE")
            .arg(&key)
            .arg(tiers.split(' ').collect::<Vec<_>>())
            .arg(&["UPTO", "1"])
            .query(&mut con3)
            .expect("RL.TAKE answers");
        let Value::Map(pairs) = value else {
            panic!("{flavor:?}: not a map: {value:?}");
        };
        let names: Vec<String> = pairs
            .iter()
            .map(|(name, _)| match name {
                Value::SimpleString(s) => s.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        let mut expected: Vec<String> = FIELDS.iter().map(|f| f.to_string()).collect();
        expected.extend(["granted".into(), "tiers".into()]);
        assert_eq!(names, expected, "{flavor:?}");
        assert_eq!(pairs[5].1, Value::Int(0), "{flavor:?}");
        let Value::Array(per_tier) = &pairs[6].1 else {
            panic!("{flavor:?}: tiers is not an array");
        };
        let remaining: Vec<&Value> = per_tier
            .iter()
            .map(|tier| match tier {
                Value::Map(fields) => &fields[2].1,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(remaining, [&Value::Int(0), &Value::Int(2)], "{flavor:?}");
        // Give two back into both tiers: two can be taken again, not more.
        let back = rl(&mut con, "RL.REFUND", &key, &format!("{tiers} COST 2"));
        assert_eq!((back.allowed, back.remaining), (true, 2), "{flavor:?}");
        let (_, g) = take(&mut con, &key, &format!("{tiers} UPTO 10"));
        assert_eq!(g, 2, "{flavor:?}");
    });
}

/// What a fixed count of units answers, for the reference of the sequence test.
#[derive(Debug, Default)]
struct Reference {
    used: i64,
}

impl Reference {
    fn take(&mut self, n: i64) -> i64 {
        let granted = n.min(LIMIT - self.used);
        self.used += granted;
        granted
    }

    fn give_back(&mut self, n: i64) -> bool {
        let any = self.used > 0;
        self.used -= n.min(self.used);
        any
    }

    fn hit(&mut self, cost: i64) -> bool {
        let allowed = self.used + cost <= LIMIT;
        if allowed {
            self.used += cost;
        }
        allowed
    }
}

/// Grants, give-backs and hits in a fixed mixed order against a count kept here: within
/// one long window every algorithm counts exactly that (the buckets refill about one unit
/// in six minutes, less than one in a test, and `remaining` rounds down).
#[test]
fn grant_give_back_and_hit_sequences_follow_a_plain_count() {
    let steps: [(&str, i64); 16] = [
        ("take", 3),
        ("hit", 2),
        ("take", 4),
        ("back", 2),
        ("take", 5),
        ("take", 1),
        ("hit", 1),
        ("back", 3),
        ("hit", 2),
        ("take", 7),
        ("back", 20),
        ("take", 20),
        ("back", 1),
        ("hit", 2),
        ("take", 1),
        ("take", 1),
    ];
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let window_ms = window_clear_of_edges(&mut con);
        for algorithm in ALGORITHMS {
            let key = testkit::key("sequence", 0);
            let rule = rule(algorithm, window_ms);
            let mut reference = Reference::default();
            for (i, (op, n)) in steps.into_iter().enumerate() {
                let what = format!("{flavor:?} {algorithm} step {i} {op} {n}");
                let remaining = match op {
                    "take" => {
                        let (reply, g) = take(&mut con, &key, &format!("{rule} UPTO {n}"));
                        assert_eq!(g, reference.take(n), "{what}");
                        reply.remaining
                    }
                    "back" => {
                        let reply = rl(&mut con, "RL.REFUND", &key, &format!("{rule} COST {n}"));
                        assert_eq!(reply.allowed, reference.give_back(n), "{what}");
                        reply.remaining
                    }
                    _ => {
                        let reply = rl(&mut con, "RL.HIT", &key, &format!("{rule} COST {n}"));
                        assert_eq!(reply.allowed, reference.hit(n), "{what}");
                        reply.remaining
                    }
                };
                assert_eq!(remaining, LIMIT - reference.used, "{what}");
            }
            redis::cmd("FLUSHALL").exec(&mut con).expect("FLUSHALL");
        }
    });
}

/// Grants on keys of every algorithm, some partial, some of nothing; returns the keys.
fn grant_on_every_algorithm(con: &mut Connection, window_ms: i64) -> Vec<Vec<u8>> {
    let mut keys = Vec::new();
    for (i, algorithm) in ALGORITHMS.into_iter().enumerate() {
        let key = testkit::key(algorithm, i);
        let rule = rule(algorithm, window_ms);
        for n in [4, 9, 3] {
            take(con, &key, &format!("{rule} UPTO {n}"));
        }
        keys.push(key);
    }
    keys
}

#[test]
fn grants_reach_replicas_as_the_primary_bytes_and_nothing_for_a_grant_of_nothing() {
    each_flavor(|flavor| {
        // The replica has no module: it can only apply what the primary sends if that is
        // the plain effect, never RL.TAKE itself.
        let (primary, replica) = primary_with_replica_configs(
            ServerConfig::new(flavor).arg("repl-ping-replica-period", "3600"),
            ServerConfig::new(flavor).without_module(),
        );
        let mut con = primary.conn();
        let window_ms = window_clear_of_edges(&mut con);
        let keys = grant_on_every_algorithm(&mut con, window_ms);
        wait_for_replicas(&mut con, 1);
        let mut on_replica = replica.conn();
        for key in &keys {
            let held = stored(&mut con, key);
            assert!(held.0.is_some(), "{flavor:?} {key:?}");
            assert_eq!(stored(&mut on_replica, key), held, "{flavor:?} {key:?}");
        }
        // Every key is full now: a grant of nothing changes and sends nothing.
        let offset = primary.master_repl_offset();
        for (key, algorithm) in keys.iter().zip(ALGORITHMS) {
            let (_, g) = take(
                &mut con,
                key,
                &format!("{} UPTO 5", rule(algorithm, window_ms)),
            );
            assert_eq!(g, 0, "{flavor:?} {algorithm}");
        }
        assert_eq!(primary.master_repl_offset(), offset, "{flavor:?}");
    });
}

/// Every file of the server's AOF directory, as text.
fn aof_text(dir: &std::path::Path) -> String {
    let entries = std::fs::read_dir(dir.join("appendonlydir")).expect("an AOF directory");
    let mut text = String::new();
    for entry in entries {
        let bytes = std::fs::read(entry.expect("an entry").path()).expect("an AOF file");
        text.push_str(&String::from_utf8_lossy(&bytes));
    }
    text
}

#[test]
fn aof_replay_restores_what_grants_counted() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).arg("appendonly", "yes").start();
        let mut con = server.conn();
        let window_ms = window_clear_of_edges(&mut con);
        let keys = grant_on_every_algorithm(&mut con, window_ms);
        let half = key("half", 0);
        let (_, g) = take(
            &mut con,
            &half,
            &format!("{} UPTO 6", rule("fixed", window_ms)),
        );
        assert_eq!(g, 6, "{flavor:?}");
        let before: Vec<_> = keys.iter().map(|k| stored(&mut con, k)).collect();
        let half_before = stored(&mut con, &half);
        // The AOF holds the effects with absolute expiries, never the command.
        let aof = aof_text(server.config.dir());
        assert!(aof.contains("PXAT"), "{flavor:?}");
        assert!(!aof.to_uppercase().contains("RL.TAKE"), "{flavor:?}");
        let server = server.restart_on_the_aof();
        let mut con = server.conn();
        let after: Vec<_> = keys.iter().map(|k| stored(&mut con, k)).collect();
        assert_eq!(after, before, "{flavor:?}");
        assert_eq!(stored(&mut con, &half), half_before, "{flavor:?}");
        let (_, g) = take(
            &mut con,
            &half,
            &format!("{} UPTO 6", rule("fixed", window_ms)),
        );
        assert_eq!(
            g,
            LIMIT - 6,
            "{flavor:?}: counting goes on from the replayed state"
        );
    });
}

#[test]
fn cluster_routes_a_grant_to_its_key() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 0);
        let primaries = cluster.primaries();
        stay_clear_of_window_edges(primaries[0], 3_600_000, 60_000);
        let mut any = cluster.servers()[0].conn();
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg(&["GETKEYS", "RL.TAKE", "k", "5", "1h", "UPTO", "3"])
            .query(&mut any)
            .expect("COMMAND GETKEYS");
        assert_eq!(keys, ["k"], "{flavor:?}");
        let mut client = cluster.client();
        for owner in &primaries {
            let key = format!("rl:{{{}}}:take", cluster.tag_on(owner, "take"));
            let slot = cluster.keyslot(key.as_str());
            for other in primaries.iter().filter(|p| p.port() != owner.port()) {
                let error = error_text(
                    &mut other.conn(),
                    redis::cmd("RL.TAKE")
                        .arg(&key)
                        .arg(&["5", "1h", "UPTO", "3"]),
                );
                assert_eq!(
                    error,
                    format!("MOVED {slot} 127.0.0.1:{}", owner.port()),
                    "{flavor:?}"
                );
            }
            let granted: Vec<i64> = [3, 3, 3]
                .iter()
                .map(|n| {
                    let values: Vec<i64> = redis::cmd("RL.TAKE")
                        .arg(&key)
                        .arg(&["5", "1h", "UPTO", &n.to_string()])
                        .query(&mut client)
                        .expect("RL.TAKE through the cluster client");
                    values[5]
                })
                .collect();
            assert_eq!(granted, [3, 2, 0], "{flavor:?} on {}", owner.port());
            assert_eq!(get_bytes(&mut owner.conn(), &key), Some(b"5".to_vec()));
        }
    });
}

#[test]
fn policies_grant_and_a_shadow_policy_never_denies_but_counts_only_what_it_would() {
    each_flavor(|flavor| {
        let server = policy_config(flavor).start();
        let mut con = server.conn();
        let window_ms = window_clear_of_edges(&mut con);
        policy_set(&mut con, b"api", &format!("5 {window_ms}ms"));
        policy_set(&mut con, b"watch", &format!("5 {window_ms}ms MODE shadow"));
        let (_, g) = take(&mut con, b"rl:p", "POLICY api UPTO 3");
        assert_eq!(g, 3, "{flavor:?}");
        let (_, g) = take(&mut con, b"rl:p", "POLICY api UPTO 3");
        assert_eq!(g, 2, "{flavor:?}");
        let (shadow, g) = take(&mut con, b"rl:s", "POLICY watch UPTO 8");
        assert_eq!(
            (g, shadow.allowed),
            (8, true),
            "{flavor:?}: shadow never denies"
        );
        assert_eq!(
            get_bytes(&mut con, b"rl:s"),
            Some(b"5".to_vec()),
            "{flavor:?}"
        );
        let mut con3 = server.conn_resp3();
        let value: Value = redis::cmd("RL.TAKE")
            .arg(&["rl:s", "POLICY", "watch", "UPTO", "1"])
            .query(&mut con3)
            .expect("RL.TAKE answers");
        let Value::Map(pairs) = value else {
            panic!("{flavor:?}: not a map");
        };
        let shadow_denied = pairs
            .iter()
            .find(|(name, _)| name == &Value::SimpleString("shadow_denied".into()));
        assert_eq!(
            shadow_denied.map(|(_, v)| v),
            Some(&Value::Int(1)),
            "{flavor:?}"
        );
    });
}

#[test]
fn bad_input_is_refused_by_name_and_writes_nothing() {
    let cases: [(&[&str], &str); 10] = [
        (
            &["5", "1m", "UPTO", "0"],
            "ERR UPTO must be a positive integer: the most units to take",
        ),
        (
            &["5", "1m", "UPTO", "-2"],
            "ERR UPTO must be a positive integer: the most units to take",
        ),
        (
            &["5", "1m", "UPTO", "9223372036854775808"],
            "ERR UPTO must be a positive integer: the most units to take",
        ),
        (
            &["5", "1m", "UPTO"],
            "ERR UPTO must be a positive integer: the most units to take",
        ),
        (
            &["5", "1m", "UPTO", "1.5"],
            "ERR UPTO must be a positive integer: the most units to take",
        ),
        (
            &["5", "1m"],
            "ERR RL.TAKE needs UPTO n: the most units to take, an integer >= 1",
        ),
        (
            &["5", "1m", "COST", "2", "UPTO", "2"],
            "ERR RL.TAKE takes UPTO n, not COST: it counts up to n units and answers how many \
             (RL.HIT COST n counts all n or none)",
        ),
        (
            &["5", "1m", "UPTO", "2", "UPTO", "3"],
            "ERR UPTO is given more than once",
        ),
        (
            &["5", "1m", "UPTO", "2", "FAST"],
            "ERR unknown option 'FAST' (expected UPTO, and with limits ALGO, BURST, TZ or ANCHOR)",
        ),
        (
            &["POLICY", "nope", "UPTO", "2"],
            "ERR no such policy 'nope'",
        ),
    ];
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        for (args, expected) in cases {
            let error = error_text(&mut con, redis::cmd("RL.TAKE").arg("rl:bad").arg(args));
            assert_eq!(error, expected, "{flavor:?} {args:?}");
        }
        let arity = error_text(&mut con, redis::cmd("RL.TAKE").arg("rl:bad"));
        assert!(
            arity.starts_with("ERR wrong number of arguments"),
            "{flavor:?}: {arity}"
        );
        let keys: i64 = redis::cmd("DBSIZE").query(&mut con).expect("DBSIZE");
        assert_eq!(keys, 0, "{flavor:?}: nothing written");
        // A key of another type, a string that is not a state, a key of leases.
        redis::cmd("RPUSH")
            .arg(&["rl:list", "x"])
            .exec(&mut con)
            .expect("RPUSH");
        redis::cmd("SET")
            .arg(&["rl:text", "hello"])
            .exec(&mut con)
            .expect("SET");
        redis::cmd("RL.ACQUIRE")
            .arg(&["rl:leases", "3", "1h"])
            .exec(&mut con)
            .expect("RL.ACQUIRE");
        let on = |key: &str, con: &mut Connection| {
            error_text(
                con,
                redis::cmd("RL.TAKE")
                    .arg(key)
                    .arg(&["5", "1m", "UPTO", "2"]),
            )
        };
        assert_eq!(
            on("rl:list", &mut con),
            "WRONGTYPE Operation against a key holding the wrong kind of value"
        );
        assert_eq!(
            on("rl:text", &mut con),
            "ERR key holds a string that is not a ratelimit state"
        );
        assert!(
            on("rl:leases", &mut con).starts_with("ERR key holds leases"),
            "{flavor:?}"
        );
        assert_eq!(get_bytes(&mut con, "rl:text"), Some(b"hello".to_vec()));
    });
}
