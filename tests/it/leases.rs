//! Concurrency leases on real Redis 7.0 and Valkey 8.1 servers:
//! RL.ACQUIRE, RL.RELEASE, RL.RENEW and RL.LEASES. Never more than `max` held, even with 8
//! clients racing; a lease frees at its absolute expiry (the key's PEXPIRETIME), checked
//! against the server's clock, never against a duration measured here; release and renew
//! by id only; a wrong id changes nothing; the replies in RESP2 and RESP3; the memory per
//! lease; the tiers in the same key; Cluster routing.

use testkit::cluster::Cluster;
use testkit::*;

use redis::{Connection, ConnectionLike, Value};
use std::collections::HashSet;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

/// RL.ACQUIRE's RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Acquired {
    acquired: bool,
    max: i64,
    free: i64,
    id: Option<String>,
    ttl_ms: i64,
    retry_after_ms: i64,
}

fn acquire(con: &mut impl ConnectionLike, key: &str, args: &[&str]) -> Acquired {
    let reply: Value = redis::cmd("RL.ACQUIRE")
        .arg(key)
        .arg(args)
        .query(con)
        .unwrap_or_else(|e| panic!("RL.ACQUIRE {key} {args:?}: {e}"));
    decode_acquired(&reply)
}

fn decode_acquired(reply: &Value) -> Acquired {
    let Value::Array(fields) = reply else {
        panic!("RL.ACQUIRE replied {reply:?}");
    };
    let int = |i: usize| match fields.get(i) {
        Some(Value::Int(n)) => *n,
        other => panic!("field {i} of {fields:?} is {other:?}"),
    };
    let id = match fields.get(3) {
        Some(Value::BulkString(bytes)) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Some(Value::Nil) => None,
        other => panic!("id is {other:?}"),
    };
    assert_eq!(fields.len(), 6, "{fields:?}");
    Acquired {
        acquired: int(0) == 1,
        max: int(1),
        free: int(2),
        id,
        ttl_ms: int(4),
        retry_after_ms: int(5),
    }
}

/// RL.LEASES's RESP2 reply: `[held, max, free, retry_after_ms, reset_after_ms]`.
fn leases(con: &mut impl ConnectionLike, key: &str, max: i64) -> [i64; 5] {
    let values: Vec<i64> = redis::cmd("RL.LEASES")
        .arg(key)
        .arg(max)
        .query(con)
        .unwrap_or_else(|e| panic!("RL.LEASES {key}: {e}"));
    values.try_into().expect("five integers")
}

fn held(con: &mut impl ConnectionLike, key: &str, max: i64) -> i64 {
    leases(con, key, max)[0]
}

fn int(con: &mut impl ConnectionLike, args: &[&str]) -> i64 {
    redis::cmd(args[0])
        .arg(&args[1..])
        .query(con)
        .unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn dump(con: &mut Connection, key: &str) -> (Option<Vec<u8>>, i64) {
    let value: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(con).expect("DUMP");
    (value, pexpiretime(con, key))
}

#[test]
fn eight_clients_racing_for_three_never_hold_more_than_three() {
    const CLIENTS: usize = 8;
    const ROUNDS: usize = 150;
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let key = "rl:lease:race";
        // Everyone at once, nobody releasing: exactly three win.
        let barrier = Arc::new(Barrier::new(CLIENTS));
        let first: Vec<Acquired> = std::thread::scope(|scope| {
            let handles: Vec<_> = (0..CLIENTS)
                .map(|_| {
                    let mut con = server.conn();
                    let barrier = barrier.clone();
                    scope.spawn(move || {
                        barrier.wait();
                        acquire(&mut con, key, &["3", "1h"])
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("client"))
                .collect()
        });
        let won: Vec<&Acquired> = first.iter().filter(|a| a.acquired).collect();
        assert_eq!(won.len(), 3, "{flavor:?}: {first:?}");
        assert!(first.iter().all(|a| a.max == 3), "{flavor:?}");
        let ids: HashSet<&str> = won.iter().filter_map(|a| a.id.as_deref()).collect();
        assert_eq!(ids.len(), 3, "{flavor:?}: three distinct ids");
        let mut con = server.conn();
        assert_eq!(leases(&mut con, key, 3)[..3], [3, 3, 0], "{flavor:?}");
        for id in ids {
            assert_eq!(int(&mut con, &["RL.RELEASE", key, id]), 1, "{flavor:?}");
        }
        assert_eq!(
            int(&mut con, &["EXISTS", key]),
            0,
            "{flavor:?}: last release"
        );

        // Then take, check, release in a loop: the holders a client counts (raised after
        // its acquire answered, lowered before its release is sent) are never more than
        // the server holds, and RL.LEASES never says more than three.
        let holding = Arc::new(AtomicI64::new(0));
        let most = Arc::new(AtomicI64::new(0));
        let granted = Arc::new(AtomicI64::new(0));
        std::thread::scope(|scope| {
            for client in 0..CLIENTS {
                let mut con = server.conn();
                let (holding, most, granted) = (holding.clone(), most.clone(), granted.clone());
                scope.spawn(move || {
                    for round in 0..ROUNDS {
                        let id = format!("c{client}-{round}");
                        let taken = acquire(&mut con, key, &["3", "1h", "ID", &id]);
                        let seen = held(&mut con, key, 3);
                        assert!(seen <= 3, "RL.LEASES says {seen} held");
                        if !taken.acquired {
                            assert!(taken.retry_after_ms > 0, "{taken:?}");
                            continue;
                        }
                        assert_eq!(taken.id.as_deref(), Some(id.as_str()));
                        granted.fetch_add(1, Ordering::SeqCst);
                        let now = holding.fetch_add(1, Ordering::SeqCst) + 1;
                        most.fetch_max(now, Ordering::SeqCst);
                        holding.fetch_sub(1, Ordering::SeqCst);
                        let released = int(&mut con, &["RL.RELEASE", key, &id]);
                        assert_eq!(released, 1, "{id} was held");
                    }
                });
            }
        });
        let most = most.load(Ordering::SeqCst);
        assert!((1..=3).contains(&most), "{flavor:?}: {most} held at once");
        assert!(
            granted.load(Ordering::SeqCst) >= ROUNDS as i64,
            "{flavor:?}"
        );
        assert_eq!(held(&mut con, key, 3), 0, "{flavor:?}");
    });
}

/// `TIME`, `RL.LEASES key 1`, `TIME` in one transaction: the lease command's clock reading
/// lies between the two (ms, floored as the module's clock is).
fn leases_between_times(con: &mut Connection, key: &str) -> (i64, i64, i64) {
    let ((s1, us1), values, (s2, us2)): ((i64, i64), Vec<i64>, (i64, i64)) = redis::pipe()
        .atomic()
        .cmd("TIME")
        .cmd("RL.LEASES")
        .arg(key)
        .arg(1)
        .cmd("TIME")
        .query(con)
        .expect("MULTI TIME RL.LEASES TIME");
    (
        s1 * 1_000 + us1 / 1_000,
        values[0],
        s2 * 1_000 + us2 / 1_000,
    )
}

#[test]
fn a_lease_is_held_until_its_absolute_expiry_and_free_from_it() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let key = "rl:lease:expiry";
        let first = acquire(&mut con, key, &["1", "200ms", "ID", "crashed-client"]);
        assert!(first.acquired, "{flavor:?}");
        assert_eq!(first.ttl_ms, 200);
        let ends = pexpiretime(&mut con, key);
        assert!(ends > 0, "{flavor:?}: the key expires with its lease");
        let (mut saw_held, mut saw_free) = (false, false);
        wait_until(Duration::from_secs(20), "the lease to expire", || {
            let (before, held, after) = leases_between_times(&mut con, key);
            if after < ends {
                assert_eq!(held, 1, "{flavor:?}: freed before {ends} (read by {after})");
                saw_held = true;
            }
            if before >= ends {
                assert_eq!(held, 0, "{flavor:?}: still held at {before} >= {ends}");
                saw_free = true;
            }
            saw_free
        });
        assert!(saw_held, "{flavor:?}: never saw the lease held");
        // The slot is free for another client, and the crashed client's id is gone.
        assert!(acquire(&mut con, key, &["1", "1h"]).acquired, "{flavor:?}");
        assert_eq!(
            int(&mut con, &["RL.RELEASE", key, "crashed-client"]),
            0,
            "{flavor:?}"
        );
        assert_eq!(
            int(&mut con, &["RL.RENEW", key, "crashed-client", "1h"]),
            0,
            "{flavor:?}"
        );
    });
}

#[test]
fn release_and_renew_act_by_id_only_and_a_wrong_id_changes_nothing() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let key = "rl:lease:ids";
        let short = acquire(&mut con, key, &["5", "50s", "ID", "short"]);
        assert!(short.acquired);
        let ends_short = pexpiretime(&mut con, key);
        assert!(acquire(&mut con, key, &["5", "100s", "ID", "long"]).acquired);
        let ends_long = pexpiretime(&mut con, key);
        assert!(
            ends_long > ends_short,
            "{flavor:?}: the key ends with its last lease"
        );
        let generated = acquire(&mut con, key, &["5", "10s"]);
        let generated_id = generated.id.clone().expect("an id");
        assert_eq!(generated_id.len(), 32, "{flavor:?}: {generated_id}");
        assert!(generated_id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        let before = dump(&mut con, key);
        let upper = generated_id.to_ascii_uppercase();
        for wrong in [
            "shor",
            "short ",
            "SHORT",
            "long\0",
            &upper,
            &generated_id[..31],
        ] {
            assert_eq!(int(&mut con, &["RL.RELEASE", key, wrong]), 0, "{wrong:?}");
            assert_eq!(
                int(&mut con, &["RL.RENEW", key, wrong, "1h"]),
                0,
                "{wrong:?}"
            );
        }
        assert_eq!(dump(&mut con, key), before, "{flavor:?}: a wrong id wrote");
        assert_eq!(held(&mut con, key, 5), 3);

        // Renewing extends (the key's expiry moves with it), never shortens.
        assert_eq!(int(&mut con, &["RL.RENEW", key, "short", "1s"]), 1);
        assert_eq!(pexpiretime(&mut con, key), ends_long, "{flavor:?}");
        assert_eq!(int(&mut con, &["RL.RENEW", key, "short", "1h"]), 1);
        let renewed = pexpiretime(&mut con, key);
        assert!(renewed > ends_long + 3_000_000, "{flavor:?}: {renewed}");
        assert_eq!(int(&mut con, &["RL.RELEASE", key, "short"]), 1);
        assert_eq!(pexpiretime(&mut con, key), ends_long, "{flavor:?}");
        assert_eq!(int(&mut con, &["RL.RELEASE", key, "short"]), 0, "only once");
        assert_eq!(int(&mut con, &["RL.RELEASE", key, &generated_id]), 1);
        assert_eq!(int(&mut con, &["RL.RELEASE", key, "long"]), 1);
        assert_eq!(int(&mut con, &["EXISTS", key]), 0, "{flavor:?}");
        // Nothing to release or renew on a missing key: 0, and still no key.
        assert_eq!(int(&mut con, &["RL.RELEASE", key, "long"]), 0);
        assert_eq!(int(&mut con, &["RL.RENEW", key, "long", "1s"]), 0);
        assert_eq!(int(&mut con, &["EXISTS", key]), 0, "{flavor:?}");
    });
}

#[test]
fn a_full_key_says_when_the_earliest_lease_ends() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let key = "rl:lease:full";
        assert!(acquire(&mut con, key, &["2", "1h", "ID", "a"]).acquired);
        let second = acquire(&mut con, key, &["2", "30m", "ID", "b"]);
        assert_eq!((second.acquired, second.free), (true, 0));
        let denied = acquire(&mut con, key, &["2", "1h", "ID", "c"]);
        assert!(!denied.acquired, "{flavor:?}");
        assert_eq!(
            (denied.free, denied.id.as_deref(), denied.ttl_ms),
            (0, None, 0)
        );
        assert!(
            (1_790_000..=1_800_000).contains(&denied.retry_after_ms),
            "{flavor:?}: b ends in 30m: {denied:?}"
        );
        let [held, max, free, retry, reset] = leases(&mut con, key, 2);
        assert_eq!((held, max, free), (2, 2, 0));
        assert!(
            retry <= denied.retry_after_ms && retry > 1_790_000,
            "{retry}"
        );
        assert!(reset > 3_590_000, "a ends in 1h: {reset}");
        // A larger max on the same key: room again.
        assert_eq!(leases(&mut con, key, 3)[2], 1);
        assert!(acquire(&mut con, key, &["3", "1h", "ID", "c"]).acquired);
    });
}

#[test]
fn replies_are_maps_in_resp3() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn_resp3();
        let reply: Value = redis::cmd("RL.ACQUIRE")
            .arg(&["rl:lease:resp3", "2", "10s", "ID", "x"])
            .query(&mut con)
            .expect("RL.ACQUIRE");
        let Value::Map(pairs) = reply else {
            panic!("{flavor:?}: {reply:?}");
        };
        let names: Vec<String> = pairs
            .iter()
            .map(|(name, _)| match name {
                Value::SimpleString(s) => s.clone(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            names,
            ["acquired", "max", "free", "id", "ttl_ms", "retry_after_ms"],
            "{flavor:?}"
        );
        assert_eq!(pairs[3].1, Value::BulkString(b"x".to_vec()));
        assert_eq!(pairs[4].1, Value::Int(10_000));
        let reply: Value = redis::cmd("RL.LEASES")
            .arg(&["rl:lease:resp3", "2"])
            .query(&mut con)
            .expect("RL.LEASES");
        let Value::Map(pairs) = reply else {
            panic!("{flavor:?}: {reply:?}");
        };
        assert_eq!(pairs.len(), 5);
        assert_eq!(pairs[0].0, Value::SimpleString("held".into()));
        assert_eq!(pairs[0].1, Value::Int(1));
    });
}

#[test]
fn tiers_count_in_the_same_key_all_or_nothing() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let key = "rl:lease:tiers";
        // At most 2 at once, and at most 3 acquisitions per hour.
        let args = |id: &'static str| ["2", "10m", "3", "1h", "ALGO", "sliding", "ID", id];
        assert!(acquire(&mut con, key, &args("a")).acquired);
        assert!(acquire(&mut con, key, &args("b")).acquired);
        assert_eq!(int(&mut con, &["DBSIZE"]), 1, "{flavor:?}: one key");
        // Full: the tier is not charged.
        let full = acquire(&mut con, key, &args("c"));
        assert!(!full.acquired);
        assert!(
            full.retry_after_ms > 590_000,
            "the earliest lease: {full:?}"
        );
        assert_eq!(int(&mut con, &["RL.RELEASE", key, "a"]), 1);
        assert!(
            acquire(&mut con, key, &args("c")).acquired,
            "{flavor:?}: 3rd of 3"
        );
        assert_eq!(int(&mut con, &["RL.RELEASE", key, "b"]), 1);
        assert_eq!(int(&mut con, &["RL.RELEASE", key, "c"]), 1);
        // A slot is free but the hour's tier is spent: denied with the tier's wait, and
        // nothing written.
        let before = dump(&mut con, key);
        let denied = acquire(&mut con, key, &args("d"));
        assert!(!denied.acquired, "{flavor:?}: {denied:?}");
        assert_eq!(denied.free, 2);
        assert!(denied.retry_after_ms > 600_000, "{flavor:?}: {denied:?}");
        assert_eq!(dump(&mut con, key), before, "{flavor:?}");
        // With no lease left the key lives on for its tier state.
        assert_eq!(held(&mut con, key, 2), 0);
        assert!(pexpiretime(&mut con, key) > server_ms(&mut con) + 600_000);
        // A cost above the limit can never pass.
        let never = acquire(
            &mut con,
            key,
            &["2", "10m", "3", "1h", "ALGO", "sliding", "COST", "4"],
        );
        assert_eq!(never.retry_after_ms, -1, "{flavor:?}: {never:?}");
    });
}

#[test]
fn a_lease_with_a_generated_id_costs_at_most_32_bytes() {
    const LEASES: i64 = 2_000;
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let key = "rl:lease:memory";
        acquire(&mut con, key, &["10000", "1h"]);
        let one: i64 = int(&mut con, &["MEMORY", "USAGE", key, "SAMPLES", "0"]);
        let mut fill = redis::pipe();
        for _ in 1..LEASES {
            fill.cmd("RL.ACQUIRE").arg(&[key, "10000", "1h"]).ignore();
        }
        fill.query::<()>(&mut con).expect("fill");
        assert_eq!(held(&mut con, key, 10_000), LEASES, "{flavor:?}");
        let all: i64 = int(&mut con, &["MEMORY", "USAGE", key, "SAMPLES", "0"]);
        let per_lease = (all - one) as f64 / (LEASES - 1) as f64;
        println!("{flavor:?}: MEMORY USAGE {one} B with 1 lease, {all} B with {LEASES}: {per_lease:.1} B per lease");
        assert!(
            per_lease <= 32.0,
            "{flavor:?}: {per_lease:.1} bytes per lease"
        );
        // Released down to one, the value shrinks back (a new string at the exact size).
        let ids: Vec<Vec<u8>> = {
            let value: Vec<u8> = redis::cmd("GET").arg(key).query(&mut con).expect("GET");
            // 0x02, tier length 0, count varint (2 bytes), then 25-byte records.
            value[4..]
                .chunks(25)
                .map(|record| {
                    record[1..17]
                        .iter()
                        .flat_map(|b| format!("{b:02x}").into_bytes())
                        .collect()
                })
                .collect()
        };
        assert_eq!(ids.len(), LEASES as usize, "{flavor:?}");
        let mut release = redis::pipe();
        for id in &ids[1..] {
            release.cmd("RL.RELEASE").arg(key).arg(id).ignore();
        }
        release.query::<()>(&mut con).expect("release");
        assert_eq!(held(&mut con, key, 10_000), 1, "{flavor:?}");
        let back: i64 = int(&mut con, &["MEMORY", "USAGE", key, "SAMPLES", "0"]);
        assert!(
            back <= one + 16,
            "{flavor:?}: {back} B after releasing, {one} B at first"
        );
    });
}

#[test]
fn leases_route_by_their_key_in_a_cluster_and_read_on_replicas() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 1);
        let mut client = cluster.client();
        for primary in cluster.primaries() {
            let key = format!("rl:{{{}}}:lease", cluster.tag_on(primary, "lease"));
            let taken = acquire(&mut client, &key, &["2", "1h", "5", "1m", "ID", "w1"]);
            assert!(taken.acquired, "{flavor:?} {key}");
            assert_eq!(held(&mut client, &key, 2), 1);
            let owner = cluster.owner_of(key.as_str());
            assert_eq!(owner.port(), primary.port());
            let mut on_owner = owner.conn();
            assert_eq!(int(&mut on_owner, &["EXISTS", &key]), 1, "{flavor:?}");
            // A write on this connection, so that WAIT covers everything before it.
            assert_eq!(int(&mut on_owner, &["RL.RENEW", &key, "w1", "2h"]), 1);
            wait_for_replicas(&mut on_owner, 1);
            let replica = cluster.replica_of(owner);
            let mut on_replica = replica.conn();
            redis::cmd("READONLY")
                .exec(&mut on_replica)
                .expect("READONLY");
            assert_eq!(
                held(&mut on_replica, &key, 2),
                1,
                "{flavor:?}: read on a replica"
            );
            let refused = error_text(
                &mut on_replica,
                redis::cmd("RL.ACQUIRE").arg(&key).arg(&["2", "1h"]),
            );
            assert!(refused.starts_with("MOVED"), "{flavor:?}: {refused}");
            assert_eq!(int(&mut client, &["RL.RELEASE", &key, "w1"]), 1);
            // The tier state stays: the key lives on.
            assert_eq!(held(&mut client, &key, 2), 0);
        }
    });
}
