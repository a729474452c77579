//! Local quota on a real Redis Cluster (3 primaries, the module on every node), on Redis
//! and on Valkey: each key's batches are taken from the primary that serves it, and the
//! limits hold exactly there.

use crate::local_quota::{quota, rule, spec};
use testkit::cluster::Cluster;
use testkit::gateway::*;

/// A gateway in front of `upstream` talking to `cluster` through the cluster client
/// seeded with every primary, with `rest` after `[redis]`.
fn gateway_on(cluster: &Cluster, upstream: &Upstream, rest: &str) -> Gateway {
    let seeds: Vec<String> = cluster
        .primaries()
        .iter()
        .map(|s| format!("\"redis://127.0.0.1:{}\"", s.port()))
        .collect();
    Gateway::start(
        &upstream.server_line(),
        &format!(
            "[redis]\ncluster = [{}]\ndeadline_ms = 1000\n{rest}",
            seeds.join(", ")
        ),
    )
}

/// The calls that decided requests on each primary, in the order of `primaries`.
fn calls(primaries: &[&Server]) -> Vec<i64> {
    primaries.iter().map(|p| decision_calls(p)).collect()
}

#[test]
fn each_primary_grants_its_own_keys_batches_and_their_limits_hold() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 0);
        let upstream = Upstream::start();
        let rules = format!(
            "{}{}",
            quota(1000, 5000, 50),
            rule("user", "/api/**", "header:X-User", "30/1d", "fixed")
        );
        let gateway = gateway_on(&cluster, &upstream, &rules);
        let primaries = cluster.primaries();
        for (i, primary) in primaries.iter().enumerate() {
            let tag = cluster.tag_on(primary, "h:user");
            let user = tag.trim_start_matches("h:");
            let what = format!("{flavor:?} {user} on {}", primary.port());
            let before = calls(&primaries);
            let mut expected = Vec::new();
            let mut statuses = Vec::new();
            for n in 1..=40 {
                let resp = gateway.send("GET", "/api/x", &[("X-User", user)]);
                if n <= 30 {
                    // Never more than is left (less while a refill is on its way).
                    let shown = resp.remaining();
                    assert!((0..=30 - n).contains(&shown), "{what}: {resp:?}");
                }
                expected.push(if n <= 30 { 200 } else { 429 });
                statuses.push(resp.status);
            }
            assert_eq!(statuses, expected, "{what}");
            let after = calls(&primaries);
            for (j, (b, a)) in before.iter().zip(&after).enumerate() {
                if i == j {
                    assert!(
                        (1..20).contains(&(a - b)),
                        "{what}: {} calls for 40 requests",
                        a - b
                    );
                } else {
                    assert_eq!(a, b, "{what}: another primary was asked");
                }
            }
            let key = format!("rl:{{{tag}}}:user");
            let counted = units_counted(primary, &key, &spec("30/1d", "fixed"));
            assert_eq!(counted, 30, "{what}");
        }
        assert_eq!(upstream.requests(), 90, "{flavor:?}");
    });
}
