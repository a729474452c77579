//! Command flags against what each command really does: the flags the
//! server reports, `min-replicas-to-write` (writing commands are refused with NOREPLICAS,
//! reading ones answer) and OOM (commands that can grow memory are refused, the others
//! answer).

use redis::{Connection, Value};
use std::collections::{BTreeMap, BTreeSet};
use testkit::policy::policy_config;
use testkit::{each_flavor, error_text, ServerConfig};

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("{other:?} is not a string"),
    }
}

/// Every command's name (subcommands as `RL.POLICY|SET`) and flags, from `COMMAND INFO`.
fn flags_of(con: &mut Connection, commands: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let info: Vec<Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(commands)
        .query(con)
        .expect("COMMAND INFO");
    let mut all = BTreeMap::new();
    let add = |entry: &Value, all: &mut BTreeMap<String, BTreeSet<String>>| {
        let Value::Array(fields) = entry else {
            panic!("COMMAND INFO entry {entry:?}");
        };
        let Some(Value::Array(flags)) = fields.get(2) else {
            panic!("no flags in {fields:?}");
        };
        all.insert(text(&fields[0]), flags.iter().map(text).collect());
        fields.get(9).cloned()
    };
    for entry in &info {
        // Field 10 (index 9) lists the subcommands of a container.
        if let Some(Value::Array(subcommands)) = add(entry, &mut all) {
            for sub in &subcommands {
                add(sub, &mut all);
            }
        }
    }
    all
}

#[test]
fn flags_say_what_each_command_does() {
    // `module` is added by the server to every module command.
    #[rustfmt::skip]
    let expected: &[(&str, &[&str])] = &[
        // ALGO log decodes up to 10,000 entries a call: not `fast`.
        ("RL.HIT", &["write", "denyoom", "module"]),
        ("RL.PEEK", &["readonly", "module"]),
        ("RL.REFUND", &["write", "module"]),
        ("RL.RESET", &["write", "module"]),
        // A partial grant counts as a hit does, and can meet a log as RL.HIT can.
        ("RL.TAKE", &["write", "denyoom", "module"]),
        // It reads whatever state the key holds, a 10,000-entry log too: not `fast`.
        ("CL.THROTTLE", &["write", "denyoom", "module"]),
        ("RL.STATS", &["fast", "module"]),
        // Leases: every call reads up to ratelimit.max-leases of them, so none is `fast`;
        // only an acquire can grow a key.
        ("RL.ACQUIRE", &["write", "denyoom", "module"]),
        ("RL.RELEASE", &["write", "module"]),
        ("RL.RENEW", &["write", "module"]),
        ("RL.LEASES", &["readonly", "module"]),
        // The several-keys commands find their keys after `numkeys`: `movablekeys`.
        ("RL.MHIT", &["write", "denyoom", "module", "movablekeys"]),
        ("RL.MPEEK", &["readonly", "module", "movablekeys"]),
        ("RL.MREFUND", &["write", "module", "movablekeys"]),
        ("RL.POLICY", &["module"]),
        ("RL.POLICY|SET", &["write", "denyoom", "module"]),
        ("RL.POLICY|DEL", &["write", "module"]),
        ("RL.POLICY|GET", &["readonly", "fast", "module"]),
        ("RL.POLICY|LIST", &["readonly", "module"]),
        ("RL.POLICY|HELP", &["readonly", "fast", "module"]),
    ];
    let expected: BTreeMap<String, BTreeSet<String>> = expected
        .iter()
        .map(|(name, flags)| {
            (
                name.to_string(),
                flags.iter().map(|f| f.to_string()).collect(),
            )
        })
        .collect();
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let names = [
            "RL.HIT",
            "RL.PEEK",
            "RL.REFUND",
            "RL.RESET",
            "RL.TAKE",
            "CL.THROTTLE",
            "RL.STATS",
            "RL.ACQUIRE",
            "RL.RELEASE",
            "RL.RENEW",
            "RL.LEASES",
            "RL.MHIT",
            "RL.MPEEK",
            "RL.MREFUND",
            "RL.POLICY",
        ];
        assert_eq!(flags_of(&mut con, &names), expected, "{flavor:?}");
    });
}

/// CL.THROTTLE is GCRA only, but a key may hold another algorithm's state (the caller's
/// RL.HIT with `ALGO log` under the same name): it then decodes that state to count its
/// units, up to 10,000 log entries, so its cost is not bounded by a small constant and it
/// must not be flagged `fast`.
#[test]
fn cl_throttle_reads_a_full_log_so_it_is_not_fast() {
    const ENTRIES: usize = 10_000;
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let mut fill = redis::pipe();
        for _ in 0..ENTRIES {
            fill.cmd("RL.HIT")
                .arg("rl:f:log")
                .arg(ENTRIES)
                .arg("1h")
                .arg("ALGO")
                .arg("log")
                .ignore();
        }
        fill.query::<()>(&mut con).expect("the log fills");
        let cell: Vec<i64> = redis::cmd("CL.THROTTLE")
            .arg(&["rl:f:log", "4", "10", "60"])
            .query(&mut con)
            .expect("CL.THROTTLE answers on a log");
        assert_eq!(
            cell.first(),
            Some(&1),
            "{flavor:?}: CL.THROTTLE counted the log's entries: {cell:?}"
        );
        let flags = flags_of(&mut con, &["CL.THROTTLE"]);
        let throttle = flags
            .get("cl.throttle")
            .or_else(|| flags.get("CL.THROTTLE"));
        let throttle = throttle.unwrap_or_else(|| panic!("{flavor:?}: {flags:?}"));
        assert!(!throttle.contains("fast"), "{flavor:?}: {throttle:?}");
    });
}

/// The writing calls, each with what it needs first, and the reading ones.
const WRITERS: [&[&str]; 12] = [
    &["RL.HIT", "rl:f:k", "5", "1h"],
    &["RL.TAKE", "rl:f:k", "5", "1h", "UPTO", "2"],
    &["RL.REFUND", "rl:f:k", "5", "1h"],
    &["RL.MHIT", "1", "rl:f:k", "SPEC", "5", "1h"],
    &["RL.MREFUND", "1", "rl:f:k", "SPEC", "5", "1h"],
    &["RL.RESET", "rl:f:k"],
    &["CL.THROTTLE", "rl:f:t", "5", "10", "60"],
    &["RL.POLICY", "SET", "new", "5", "1m"],
    &["RL.POLICY", "DEL", "kept"],
    &["RL.ACQUIRE", "rl:f:l", "3", "1h"],
    &["RL.RENEW", "rl:f:l", "job", "2h"],
    &["RL.RELEASE", "rl:f:l", "job"],
];
const READERS: [&[&str]; 6] = [
    &["RL.PEEK", "rl:f:k", "5", "1h"],
    &["RL.MPEEK", "1", "rl:f:k", "SPEC", "5", "1h"],
    &["RL.POLICY", "GET", "kept"],
    &["RL.POLICY", "LIST"],
    &["RL.STATS"],
    &["RL.LEASES", "rl:f:l", "3"],
];

fn cmd(args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(args[0]);
    cmd.arg(&args[1..]);
    cmd
}

fn answers(con: &mut Connection, args: &[&str], context: &str) {
    if let Err(err) = cmd(args).query::<Value>(con) {
        panic!("{context}: {args:?} was refused: {err}");
    }
}

/// A key and a policy for the writers and readers to find.
fn prepare(con: &mut Connection) {
    answers(con, &["RL.HIT", "rl:f:k", "5", "1h"], "setup");
    answers(con, &["RL.POLICY", "SET", "kept", "5", "1h"], "setup");
    answers(
        con,
        &["RL.ACQUIRE", "rl:f:l", "3", "1h", "ID", "job"],
        "setup",
    );
}

/// What the readers see, to show that a refused writer changed nothing.
fn snapshot(con: &mut Connection) -> Vec<Value> {
    // The policy readers (RL.PEEK's reply moves with the clock; the keys are read raw).
    let mut seen: Vec<Value> = READERS[2..4]
        .iter()
        .map(|args| cmd(args).query(con).expect("reader"))
        .collect();
    for key in ["rl:f:k", "rl:f:t", "rl:f:l"] {
        seen.push(redis::cmd("GET").arg(key).query(con).expect("GET"));
        seen.push(Value::Int(testkit::pexpiretime(con, key)));
    }
    seen
}

#[test]
fn without_enough_replicas_writers_get_noreplicas_and_readers_answer() {
    each_flavor(|flavor| {
        let server = policy_config(flavor).start();
        let mut con = server.conn();
        prepare(&mut con);
        redis::cmd("CONFIG")
            .arg(&["SET", "min-replicas-to-write", "1"])
            .exec(&mut con)
            .expect("CONFIG SET");
        let before = snapshot(&mut con);
        for args in WRITERS {
            let context = format!("{flavor:?} {args:?}");
            let error = error_text(&mut con, &cmd(args));
            assert!(error.starts_with("NOREPLICAS"), "{context}: {error}");
        }
        for args in READERS {
            answers(&mut con, args, &format!("{flavor:?}"));
        }
        assert_eq!(
            snapshot(&mut con),
            before,
            "{flavor:?}: a refused call wrote"
        );
    });
}

#[test]
fn out_of_memory_refuses_what_grows_memory_and_answers_the_rest() {
    each_flavor(|flavor| {
        let server = policy_config(flavor).start();
        let mut con = server.conn();
        prepare(&mut con);
        answers(
            &mut con,
            &["CL.THROTTLE", "rl:f:t", "5", "10", "60"],
            "setup",
        );
        // Any use is above a 1-byte limit, and noeviction (the default) evicts nothing.
        redis::cmd("CONFIG")
            .arg(&["SET", "maxmemory", "1"])
            .exec(&mut con)
            .expect("CONFIG SET");
        let growing: [&[&str]; 6] = [
            &["RL.ACQUIRE", "rl:f:new4", "3", "1h"],
            &["RL.HIT", "rl:f:new", "5", "1h"],
            &["RL.TAKE", "rl:f:new5", "5", "1h", "UPTO", "2"],
            &["RL.MHIT", "1", "rl:f:new3", "SPEC", "5", "1h"],
            &["CL.THROTTLE", "rl:f:new2", "5", "10", "60"],
            &["RL.POLICY", "SET", "new", "5", "1m"],
        ];
        for args in growing {
            let error = error_text(&mut con, &cmd(args));
            assert!(error.starts_with("OOM"), "{flavor:?} {args:?}: {error}");
        }
        for args in READERS {
            answers(&mut con, args, &format!("{flavor:?} under OOM"));
        }
        // Giving back, forgetting and deleting free memory: they answer too.
        let shrinking: [&[&str]; 6] = [
            &["RL.RENEW", "rl:f:l", "job", "2h"],
            &["RL.RELEASE", "rl:f:l", "job"],
            &["RL.REFUND", "rl:f:k", "5", "1h"],
            &["RL.MREFUND", "1", "rl:f:k", "SPEC", "5", "1h"],
            &["RL.RESET", "rl:f:t"],
            &["RL.POLICY", "DEL", "kept"],
        ];
        for args in shrinking {
            answers(&mut con, args, &format!("{flavor:?} under OOM"));
        }
        redis::cmd("CONFIG")
            .arg(&["SET", "maxmemory", "0"])
            .exec(&mut con)
            .expect("CONFIG SET");
    });
}

/// The tips of `command` (field 8 of `COMMAND INFO`).
fn tips_of(con: &mut Connection, command: &str) -> BTreeSet<String> {
    let info: Vec<Value> = redis::cmd("COMMAND")
        .arg(&["INFO", command])
        .query(con)
        .expect("COMMAND INFO");
    let Some(Value::Array(fields)) = info.first() else {
        panic!("COMMAND INFO {command}: {info:?}");
    };
    match fields.get(7) {
        Some(Value::Array(tips)) => tips.iter().map(text).collect(),
        other => panic!("COMMAND INFO {command}: tips are {other:?}"),
    }
}

#[test]
fn every_command_that_reads_the_clock_says_so_and_the_docs_give_the_complexity() {
    let clock = [
        "RL.HIT",
        "RL.PEEK",
        "RL.REFUND",
        "RL.TAKE",
        "RL.MHIT",
        "RL.MPEEK",
        "RL.MREFUND",
        "CL.THROTTLE",
        "RL.STATS",
        "RL.ACQUIRE",
        "RL.RELEASE",
        "RL.RENEW",
        "RL.LEASES",
    ];
    let no_clock = ["RL.RESET", "RL.POLICY"];
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        for command in clock {
            let tips = tips_of(&mut con, command);
            assert!(
                tips.contains("nondeterministic_output"),
                "{flavor:?} {command}: {tips:?}"
            );
        }
        for command in no_clock {
            assert!(
                tips_of(&mut con, command).is_empty(),
                "{flavor:?} {command}"
            );
        }
        // COMMAND DOCS: a flat map per command; the complexity names ALGO log.
        let docs: Value = redis::cmd("COMMAND")
            .arg(&["DOCS", "RL.HIT"])
            .query(&mut con)
            .expect("COMMAND DOCS");
        let shown = format!("{docs:?}");
        assert!(shown.contains("O(N) with ALGO log"), "{flavor:?}: {shown}");
        // The key position registered with the command is still there.
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg(&["GETKEYS", "RL.PEEK", "k", "5", "1m"])
            .query(&mut con)
            .expect("COMMAND GETKEYS");
        assert_eq!(keys, ["k"], "{flavor:?}");
    });
}
