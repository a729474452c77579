//! `concurrency = N` on Redis Cluster: each client's lease key is on the primary that
//! serves its hash tag (the subject, as for its RL.HIT keys), the slots are enforced there,
//! and the release reaches it.

use std::time::Duration;
use testkit::cluster::{connect, Cluster};
use testkit::gateway::*;

const POLL: Duration = Duration::from_secs(30);

/// `RL.LEASES key max` on `server` itself: how many leases it holds.
fn held_on(server: &Server, key: &str) -> i64 {
    let reply: Vec<i64> = redis::cmd("RL.LEASES")
        .arg(key)
        .arg(1)
        .query(&mut connect(server.port()))
        .expect("RL.LEASES");
    reply[0]
}

#[test]
fn each_clients_slot_is_held_on_its_own_shard_and_given_back() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 0);
        let upstream = Upstream::start();
        let seeds = cluster.gateway_seeds();
        let gateway = Gateway::start(
            &upstream.server_line(),
            &format!(
                "[redis]\ncluster = [{}]\ndeadline_ms = 1000\n\
                 [[rule]]\nname = \"llm\"\npath = \"/llm\"\nkey = \"header:X-User\"\n\
                 concurrency = 1\nlease_ttl = \"300s\"\n",
                seeds
            ),
        );
        for (n, primary) in cluster.primaries().into_iter().enumerate() {
            let user = cluster
                .tag_on(primary, "h:user")
                .trim_start_matches("h:")
                .to_owned();
            let key = format!("rl:{{h:{user}}}:llm:lease");
            let url = gateway.url("/llm?hold=1");
            let agent = gateway.agent.clone();
            let header_user = user.clone();
            let request = std::thread::spawn(move || {
                agent
                    .get(&url)
                    .set("X-User", &header_user)
                    .call()
                    .map_or(0, |r| r.status())
            });
            wait_until(POLL, "the request reaches the upstream", || {
                upstream.requests() == n as u64 + 1
            });
            assert_eq!(held_on(primary, &key), 1, "{flavor:?} {user}");
            let denied = gateway.send("GET", "/llm", &[("X-User", &user)]);
            assert_eq!(denied.status, 429, "{flavor:?} {user}: {denied:?}");
            upstream.release_held();
            assert_eq!(request.join().expect("the thread"), 200, "{flavor:?}");
            wait_until(POLL, "the lease is given back on its shard", || {
                held_on(primary, &key) == 0
            });
        }
        let metrics = gateway.metrics();
        assert_eq!(metrics.decisions("llm", "fail_open"), 0.0, "{flavor:?}");
        assert_eq!(metrics.decisions("llm", "denied"), 3.0, "{flavor:?}");
    });
}
