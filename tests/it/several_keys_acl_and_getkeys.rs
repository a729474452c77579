//! RL.MHIT, RL.MPEEK and RL.MREFUND where the server reads their keys itself, on Redis 7.0
//! and Valkey 8.1: calls that make the server look for the keys before the module runs (ACL
//! key patterns, `COMMAND GETKEYS`) with the count missing or absurd, a user limited to
//! some keys, and the worst values of every argument. The server stays up, each bad call is
//! refused by name and nothing is written.

use testkit::*;

use redis::{Connection, Value};

const COMMANDS: [&str; 3] = ["RL.MHIT", "RL.MPEEK", "RL.MREFUND"];

/// A connection as `user`, made with `ACL SETUSER user on nopass <rules>`.
fn conn_as(server: &Server, user: &str, rules: &[&str]) -> Connection {
    let mut admin = server.conn();
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg(user)
        .arg("on")
        .arg("nopass")
        .arg(rules)
        .exec(&mut admin)
        .expect("ACL SETUSER");
    let mut con = server.conn();
    redis::cmd("AUTH")
        .arg(user)
        .arg("any")
        .exec(&mut con)
        .expect("AUTH");
    con
}

fn cmd(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(args[0]);
    cmd.arg(&args[1..]);
    cmd
}

fn assert_alive(server: &Server, context: &str) {
    let pong: Result<String, _> = redis::cmd("PING").query(&mut server.conn());
    assert_eq!(
        pong.ok().as_deref(),
        Some("PONG"),
        "{context}: server alive"
    );
}

/// With key patterns in its ACL, the server looks for a call's keys before running it:
/// a several-keys command without its `numkeys` must be refused, not read past the end of
/// the arguments (both servers' key spec search reads the count unchecked).
#[test]
fn a_key_limited_user_without_numkeys_gets_an_arity_error() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut limited = conn_as(&server, "limited", &["~rl:a*", "+@all"]);
        for command in COMMANDS {
            let context = format!("{flavor:?} {command}");
            assert_eq!(
                error_text(&mut limited, &cmd(&[command])),
                format!("ERR wrong number of arguments for '{command}' command"),
                "{context}"
            );
            assert_alive(&server, &context);
        }
    });
}

/// `COMMAND GETKEYS` runs the same key search for any client.
#[test]
fn command_getkeys_with_a_missing_or_absurd_numkeys_answers_an_error() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        for command in COMMANDS {
            let context = format!("{flavor:?} {command}");
            let error = error_text(&mut con, &cmd(&["COMMAND", "GETKEYS", command]));
            assert!(error.starts_with("ERR "), "{context}: {error}");
            assert_alive(&server, &context);
            for numkeys in [
                "-1",
                "0",
                "17",
                "x",
                "+1",
                "2147483647",
                "2147483648",
                "999999999",
                "9223372036854775807",
                "9223372036854775808",
            ] {
                let call = [
                    "COMMAND", "GETKEYS", command, numkeys, "rl:a", "SPEC", "1", "1s",
                ];
                let error = error_text(&mut con, &cmd(&call));
                assert!(error.starts_with("ERR "), "{context} {numkeys}: {error}");
            }
            assert_alive(&server, &context);
        }
    });
}

/// Every key in the database, sorted.
fn keys_of(con: &mut Connection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).expect("KEYS");
    keys.sort();
    keys
}

/// A user allowed only `rl:a*` touches no other key through any spelling of `numkeys`
/// (the server's key spec reads only the plain spelling; the module's key report, the
/// others).
#[test]
fn a_key_pattern_holds_for_every_spelling_of_numkeys() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut limited = conn_as(&server, "limited", &["~rl:a*", "+@all"]);
        for command in COMMANDS {
            for numkeys in ["2", "02", "0000000000000000000002"] {
                let call = [
                    command, numkeys, "rl:a1", "rl:b1", "SPEC", "5", "1h", "SPEC", "5", "1h",
                ];
                let error = error_text(&mut limited, &cmd(&call));
                assert!(
                    error.starts_with("NOPERM"),
                    "{flavor:?} {command} {numkeys}: {error}"
                );
            }
            let script = format!(
                "return redis.call('{command}', '02', 'rl:a1', 'rl:b1', 'SPEC', '5', '1h', \
                 'SPEC', '5', '1h')"
            );
            let refused = redis::cmd("EVAL")
                .arg(script)
                .arg(0)
                .query::<Value>(&mut limited);
            assert!(
                matches!(refused, Err(_) | Ok(Value::ServerError(_))),
                "{flavor:?} {command} in a script: {refused:?}"
            );
        }
        assert_eq!(
            keys_of(&mut server.conn()),
            Vec::<String>::new(),
            "{flavor:?}"
        );
        // The allowed key alone is counted.
        let (allowed, _, _): (i64, i64, Vec<Vec<i64>>) =
            cmd(&["RL.MHIT", "01", "rl:a1", "SPEC", "5", "1h"])
                .query(&mut limited)
                .expect("RL.MHIT on an allowed key");
        assert_eq!(allowed, 1, "{flavor:?}");
        assert_eq!(keys_of(&mut server.conn()), ["rl:a1"], "{flavor:?}");
    });
}

/// Every key's value and absolute expiry, key by key.
fn dump(con: &mut Connection) -> Vec<(String, Option<Vec<u8>>, i64)> {
    keys_of(con)
        .into_iter()
        .map(|k| {
            let (value, expiry) = stored(con, k.as_bytes());
            (k, value, expiry)
        })
        .collect()
}

/// Mixed traffic, plain, in MULTI/EXEC and from Lua: allowed and denied calls, refunds
/// that empty a key (a DEL) or would push it below empty, peeks; the replica ends with the
/// primary's exact bytes and expiries, and got only SET and DEL (in MULTI/EXEC).
#[test]
fn a_replica_holds_the_primarys_bytes_after_mixed_calls() {
    each_flavor(|flavor| {
        let (primary, replica) = primary_with_replica(flavor);
        let mut con = primary.conn();
        let keys = ["rl:{m}:fixed", "rl:{m}:log", "rl:{m}:gcra"];
        let spec = |cost: &str| {
            let mut args: Vec<String> = vec!["3".into()];
            args.extend(keys.iter().map(|k| k.to_string()));
            for rule in ["3 1h", "4 1h 6 2h ALGO log", "2 1h ALGO gcra"] {
                args.push("SPEC".into());
                args.extend(rule.split(' ').map(String::from));
                args.extend(["COST".into(), cost.into()]);
            }
            args
        };
        let mut calls = 0;
        for round in 0..4 {
            for (command, cost) in [
                ("RL.MHIT", "1"),
                ("RL.MHIT", "1"),
                ("RL.MPEEK", "2"),
                ("RL.MHIT", "1"),
                ("RL.MREFUND", "1"),
                ("RL.MREFUND", "9223372036854775807"),
                ("RL.MREFUND", "1"),
                ("RL.MHIT", "2"),
            ] {
                let args = spec(cost);
                match (round + calls) % 3 {
                    0 => {
                        redis::cmd(command)
                            .arg(&args)
                            .query::<Value>(&mut con)
                            .expect(command);
                    }
                    1 => {
                        let (_, _): (Value, Vec<Value>) = redis::pipe()
                            .atomic()
                            .cmd(command)
                            .arg(&args)
                            .cmd(command)
                            .arg(&args)
                            .query(&mut con)
                            .expect("MULTI/EXEC");
                    }
                    _ => {
                        let script = "local a = {} for i = 2, #ARGV do a[#a + 1] = ARGV[i] end \
                                      return redis.call(ARGV[1], unpack(a))";
                        redis::cmd("EVAL")
                            .arg(script)
                            .arg(3)
                            .arg(&keys)
                            .arg(command)
                            .arg(&args)
                            .query::<Value>(&mut con)
                            .expect("EVAL");
                    }
                }
                calls += 1;
            }
        }
        wait_for_replicas(&mut con, 1);
        let on_primary = dump(&mut con);
        assert_eq!(dump(&mut replica.conn()), on_primary, "{flavor:?}");
        for command in ["rl.mhit", "rl.mrefund", "eval"] {
            assert_eq!(replica.command_calls(command), None, "{flavor:?} {command}");
        }
        assert!(replica.command_calls("set").unwrap_or(0) > 0, "{flavor:?}");
        assert!(replica.command_calls("del").unwrap_or(0) > 0, "{flavor:?}");
    });
}

/// A user who may only read `rl:*` keys (`%R~`) may run RL.MPEEK, not RL.MHIT or
/// RL.MREFUND, however `numkeys` is spelt: the keys the module reports itself (for a
/// count the server's key spec cannot read) carry the same read or write flags.
#[test]
fn a_read_only_key_pattern_lets_only_mpeek_through_for_every_spelling_of_numkeys() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut reader = conn_as(&server, "reader", &["%R~rl:*", "+@all"]);
        for numkeys in ["1", "01"] {
            let call = |command| cmd(&[command, numkeys, "rl:r", "SPEC", "5", "1h"]);
            let (allowed, _, _): (i64, i64, Vec<Vec<i64>>) = call("RL.MPEEK")
                .query(&mut reader)
                .unwrap_or_else(|e| panic!("{flavor:?} RL.MPEEK {numkeys}: {e}"));
            assert_eq!(allowed, 1, "{flavor:?} {numkeys}");
            for command in ["RL.MHIT", "RL.MREFUND"] {
                let error = error_text(&mut reader, &call(command));
                assert!(
                    error.starts_with("NOPERM"),
                    "{flavor:?} {command} {numkeys}: {error}"
                );
            }
        }
        assert_eq!(
            keys_of(&mut server.conn()),
            Vec::<String>::new(),
            "{flavor:?}"
        );
    });
}
