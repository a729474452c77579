//! RL.PEEK, RL.RESET and RL.REFUND against real Redis and Valkey servers, for every
//! algorithm: PEEK answers what RL.HIT would and writes nothing, also on a replica and for
//! a key a replica still holds past its expiry; RESET deletes the state everywhere and
//! refuses what is not a rate-limit state; REFUND lets a caller count only failures, even
//! under parallel clients, never above the limit, and writes nothing when it gives nothing
//! back.

use testkit::shapes::{seed_every_shape, Rule, SeededKey};
use testkit::*;

use redis::{Connection, Value};
use std::process::Command;
use std::time::Duration;

const NOT_OURS: &str = "ERR key holds a string that is not a ratelimit state";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn rl_reset(con: &mut Connection, key: &[u8]) -> i64 {
    redis::cmd("RL.RESET")
        .arg(key)
        .query(con)
        .unwrap_or_else(|e| panic!("RL.RESET {key:?}: {e}"))
}

/// The five fields as integers, for exact comparisons in one assertion.
fn values(r: &Reply) -> [i64; 5] {
    [
        i64::from(r.allowed),
        r.limit,
        r.remaining,
        r.reset_after_ms,
        r.retry_after_ms,
    ]
}

/// Runs `command key <spec>` on a RESP3 connection; returns the binding decision and the
/// per-tier ones (empty for a single tier).
fn rl3(con: &mut Connection, command: &str, key: &[u8], spec: &str) -> (Reply, Vec<Reply>) {
    let args: Vec<&str> = spec.split_whitespace().collect();
    let value: Value = redis::cmd(command)
        .arg(key)
        .arg(&args)
        .query(con)
        .unwrap_or_else(|e| panic!("{command} {key:?} {spec}: {e}"));
    let decode = |map: &Value| -> (Reply, Option<Value>) {
        let Value::Map(pairs) = map else {
            panic!("not a map: {map:?}");
        };
        let mut integers = Vec::new();
        for ((name, field), expected) in pairs.iter().zip(FIELDS) {
            assert_eq!(name, &Value::SimpleString(expected.into()), "{map:?}");
            let Value::Int(n) = field else {
                panic!("{expected} is not an integer: {map:?}");
            };
            integers.push(*n);
        }
        (
            decode_reply(&integers),
            pairs.get(5).map(|(_, v)| v.clone()),
        )
    };
    let (binding, tiers) = decode(&value);
    let tiers = match tiers {
        None => Vec::new(),
        Some(Value::Array(maps)) => maps.iter().map(|m| decode(m).0).collect(),
        Some(other) => panic!("tiers is not an array: {other:?}"),
    };
    (binding, tiers)
}

fn changes_since_save(server: &Server) -> i64 {
    server
        .info_field("persistence", "rdb_changes_since_last_save")
        .expect("rdb_changes_since_last_save")
        .parse()
        .expect("an integer")
}

/// A primary that sends no pings, so that only writes move its replication offset, with
/// a replica attached.
fn quiet_primary_with_replica(flavor: Flavor) -> (Server, Server) {
    primary_with_replica_configs(
        ServerConfig::new(flavor).arg("repl-ping-replica-period", "3600"),
        ServerConfig::new(flavor),
    )
}

/// Asserts that two answers to the same question a few ms apart agree: the same decision
/// and counts, and times no further apart than `slack_ms` (0 and -1 exactly).
fn assert_same_answer(context: &str, a: &Reply, b: &Reply, slack_ms: i64) {
    assert_eq!(
        (a.allowed, a.limit, a.remaining),
        (b.allowed, b.limit, b.remaining),
        "{context}: {a:?} vs {b:?}"
    );
    for (x, y) in [
        (a.reset_after_ms, b.reset_after_ms),
        (a.retry_after_ms, b.retry_after_ms),
    ] {
        if x <= 0 || y <= 0 {
            assert_eq!(x, y, "{context}: {a:?} vs {b:?}");
        } else {
            assert!((x - y).abs() <= slack_ms, "{context}: {a:?} vs {b:?}");
        }
    }
}

/// Calls for the PEEK/HIT comparison on one key, `{w}` and `{d}` standing for the clear
/// window and 24 times it: fills, denials, a cost above the limit, and a change of
/// limit (a renewal, which HIT writes and PEEK must not).
const PEEK_STEPS: [&str; 9] = [
    "4 {w}ms",
    "4 {w}ms COST 2",
    "4 {w}ms COST 2",
    "4 {w}ms",
    "4 {w}ms",
    "4 {w}ms COST 5",
    "6 {w}ms",
    "4 {w}ms 6 {d}ms COST 1",
    "4 {w}ms 6 {d}ms COST 1",
];

#[test]
fn peek_answers_what_hit_would_and_writes_nothing() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let w = window_clear_of_edges(&mut con);
        for algo in ALGORITHMS {
            let name = key(algo, 0);
            for step in PEEK_STEPS {
                let spec = step
                    .replace("{w}", &w.to_string())
                    .replace("{d}", &(24 * w).to_string());
                let spec = format!("{spec} ALGO {algo}");
                let context = format!("{flavor:?} {spec}");
                let before = stored(&mut con, &name);
                let from = server_ms(&mut con);
                let peek = rl(&mut con, "RL.PEEK", &name, &spec);
                assert_eq!(stored(&mut con, &name), before, "{context}: PEEK wrote");
                let hit = rl(&mut con, "RL.HIT", &name, &spec);
                let slack = server_ms(&mut con) - from;
                // After a rule change a look cannot write the renewal, so its wait lasts
                // until the old state is gone: never shorter than the hit's.
                let mut peek = peek;
                if !peek.allowed && peek.retry_after_ms > hit.retry_after_ms + slack {
                    assert!(hit.retry_after_ms > 0, "{context}: {peek:?} vs {hit:?}");
                    peek.retry_after_ms = hit.retry_after_ms;
                }
                assert_same_answer(&context, &peek, &hit, slack);
            }
        }
        // A key with no state stays without one.
        let peek = rl(&mut con, "RL.PEEK", b"rl:none", "3 1h ALGO gcra COST 2");
        assert_eq!(values(&peek), [1, 3, 1, 2_400_000, 0], "{flavor:?}");
        assert_eq!(stored(&mut con, b"rl:none"), (None, -2), "{flavor:?}");
    });
}

#[test]
fn peek_breaks_no_watch_and_moves_no_replication_offset() {
    each_flavor(|flavor| {
        let (primary, replica) = quiet_primary_with_replica(flavor);
        let mut con = primary.conn();
        let mut watcher = primary.conn();
        let w = window_clear_of_edges(&mut con);
        let mut peeks = Vec::new();
        for algo in ALGORITHMS {
            let name = key(algo, 1);
            let full = format!("3 {w}ms ALGO {algo}");
            assert!(rl(&mut con, "RL.HIT", &name, &format!("{full} COST 2")).allowed);
            // Peeks that would be allowed, denied, never fit, and renew the key.
            for spec in [
                full.clone(),
                format!("{full} COST 2"),
                format!("{full} COST 9"),
                format!("2 {w}ms ALGO {algo}"),
                format!("3 {}ms ALGO {algo}", 2 * w),
                format!(
                    "3 {w}ms ALGO {}",
                    if algo == "log" { "gcra" } else { "log" }
                ),
            ] {
                peeks.push((name.clone(), spec));
            }
            peeks.push((key(algo, 2), full));
        }
        wait_for_replicas(&mut con, 1);
        let offset = primary.master_repl_offset();
        let changes = changes_since_save(&primary);
        for (name, spec) in &peeks {
            let before = stored(&mut con, name);
            let survives = watch_survives(&mut watcher, name, || {
                rl(&mut con, "RL.PEEK", name, spec);
            });
            assert!(survives, "{flavor:?} RL.PEEK {name:?} {spec} broke a WATCH");
            assert_eq!(stored(&mut con, name), before, "{flavor:?} {spec}");
        }
        assert_eq!(primary.master_repl_offset(), offset, "{flavor:?}");
        assert_eq!(changes_since_save(&primary), changes, "{flavor:?}");
        assert_eq!(replica.command_calls("RL.PEEK"), None, "{flavor:?}");
    });
}

/// Sends `signal` (`STOP` or `CONT`) to a process.
fn signal(pid: u32, signal: &str) {
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// Keeps a server stopped with SIGSTOP, and lets it go on when dropped, even when the test
/// fails meanwhile.
struct Frozen(u32);

impl Frozen {
    fn new(server: &Server) -> Frozen {
        signal(server.pid(), "STOP");
        Frozen(server.pid())
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

fn dbsize(con: &mut Connection) -> i64 {
    redis::cmd("DBSIZE").query(con).expect("DBSIZE")
}

#[test]
fn peek_on_a_replica_reads_the_replicated_state() {
    each_flavor(|flavor| {
        let (primary, replica) = primary_with_replica(flavor);
        let (mut con, mut on_replica) = (primary.conn(), replica.conn());
        let w = window_clear_of_edges(&mut con);
        let mut specs = Vec::new();
        for (n, algo) in ALGORITHMS.into_iter().enumerate() {
            let spec = format!("5 {w}ms 9 {}ms ALGO {algo}", 24 * w);
            for cost in 1..=n as i64 + 1 {
                rl(
                    &mut con,
                    "RL.HIT",
                    &key(algo, 3),
                    &format!("{spec} COST {cost}"),
                );
            }
            specs.push((key(algo, 3), spec));
        }
        wait_for_replicas(&mut con, 1);
        for (name, spec) in &specs {
            let from = server_ms(&mut con);
            let on_primary = rl(&mut con, "RL.PEEK", name, spec);
            let there = rl(&mut on_replica, "RL.PEEK", name, spec);
            let slack = server_ms(&mut con) - from + 1;
            assert_same_answer(&format!("{flavor:?} {spec}"), &on_primary, &there, slack);
        }
        // The replica refuses the writing commands; PEEK is the one that runs there.
        let (name, spec) = &specs[0];
        let args: Vec<&str> = spec.split_whitespace().collect();
        for command in ["RL.HIT", "RL.REFUND"] {
            let error = error_text(&mut on_replica, redis::cmd(command).arg(name).arg(&args));
            assert!(
                error.starts_with("READONLY"),
                "{flavor:?} {command}: {error}"
            );
        }
    });
}

#[test]
fn peek_on_a_replica_answers_an_expired_key_as_an_empty_window() {
    each_flavor(|flavor| {
        let (primary, replica) = primary_with_replica(flavor);
        let (mut con, mut on_replica) = (primary.conn(), replica.conn());
        // States that last about a second from hits made just after a second's edge:
        // the fixed window ends at the next edge, the sliding counter a window after its
        // (half-second) window, the log a window after the hit, and two units of a
        // bucket refilling 3 per 1.5 s are gone after one second.
        let names: Vec<(Vec<u8>, String)> = ALGORITHMS
            .iter()
            .map(|algo| {
                let window = match *algo {
                    "sliding" => "500ms",
                    "token" | "gcra" => "1500ms",
                    _ => "1s",
                };
                (key(algo, 4), format!("3 {window} ALGO {algo}"))
            })
            .collect();
        let into_second = server_ms(&mut con).rem_euclid(1_000);
        std::thread::sleep(Duration::from_millis(1_000 - into_second as u64));
        for (name, spec) in &names {
            assert!(rl(&mut con, "RL.HIT", name, &format!("{spec} COST 2")).allowed);
        }
        // WAIT would take up to the replica's one-second ack: poll for the bytes instead.
        wait_until(
            Duration::from_secs(5),
            "the replica to hold the keys",
            || {
                names
                    .iter()
                    .all(|(name, _)| get_bytes(&mut on_replica, name) == get_bytes(&mut con, name))
            },
        );
        // A cost above the limit only looks: `remaining` and `reset_after_ms` are the
        // state as it stands, and an empty window says [0, 3, 3, 0, -1].
        let look = |con: &mut Connection, name: &[u8], spec: &str| {
            values(&rl(con, "RL.PEEK", name, &format!("{spec} COST 4")))
        };
        let latest_expiry = {
            let frozen = Frozen::new(&primary);
            let mut latest = 0;
            for (name, spec) in &names {
                let [_, _, remaining, reset, _] = look(&mut on_replica, name, spec);
                let expiry = pexpiretime(&mut on_replica, name);
                // Unless the replica was slow, the state is still live here: it counts.
                if server_ms(&mut on_replica) < expiry {
                    assert!(remaining < 3 && reset > 0, "{flavor:?} {spec}: live state");
                }
                latest = latest.max(expiry);
            }
            // With the primary frozen no DEL can come: the keys stay on the replica,
            // which never expires keys itself, past their expiry.
            wait_until(Duration::from_secs(5), "the keys' expiry", || {
                server_ms(&mut on_replica) > latest
            });
            assert_eq!(dbsize(&mut on_replica), names.len() as i64, "{flavor:?}");
            for (name, spec) in &names {
                let context = format!("{flavor:?} {spec} past its expiry on the replica");
                assert_eq!(
                    look(&mut on_replica, name, spec),
                    [0, 3, 3, 0, -1],
                    "{context}"
                );
                // What a hit would answer there: the first unit of an empty window, whose
                // state would last at most a window (two for the sliding counter).
                let peek = rl(&mut on_replica, "RL.PEEK", name, spec);
                assert_eq!(
                    (
                        peek.allowed,
                        peek.limit,
                        peek.remaining,
                        peek.retry_after_ms
                    ),
                    (true, 3, 2, 0),
                    "{context}: {peek:?}"
                );
                assert!(
                    (1..=1_500).contains(&peek.reset_after_ms),
                    "{context}: {peek:?}"
                );
            }
            drop(frozen);
            latest
        };
        // Running again, the primary expires the keys and the replica loses them.
        wait_until(
            Duration::from_secs(10),
            "the replica to get the DELs",
            || dbsize(&mut on_replica) == 0,
        );
        assert!(server_ms(&mut con) > latest_expiry, "{flavor:?}");
    });
}

/// Every algorithm with one tier of 4 per `w` ms, and with a second of 8 per day (24 `w`).
fn four_then_eight(w: i64) -> Rule {
    Rule {
        limit: 4,
        window_ms: w,
        outer_limit: 8,
        outer_window_ms: 24 * w,
        burst: None,
    }
}

/// Each seeded key's name and the arguments it was counted under.
fn seeded_pairs(seeded: Vec<SeededKey>) -> Vec<(Vec<u8>, String)> {
    seeded.into_iter().map(|k| (k.key, k.spec)).collect()
}

#[test]
fn reset_deletes_the_state_everywhere_and_answers_0_for_no_key() {
    each_flavor(|flavor| {
        let (primary, replica) = quiet_primary_with_replica(flavor);
        let (mut con, mut on_replica) = (primary.conn(), replica.conn());
        let w = window_clear_of_edges(&mut con);
        let names = seeded_pairs(seed_every_shape(
            &mut con,
            "reset",
            &four_then_eight(w),
            &[3],
        ));
        wait_for_replicas(&mut con, 1);
        for (name, _) in &names {
            assert!(get_bytes(&mut on_replica, name).is_some(), "{flavor:?}");
        }
        for (name, spec) in &names {
            assert_eq!(rl_reset(&mut con, name), 1, "{flavor:?} {spec}");
            assert_eq!(stored(&mut con, name), (None, -2), "{flavor:?} {spec}");
            // The state is forgotten: the next hit starts from nothing.
            let fresh = rl(&mut con, "RL.PEEK", name, spec);
            assert_eq!(
                (fresh.allowed, fresh.remaining),
                (true, 3),
                "{flavor:?} {spec}"
            );
        }
        wait_for_replicas(&mut con, 1);
        for (name, spec) in &names {
            assert_eq!(
                stored(&mut on_replica, name),
                (None, -2),
                "{flavor:?} {spec}"
            );
        }
        // Each reset reached the replica as a DEL.
        assert_eq!(
            replica.command_calls("del"),
            Some(names.len() as i64),
            "{flavor:?}"
        );
        // No key: 0, and nothing written or propagated.
        let offset = primary.master_repl_offset();
        for (name, _) in &names {
            assert_eq!(rl_reset(&mut con, name), 0, "{flavor:?}");
        }
        assert_eq!(rl_reset(&mut con, b"rl:never"), 0, "{flavor:?}");
        assert_eq!(primary.master_repl_offset(), offset, "{flavor:?}");
        let arity = "ERR wrong number of arguments for 'RL.RESET' command";
        for args in [&[][..], &["a", "b"]] {
            let error = error_text(&mut con, redis::cmd("RL.RESET").arg(args));
            assert_eq!(error, arity, "{flavor:?} {args:?}");
        }
    });
}

#[test]
fn reset_refuses_keys_of_other_types() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        redis::cmd("RPUSH")
            .arg("list")
            .arg("x")
            .exec(&mut con)
            .expect("RPUSH");
        redis::cmd("HSET")
            .arg("hash")
            .arg("f")
            .arg("v")
            .exec(&mut con)
            .expect("HSET");
        for name in ["list", "hash"] {
            let error = error_text(&mut con, redis::cmd("RL.RESET").arg(name));
            assert_eq!(error, WRONGTYPE, "{flavor:?} {name}");
            let exists: i64 = redis::cmd("EXISTS")
                .arg(name)
                .query(&mut con)
                .expect("EXISTS");
            assert_eq!(exists, 1, "{flavor:?} {name} untouched");
        }
    });
}

/// A reply as text: an integer's digits, or an error's code and message.
fn reply_text(con: &mut Connection, cmd: &redis::Cmd) -> String {
    let error = |code: &str, detail: &str| format!("{code} {detail}").trim().to_string();
    match cmd.query::<Value>(con) {
        Ok(Value::Int(n)) => n.to_string(),
        Ok(Value::ServerError(e)) => error(e.code(), e.details().unwrap_or("")),
        Ok(other) => format!("{other:?}"),
        Err(e) => error(e.code().unwrap_or(""), e.detail().unwrap_or("")),
    }
}

/// Strings the module did not write: RL.HIT refuses each with NOT_OURS (checked below),
/// so RL.RESET must refuse them too and leave them alone. `None` is no expiry.
fn foreign_strings() -> Vec<(&'static str, &'static [u8], Option<i64>)> {
    // 2100-01-01T00:00:00Z: an expiry no test reaches.
    const FAR: i64 = 4_102_444_800_000;
    vec![
        ("text", b"hello", Some(FAR)),
        ("text without expiry", b"hello", None),
        ("zero", b"0", Some(FAR)),
        ("leading zero", b"05", Some(FAR)),
        // A count without an expiry is a state that lost it (PERSIST, RESTORE key 0):
        // RL.RESET deletes it (tests/lost_expiry.rs). One that is no canonical count is
        // not.
        ("signed count without expiry", b"+5", None),
        // Our format byte, but an algorithm id that does not exist.
        ("unknown algorithm", b"\x01\x09\x01", Some(FAR)),
        // Our format byte and GCRA's id, but no tier after the header.
        ("truncated tiers", b"\x01\x05\x01\x01", Some(FAR)),
        // Short words with an expiry: no text may pass for a state.
        ("word", b"Pay", Some(FAR)),
        ("capitalised word", b"Tab", Some(FAR)),
    ]
}

#[test]
fn reset_refuses_strings_the_module_did_not_write() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let mut wrong = Vec::new();
        for (what, value, expiry) in foreign_strings() {
            let name = format!("foreign:{what}");
            let mut set = redis::cmd("SET");
            set.arg(&name).arg(value);
            if let Some(at) = expiry {
                set.arg("PXAT").arg(at);
            }
            set.exec(&mut con).expect("SET");
            let before = stored(&mut con, name.as_bytes());
            // RL.HIT's own verdict: not a rate-limit state.
            let hit = error_text(&mut con, redis::cmd("RL.HIT").arg(&name).arg(&["5", "1h"]));
            assert_eq!(hit, NOT_OURS, "{flavor:?} {what}");
            let reset = reply_text(&mut con, redis::cmd("RL.RESET").arg(&name));
            let after = stored(&mut con, name.as_bytes());
            if reset != NOT_OURS || after != before {
                wrong.push(format!(
                    "SET {name} {value:?}{}: RL.RESET replied {reset:?}, key {} (RL.HIT \
                     replies {hit:?})",
                    expiry.map_or(String::new(), |at| format!(" PXAT {at}")),
                    if after == before {
                        "untouched"
                    } else {
                        "deleted"
                    },
                ));
            }
        }
        assert!(
            wrong.is_empty(),
            "{flavor:?}: RL.RESET deleted strings the module did not write:\n{}",
            wrong.join("\n")
        );
    });
}

/// One attempt of the "count only failures" pattern: charge before the work, refund if
/// the work succeeded. Returns the charge's reply (`None` when refused, so no work).
fn attempt(con: &mut Connection, name: &[u8], spec: &str, succeeds: bool) -> Option<Reply> {
    let charge = rl(con, "RL.HIT", name, spec);
    if !charge.allowed {
        return None;
    }
    if succeeds {
        let refund = rl(con, "RL.REFUND", name, spec);
        assert!(
            refund.allowed,
            "{spec}: a charged unit is refunded: {refund:?}"
        );
    }
    Some(charge)
}

#[test]
fn refunds_let_only_failures_count() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let w = window_clear_of_edges(&mut con);
        for algo in ALGORITHMS {
            let name = key(algo, 7);
            let spec = format!("5 {w}ms ALGO {algo}");
            let context = format!("{flavor:?} {spec}");
            // Successes never count, however many.
            for n in 0..20 {
                let charge = attempt(&mut con, &name, &spec, true);
                assert_eq!(
                    charge.map(|c| c.remaining),
                    Some(4),
                    "{context}: success {n}"
                );
            }
            // Five failures count, with successes in between that do not.
            for failures in 1..=5 {
                let charge = attempt(&mut con, &name, &spec, false);
                assert_eq!(charge.map(|c| c.remaining), Some(5 - failures), "{context}");
                if failures < 5 {
                    for _ in 0..3 {
                        let charge = attempt(&mut con, &name, &spec, true);
                        assert_eq!(charge.map(|c| c.remaining), Some(4 - failures));
                    }
                }
            }
            // Then nothing gets through, a success no more than a failure.
            for succeeds in [true, false] {
                assert!(
                    attempt(&mut con, &name, &spec, succeeds).is_none(),
                    "{context}"
                );
            }
            let denied = rl(&mut con, "RL.PEEK", &name, &spec);
            assert_eq!((denied.allowed, denied.remaining), (false, 0), "{context}");
            assert!(denied.retry_after_ms > 0, "{context}: {denied:?}");
        }
    });
}

#[test]
fn parallel_charges_and_refunds_leave_exactly_the_failures() {
    const CLIENTS: usize = 8;
    const ATTEMPTS: usize = 100;
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let w = window_clear_of_edges(&mut server.conn());
        for algo in ALGORITHMS {
            let name = key(algo, 8);
            // A day-long window: a bucket leaks one unit every 86 s, not during the test.
            let spec = format!("1000 {}ms ALGO {algo}", 24 * w);
            // Every fifth attempt of each client fails and stays counted.
            let failures = std::thread::scope(|scope| {
                let clients: Vec<_> = (0..CLIENTS)
                    .map(|_| {
                        let (name, spec) = (&name, &spec);
                        let mut con = server.conn();
                        scope.spawn(move || {
                            let mut failed = 0;
                            for n in 0..ATTEMPTS {
                                let fails = n % 5 == 0;
                                let charged = attempt(&mut con, name, spec, !fails);
                                assert!(charged.is_some(), "{spec}: never full here");
                                failed += usize::from(fails);
                            }
                            failed
                        })
                    })
                    .collect();
                clients
                    .into_iter()
                    .map(|c| c.join().expect("client"))
                    .sum::<usize>() as i64
            });
            assert_eq!(failures, (CLIENTS * ATTEMPTS / 5) as i64);
            let mut con = server.conn();
            let peek = rl(&mut con, "RL.PEEK", &name, &spec);
            assert_eq!(
                (peek.allowed, peek.remaining),
                (true, 1000 - failures - 1),
                "{flavor:?} {spec}"
            );
            if algo == "fixed" {
                let count = failures.to_string().into_bytes();
                assert_eq!(get_bytes(&mut con, &name), Some(count), "{flavor:?}");
            }
        }
    });
}

#[test]
fn a_refund_never_lifts_remaining_above_the_limit() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let (mut con, mut con3) = (server.conn(), server.conn_resp3());
        let w = window_clear_of_edges(&mut con);
        for algo in ALGORITHMS {
            let name = key(algo, 9);
            let spec = format!("10 {w}ms ALGO {algo}");
            let context = format!("{flavor:?} {spec}");
            assert!(rl(&mut con, "RL.HIT", &name, &format!("{spec} COST 3")).allowed);
            let some = rl(&mut con, "RL.REFUND", &name, &format!("{spec} COST 1"));
            assert_eq!((some.allowed, some.limit, some.remaining), (true, 10, 8));
            assert_eq!(some.retry_after_ms, 0, "{context}: {some:?}");
            // Asking back far more than was charged gives back what was, no more.
            let all = rl(&mut con, "RL.REFUND", &name, &format!("{spec} COST 50"));
            assert_eq!(values(&all), [1, 10, 10, 0, 0], "{context}");
            let again = rl(&mut con, "RL.REFUND", &name, &spec);
            assert_eq!(values(&again), [0, 10, 10, 0, 0], "{context}");
            let next = rl(&mut con, "RL.HIT", &name, &spec);
            assert_eq!((next.allowed, next.remaining), (true, 9), "{context}");

            // Two tiers: each gets the units back, each only up to its own limit.
            let tiers = format!("4 {w}ms 10 {}ms ALGO {algo}", 24 * w);
            let multi = key(algo, 10);
            assert!(rl(&mut con, "RL.HIT", &multi, &format!("{tiers} COST 3")).allowed);
            let (binding, each) = rl3(&mut con3, "RL.REFUND", &multi, &format!("{tiers} COST 2"));
            let remaining: Vec<i64> = each.iter().map(|t| t.remaining).collect();
            assert_eq!(remaining, [3, 9], "{context}: {each:?}");
            assert_eq!((binding.allowed, binding.remaining), (true, 3), "{context}");
            let (_, each) = rl3(&mut con3, "RL.REFUND", &multi, &format!("{tiers} COST 9"));
            let remaining: Vec<i64> = each.iter().map(|t| t.remaining).collect();
            assert_eq!(remaining, [4, 10], "{context}: {each:?}");
        }
    });
}

#[test]
fn a_refund_with_nothing_to_give_back_writes_and_propagates_nothing() {
    each_flavor(|flavor| {
        let (primary, replica) = quiet_primary_with_replica(flavor);
        let (mut con, mut watcher) = (primary.conn(), primary.conn());
        let w = window_clear_of_edges(&mut con);
        let mut cases = Vec::new();
        for (n, algo) in ALGORITHMS.into_iter().enumerate() {
            let spec = format!("10 {w}ms ALGO {algo}");
            // No key at all: nothing was charged.
            cases.push((key(algo, 11), spec.clone(), [0, 10, 10, 0, 0]));
            // Units counted under another algorithm were not charged by this one's rules:
            // none of them is given back, and the answer counts them (10 - 2).
            let other = ALGORITHMS[(n + 1) % ALGORITHMS.len()];
            let counted = key(algo, 12);
            rl(
                &mut con,
                "RL.HIT",
                &counted,
                &format!("10 {w}ms ALGO {other} COST 2"),
            );
            cases.push((counted, spec, [0, 10, 8, -2, 0]));
        }
        wait_for_replicas(&mut con, 1);
        let offset = primary.master_repl_offset();
        let changes = changes_since_save(&primary);
        for (name, spec, expected) in &cases {
            let context = format!("{flavor:?} RL.REFUND {name:?} {spec}");
            let before = stored(&mut con, name);
            let mut reply = None;
            let survives = watch_survives(&mut watcher, name, || {
                reply = Some(rl(&mut con, "RL.REFUND", name, spec));
            });
            let reply = reply.expect("replied");
            assert!(survives, "{context}: broke a WATCH");
            assert_eq!(stored(&mut con, name), before, "{context}");
            let got = values(&reply);
            // -2 marks a time that depends on the moment: only its sign is checked.
            for (field, (g, e)) in FIELDS.iter().zip(got.iter().zip(expected)) {
                if *e == -2 {
                    assert!(*g > 0, "{context}: {field} in {got:?}");
                } else {
                    assert_eq!(g, e, "{context}: {field} in {got:?}");
                }
            }
        }
        assert_eq!(primary.master_repl_offset(), offset, "{flavor:?}");
        assert_eq!(changes_since_save(&primary), changes, "{flavor:?}");
        assert_eq!(replica.command_calls("RL.REFUND"), None, "{flavor:?}");
    });
}

#[test]
fn a_refund_that_empties_a_key_deletes_it_everywhere() {
    each_flavor(|flavor| {
        let (primary, replica) = primary_with_replica(flavor);
        let (mut con, mut on_replica) = (primary.conn(), replica.conn());
        let w = window_clear_of_edges(&mut con);
        let seeded = seed_every_shape(&mut con, "emptied", &four_then_eight(w), &[1, 1]);
        let names = seeded_pairs(seeded);
        wait_for_replicas(&mut con, 1);
        for (name, spec) in &names {
            assert!(
                get_bytes(&mut on_replica, name).is_some(),
                "{flavor:?} {spec}"
            );
            let back = rl(&mut con, "RL.REFUND", name, &format!("{spec} COST 2"));
            assert_eq!(values(&back), [1, 4, 4, 0, 0], "{flavor:?} {spec}");
            assert_eq!(stored(&mut con, name), (None, -2), "{flavor:?} {spec}");
        }
        wait_for_replicas(&mut con, 1);
        for (name, spec) in &names {
            assert_eq!(
                stored(&mut on_replica, name),
                (None, -2),
                "{flavor:?} {spec}"
            );
        }
    });
}
