//! Local quota on a real Redis Cluster (3 primaries, the module on every node), on Redis
//! and on Valkey: each key's batches are taken from the primary that serves it, the
//! limits hold exactly there, and unspent units go back to it.

use crate::local_quota::{quota, rule, spec, OVERSTATED};
use std::time::Duration;
use testkit::cluster::Cluster;
use testkit::gateway::*;

/// A gateway in front of `upstream` talking to `cluster` through the cluster client
/// seeded with every primary, with `rest` after `[redis]`.
fn gateway_on(cluster: &Cluster, upstream: &Upstream, rest: &str) -> Gateway {
    let seeds = cluster.gateway_seeds();
    Gateway::start(
        &upstream.server_line(),
        &format!("[redis]\ncluster = [{}]\ndeadline_ms = 1000\n{rest}", seeds),
    )
}

/// The calls that decided requests on each primary, in the order of `primaries`.
fn calls(primaries: &[&Server]) -> Vec<i64> {
    primaries.iter().map(|p| decision_calls(p)).collect()
}

/// 20 requests of `user` (whose keys `primary` serves) on the idle rule: the units the
/// gateway took beyond them go back to `primary`, unspent for hold_ms.
fn gives_back_on(primary: &Server, gateway: &Gateway, user: &str, what: &str) {
    for _ in 0..20 {
        let resp = gateway.send("GET", "/idle/x", &[("X-User", user)]);
        assert_eq!(resp.status, 200, "{what}: {resp:?}");
    }
    let key = format!("rl:{{h:{user}}}:idle");
    let words = spec("1000/1d", "fixed");
    // Units held (a refill on its way lands first).
    wait_until(Duration::from_secs(20), "units held", || {
        units_counted(primary, &key, &words) > 20
    });
    wait_until(Duration::from_secs(20), "the units given back", || {
        units_counted(primary, &key, &words) == 20
    });
}

#[test]
fn each_primary_grants_its_own_keys_batches_and_their_limits_hold() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 0);
        let upstream = Upstream::start();
        let rules = format!(
            "{}{}{}",
            quota(1000, 1000, 50),
            rule("user", "/api/**", "header:X-User", "30/1d", "fixed"),
            rule("idle", "/idle/**", "header:X-User", "1000/1d", "fixed"),
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
                    let most = 30 - n + OVERSTATED;
                    assert!(
                        (0..=most).contains(&shown),
                        "{what}: request {n} shows {shown} left, at most {most}"
                    );
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
            gives_back_on(primary, &gateway, user, &what);
        }
        assert_eq!(upstream.requests(), 90 + 3 * 20, "{flavor:?}");
    });
}

#[test]
fn a_global_cap_and_a_user_budget_in_two_slots_take_batches_on_their_own_primaries() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 0);
        let upstream = Upstream::start();
        let rules = format!(
            "{}{}stack = true\n{}",
            quota(1000, 1000, 1),
            rule("global", "/api/**", "global", "100000/1d", "fixed"),
            rule("user", "/api/**", "header:X-User", "100000/1d", "fixed"),
        );
        let gateway = gateway_on(&cluster, &upstream, &rules);
        let global_key = "rl:{global}:global";
        let global_on = cluster.owner_of(global_key);
        // A user whose key another primary serves.
        let primaries = cluster.primaries();
        let user_on = primaries
            .iter()
            .find(|p| p.port() != global_on.port())
            .expect("another primary");
        let tag = cluster.tag_on(user_on, "h:user");
        let user = tag.trim_start_matches("h:");
        let what = format!("{flavor:?} {user}");
        for _ in 0..200 {
            let resp = gateway.send("GET", "/api/x", &[("X-User", user)]);
            assert_eq!(resp.status, 200, "{what}: {resp:?}");
        }
        let calls: i64 = calls(&primaries).iter().sum();
        assert!(calls < 100, "{what}: {calls} calls for 200 requests");
        assert!(
            take_calls(global_on) > 0,
            "{what}: the global cap's batches"
        );
        assert!(take_calls(user_on) > 0, "{what}: the user's batches");
        // Once the held units go back, each primary counts the 200 exactly.
        let words = spec("100000/1d", "fixed");
        let user_key = format!("rl:{{{tag}}}:user");
        for (primary, key) in [(global_on, global_key), (*user_on, user_key.as_str())] {
            wait_until(Duration::from_secs(20), "the units given back", || {
                units_counted(primary, key, &words) == 200
            });
        }
        assert_eq!(upstream.requests(), 200, "{what}");
    });
}
