//! rl-gateway on a real Redis Cluster (3 primaries, a replica each, the module on every
//! node), on Redis and on Valkey: keys route by their hash tag (a client's tiers are one
//! key, its rules share a slot), limits hold on every shard, and a forced failover under
//! load gets no 5xx: requests to the lost shard fail open, counted, only until the cluster
//! has converged and the client has found the promoted node.

use testkit::cluster::{connect, role, Cluster};
use testkit::gateway::*;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A gateway in front of `upstream`, keyed by the `X-User` header, talking to `cluster`
/// through the cluster client seeded with every primary.
fn gateway_on(cluster: &Cluster, upstream: &Upstream, deadline_ms: u64, limits: &str) -> Gateway {
    let seeds = cluster.gateway_seeds();
    Gateway::start(
        &upstream.server_line(),
        &format!(
            "[redis]\ncluster = [{}]\ndeadline_ms = {deadline_ms}\nbreaker_open_ms = 100\n\
             [default]\nkey = \"header:X-User\"\nlimits = {limits}\n",
            seeds
        ),
    )
}

/// A user whose key (`rl:{h:<user>}:default`) lives on `primary`.
fn user_on(cluster: &Cluster, primary: &Server) -> String {
    let tag = cluster.tag_on(primary, "h:user");
    tag.trim_start_matches("h:").to_owned()
}

fn key_of(user: &str) -> String {
    format!("rl:{{h:{user}}}:default")
}

/// Whether `server` itself holds `key` (KEYS lists only a node's own keys; EXISTS would
/// answer MOVED from a node that does not serve the slot).
fn holds(server: &Server, key: &str) -> bool {
    let mut con = connect(server.port());
    let found: Vec<String> = redis::cmd("KEYS").arg(key).query(&mut con).expect("KEYS");
    found == [key]
}

#[test]
fn every_shard_enforces_and_holds_its_clients_keys() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 1);
        let upstream = Upstream::start();
        let gateway = gateway_on(&cluster, &upstream, 1000, "[\"5/1h\", \"1000/1d\"]");
        let primaries = cluster.primaries();
        for primary in &primaries {
            let user = user_on(&cluster, primary);
            for expected in (0..5).rev() {
                let resp = gateway.send("GET", "/api/items", &[("X-User", &user)]);
                assert_eq!(resp.status, 200, "{flavor:?} {user}: {resp:?}");
                assert_eq!(resp.fail_open_reason(), None, "{flavor:?} {user}");
                let tiers = resp.limits();
                assert_eq!(tiers.len(), 2, "{flavor:?}: both tiers shown: {resp:?}");
                assert_eq!(tiers[0].r, expected, "{flavor:?} {user}");
            }
            let denied = gateway.send("GET", "/api/items", &[("X-User", &user)]);
            assert_eq!(denied.status, 429, "{flavor:?} {user}: {denied:?}");
            // The key is on the primary that serves its hash tag, and on no other.
            for other in &primaries {
                assert_eq!(
                    holds(other, &key_of(&user)),
                    other.port() == primary.port(),
                    "{flavor:?}: {} on {}",
                    key_of(&user),
                    other.port()
                );
            }
        }
        let metrics = gateway.metrics();
        assert_eq!(metrics.decisions("default", "allowed"), 15.0, "{flavor:?}");
        assert_eq!(metrics.decisions("default", "denied"), 3.0, "{flavor:?}");
        assert_eq!(metrics.decisions("default", "fail_open"), 0.0, "{flavor:?}");
    });
}

/// What the load clients saw.
#[derive(Default)]
struct Seen {
    statuses: Vec<u16>,
    /// When each request that failed open was sent and answered, from the start of the load.
    fail_opens: Vec<(Duration, Duration)>,
}

#[test]
fn forced_failover_answers_no_5xx_and_fails_open_only_while_converging() {
    each_flavor(|flavor| {
        let mut cluster = Cluster::start(flavor, 3, 1);
        let upstream = Upstream::start();
        // 200 ms: a debug build under load always answers in time when the cluster is
        // whole, so every fail-open below is the failover's.
        let gateway = Arc::new(gateway_on(&cluster, &upstream, 200, "[\"1000000/1h\"]"));
        let primaries = cluster.primaries();
        let victim = primaries[0].port();
        let promoted = cluster.replica_of(primaries[0]).port();
        let users: Vec<String> = primaries.iter().map(|p| user_on(&cluster, p)).collect();
        let victim_user = users[0].clone();
        drop(primaries);

        let stop = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Seen::default()));
        let started = Instant::now();
        let clients: Vec<_> = (0..3)
            .map(|_| {
                let (gateway, stop, seen, users) =
                    (gateway.clone(), stop.clone(), seen.clone(), users.clone());
                std::thread::spawn(move || {
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let user = &users[n % users.len()];
                        n += 1;
                        let sent = started.elapsed();
                        let resp = gateway.send("GET", "/api/items", &[("X-User", user)]);
                        let mut seen = seen.lock().unwrap();
                        seen.statuses.push(resp.status);
                        if resp.fail_open_reason().is_some() {
                            seen.fail_opens.push((sent, started.elapsed()));
                        }
                    }
                })
            })
            .collect();
        let count = |seen: &Arc<Mutex<Seen>>| seen.lock().unwrap().statuses.len();
        wait_until(Duration::from_secs(30), "load before the failover", || {
            count(&seen) >= 300
        });
        let before = seen.lock().unwrap().fail_opens.len();
        assert_eq!(
            before, 0,
            "{flavor:?}: no fail-open while the cluster is whole"
        );

        let killed_at = started.elapsed();
        cluster.kill(victim);
        redis::cmd("CLUSTER")
            .arg("FAILOVER")
            .arg("FORCE")
            .exec(&mut connect(promoted))
            .expect("CLUSTER FAILOVER FORCE");
        wait_until(Duration::from_secs(30), "the replica promoted", || {
            role(cluster.server(promoted)) == "master"
        });
        cluster.wait_converged();
        let converged_at = started.elapsed();
        // The gateway decides the victim shard's keys again: answered by the promoted node.
        wait_until(
            Duration::from_secs(20),
            "decisions on the promoted node",
            || {
                let resp = gateway.send("GET", "/api/items", &[("X-User", &victim_user)]);
                resp.status == 200
                    && resp.fail_open_reason().is_none()
                    && resp.has_ratelimit_headers()
            },
        );
        let decided_at = started.elapsed();
        let at_decided = count(&seen);
        wait_until(Duration::from_secs(30), "load after the failover", || {
            count(&seen) >= at_decided + 300
        });
        stop.store(true, Ordering::Relaxed);
        for client in clients {
            client.join().expect("a load client");
        }

        let seen = seen.lock().unwrap();
        let errors: Vec<u16> = seen
            .statuses
            .iter()
            .copied()
            .filter(|s| *s != 200)
            .collect();
        assert_eq!(
            errors,
            Vec::<u16>::new(),
            "{flavor:?}: every request answered 200"
        );
        let fail_opens = seen.fail_opens.len();
        // Answered after the kill (a request in flight when the node died may have been
        // sent just before), and sent before decisions resumed.
        let first = seen.fail_opens.iter().map(|(_, answered)| *answered).min();
        let last = seen.fail_opens.iter().map(|(sent, _)| *sent).max();
        if let Some(first) = first {
            assert!(
                first >= killed_at,
                "{flavor:?}: a fail-open answered before the kill"
            );
        }
        if let Some(last) = last {
            assert!(
                last <= decided_at,
                "{flavor:?}: a request sent at {last:?} failed open, after decisions resumed at \
                 {decided_at:?}"
            );
        }
        // The gateway counted every fail-open its clients saw (the probe requests of the
        // wait above were all decided, so they add none).
        let metrics = gateway.metrics();
        // The default rule's on_redis_failure is "local": its local limit let them through.
        assert_eq!(
            metrics.decisions("default", "fail_open")
                + metrics.decisions("default", "local_allowed"),
            fail_opens as f64,
            "{flavor:?}"
        );
        assert!(
            holds(cluster.server(promoted), &key_of(&victim_user)),
            "{flavor:?}"
        );
        println!(
            "[{flavor:?}] gateway across a forced failover: {} requests, all 200; {fail_opens} \
             failed open (reasons: timeout {}, connection {}, unavailable {}, breaker {}), \
             answered from {:?} after the kill, the last sent {:?} after it; cluster converged {} ms after the kill, \
             the gateway decided on the promoted node {} ms after it",
            seen.statuses.len(),
            metrics.fail_open("timeout"),
            metrics.fail_open("connection"),
            metrics.fail_open("unavailable"),
            metrics.fail_open("breaker"),
            first.map(|t| t.saturating_sub(killed_at)),
            last.map(|t| t.saturating_sub(killed_at)),
            (converged_at - killed_at).as_millis(),
            (decided_at - killed_at).as_millis(),
        );
    });
}
