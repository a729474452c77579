//! Policies on replicas, against real Redis and Valkey servers: a replica gets its primary's
//! policies by full sync and by propagation, refuses to change them, reads through them,
//! and keeps them when promoted; a server that becomes a replica takes exactly its
//! primary's; a policy keeps the algorithm it was defined with on replicas and after an
//! AOF restart.
//!
//! On Redis 7.0 the module is loaded with `policies-in-rdb yes` (see
//! `tests/policy_persistence.rs` for why).

use testkit::policy::*;
use testkit::*;

const READONLY: &str = "READONLY You can't write against a read only replica.";

/// Policies with their names as text, for failure messages.
fn readable(policies: &Policies) -> Vec<(String, String)> {
    policies
        .iter()
        .map(|(name, shown)| (String::from_utf8_lossy(name).into_owned(), shown.join(" ")))
        .collect()
}

#[test]
fn replicas_get_policies_refuse_to_change_them_and_keep_them_when_promoted() {
    each_flavor(|flavor| {
        let primary = policy_config(flavor).start();
        let w = window_clear_of_edges(&mut primary.conn());
        let mut con = primary.conn();
        policy_set(&mut con, b"api", &format!("5 {}", minutes(w)));
        policy_set(&mut con, b"login", "3 15m");
        policy_set(&mut con, b"shadow", "1 1h ALGO gcra MODE shadow");
        policy_set(&mut con, b"bin\0\xff", "2 2h");
        policy_set(&mut con, b"to-delete", "1 1h");
        let key = "rl:{203.0.113.7}:GET:/home";
        for _ in 0..3 {
            assert!(hit_policy(&mut con, key, b"api").allowed);
        }

        // Defined before the replica attached: the full sync brings them.
        let replica = attach_replica(&primary, policy_config(flavor));
        let before = all_policies(&primary);
        assert_eq!(before.len(), 5);
        assert_eq!(all_policies(&replica), before, "{flavor:?} full sync");
        assert_eq!(replica.info_stat("policies"), 5, "{flavor:?}");

        // Changed after: the changes are propagated.
        policy_set(&mut con, b"late", "2 1h ALGO token BURST 4");
        policy_set(&mut con, b"login", "2 30m MODE shadow");
        assert_eq!(policy_del(&mut con, b"to-delete"), 1);
        assert_eq!(policy_del(&mut con, b"never"), 0);
        wait_for_replicas(&mut con, 1);
        let after = all_policies(&primary);
        let names: Vec<&[u8]> = after.iter().map(|(n, _)| n.as_slice()).collect();
        assert_eq!(
            names,
            [&b"api"[..], b"bin\0\xff", b"late", b"login", b"shadow"],
            "{flavor:?}"
        );
        assert_eq!(all_policies(&replica), after, "{flavor:?} propagated");

        // A client may not change the replica's policies.
        let mut rcon = replica.conn();
        for args in [
            &["SET", "new", "1", "1h"][..],
            &["SET", "api", "1", "1h"],
            &["DEL", "api"],
            &["DEL", "never"],
        ] {
            let cmd = policy_cmd(args);
            assert_eq!(error_text(&mut rcon, &cmd), READONLY, "{flavor:?} {args:?}");
        }
        assert_eq!(all_policies(&replica), after, "{flavor:?} unchanged");

        // Reads through a policy work on the replica, on the replicated state.
        let peek = through(&mut rcon, "RL.PEEK", key, b"api", &[]);
        assert_eq!(
            (
                peek.allowed,
                peek.limit,
                peek.remaining,
                peek.retry_after_ms
            ),
            (true, 5, 1, 0),
            "{flavor:?}"
        );
        let peek = through(&mut rcon, "RL.PEEK", key, b"api", &["COST", "3"]);
        assert!(!peek.allowed, "{flavor:?}: 3 more than the 2 left");
        let write = redis::cmd("RL.HIT").arg(&[key, "POLICY", "api"]).clone();
        let error = error_text(&mut rcon, &write);
        assert!(error.starts_with("READONLY"), "{flavor:?}: {error}");

        // Promoted, it keeps the policies, enforces them and accepts changes.
        redis::cmd("REPLICAOF")
            .arg(&["NO", "ONE"])
            .exec(&mut rcon)
            .expect("REPLICAOF NO ONE");
        drop(primary);
        assert_eq!(all_policies(&replica), after, "{flavor:?} promoted");
        for remaining in [1, 0] {
            let reply = hit_policy(&mut rcon, key, b"api");
            assert_eq!(
                (reply.allowed, reply.remaining),
                (true, remaining),
                "{flavor:?}"
            );
        }
        assert!(!hit_policy(&mut rcon, key, b"api").allowed, "{flavor:?}");
        let shadow = hit_policy(&mut rcon, "rl:new", b"login");
        assert!(shadow.allowed, "{flavor:?}");
        policy_set(&mut rcon, b"new", &format!("1 {}", minutes(w)));
        assert_eq!(policy_del(&mut rcon, b"to-delete"), 0);
        assert_eq!(policy_del(&mut rcon, b"late"), 1);
        assert!(hit_policy(&mut rcon, "rl:n", b"new").allowed);
        assert!(!hit_policy(&mut rcon, "rl:n", b"new").allowed);
        assert_eq!(
            rl_stats(&mut rcon, Some(b"new")),
            pairs(&[
                ("hits", 2),
                ("allowed", 1),
                ("denied", 1),
                ("shadow_denied", 0)
            ]),
        );
    });
}

/// A server that becomes a replica holds exactly its primary's policies afterwards, its
/// own dropped, whether the primary has policies or none.
#[test]
fn a_server_that_becomes_a_replica_takes_exactly_its_primarys_policies() {
    // (flavor, primary has policies, primary's, the replica's), checked once all ran.
    let mut outcomes = Vec::new();
    each_flavor(|flavor| {
        for primary_has_policies in [true, false] {
            let primary = policy_config(flavor).start();
            if primary_has_policies {
                policy_set(&mut primary.conn(), b"kept", "5 1h");
            }
            let server = policy_config(flavor).start();
            let mut con = server.conn();
            policy_set(&mut con, b"stale", "1 1h");
            policy_set(&mut con, b"kept", "9 9h MODE shadow");
            redis::cmd("REPLICAOF")
                .arg("127.0.0.1")
                .arg(primary.port())
                .exec(&mut con)
                .expect("REPLICAOF");
            wait_for_link(&server);
            let on_primary = readable(&all_policies(&primary));
            let on_replica = readable(&all_policies(&server));
            assert_eq!(
                server.info_stat("policies"),
                on_replica.len() as i64,
                "{flavor:?}"
            );
            outcomes.push((flavor, primary_has_policies, on_primary, on_replica));
        }
    });
    let expected: Vec<_> = outcomes
        .iter()
        .map(|(flavor, has, on_primary, _)| (*flavor, *has, on_primary.clone(), on_primary.clone()))
        .collect();
    assert_eq!(
        outcomes, expected,
        "(flavor, primary has policies, the primary's, the replica's after the sync)"
    );
}

/// A policy defined without ALGO takes the default algorithm of the server it was defined
/// on, when it was defined; replicas and the AOF must keep that algorithm, whatever their
/// own default when they replay the definition.
#[test]
fn a_policy_keeps_the_algorithm_it_was_defined_with_on_replicas_and_after_restart() {
    let gcra = Some(words("5 1h ALGO gcra MODE enforce"));
    // (flavor, on the replica, on the primary after an AOF restart), checked once both ran.
    let mut outcomes = Vec::new();
    each_flavor(|flavor| {
        let primary = policy_config(flavor).arg("appendonly", "yes").start();
        let replica = attach_replica(&primary, policy_config(flavor));
        let mut con = primary.conn();
        redis::cmd("CONFIG")
            .arg(&["SET", "ratelimit.default-algorithm", "gcra"])
            .exec(&mut con)
            .expect("CONFIG SET");
        policy_set(&mut con, b"p", "5 1h");
        assert_eq!(
            policy_get(&mut con, b"p"),
            gcra,
            "{flavor:?} on the primary"
        );
        wait_for_replicas(&mut con, 1);
        let on_replica = policy_get(&mut replica.conn(), b"p");
        // CONFIG SET is not saved: the restarted primary has its default back.
        let restarted = primary.shutdown("NOSAVE").start();
        let after_restart = policy_get(&mut restarted.conn(), b"p");
        outcomes.push((flavor, on_replica, after_restart));
    });
    let expected: Vec<_> = FLAVORS
        .iter()
        .map(|&f| (f, gcra.clone(), gcra.clone()))
        .collect();
    assert_eq!(
        outcomes, expected,
        "(flavor, on the replica, on the primary after an AOF restart)"
    );
}
