//! What the policy tests share (`tests/policy_*.rs`): a server whose policies persist, the
//! `RL.POLICY` subcommands, calls that name a policy, and `RL.STATS` and `INFO` counts.

use super::*;
use redis::{Connection, Value};

pub const MINUTE_MS: i64 = 60_000;

/// Every policy: its name and its definition as `RL.POLICY GET` shows it.
pub type Policies = Vec<(Vec<u8>, Vec<String>)>;

/// A server whose policies persist: on Redis 7.0 the module opts in with
/// `policies-in-rdb yes`; Valkey needs nothing.
pub fn policy_config(flavor: Flavor) -> ServerConfig {
    let config = ServerConfig::new(flavor);
    match flavor {
        Flavor::Redis => config.module_arg("policies-in-rdb").module_arg("yes"),
        Flavor::Valkey => config,
    }
}

/// `RL.POLICY SET name <rule split on spaces>`, which must answer OK.
pub fn policy_set(con: &mut Connection, name: &[u8], rule: &str) {
    let rule: Vec<&str> = rule.split_whitespace().collect();
    let reply: String = redis::cmd("RL.POLICY")
        .arg("SET")
        .arg(name)
        .arg(&rule)
        .query(con)
        .unwrap_or_else(|e| panic!("RL.POLICY SET {name:?} {rule:?}: {e}"));
    assert_eq!(reply, "OK", "RL.POLICY SET {name:?} {rule:?}");
}

/// `RL.POLICY GET name`: the canonical arguments, or `None`.
pub fn policy_get(con: &mut Connection, name: &[u8]) -> Option<Vec<String>> {
    redis::cmd("RL.POLICY")
        .arg("GET")
        .arg(name)
        .query(con)
        .unwrap_or_else(|e| panic!("RL.POLICY GET {name:?}: {e}"))
}

/// `RL.POLICY DEL name`: 1 when it existed, else 0.
pub fn policy_del(con: &mut Connection, name: &[u8]) -> i64 {
    redis::cmd("RL.POLICY")
        .arg("DEL")
        .arg(name)
        .query(con)
        .unwrap_or_else(|e| panic!("RL.POLICY DEL {name:?}: {e}"))
}

/// `RL.POLICY LIST`.
pub fn policy_list(con: &mut Connection) -> Vec<Vec<u8>> {
    redis::cmd("RL.POLICY")
        .arg("LIST")
        .query(con)
        .expect("RL.POLICY LIST")
}

/// Every policy of the server, in `RL.POLICY LIST` order, with its definition.
pub fn all_policies(server: &Server) -> Policies {
    let mut con = server.conn();
    policy_list(&mut con)
        .into_iter()
        .map(|name| {
            let definition = policy_get(&mut con, &name)
                .unwrap_or_else(|| panic!("{name:?} is listed but GET answers nil"));
            (name, definition)
        })
        .collect()
}

/// The words of `text`, to compare with `RL.POLICY GET`.
pub fn words(text: &str) -> Vec<String> {
    text.split_whitespace().map(str::to_string).collect()
}

/// `command key POLICY name [extra ...]` on a RESP2 connection: the five integers.
pub fn through(
    con: &mut Connection,
    command: &str,
    key: &str,
    name: &[u8],
    extra: &[&str],
) -> Reply {
    let values: Vec<i64> = through_cmd(command, key, name, extra)
        .query(con)
        .unwrap_or_else(|e| panic!("{command} {key} POLICY {name:?} {extra:?}: {e}"));
    decode_reply(&values)
}

/// The command `command key POLICY name [extra ...]`, to run on any connection.
pub fn through_cmd(command: &str, key: &str, name: &[u8], extra: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(command);
    cmd.arg(key).arg("POLICY").arg(name).arg(extra);
    cmd
}

/// The command `RL.POLICY <args>`, to run or to check the error of.
pub fn policy_cmd(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd("RL.POLICY");
    cmd.arg(args);
    cmd
}

/// `RL.HIT key POLICY name` on a RESP2 connection.
pub fn hit_policy(con: &mut Connection, key: &str, name: &[u8]) -> Reply {
    through(con, "RL.HIT", key, name, &[])
}

/// Name/value pairs from a RESP3 map or a flat RESP2 `[name, value, ...]` array.
pub fn named_integers(value: Value) -> Vec<(String, i64)> {
    let pairs: Vec<(Value, Value)> = match value {
        Value::Map(pairs) => pairs,
        Value::Array(items) => {
            assert!(items.len() % 2 == 0, "pairs: {items:?}");
            items
                .chunks(2)
                .map(|pair| (pair[0].clone(), pair[1].clone()))
                .collect()
        }
        other => panic!("neither a map nor an array: {other:?}"),
    };
    pairs
        .into_iter()
        .map(|(name, value)| {
            let name: String = redis::from_redis_value(name).expect("a field name");
            let value: i64 = redis::from_redis_value(value).expect("an integer");
            (name, value)
        })
        .collect()
}

/// Name/value pairs as the counters' replies give them.
pub fn pairs(expected: &[(&str, i64)]) -> Vec<(String, i64)> {
    expected.iter().map(|&(n, v)| (n.to_string(), v)).collect()
}

/// One field of a decision's RESP3 fields.
pub fn field(fields: &[(String, i64)], name: &str) -> i64 {
    fields
        .iter()
        .find(|(n, _)| n == name)
        .unwrap_or_else(|| panic!("no {name} in {fields:?}"))
        .1
}

/// `RL.STATS [name]` as name/value pairs (RESP2 or RESP3 alike).
pub fn rl_stats(con: &mut Connection, name: Option<&[u8]>) -> Vec<(String, i64)> {
    let mut cmd = redis::cmd("RL.STATS");
    if let Some(name) = name {
        cmd.arg(name);
    }
    named_integers(cmd.query(con).expect("RL.STATS"))
}

/// `RL.STATS RESET [name]`, which must answer OK.
pub fn rl_stats_reset(con: &mut Connection, name: Option<&[u8]>) {
    let mut cmd = redis::cmd("RL.STATS");
    cmd.arg("RESET");
    if let Some(name) = name {
        cmd.arg(name);
    }
    let reply: String = cmd.query(con).expect("RL.STATS RESET");
    assert_eq!(reply, "OK");
}

/// `ms` as a window argument in minutes.
pub fn minutes(ms: i64) -> String {
    format!("{}m", ms / MINUTE_MS)
}

/// Starts a server that becomes a replica of `primary`, and waits until its link is up
/// (the full sync done).
pub fn attach_replica(primary: &Server, config: ServerConfig) -> Server {
    let replica = config
        .arg("replicaof", &format!("127.0.0.1 {}", primary.port()))
        .start();
    wait_for_link(&replica);
    replica
}
