//! Keys that lost their expiry (issue 11, A3). `PERSIST key`, or `RESTORE key 0 <dump>`
//! (what a migration does when it drops TTLs), leaves a rate-limit state without the
//! expiry that some encodings keep their time in. Before, such a key was "not a ratelimit
//! state" for good: RL.HIT failed (and the gateway failed open for that client), RL.RESET
//! refused to delete it. Now every encoding is recognised with or without an expiry: RL.PEEK
//! reads it, a hit renews it under the current rule and writes its absolute expiry again
//! (propagated like any write, so the replica and the AOF agree), and RL.RESET deletes it.

mod support;

use redis::Connection;
use support::{
    get_bytes, pexpiretime, primary_with_replica_configs, rl, server_ms, wait_for_replicas,
    window_clear_of_edges, Server, ServerConfig, FLAVORS,
};

/// A shape of key: its RL.HIT arguments (`{w}` is a window clear of its edges, in ms) and
/// whether its time lives only in the key's expiry as a bucket's does (then a hit after the
/// loss takes the bucket as full and is denied).
struct Shape {
    name: &'static str,
    spec: &'static str,
    bucket: bool,
}

const SHAPES: [Shape; 6] = [
    Shape {
        name: "fixed (plain count)",
        spec: "5 {w}ms",
        bucket: false,
    },
    Shape {
        name: "sliding",
        spec: "5 {w}ms ALGO sliding",
        bucket: false,
    },
    Shape {
        name: "log",
        spec: "5 {w}ms ALGO log",
        bucket: false,
    },
    Shape {
        name: "token (short form)",
        spec: "5 {w}ms ALGO token",
        bucket: true,
    },
    Shape {
        name: "gcra (short form)",
        spec: "5 {w}ms ALGO gcra",
        bucket: true,
    },
    Shape {
        name: "two fixed tiers",
        spec: "5 {w}ms 10 {w2}ms",
        bucket: false,
    },
];

/// How a key loses its expiry.
#[derive(Debug, Clone, Copy)]
enum Loss {
    Persist,
    /// `DUMP`, then `RESTORE key 0 <dump> REPLACE`.
    Restore,
}

fn lose_expiry(con: &mut Connection, key: &str, loss: Loss) {
    match loss {
        Loss::Persist => {
            let removed: i64 = redis::cmd("PERSIST").arg(key).query(con).expect("PERSIST");
            assert_eq!(removed, 1, "{key}: it had an expiry");
        }
        Loss::Restore => {
            let dump: Vec<u8> = redis::cmd("DUMP").arg(key).query(con).expect("DUMP");
            redis::cmd("RESTORE")
                .arg(key)
                .arg(0)
                .arg(dump)
                .arg("REPLACE")
                .exec(con)
                .expect("RESTORE");
        }
    }
    assert_eq!(pexpiretime(con, key), -1, "{key}: no expiry left");
}

/// Every key's value and absolute expiry, in name order.
type Dataset = Vec<(String, Option<Vec<u8>>, i64)>;

fn dataset(con: &mut Connection) -> Dataset {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(con).expect("KEYS");
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let value = get_bytes(&mut *con, &k);
            let expiry = pexpiretime(con, &k);
            (k, value, expiry)
        })
        .collect()
}

fn error_of(con: &mut Connection, args: &[&str]) -> Option<String> {
    let mut cmd = redis::cmd(args[0]);
    cmd.arg(&args[1..]);
    cmd.query::<redis::Value>(con).err().map(|e| e.to_string())
}

/// Runs every shape through both losses on `primary` and checks what the commands answer
/// and write; returns how many keys must be left.
fn exercise(primary: &Server, context: &str) {
    let mut con = primary.conn();
    let window = window_clear_of_edges(&mut con);
    for shape in &SHAPES {
        let spec = shape
            .spec
            .replace("{w2}", &(2 * window).to_string())
            .replace("{w}", &window.to_string());
        for loss in [Loss::Persist, Loss::Restore] {
            let context = format!("{context} {} after {loss:?}", shape.name);
            let renewed = format!("rl:lost:{}:{loss:?}:renewed", shape.name);
            let reset = format!("rl:lost:{}:{loss:?}:reset", shape.name);
            for key in [&renewed, &reset] {
                for _ in 0..2 {
                    assert!(rl(&mut con, "RL.HIT", key.as_bytes(), &spec).allowed);
                }
                lose_expiry(&mut con, key, loss);
            }

            // A look reads it and writes nothing.
            let before = (
                get_bytes(&mut con, &renewed),
                pexpiretime(&mut con, &renewed),
            );
            let args: Vec<&str> = spec.split_whitespace().collect();
            let peek = [&["RL.PEEK", renewed.as_str()][..], &args].concat();
            assert_eq!(error_of(&mut con, &peek), None, "{context}: RL.PEEK");
            let after = (
                get_bytes(&mut con, &renewed),
                pexpiretime(&mut con, &renewed),
            );
            assert_eq!(after, before, "{context}: RL.PEEK wrote");

            // A hit renews it and sets its absolute expiry again.
            let now = server_ms(&mut con);
            let hit = rl(&mut con, "RL.HIT", renewed.as_bytes(), &spec);
            if shape.bucket {
                assert!(!hit.allowed, "{context}: a bucket without its time is full");
                assert!(hit.retry_after_ms <= window, "{context}: {hit:?}");
            } else {
                assert!(hit.allowed, "{context}: {hit:?}");
                assert_eq!(hit.remaining, 2, "{context}: the 2 units still count");
            }
            let expiry = pexpiretime(&mut con, &renewed);
            assert!(
                expiry > now && expiry <= server_ms(&mut con) + 2 * window,
                "{context}: expiry {expiry}, now {now}"
            );
            // And it is a state again, read as such.
            assert_eq!(error_of(&mut con, &peek), None, "{context}");

            // RL.RESET deletes one that lost its expiry.
            let deleted: i64 = redis::cmd("RL.RESET")
                .arg(&reset)
                .query(&mut con)
                .unwrap_or_else(|e| panic!("{context}: RL.RESET: {e}"));
            assert_eq!(deleted, 1, "{context}");
            assert_eq!(get_bytes(&mut con, &reset), None, "{context}");
        }
    }
    // CL.THROTTLE (GCRA, short form) renews one too.
    for loss in [Loss::Persist, Loss::Restore] {
        let key = format!("rl:lost:throttle:{loss:?}");
        let cell = |con: &mut Connection| -> Vec<i64> {
            redis::cmd("CL.THROTTLE")
                .arg(&key)
                .arg(&["4", "10", "60"])
                .query(con)
                .unwrap_or_else(|e| panic!("{context} CL.THROTTLE after {loss:?}: {e}"))
        };
        cell(&mut con);
        lose_expiry(&mut con, &key, loss);
        assert_eq!(cell(&mut con).len(), 5, "{context}");
        assert!(pexpiretime(&mut con, &key) > 0, "{context} {loss:?}");
    }
}

#[test]
fn keys_that_lost_their_expiry_are_renewed_read_and_reset_and_the_copies_agree() {
    for flavor in FLAVORS {
        let context = format!("{flavor:?}");
        let (primary, replica) = primary_with_replica_configs(
            ServerConfig::new(flavor).arg("appendonly", "yes"),
            ServerConfig::new(flavor),
        );
        exercise(&primary, &context);
        let mut con = primary.conn();
        let on_primary = dataset(&mut con);
        assert!(
            on_primary.iter().all(|(_, _, expiry)| *expiry > 0),
            "{context}: a key without an expiry is left: {on_primary:?}"
        );
        // WAIT covers the writes of the connection it is sent on: write once more there.
        redis::cmd("SET")
            .arg(&["rl:lost:marker", "1", "PX", "600000"])
            .exec(&mut con)
            .expect("SET");
        wait_for_replicas(&mut con, 1);
        let on_primary = dataset(&mut con);
        assert_eq!(
            dataset(&mut replica.conn()),
            on_primary,
            "{context}: the replica differs"
        );
        drop(replica);
        let restarted = primary.shutdown("NOSAVE").start();
        assert_eq!(
            dataset(&mut restarted.conn()),
            on_primary,
            "{context}: the AOF replay differs"
        );
    }
}
