//! Keys that lost their expiry. `PERSIST key`, or `RESTORE key 0 <dump>`
//! (what a migration does when it drops TTLs), leaves a rate-limit state without the
//! expiry that some encodings keep their time in. Before, such a key was "not a ratelimit
//! state" for good: RL.HIT failed (and the gateway failed open for that client), RL.RESET
//! refused to delete it. Now every encoding is recognised with or without an expiry: RL.PEEK
//! reads it, a hit renews it under the current rule and writes its absolute expiry again
//! (propagated like any write, so the replica and the AOF agree), and RL.RESET deletes it.

use redis::Connection;
use testkit::shapes::{seed_every_shape, Rule, SeededKey, Tiers};
use testkit::{
    each_flavor, get_bytes, pexpiretime, primary_with_replica_configs, rl, server_ms,
    wait_for_replicas, window_clear_of_edges, Server, ServerConfig,
};

/// How a key loses its expiry.
#[derive(Debug, Clone, Copy)]
enum Loss {
    Persist,
    /// `DUMP`, then `RESTORE key 0 <dump> REPLACE`.
    Restore,
}

fn lose_expiry(con: &mut Connection, key: &[u8], loss: Loss) {
    match loss {
        Loss::Persist => {
            let removed: i64 = redis::cmd("PERSIST").arg(key).query(con).expect("PERSIST");
            assert_eq!(removed, 1, "{key:?}: it had an expiry");
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
    assert_eq!(pexpiretime(con, key), -1, "{key:?}: no expiry left");
}

/// Every key's value and absolute expiry, in name order.
type Dataset = Vec<(Vec<u8>, Option<Vec<u8>>, i64)>;

fn dataset(con: &mut Connection) -> Dataset {
    let mut keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(con).expect("KEYS");
    keys.sort();
    keys.into_iter()
        .map(|k| {
            let value = get_bytes(&mut *con, &k);
            let expiry = pexpiretime(con, &k);
            (k, value, expiry)
        })
        .collect()
}

/// The error `command key <spec split on spaces>` answers, `None` when it succeeds.
fn error_of(con: &mut Connection, command: &str, key: &[u8], spec: &str) -> Option<String> {
    let args: Vec<&str> = spec.split_whitespace().collect();
    let mut cmd = redis::cmd(command);
    cmd.arg(key).arg(&args);
    cmd.query::<redis::Value>(con).err().map(|e| e.to_string())
}

/// Every algorithm in every tier shape, limit 5 per `window` ms (a second tier of 10 per
/// twice that, a burst of 8), each key counted twice, then without its expiry by `loss`.
/// Not two tiers of sliding: its state lasts two of its longer windows, past the renewed
/// expiry's bound checked here.
fn keys_without_expiry(
    con: &mut Connection,
    window: i64,
    loss: Loss,
    role: &str,
) -> Vec<SeededKey> {
    let rule = Rule {
        limit: 5,
        window_ms: window,
        outer_limit: 10,
        outer_window_ms: 2 * window,
        burst: Some(8),
    };
    let what = format!("lost:{loss:?}:{role}");
    let keys: Vec<SeededKey> = seed_every_shape(con, &what, &rule, &[1, 1])
        .into_iter()
        .filter(|k| !(k.algo == "sliding" && k.tiers == Tiers::Two))
        .collect();
    for k in &keys {
        lose_expiry(con, &k.key, loss);
    }
    keys
}

/// Runs every shape through both losses on `primary` and checks what the commands answer
/// and write.
fn exercise(primary: &Server, context: &str) {
    let mut con = primary.conn();
    let window = window_clear_of_edges(&mut con);
    for loss in [Loss::Persist, Loss::Restore] {
        let renewed_keys = keys_without_expiry(&mut con, window, loss, "renewed");
        let reset_keys = keys_without_expiry(&mut con, window, loss, "reset");
        for (k, reset) in renewed_keys.iter().zip(&reset_keys) {
            let context = format!("{context} {} after {loss:?}", k.spec);
            let (renewed, spec) = (k.key.as_slice(), k.spec.as_str());

            // A look reads it and writes nothing.
            let before = (get_bytes(&mut con, renewed), pexpiretime(&mut con, renewed));
            let peek = error_of(&mut con, "RL.PEEK", renewed, spec);
            assert_eq!(peek, None, "{context}: RL.PEEK");
            let after = (get_bytes(&mut con, renewed), pexpiretime(&mut con, renewed));
            assert_eq!(after, before, "{context}: RL.PEEK wrote");

            // A hit renews it and sets its absolute expiry again.
            let now = server_ms(&mut con);
            let hit = rl(&mut con, "RL.HIT", renewed, spec);
            if k.time_in_expiry() {
                assert!(!hit.allowed, "{context}: a bucket without its time is full");
                assert!(hit.retry_after_ms <= window, "{context}: {hit:?}");
            } else {
                assert!(hit.allowed, "{context}: {hit:?}");
                assert_eq!(
                    hit.remaining,
                    k.capacity - 3,
                    "{context}: the 2 units still count"
                );
            }
            let expiry = pexpiretime(&mut con, renewed);
            assert!(
                expiry > now && expiry <= server_ms(&mut con) + 2 * window,
                "{context}: expiry {expiry}, now {now}"
            );
            // And it is a state again, read as such.
            let peek = error_of(&mut con, "RL.PEEK", renewed, spec);
            assert_eq!(peek, None, "{context}");

            // RL.RESET deletes one that lost its expiry.
            let deleted: i64 = redis::cmd("RL.RESET")
                .arg(&reset.key)
                .query(&mut con)
                .unwrap_or_else(|e| panic!("{context}: RL.RESET: {e}"));
            assert_eq!(deleted, 1, "{context}");
            assert_eq!(get_bytes(&mut con, &reset.key), None, "{context}");
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
        lose_expiry(&mut con, key.as_bytes(), loss);
        assert_eq!(cell(&mut con).len(), 5, "{context}");
        assert!(pexpiretime(&mut con, &key) > 0, "{context} {loss:?}");
    }
}

#[test]
fn keys_that_lost_their_expiry_are_renewed_read_and_reset_and_the_copies_agree() {
    each_flavor(|flavor| {
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
    });
}
