//! The module in a Redis Cluster (and a Valkey cluster): 3 primaries with a replica each,
//! the module on every node. Every command but `RL.POLICY` names its key at position 1, so
//! it routes like any single-key command (`COMMAND GETKEYS`, `MOVED` from a wrong node, the
//! `redis` crate's cluster client); a hash tag keeps a client's limits on one slot, and a
//! multi-tier limit is one key. `RL.POLICY` is keyless: `redis-cli --cluster call` sets it on
//! every primary and [`Cluster::policies_missing`] finds a primary that lacks one. Across a
//! `CLUSTER FAILOVER` the promoted replica holds the primary's bytes and expiries and keeps
//! enforcing; across a forced failover with the primary killed under load, it lacks at most
//! the hits still in flight to it, which the last test measures and prints (`--nocapture`).

use testkit::cluster::*;
use testkit::*;

use redis::{Connection, ConnectionLike, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;

/// A limit the load never reaches, so that every acknowledged hit is an allowed one.
const UNREACHED: &str = "1000000";
const UNREACHED_LIMIT: i64 = 1_000_000;

/// Runs `command key args...` (RL.HIT, RL.PEEK, RL.REFUND) on any connection, plain or
/// cluster, and decodes the five integers.
fn rl(con: &mut impl ConnectionLike, command: &str, key: &str, args: &[&str]) -> Reply {
    let values: Vec<i64> = redis::cmd(command)
        .arg(key)
        .arg(args)
        .query(con)
        .unwrap_or_else(|e| panic!("{command} {key} {args:?}: {e}"));
    decode_reply(&values)
}

/// `CL.THROTTLE key args...`: `[limited, limit, remaining, retry_after_s, reset_after_s]`.
fn throttle(con: &mut impl ConnectionLike, key: &str, args: &[&str]) -> Vec<i64> {
    redis::cmd("CL.THROTTLE")
        .arg(key)
        .arg(args)
        .query(con)
        .unwrap_or_else(|e| panic!("CL.THROTTLE {key} {args:?}: {e}"))
}

/// The error a command answers, as `CODE detail`.
fn error_of(con: &mut impl ConnectionLike, cmd: &redis::Cmd) -> String {
    match cmd.query::<Value>(con) {
        Ok(Value::ServerError(err)) => format!("{} {}", err.code(), err.details().unwrap_or(""))
            .trim()
            .to_string(),
        Ok(other) => panic!("expected an error, got {other:?}"),
        Err(err) => format!(
            "{} {}",
            err.code().unwrap_or(""),
            err.detail().unwrap_or("")
        )
        .trim()
        .to_string(),
    }
}

/// `RL.POLICY GET name` on `server`.
fn policy_get(server: &Server, name: &str) -> Option<Vec<String>> {
    redis::cmd("RL.POLICY")
        .arg("GET")
        .arg(name)
        .query(&mut server.conn())
        .expect("RL.POLICY GET")
}

/// A fixed-window count as `GET` shows it, 0 when the key is missing.
fn count_on(con: &mut Connection, key: &str) -> u64 {
    get_bytes(&mut *con, key).map_or(0, |bytes| {
        String::from_utf8(bytes)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("{key} holds a decimal count"))
    })
}

/// Every RL command with arguments valid for one key (a fixed window of 5 per minute, or
/// redis-cell's 30 per minute), for the routing checks.
const ROUTED: [(&str, &[&str]); 12] = [
    ("RL.HIT", &["5", "1m"]),
    ("RL.TAKE", &["5", "1m", "UPTO", "2"]),
    ("RL.HIT", &["10", "1s", "1000", "1h", "ALGO", "gcra"]),
    ("RL.PEEK", &["5", "1m"]),
    ("RL.REFUND", &["5", "1m"]),
    ("RL.RESET", &[]),
    ("CL.THROTTLE", &["15", "30", "60"]),
    ("RL.ACQUIRE", &["3", "1h", "5", "1m", "ID", "job"]),
    ("RL.ACQUIRE", &["3", "1h"]),
    ("RL.RELEASE", &["job"]),
    ("RL.RENEW", &["job", "1h"]),
    ("RL.LEASES", &["3"]),
];

#[test]
fn commands_route_by_their_key() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 1);
        let primaries = cluster.primaries();
        assert_eq!(primaries.len(), 3, "{flavor:?}");
        stay_clear_of_window_edges(primaries[0], HOUR_MS, 60_000);

        // COMMAND GETKEYS names the key, and only it, for every keyed command; RL.POLICY
        // names none.
        let mut any = cluster.servers()[0].conn();
        for (command, args) in ROUTED {
            let keys: Vec<String> = redis::cmd("COMMAND")
                .arg("GETKEYS")
                .arg(command)
                .arg("k")
                .arg(args)
                .query(&mut any)
                .unwrap_or_else(|e| panic!("COMMAND GETKEYS {command}: {e}"));
            assert_eq!(keys, vec!["k"], "{flavor:?} {command} {args:?}");
        }
        let keyless = error_of(
            &mut any,
            redis::cmd("COMMAND")
                .arg("GETKEYS")
                .arg("RL.POLICY")
                .arg(&["SET", "api", "5", "1m"]),
        );
        assert!(keyless.starts_with("ERR"), "{flavor:?}: {keyless}");

        // One key per shard: every other primary answers MOVED to its owner, for every
        // command, and writes nothing; the owner answers.
        for owner in &primaries {
            let key = format!("rl:{{{}}}:route", cluster.tag_on(owner, "route"));
            let slot = cluster.keyslot(key.as_str());
            assert_eq!(cluster.owner_of(key.as_str()).port(), owner.port());
            let moved = format!("MOVED {slot} 127.0.0.1:{}", owner.port());
            for other in primaries.iter().filter(|p| p.port() != owner.port()) {
                let mut con = other.conn();
                for (command, args) in ROUTED {
                    let error = error_of(&mut con, redis::cmd(command).arg(&key).arg(args));
                    assert_eq!(error, moved, "{flavor:?} {command} on {}", other.port());
                }
                let dbsize: i64 = redis::cmd("DBSIZE").query(&mut con).expect("DBSIZE");
                assert_eq!(dbsize, 0, "{flavor:?}: a wrong node wrote nothing");
            }
            let mut con = owner.conn();
            let first = rl(&mut con, "RL.HIT", &key, &["5", "1h"]);
            assert_eq!((first.allowed, first.remaining), (true, 4), "{flavor:?}");
            let peek = rl(&mut con, "RL.PEEK", &key, &["5", "1h"]);
            assert_eq!((peek.allowed, peek.remaining), (true, 3), "{flavor:?}");
            let refund = rl(&mut con, "RL.REFUND", &key, &["5", "1h"]);
            assert_eq!((refund.allowed, refund.remaining), (true, 5), "{flavor:?}");
            rl(&mut con, "RL.HIT", &key, &["5", "1h"]);
            wait_for_replicas(&mut con, 1);

            // Its replica: RL.PEEK (read-only) answers there after READONLY, and MOVED
            // without it; RL.HIT is always sent to the owner.
            let replica = cluster.replica_of(owner);
            let mut on_replica = replica.conn();
            let error = error_of(
                &mut on_replica,
                redis::cmd("RL.PEEK").arg(&key).arg(&["5", "1h"]),
            );
            assert_eq!(
                error, moved,
                "{flavor:?} RL.PEEK on a replica without READONLY"
            );
            redis::cmd("READONLY")
                .exec(&mut on_replica)
                .expect("READONLY");
            let peek = rl(&mut on_replica, "RL.PEEK", &key, &["5", "1h"]);
            assert_eq!((peek.allowed, peek.remaining), (true, 3), "{flavor:?}");
            let error = error_of(
                &mut on_replica,
                redis::cmd("RL.HIT").arg(&key).arg(&["5", "1h"]),
            );
            assert_eq!(error, moved, "{flavor:?} RL.HIT on a replica");

            let reset: i64 = redis::cmd("RL.RESET")
                .arg(&key)
                .query(&mut con)
                .expect("RL.RESET");
            assert_eq!(reset, 1, "{flavor:?}");
        }

        // The cluster client routes every RL command to the owner, on every shard.
        let mut client = cluster.client();
        for owner in &primaries {
            let tag = cluster.tag_on(owner, "client");
            let key = format!("rl:{{{tag}}}:api");
            for remaining in [2, 1, 0] {
                let reply = rl(&mut client, "RL.HIT", &key, &["3", "1h"]);
                assert_eq!((reply.allowed, reply.remaining), (true, remaining));
            }
            let denied = rl(&mut client, "RL.HIT", &key, &["3", "1h"]);
            assert!(!denied.allowed && denied.retry_after_ms > 0, "{flavor:?}");
            let peek = rl(&mut client, "RL.PEEK", &key, &["3", "1h"]);
            assert_eq!(
                (peek.allowed, peek.limit, peek.remaining),
                (false, 3, 0),
                "{flavor:?}: RL.PEEK answers as RL.HIT would"
            );
            let refund = rl(&mut client, "RL.REFUND", &key, &["3", "1h"]);
            assert_eq!((refund.allowed, refund.remaining), (true, 1), "{flavor:?}");
            assert_eq!(get_bytes(&mut owner.conn(), &key), Some(b"2".to_vec()));
            let reset: i64 = redis::cmd("RL.RESET")
                .arg(&key)
                .query(&mut client)
                .expect("RL.RESET");
            assert_eq!(reset, 1, "{flavor:?}");
            assert_eq!(pexpiretime(&mut owner.conn(), &key), -2, "{flavor:?}");

            let cell = format!("rl:{{{tag}}}:cell");
            // 2 per minute, bursts of 2: two allowed, then limited.
            assert_eq!(
                throttle(&mut client, &cell, &["1", "2", "60"])[..3],
                [0_i64, 2, 1]
            );
            assert_eq!(
                throttle(&mut client, &cell, &["1", "2", "60"])[..3],
                [0_i64, 2, 0]
            );
            assert_eq!(
                throttle(&mut client, &cell, &["1", "2", "60"])[..3],
                [1_i64, 2, 0]
            );
            let exists: i64 = redis::cmd("EXISTS")
                .arg(&cell)
                .query(&mut owner.conn())
                .expect("EXISTS");
            assert_eq!(exists, 1, "{flavor:?}: CL.THROTTLE wrote on the owner");
        }

        // Hash tags: a client's limits share a slot and a node; a multi-tier limit is one
        // key in that slot.
        let (login, api) = ("rl:{user42}:login", "rl:{user42}:api");
        let slot = cluster.keyslot("user42");
        assert_eq!(cluster.keyslot(login), slot, "{flavor:?}");
        assert_eq!(cluster.keyslot(api), slot, "{flavor:?}");
        rl(&mut client, "RL.HIT", login, &["5", "1h"]);
        for remaining in [99, 98] {
            let reply = rl(&mut client, "RL.HIT", api, &["100", "1h", "1000", "1d"]);
            assert_eq!((reply.allowed, reply.remaining), (true, remaining));
        }
        let owner = cluster.owner_of("user42");
        let mut con = owner.conn();
        let both: i64 = redis::cmd("EXISTS")
            .arg(login)
            .arg(api)
            .query(&mut con)
            .expect("EXISTS of two keys in one slot");
        assert_eq!(both, 2, "{flavor:?}: both limits on {}", owner.port());
        let in_slot: i64 = redis::cmd("CLUSTER")
            .arg("COUNTKEYSINSLOT")
            .arg(slot)
            .query(&mut con)
            .expect("CLUSTER COUNTKEYSINSLOT");
        assert_eq!(in_slot, 2, "{flavor:?}: two tiers are one key");
        let keys: Vec<String> = redis::cmd("COMMAND")
            .arg("GETKEYS")
            .arg("RL.HIT")
            .arg(api)
            .arg(&["100", "1h", "1000", "1d"])
            .query(&mut con)
            .expect("COMMAND GETKEYS");
        assert_eq!(keys, vec![api], "{flavor:?}");
    });
}

#[test]
fn policies_reach_every_primary_and_a_missing_one_is_found() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 1);
        let primaries = cluster.primaries();
        let replicas: Vec<&Server> = primaries.iter().map(|p| cluster.replica_of(p)).collect();

        // Restricted to the primaries, every one answers OK.
        let output = cluster.call_on_primaries(&["RL.POLICY", "SET", "api", "5", "1m"]);
        for primary in &primaries {
            let ok = format!("127.0.0.1:{}: OK", primary.port());
            assert!(output.contains(&ok), "{flavor:?}: {output}");
        }
        // Sent to every node (the plain `--cluster call`), the primaries answer OK and the
        // replicas READONLY: they get it through replication all the same.
        let output = cluster.call(
            &["RL.POLICY", "SET", "login", "3", "15m", "ALGO", "gcra"],
            None,
        );
        for primary in &primaries {
            let ok = format!("127.0.0.1:{}: OK", primary.port());
            assert!(output.contains(&ok), "{flavor:?}: {output}");
        }
        for replica in &replicas {
            let refused = format!("127.0.0.1:{}: READONLY", replica.port());
            assert!(output.contains(&refused), "{flavor:?}: {output}");
        }

        let api: Vec<String> = ["5", "1m", "ALGO", "fixed", "MODE", "enforce"]
            .map(String::from)
            .to_vec();
        let login = policy_get(primaries[0], "login").expect("login on the first primary");
        for node in primaries.iter().chain(&replicas) {
            wait_until(Duration::from_secs(10), "policies on every node", || {
                policy_get(node, "api").as_ref() == Some(&api)
                    && policy_get(node, "login").as_ref() == Some(&login)
            });
        }
        assert_eq!(cluster.policies_missing(), vec![], "{flavor:?}");

        // Calls naming the policy work on every shard, through the cluster client.
        stay_clear_of_window_edges(primaries[0], MINUTE_MS, 5_000);
        let mut client = cluster.client();
        for primary in &primaries {
            let key = format!("rl:{{{}}}:GET:/home", cluster.tag_on(primary, "ip"));
            for remaining in (0..5).rev() {
                let reply = rl(&mut client, "RL.HIT", &key, &["POLICY", "api"]);
                assert_eq!((reply.allowed, reply.remaining), (true, remaining));
            }
            assert!(!rl(&mut client, "RL.HIT", &key, &["POLICY", "api"]).allowed);
        }

        // A policy deleted on one primary is found missing there, and calls naming it fail
        // on that shard only; setting it everywhere again repairs it.
        let lacking = primaries[1];
        let deleted: i64 = redis::cmd("RL.POLICY")
            .arg("DEL")
            .arg("api")
            .query(&mut lacking.conn())
            .expect("RL.POLICY DEL");
        assert_eq!(deleted, 1, "{flavor:?}");
        assert_eq!(
            cluster.policies_missing(),
            vec![(lacking.port(), "api".to_string())],
            "{flavor:?}"
        );
        let key = format!("rl:{{{}}}:x", cluster.tag_on(lacking, "ip"));
        let error = error_of(
            &mut client,
            redis::cmd("RL.HIT").arg(&key).arg(&["POLICY", "api"]),
        );
        assert_eq!(error, "ERR no such policy 'api'", "{flavor:?}");
        let replica = cluster.replica_of(lacking);
        wait_until(Duration::from_secs(10), "the DEL on the replica", || {
            policy_get(replica, "api").is_none()
        });

        cluster.call_on_primaries(&["RL.POLICY", "SET", "api", "5", "1m"]);
        assert_eq!(cluster.policies_missing(), vec![], "{flavor:?}");
        assert!(rl(&mut client, "RL.HIT", &key, &["POLICY", "api"]).allowed);

        // The trap the check is for: a cluster client routes a keyless command by its first
        // argument, so `RL.POLICY SET` sent through it reaches one primary only (the owner
        // of the slot of "SET"), and the others lack the policy.
        let reply: String = redis::cmd("RL.POLICY")
            .arg(&["SET", "via-client", "5", "1m"])
            .query(&mut client)
            .expect("RL.POLICY SET through the cluster client");
        assert_eq!(reply, "OK", "{flavor:?}");
        let reached = cluster.owner_of("SET").port();
        let lacking: Vec<(u16, String)> = primaries
            .iter()
            .filter(|p| p.port() != reached)
            .map(|p| (p.port(), "via-client".to_string()))
            .collect();
        assert_eq!(cluster.policies_missing(), lacking, "{flavor:?}");
        cluster.call_on_primaries(&["RL.POLICY", "DEL", "via-client"]);
        assert_eq!(cluster.policies_missing(), vec![], "{flavor:?}");

        // A primary whose definition differs from the others' is reported too.
        let differing = primaries[2];
        redis::cmd("RL.POLICY")
            .arg(&["SET", "api", "6", "1m"])
            .exec(&mut differing.conn())
            .expect("RL.POLICY SET");
        assert_eq!(
            cluster.policies_missing(),
            vec![(differing.port(), "api (differs)".to_string())],
            "{flavor:?}"
        );
    });
}

/// A state key of every kind: its name under a hash tag, the RL.HIT arguments, how many
/// hits it gets, and whether that fills it.
const STATES: [(&str, &[&str], usize, bool); 8] = [
    ("fixed", &["10", "1h"], 4, false),
    ("full", &["3", "1h"], 3, true),
    ("sliding", &["10", "1h", "ALGO", "sliding"], 3, false),
    ("log", &["10", "1h", "ALGO", "log"], 3, false),
    ("token", &["5", "1h", "ALGO", "token"], 2, false),
    ("gcra", &["2", "1h", "ALGO", "gcra"], 2, true),
    ("tiers", &["10", "1m", "100", "1h"], 2, false),
    ("policy", &["POLICY", "api"], 3, true),
];

/// redis-cell's 2 per hour, bursts of 2: two hits fill it.
const CELL: [&str; 3] = ["1", "2", "3600"];

/// What a key held on the primary before the failover.
struct Recorded {
    key: String,
    bytes: Option<Vec<u8>>,
    expiry_ms: i64,
}

/// Writes every kind of state under `tag` on `primary` (and a CL.THROTTLE key), waits until
/// its replica has it, and returns what the primary holds.
fn write_states(primary: &Server, tag: &str) -> Vec<Recorded> {
    let mut con = primary.conn();
    let mut keys = Vec::new();
    for (name, args, hits, _) in STATES {
        let key = format!("rl:{{{tag}}}:{name}");
        for _ in 0..hits {
            assert!(rl(&mut con, "RL.HIT", &key, args).allowed, "{key}");
        }
        keys.push(key);
    }
    let cell = format!("rl:{{{tag}}}:cell");
    for _ in 0..2 {
        assert_eq!(throttle(&mut con, &cell, &CELL)[0], 0, "{cell}");
    }
    keys.push(cell);
    wait_for_replicas(&mut con, 1);
    keys.into_iter()
        .map(|key| {
            let bytes = get_bytes(&mut con, &key);
            let expiry_ms = pexpiretime(&mut con, &key);
            assert!(
                bytes.is_some() && expiry_ms > 0,
                "{key} has state and expiry"
            );
            Recorded {
                key,
                bytes,
                expiry_ms,
            }
        })
        .collect()
}

/// Checks that `server` holds exactly the recorded bytes and expiries (reading on a replica
/// too: `READONLY`).
fn assert_holds(server: &Server, recorded: &[Recorded], what: &str) {
    let mut con = server.conn();
    redis::cmd("READONLY").exec(&mut con).expect("READONLY");
    for r in recorded {
        assert_eq!(
            get_bytes(&mut con, &r.key),
            r.bytes,
            "{what}: bytes of {}",
            r.key
        );
        assert_eq!(
            pexpiretime(&mut con, &r.key),
            r.expiry_ms,
            "{what}: expiry of {}",
            r.key
        );
    }
}

/// Checks that the full keys under `tag` are denied on `server` and the others still allow.
fn assert_enforces(server: &Server, tag: &str, what: &str) {
    let mut con = server.conn();
    for (name, args, _, full) in STATES {
        let key = format!("rl:{{{tag}}}:{name}");
        let reply = rl(&mut con, "RL.HIT", &key, args);
        assert_eq!(reply.allowed, !full, "{what}: {key} {reply:?}");
    }
    let cell = format!("rl:{{{tag}}}:cell");
    assert_eq!(
        throttle(&mut con, &cell, &CELL)[0],
        1,
        "{what}: {cell} limited"
    );
}

/// What one load client saw.
#[derive(Debug, Default)]
struct Load {
    /// Allowed hits per key, as the client saw them.
    allowed: Vec<u64>,
    /// Hits sent (each answered, redirected or left without a reply).
    attempts: u64,
    /// The port a `MOVED` sent the client to, when it followed one.
    redirected_to: Option<u16>,
    /// The key of the hit whose reply never came (the connection broke).
    unanswered: Option<usize>,
    /// Any other error.
    errors: Vec<String>,
}

/// Hits `keys` round robin (`RL.HIT key 1000000 1h`) on `port` until `stop`, an error, or
/// `max_hits`; follows one `MOVED` when `follow_moved`.
fn hammer(
    port: u16,
    keys: Vec<String>,
    follow_moved: bool,
    stop: Arc<AtomicBool>,
    progress: Arc<AtomicU64>,
    max_hits: u64,
) -> JoinHandle<Load> {
    std::thread::spawn(move || {
        let mut con = connect(port);
        let mut load = Load {
            allowed: vec![0; keys.len()],
            ..Load::default()
        };
        while !stop.load(Ordering::Relaxed) && load.attempts < max_hits {
            let at = (load.attempts % keys.len() as u64) as usize;
            load.attempts += 1;
            progress.fetch_add(1, Ordering::Relaxed);
            let reply: redis::RedisResult<Vec<i64>> = redis::cmd("RL.HIT")
                .arg(&keys[at])
                .arg(UNREACHED)
                .arg("1h")
                .query(&mut con);
            match reply {
                Ok(values) => {
                    let reply = decode_reply(&values);
                    assert!(reply.allowed, "{} is never full", keys[at]);
                    load.allowed[at] += 1;
                }
                Err(e) if follow_moved && load.redirected_to.is_none() => {
                    let Some((address, _)) = e.redirect_node() else {
                        load.errors.push(e.to_string());
                        break;
                    };
                    let to: u16 = address
                        .rsplit(':')
                        .next()
                        .and_then(|p| p.parse().ok())
                        .expect("MOVED names host:port");
                    load.redirected_to = Some(to);
                    con = connect(to);
                }
                Err(e) if e.is_io_error() || e.is_connection_dropped() => {
                    load.unanswered = Some(at);
                    break;
                }
                Err(e) => {
                    load.errors.push(e.to_string());
                    break;
                }
            }
        }
        load
    })
}

/// Waits until `progress` reached `at_least` (bounded), or until one of `clients` has
/// stopped on its own: its `Load` then says why (an error, a reply that never came), which
/// the caller's assertions show, rather than a bare timeout.
fn wait_for_progress(progress: &AtomicU64, at_least: u64, clients: &[&JoinHandle<Load>]) {
    wait_until(Duration::from_secs(20), "load progress", || {
        progress.load(Ordering::Relaxed) >= at_least || clients.iter().any(|c| c.is_finished())
    });
}

#[test]
fn failover_keeps_counters_expiries_and_limits() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 1);
        cluster.call_on_primaries(&["RL.POLICY", "SET", "api", "3", "1h"]);
        let primaries = cluster.primaries();
        stay_clear_of_window_edges(primaries[0], HOUR_MS, 60_000);
        for node in cluster.servers() {
            wait_until(Duration::from_secs(10), "the policy on every node", || {
                policy_get(node, "api").is_some()
            });
        }

        // State of every kind on every shard, replicated, recorded on the primaries.
        let shards: Vec<(u16, u16, String, Vec<Recorded>)> = primaries
            .iter()
            .map(|primary| {
                let tag = cluster.tag_on(primary, "shard");
                let recorded = write_states(primary, &tag);
                let replica = cluster.replica_of(primary);
                assert_holds(replica, &recorded, "replica before the failover");
                (primary.port(), replica.port(), tag, recorded)
            })
            .collect();
        let (old_port, new_port, tag, recorded) = &shards[0];
        let (old_port, new_port) = (*old_port, *new_port);

        // Load on that shard while its replica takes over.
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(AtomicU64::new(0));
        let load_keys: Vec<String> = (0..4).map(|i| format!("rl:{{{tag}}}:load{i}")).collect();
        let client = hammer(
            old_port,
            load_keys.clone(),
            true,
            stop.clone(),
            progress.clone(),
            200_000,
        );
        wait_for_progress(&progress, 300, &[&client]);
        let started = Instant::now();
        redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .exec(&mut cluster.server(new_port).conn())
            .expect("CLUSTER FAILOVER");
        wait_until(Duration::from_secs(30), "the replica promoted", || {
            role(cluster.server(new_port)) == "master"
        });
        cluster.wait_converged();
        let took = started.elapsed();
        // Some load on the promoted node too, then stop.
        let at_converged = progress.load(Ordering::Relaxed);
        wait_for_progress(&progress, at_converged + 300, &[&client]);
        stop.store(true, Ordering::Relaxed);
        let load = client.join().expect("the load client");

        let promoted = cluster.server(new_port);
        let demoted = cluster.server(old_port);
        assert_eq!(role(demoted), "slave", "{flavor:?}");
        assert_eq!(
            cluster.replica_of(promoted).port(),
            old_port,
            "{flavor:?}: the old primary follows the new one"
        );

        // The promoted node holds what the old primary had, bytes and expiries, and every
        // other shard is untouched.
        assert_holds(promoted, recorded, "promoted replica");
        for (primary, _, _, recorded) in &shards[1..] {
            assert_holds(cluster.server(*primary), recorded, "other shard");
        }

        // A manual failover loses nothing: the client was redirected, and every hit it saw
        // allowed (on either node) is counted on the promoted node, with its expiry.
        assert_eq!(load.errors, Vec::<String>::new(), "{flavor:?}");
        assert_eq!(load.unanswered, None, "{flavor:?}");
        assert_eq!(load.redirected_to, Some(new_port), "{flavor:?}");
        let mut con = promoted.conn();
        for (key, allowed) in load_keys.iter().zip(&load.allowed) {
            assert_eq!(count_on(&mut con, key), *allowed, "{flavor:?} {key}");
            assert!(pexpiretime(&mut con, key) > 0, "{flavor:?} {key} expires");
        }
        let allowed: u64 = load.allowed.iter().sum();
        println!(
            "[{flavor:?}] CLUSTER FAILOVER under load: {} hits sent (one answered MOVED), \
             {allowed} allowed, all of them on the promoted node; promoted and converged in \
             {} ms",
            load.attempts,
            took.as_millis()
        );

        // Limits still hold on the promoted node, policies are there, and the old primary
        // now redirects to it.
        assert_eq!(
            policy_get(promoted, "api"),
            Some(
                ["3", "1h", "ALGO", "fixed", "MODE", "enforce"]
                    .map(String::from)
                    .to_vec()
            ),
            "{flavor:?}"
        );
        assert_enforces(promoted, tag, &format!("{flavor:?} promoted"));
        let slot = cluster.keyslot(format!("rl:{{{tag}}}:full").as_str());
        let error = error_of(
            &mut demoted.conn(),
            redis::cmd("RL.HIT")
                .arg(format!("rl:{{{tag}}}:full"))
                .arg(&["3", "1h"]),
        );
        assert_eq!(
            error,
            format!("MOVED {slot} 127.0.0.1:{new_port}"),
            "{flavor:?}"
        );
        let denied = rl(
            &mut cluster.client(),
            "RL.HIT",
            &format!("rl:{{{tag}}}:full"),
            &["3", "1h"],
        );
        assert!(
            !denied.allowed,
            "{flavor:?}: the cluster client reaches the new owner"
        );
    });
}

#[test]
fn forced_failover_with_the_primary_killed_loses_at_most_the_replication_lag() {
    const CLIENTS: usize = 4;
    const KEYS_PER_CLIENT: usize = 4;
    each_flavor(|flavor| {
        let mut cluster = Cluster::start(flavor, 3, 1);
        cluster.call_on_primaries(&["RL.POLICY", "SET", "api", "3", "1h"]);
        let (old_port, new_port, tag, full) = {
            let primary = cluster.primaries()[0];
            stay_clear_of_window_edges(primary, HOUR_MS, 60_000);
            let replica = cluster.replica_of(primary);
            wait_until(Duration::from_secs(10), "the policy on the replica", || {
                policy_get(replica, "api").is_some()
            });
            let tag = cluster.tag_on(primary, "shard");
            // A full key, replicated before anything else happens.
            let full = format!("rl:{{{tag}}}:full");
            let mut con = primary.conn();
            for _ in 0..3 {
                assert!(rl(&mut con, "RL.HIT", &full, &["3", "1h"]).allowed);
            }
            wait_for_replicas(&mut con, 1);
            (primary.port(), replica.port(), tag, full)
        };

        // Clients hammer the shard, each on its own keys and connection.
        let stop = Arc::new(AtomicBool::new(false));
        let progress = Arc::new(AtomicU64::new(0));
        let keys: Vec<Vec<String>> = (0..CLIENTS)
            .map(|c| {
                (0..KEYS_PER_CLIENT)
                    .map(|k| format!("rl:{{{tag}}}:load:{c}:{k}"))
                    .collect()
            })
            .collect();
        let clients: Vec<JoinHandle<Load>> = keys
            .iter()
            .map(|keys| {
                hammer(
                    old_port,
                    keys.clone(),
                    false,
                    stop.clone(),
                    progress.clone(),
                    100_000,
                )
            })
            .collect();
        wait_for_progress(&progress, 3_000, &clients.iter().collect::<Vec<_>>());

        // Kill the primary mid-load, then make its replica take over without it.
        let mut on_replica = connect(new_port);
        let started = Instant::now();
        cluster.kill(old_port);
        redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .arg("FORCE")
            .exec(&mut on_replica)
            .expect("CLUSTER FAILOVER FORCE");
        stop.store(true, Ordering::Relaxed);
        let loads: Vec<Load> = clients
            .into_iter()
            .map(|c| c.join().expect("a load client"))
            .collect();
        wait_until(Duration::from_secs(30), "the replica promoted", || {
            role(cluster.server(new_port)) == "master"
        });
        cluster.wait_converged();
        let took = started.elapsed();

        // Compare what the clients saw allowed with what the promoted node counts.
        let promoted = cluster.server(new_port);
        let mut con = promoted.conn();
        let (mut attempts, mut allowed, mut counted, mut lost) = (0, 0, 0, 0);
        let (mut unanswered, mut unanswered_counted) = (0, 0);
        for (load, keys) in loads.iter().zip(&keys) {
            assert_eq!(load.errors, Vec::<String>::new(), "{flavor:?}");
            attempts += load.attempts;
            unanswered += u64::from(load.unanswered.is_some());
            for (at, key) in keys.iter().enumerate() {
                let seen = load.allowed[at];
                let held = count_on(&mut con, key);
                // A hit whose reply never came may or may not have been counted and
                // replicated; nothing else may be counted beyond what clients were allowed.
                let in_flight = u64::from(load.unanswered == Some(at));
                assert!(
                    held <= seen + in_flight,
                    "{flavor:?} {key}: the new primary counts {held}, clients saw {seen} allowed"
                );
                if held > 0 {
                    assert!(pexpiretime(&mut con, key) > 0, "{flavor:?} {key} expires");
                }
                allowed += seen;
                counted += held;
                lost += seen.saturating_sub(held);
                unanswered_counted += held.saturating_sub(seen);
            }
        }
        println!(
            "[{flavor:?}] FORCED FAILOVER, primary SIGKILLed under load ({CLIENTS} clients x \
             {KEYS_PER_CLIENT} keys): {attempts} hits sent, {allowed} acknowledged as allowed by \
             the old primary, {counted} counted on the promoted replica: LOST {lost} \
             acknowledged hits ({:.4}% of allowed); {unanswered} hits left without a reply, \
             {unanswered_counted} of them counted anyway; promoted and converged in {} ms",
            100.0 * lost as f64 / allowed.max(1) as f64,
            took.as_millis()
        );
        assert!(allowed > 0, "{flavor:?}: the clients got hits through");

        // The new primary serves and enforces: the full key stays denied, the policy is
        // there and limits, and the counters go on from what it holds.
        assert!(
            !rl(&mut con, "RL.HIT", &full, &["3", "1h"]).allowed,
            "{flavor:?}"
        );
        let fresh = format!("rl:{{{tag}}}:fresh");
        for remaining in [2, 1, 0] {
            let reply = rl(&mut con, "RL.HIT", &fresh, &["POLICY", "api"]);
            assert_eq!(
                (reply.allowed, reply.remaining),
                (true, remaining),
                "{flavor:?}"
            );
        }
        assert!(!rl(&mut con, "RL.HIT", &fresh, &["POLICY", "api"]).allowed);
        let key = &keys[0][0];
        let held = count_on(&mut con, key) as i64;
        let reply = rl(&mut con, "RL.HIT", key, &[UNREACHED, "1h"]);
        assert_eq!(
            (reply.allowed, reply.remaining),
            (true, UNREACHED_LIMIT - held - 1),
            "{flavor:?}"
        );
        let denied = rl(&mut cluster.client(), "RL.HIT", &full, &["3", "1h"]);
        assert!(
            !denied.allowed,
            "{flavor:?}: the cluster client reaches the new owner"
        );
        assert_eq!(cluster.policies_missing(), vec![], "{flavor:?}");
    });
}

/// `command numkeys keys... SPEC rule ...` with every key on the rule `rule`.
fn several_cmd(command: &str, keys: &[&str], rule: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(command);
    cmd.arg(keys.len()).arg(keys);
    for _ in keys {
        cmd.arg("SPEC").arg(rule);
    }
    cmd
}

#[test]
fn several_keys_route_by_their_slot_and_keys_in_two_slots_answer_crossslot() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 0);
        let primaries = cluster.primaries();
        stay_clear_of_window_edges(primaries[0], HOUR_MS, 60_000);
        // Keys sharing a hash tag: the owner answers, every other primary answers MOVED
        // to it, for each of the three commands.
        let owner = primaries[1];
        let tag = cluster.tag_on(owner, "several");
        let keys = [format!("rl:{{{tag}}}:user"), format!("rl:{{{tag}}}:ip")];
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let slot = cluster.keyslot(keys[0]);
        let moved = format!("MOVED {slot} 127.0.0.1:{}", owner.port());
        for other in primaries.iter().filter(|p| p.port() != owner.port()) {
            for command in ["RL.MHIT", "RL.MPEEK", "RL.MREFUND"] {
                let cmd = several_cmd(command, &keys, &["5", "1h"]);
                let error = error_of(&mut other.conn(), &cmd);
                assert_eq!(error, moved, "{flavor:?} {command} on {}", other.port());
            }
        }
        let mut con = owner.conn();
        let (allowed, binding, _): (i64, i64, Vec<Vec<i64>>) =
            several_cmd("RL.MHIT", &keys, &["5", "1h"])
                .query(&mut con)
                .expect("RL.MHIT on the owner");
        assert_eq!((allowed, binding), (1, 0), "{flavor:?}");
        assert_eq!(count_on(&mut con, keys[1]), 1, "{flavor:?}");
        // Keys in two slots: CROSSSLOT from every node, owner or not, and nothing written.
        let elsewhere = format!("rl:{{{}}}:ip", cluster.tag_on(primaries[2], "other"));
        let split = [keys[0], elsewhere.as_str()];
        for node in &primaries {
            for command in ["RL.MHIT", "RL.MPEEK", "RL.MREFUND"] {
                let cmd = several_cmd(command, &split, &["5", "1h"]);
                let error = error_of(&mut node.conn(), &cmd);
                assert!(
                    error.starts_with("CROSSSLOT"),
                    "{flavor:?} {command}: {error}"
                );
            }
        }
        assert_eq!(count_on(&mut con, keys[0]), 1, "{flavor:?}");
        let mut on_other = primaries[2].conn();
        let dbsize: i64 = redis::cmd("DBSIZE").query(&mut on_other).expect("DBSIZE");
        assert_eq!(dbsize, 0, "{flavor:?}");
    });
}
