//! Every writing command under `CLIENT PAUSE WRITE` (what FAILOVER and CLUSTER FAILOVER do
//! on their own): the server holds the call until the pause ends, then runs it, and answers
//! PING and the reading commands meanwhile. A writing command flagged neither `write` nor
//! `may-replicate` would run during the pause, propagate, and abort the server with
//! `ASSERTION FAILED`, which is what `RL.POLICY` did.

use redis::{Connection, Value};
use std::sync::mpsc;
use std::time::Duration;
use testkit::{each_flavor, wait_until, Flavor, Server, ServerConfig};

/// The name the held connection gives itself, to find it in `CLIENT LIST`.
const WRITER: &str = "rl-paused-writer";

/// A server with the AOF on (so every write propagates) and policies allowed on Redis 7.0.
fn paused_config(flavor: Flavor) -> ServerConfig {
    let config = ServerConfig::new(flavor).arg("appendonly", "yes");
    match flavor {
        Flavor::Redis => config.module_arg("policies-in-rdb").module_arg("yes"),
        Flavor::Valkey => config,
    }
}

fn query(con: &mut Connection, args: &[&str]) -> Value {
    let mut cmd = redis::cmd(args[0]);
    cmd.arg(&args[1..]);
    cmd.query(con)
        .unwrap_or_else(|e| panic!("{args:?} failed: {e}"))
}

/// Whether the connection named [`WRITER`] is blocked (flag `b`) in `cmd`.
fn writer_is_held(con: &mut Connection) -> bool {
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(con)
        .expect("CLIENT LIST");
    clients.lines().any(|line| {
        let fields: Vec<&str> = line.split(' ').collect();
        fields.contains(&format!("name={WRITER}").as_str())
            && fields.iter().any(|f| {
                f.strip_prefix("flags=")
                    .is_some_and(|flags| flags.contains('b'))
            })
    })
}

/// The readers that must answer while writes are paused, with the state they must see:
/// PING, RL.PEEK on `peek_key`, RL.POLICY GET and LIST.
fn readers_answer(con: &mut Connection, peek_key: &str, context: &str) {
    let pong: String = redis::cmd("PING")
        .query(con)
        .expect("PING during the pause");
    assert_eq!(pong, "PONG", "{context}");
    let peek: Vec<i64> = redis::cmd("RL.PEEK")
        .arg(peek_key)
        .arg(&["5", "1h"])
        .query(con)
        .unwrap_or_else(|e| panic!("{context}: RL.PEEK during the pause: {e}"));
    assert_eq!(peek.len(), 5, "{context}");
    let shown: Option<Vec<String>> = redis::cmd("RL.POLICY")
        .arg(&["GET", "kept"])
        .query(con)
        .unwrap_or_else(|e| panic!("{context}: RL.POLICY GET during the pause: {e}"));
    assert!(shown.is_some(), "{context}: the policy 'kept' is shown");
    let names: Vec<String> = redis::cmd("RL.POLICY")
        .arg("LIST")
        .query(con)
        .unwrap_or_else(|e| panic!("{context}: RL.POLICY LIST during the pause: {e}"));
    assert!(names.contains(&"kept".to_string()), "{context}: {names:?}");
}

/// Runs `call` on its own connection while writes are paused (until `CLIENT UNPAUSE`):
/// asserts that the server holds it, that `before` (the call's key or policy) is unchanged
/// and the readers answer meanwhile, then ends the pause and returns the call's reply.
fn call_held_by_pause(
    server: &Server,
    call: &[&str],
    unchanged: impl Fn(&mut Connection) -> Value,
    context: &str,
) -> Value {
    let mut admin = server.conn();
    let mut writer = server.conn();
    redis::cmd("CLIENT")
        .arg(&["SETNAME", WRITER])
        .exec(&mut writer)
        .expect("CLIENT SETNAME");
    let before = unchanged(&mut admin);
    redis::cmd("CLIENT")
        .arg(&["PAUSE", "600000", "WRITE"])
        .exec(&mut admin)
        .expect("CLIENT PAUSE");
    let (sent, replied) = mpsc::channel();
    let owned: Vec<String> = call.iter().map(|s| s.to_string()).collect();
    let thread = std::thread::spawn(move || {
        let mut cmd = redis::cmd(&owned[0]);
        cmd.arg(&owned[1..]);
        let _ = sent.send(cmd.query::<Value>(&mut writer));
    });
    wait_until(Duration::from_secs(30), "the call to be held", || {
        writer_is_held(&mut admin)
    });
    assert!(
        replied.try_recv().is_err(),
        "{context}: answered during the pause"
    );
    readers_answer(&mut admin, "rl:pause:peeked", context);
    assert_eq!(
        unchanged(&mut admin),
        before,
        "{context}: changed during the pause"
    );
    assert!(
        replied.try_recv().is_err(),
        "{context}: answered during the pause"
    );
    redis::cmd("CLIENT")
        .arg("UNPAUSE")
        .exec(&mut admin)
        .expect("CLIENT UNPAUSE");
    let reply = replied
        .recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{context}: no reply after the pause"))
        .unwrap_or_else(|e| panic!("{context}: failed after the pause: {e}"));
    thread.join().expect("the writer thread");
    reply
}

fn get(con: &mut Connection, key: &str) -> Value {
    redis::cmd("GET").arg(key).query(con).expect("GET")
}

fn policy(con: &mut Connection, name: &str) -> Value {
    redis::cmd("RL.POLICY")
        .arg(&["GET", name])
        .query(con)
        .expect("RL.POLICY GET")
}

fn assert_alive_without_assertion(server: &Server, context: &str) {
    let pong: String = redis::cmd("PING")
        .query(&mut server.conn())
        .unwrap_or_else(|e| panic!("{context}: the server is gone: {e}"));
    assert_eq!(pong, "PONG", "{context}");
    let log = server
        .config
        .dir()
        .join(format!("server-{}.log", server.port()));
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(
        !text.contains("ASSERTION"),
        "{context}: the log has an assertion:\n{text}"
    );
}

#[test]
fn every_writing_command_waits_for_a_write_pause_and_then_completes() {
    each_flavor(|flavor| {
        let server = paused_config(flavor).start();
        let mut con = server.conn();
        query(&mut con, &["RL.POLICY", "SET", "kept", "5", "1h"]);
        query(&mut con, &["RL.HIT", "rl:pause:peeked", "5", "1h"]);
        let context = |what: &str| format!("{flavor:?} {what}");

        let hit = call_held_by_pause(
            &server,
            &["RL.HIT", "rl:pause:k", "5", "1h"],
            |c| get(c, "rl:pause:k"),
            &context("RL.HIT"),
        );
        assert!(matches!(&hit, Value::Array(v) if v.first() == Some(&Value::Int(1))));
        assert_eq!(
            get(&mut con, "rl:pause:k"),
            Value::BulkString(b"1".to_vec())
        );

        let take = call_held_by_pause(
            &server,
            &["RL.TAKE", "rl:pause:t", "5", "1h", "UPTO", "2"],
            |c| get(c, "rl:pause:t"),
            &context("RL.TAKE"),
        );
        assert!(matches!(&take, Value::Array(v) if v.get(5) == Some(&Value::Int(2))));
        assert_eq!(
            get(&mut con, "rl:pause:t"),
            Value::BulkString(b"2".to_vec())
        );

        let refund = call_held_by_pause(
            &server,
            &["RL.REFUND", "rl:pause:k", "5", "1h"],
            |c| get(c, "rl:pause:k"),
            &context("RL.REFUND"),
        );
        assert!(matches!(&refund, Value::Array(v) if v.first() == Some(&Value::Int(1))));
        assert_eq!(
            get(&mut con, "rl:pause:k"),
            Value::Nil,
            "refunded to nothing"
        );

        query(&mut con, &["RL.HIT", "rl:pause:k", "5", "1h"]);
        let reset = call_held_by_pause(
            &server,
            &["RL.RESET", "rl:pause:k"],
            |c| get(c, "rl:pause:k"),
            &context("RL.RESET"),
        );
        assert_eq!(reset, Value::Int(1), "{flavor:?}");
        assert_eq!(get(&mut con, "rl:pause:k"), Value::Nil);

        let throttle = call_held_by_pause(
            &server,
            &["CL.THROTTLE", "rl:pause:t", "5", "10", "60"],
            |c| get(c, "rl:pause:t"),
            &context("CL.THROTTLE"),
        );
        assert!(matches!(&throttle, Value::Array(v) if v.first() == Some(&Value::Int(0))));
        assert_ne!(get(&mut con, "rl:pause:t"), Value::Nil);

        let set = call_held_by_pause(
            &server,
            &["RL.POLICY", "SET", "p", "5", "1m"],
            |c| policy(c, "p"),
            &context("RL.POLICY SET"),
        );
        assert_eq!(set, Value::Okay, "{flavor:?}");
        assert_ne!(policy(&mut con, "p"), Value::Nil, "{flavor:?}: defined");

        let del = call_held_by_pause(
            &server,
            &["RL.POLICY", "DEL", "p"],
            |c| policy(c, "p"),
            &context("RL.POLICY DEL"),
        );
        assert_eq!(del, Value::Int(1), "{flavor:?}");
        assert_eq!(policy(&mut con, "p"), Value::Nil, "{flavor:?}: deleted");

        assert_alive_without_assertion(&server, &format!("{flavor:?}"));
    });
}

/// The steps that once failed, as they were: a pause that ends on its own, `RL.POLICY SET` sent into
/// it. The call completes once the pause is over and the server is still there.
#[test]
fn a_policy_set_into_a_timed_pause_completes_after_it() {
    each_flavor(|flavor| {
        let server = paused_config(flavor).start();
        let mut con = server.conn();
        redis::cmd("CLIENT")
            .arg(&["PAUSE", "1000", "WRITE"])
            .exec(&mut con)
            .expect("CLIENT PAUSE");
        let mut writer = server.conn();
        let reply = query(&mut writer, &["RL.POLICY", "SET", "p", "5", "1m"]);
        assert_eq!(reply, Value::Okay, "{flavor:?}");
        assert_ne!(policy(&mut con, "p"), Value::Nil, "{flavor:?}");
        assert_alive_without_assertion(&server, &format!("{flavor:?}"));
    });
}
