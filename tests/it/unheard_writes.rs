//! The module propagates its writes only when something can receive them, as the server
//! does its own: with the AOF off and no replica ever attached (no replication backlog), a
//! write reaches no one, so it is not propagated (`INFO ratelimit`: `unpropagated_writes`
//! counts those). Nothing is lost by that:
//! - a replica that attaches after such writes gets them in its full sync, also when it
//!   attaches during a delayed (diskless) sync while writes go on;
//! - `CONFIG SET appendonly yes` after them rewrites the AOF from the dataset, and the AOF
//!   restarts to the same state;
//! - a replica attached from the start, and one that went away and came back, sees every
//!   write, and the save points count every write either way.

use testkit::shapes::{seed_every_shape, Rule, SeededKey};
use testkit::*;

use redis::Connection;
use std::time::Duration;

/// One key of every algorithm and tier shape, seeded with two allowed hits each on a
/// window clear of its edges.
fn seed(con: &mut Connection, what: &str) -> Vec<SeededKey> {
    let window_ms = window_clear_of_edges(con);
    let rule = Rule {
        limit: 100,
        window_ms,
        outer_limit: 500,
        outer_window_ms: 24 * window_ms,
        burst: Some(150),
    };
    seed_every_shape(con, what, &rule, &[1, 2])
}

/// One more allowed hit on every key.
fn hit_each(con: &mut Connection, keys: &[SeededKey]) {
    for k in keys {
        let reply = rl(con, "RL.HIT", &k.key, &k.spec);
        assert!(reply.allowed, "{}: {reply:?}", k.spec);
    }
}

/// The bytes and absolute expiry of every key.
fn snapshot(con: &mut Connection, keys: &[SeededKey]) -> Vec<(Option<Vec<u8>>, i64)> {
    let states: Vec<_> = keys.iter().map(|k| stored(con, &k.key)).collect();
    assert!(states
        .iter()
        .all(|(value, expiry)| value.is_some() && *expiry > 0));
    states
}

fn changes_since_save(server: &Server) -> i64 {
    server.info_int("persistence", "rdb_changes_since_last_save")
}

#[test]
fn writes_nothing_can_receive_are_not_propagated_but_count_for_the_save_points() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let keys = seed(&mut con, "alone");
        let writes = 2 * keys.len() as i64;
        assert_eq!(
            server.info_stat("unpropagated_writes"),
            writes,
            "{flavor:?}"
        );
        assert_eq!(server.info_stat("propagating_always"), 0, "{flavor:?}");
        assert_eq!(
            server.master_repl_offset(),
            0,
            "{flavor:?}: nothing propagated"
        );
        // Each write counts as one change, as a propagated one does.
        assert_eq!(changes_since_save(&server), writes, "{flavor:?}");
        // RL.RESET's delete is a write like the others.
        let deleted: i64 = redis::cmd("RL.RESET")
            .arg(&keys[0].key)
            .query(&mut con)
            .expect("RL.RESET");
        assert_eq!(deleted, 1);
        assert_eq!(
            server.info_stat("unpropagated_writes"),
            writes + 1,
            "{flavor:?}"
        );
        assert_eq!(changes_since_save(&server), writes + 1, "{flavor:?}");
    });
}

#[test]
fn a_replica_attaching_after_unpropagated_writes_holds_the_same_bytes() {
    each_flavor(|flavor| {
        // A diskless sync that waits 2 s before it forks: the writes made meanwhile are
        // made while the new replica waits, before anything is propagated to it.
        let primary = ServerConfig::new(flavor)
            .arg("repl-diskless-sync", "yes")
            .arg("repl-diskless-sync-delay", "2")
            .start();
        let mut con = primary.conn();
        let keys = seed(&mut con, "before");
        let unpropagated = primary.info_stat("unpropagated_writes");
        assert!(unpropagated > 0, "{flavor:?}");
        let replica = ServerConfig::new(flavor)
            .arg("replicaof", &format!("127.0.0.1 {}", primary.port()))
            .start();
        wait_until(
            Duration::from_secs(10),
            "the replica to ask for a sync",
            || {
                primary
                    .info_field("replication", "slave0")
                    .is_some_and(|state| state.contains("wait_bgsave"))
            },
        );
        hit_each(&mut con, &keys);
        wait_for_link(&replica);
        // From now on every write is propagated.
        hit_each(&mut con, &keys);
        wait_for_replicas(&mut con, 1);
        assert_eq!(primary.info_stat("propagating_always"), 1, "{flavor:?}");
        let on_primary = snapshot(&mut con, &keys);
        assert_eq!(
            snapshot(&mut replica.conn(), &keys),
            on_primary,
            "{flavor:?}: the replica holds the primary's bytes and expiries"
        );
        let during_delay = primary.info_stat("unpropagated_writes") - unpropagated;
        assert!(
            during_delay <= keys.len() as i64,
            "{flavor:?}: only writes before the fork may go unpropagated ({during_delay})"
        );
        // Effects only: the replica (which loads the module) never ran an RL.* command.
        assert_eq!(replica.command_calls("RL.HIT"), None, "{flavor:?}");
    });
}

#[test]
fn the_aof_turned_on_after_unpropagated_writes_restarts_to_the_same_state() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let keys = seed(&mut con, "aof-later");
        let unpropagated = server.info_stat("unpropagated_writes");
        assert!(unpropagated > 0, "{flavor:?}");
        redis::cmd("CONFIG")
            .arg(&["SET", "appendonly", "yes"])
            .exec(&mut con)
            .expect("CONFIG SET appendonly yes");
        // Writes go on while the AOF is rewritten from the dataset, and after.
        hit_each(&mut con, &keys);
        wait_until(Duration::from_secs(30), "the AOF rewrite", || {
            server
                .info_field("persistence", "aof_rewrite_in_progress")
                .as_deref()
                == Some("0")
                && server
                    .info_field("persistence", "aof_rewrite_scheduled")
                    .as_deref()
                    == Some("0")
        });
        hit_each(&mut con, &keys);
        assert_eq!(
            server.info_stat("unpropagated_writes"),
            unpropagated,
            "{flavor:?}: with the AOF on, every write is propagated"
        );
        let before = snapshot(&mut con, &keys);
        drop(con);
        let config = server.shutdown("NOSAVE");
        assert!(!config.dir().join("dump.rdb").exists(), "{flavor:?}");
        let server = config.arg("appendonly", "yes").start();
        let mut con = server.conn();
        assert_eq!(
            snapshot(&mut con, &keys),
            before,
            "{flavor:?}: the AOF's state"
        );
        for k in &keys {
            let reply = rl(&mut con, "RL.HIT", &k.key, &k.spec);
            assert!(reply.allowed, "{flavor:?} {}: {reply:?}", k.spec);
            assert_eq!(
                reply.remaining,
                k.last.remaining - 3,
                "{flavor:?} {}",
                k.spec
            );
        }
    });
}

#[test]
fn a_replica_attached_from_the_start_sees_every_write() {
    each_flavor(|flavor| {
        let (primary, replica) = primary_with_replica(flavor);
        let mut con = primary.conn();
        let keys = seed(&mut con, "from-start");
        wait_for_replicas(&mut con, 1);
        assert_eq!(primary.info_stat("unpropagated_writes"), 0, "{flavor:?}");
        assert_eq!(primary.info_stat("propagating_always"), 1, "{flavor:?}");
        assert_eq!(
            snapshot(&mut replica.conn(), &keys),
            snapshot(&mut con, &keys),
            "{flavor:?}"
        );
    });
}

#[test]
fn a_replica_that_went_away_resynchronises_every_write_from_the_backlog() {
    each_flavor(|flavor| {
        let (primary, replica) = primary_with_replica(flavor);
        let mut con = primary.conn();
        let keys = seed(&mut con, "came-back");
        wait_for_replicas(&mut con, 1);
        let partial_syncs = primary.info_int("stats", "sync_partial_ok");
        // The replica is frozen and its link cut: it reconnects only after the writes,
        // and asks the backlog for what it missed.
        let pid = replica.pid().to_string();
        signal(&pid, "-STOP");
        redis::cmd("CLIENT")
            .arg(&["KILL", "TYPE", "replica"])
            .exec(&mut con)
            .expect("CLIENT KILL TYPE replica");
        wait_until(Duration::from_secs(10), "the replica to be gone", || {
            primary
                .info_field("replication", "connected_slaves")
                .as_deref()
                == Some("0")
        });
        hit_each(&mut con, &keys);
        assert_eq!(primary.info_stat("unpropagated_writes"), 0, "{flavor:?}");
        signal(&pid, "-CONT");
        wait_until(Duration::from_secs(30), "the replica to come back", || {
            primary
                .info_field("replication", "connected_slaves")
                .as_deref()
                == Some("1")
        });
        wait_for_replicas(&mut con, 1);
        assert_eq!(
            primary.info_int("stats", "sync_partial_ok"),
            partial_syncs + 1,
            "{flavor:?}: the replica resynchronised from the backlog"
        );
        assert_eq!(
            snapshot(&mut replica.conn(), &keys),
            snapshot(&mut con, &keys),
            "{flavor:?}"
        );
    });
}

fn signal(pid: &str, which: &str) {
    let status = std::process::Command::new("kill")
        .args([which, pid])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill {which} {pid}");
}

#[test]
fn after_a_failover_the_promoted_server_propagates_to_the_old_primary_rejoining_it() {
    each_flavor(|flavor| {
        // `a` writes alone first: nothing listens to it then.
        let a = ServerConfig::new(flavor).start();
        let mut a_con = a.conn();
        seed(&mut a_con, "alone-first");
        assert!(a.info_stat("unpropagated_writes") > 0, "{flavor:?}");
        let b = ServerConfig::new(flavor).start();
        replica_of(&mut a_con, Some(b.port()));
        wait_for_link(&a);
        let mut b_con = b.conn();
        let keys = seed(&mut b_con, "failover");
        wait_for_replicas(&mut b_con, 1);
        // The failover: `a` is promoted, and `b` rejoins it, resynchronising from the
        // backlog `a` kept as a replica; no full sync, so no fork on `a`.
        replica_of(&mut a_con, None);
        replica_of(&mut b_con, Some(a.port()));
        wait_for_link(&b);
        assert_eq!(a.info_int("stats", "sync_partial_ok"), 1, "{flavor:?}");
        let unpropagated = a.info_stat("unpropagated_writes");
        hit_each(&mut a_con, &keys);
        wait_for_replicas(&mut a_con, 1);
        assert_eq!(
            a.info_stat("unpropagated_writes"),
            unpropagated,
            "{flavor:?}"
        );
        assert_eq!(
            snapshot(&mut b.conn(), &keys),
            snapshot(&mut a_con, &keys),
            "{flavor:?}"
        );
    });
}

/// `REPLICAOF 127.0.0.1 <port>`, or `REPLICAOF NO ONE`.
fn replica_of(con: &mut Connection, port: Option<u16>) {
    let mut command = redis::cmd("REPLICAOF");
    match port {
        Some(port) => command.arg("127.0.0.1").arg(port),
        None => command.arg("NO").arg("ONE"),
    };
    command.exec(con).expect("REPLICAOF");
}
