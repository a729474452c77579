//! Rule stacking on a real Redis Cluster (3 primaries, the module on every node), Redis
//! 7.0 and Valkey 8.1. Rules keyed by the same subject share a hash tag, hence a slot:
//! one `RL.MHIT`, sent to the slot's owner. A per-user rule and a global cap have keys in
//! different slots: charged one after the other in rule order, and the user's hit given
//! back (`RL.REFUND`) when the cap denies. Under concurrency no limit is ever exceeded, and
//! once every answer is in, what is counted is exactly what was admitted.

use testkit::cluster::{connect, Cluster};
use testkit::gateway::*;
use testkit::get_bytes;

use std::sync::Arc;

/// A gateway in front of `upstream` talking to `cluster` through its cluster client, with
/// `rules`.
fn gateway_on(cluster: &Cluster, upstream: &Upstream, rules: &str) -> Gateway {
    let seeds = cluster.gateway_seeds();
    Gateway::start(
        &upstream.server_line(),
        &format!(
            "[redis]\ncluster = [{}]\ndeadline_ms = 1000\n{rules}\n",
            seeds
        ),
    )
}

/// What `key` has left under `tiers`, asked with RL.PEEK of the node that owns it (a hit
/// would leave one less when allowed).
fn peek_remaining(cluster: &Cluster, key: &str, tiers: &[&str]) -> i64 {
    let owner = cluster.owner_of(key);
    let values: Vec<i64> = redis::cmd("RL.PEEK")
        .arg(key)
        .arg(tiers)
        .query(&mut connect(owner.port()))
        .expect("RL.PEEK");
    values[2] + values[0]
}

/// `command`'s calls over every primary.
fn calls(cluster: &Cluster, command: &str) -> i64 {
    cluster
        .primaries()
        .iter()
        .map(|p| p.command_calls(command).unwrap_or(0))
        .sum()
}

fn names(tiers: &[LimitTier]) -> Vec<&str> {
    tiers.iter().map(|t| t.name.as_str()).collect()
}

#[test]
fn rules_of_one_subject_are_one_mhit_on_the_slot_owner() {
    const RULES: &str = r#"
[[rule]]
name = "user"
path = "/api/**"
key = "header:X-User"
limits = ["10/1h"]
stack = true

[[rule]]
name = "orders"
path = "/api/orders"
key = "header:X-User"
limits = ["2/1h"]
"#;
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 0);
        let upstream = Upstream::start();
        let gateway = gateway_on(&cluster, &upstream, RULES);
        for primary in cluster.primaries() {
            let user = cluster
                .tag_on(primary, "h:user")
                .trim_start_matches("h:")
                .to_owned();
            let user_key = format!("rl:{{h:{user}}}:user");
            let orders_key = format!("rl:{{h:{user}}}:orders");
            let before = primary.command_calls("RL.MHIT").unwrap_or(0);
            for expected in [1, 0] {
                let resp = gateway.send("GET", "/api/orders", &[("X-User", &user)]);
                assert_eq!(resp.status, 200, "{flavor:?} {user}: {resp:?}");
                assert_eq!(resp.fail_open_reason(), None, "{flavor:?}");
                assert_eq!(names(&resp.limits()), ["user", "orders"], "{flavor:?}");
                assert_eq!(resp.limits()[1].r, expected, "{flavor:?}");
            }
            let mut owner = connect(primary.port());
            let user_bytes = get_bytes(&mut owner, &user_key);
            let orders_bytes = get_bytes(&mut owner, &orders_key);
            let denied = gateway.send("GET", "/api/orders", &[("X-User", &user)]);
            assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
            assert_eq!(names(&denied.limits()), ["orders", "user"], "{flavor:?}");
            assert_eq!(
                denied.limits()[1].r,
                8,
                "{flavor:?}: nothing taken from user"
            );
            assert_eq!(get_bytes(&mut owner, &user_key), user_bytes, "{flavor:?}");
            assert_eq!(
                get_bytes(&mut owner, &orders_key),
                orders_bytes,
                "{flavor:?}"
            );
            assert_eq!(
                primary.command_calls("RL.MHIT").unwrap_or(0) - before,
                3,
                "{flavor:?}: every decision one RL.MHIT on the owner of {user_key}"
            );
        }
        assert_eq!(calls(&cluster, "RL.HIT"), 0, "{flavor:?}");
        assert_eq!(calls(&cluster, "RL.REFUND"), 0, "{flavor:?}");
    });
}

#[test]
fn rules_in_different_slots_are_charged_in_order_and_given_back() {
    const RULES: &str = r#"
[[rule]]
name = "user"
path = "/api/**"
key = "header:X-User"
limits = ["3/1h"]
stack = true

[[rule]]
name = "cap"
path = "/api/**"
key = "global"
limits = ["2/1h"]
"#;
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 0);
        let upstream = Upstream::start();
        let gateway = gateway_on(&cluster, &upstream, RULES);
        let cap_key = "rl:{global}:cap";
        let cap_owner = cluster.owner_of(cap_key).port();
        let elsewhere = cluster
            .primaries()
            .into_iter()
            .find(|p| p.port() != cap_owner)
            .expect("another primary");
        let user = cluster
            .tag_on(elsewhere, "h:user")
            .trim_start_matches("h:")
            .to_owned();
        let user_key = format!("rl:{{h:{user}}}:user");
        for expected in [1, 0] {
            let resp = gateway.send("GET", "/api/x", &[("X-User", &user)]);
            assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
            assert_eq!(names(&resp.limits()), ["user", "cap"], "{flavor:?}");
            assert_eq!(resp.limits()[1].r, expected, "{flavor:?}");
        }
        assert_eq!(
            calls(&cluster, "RL.HIT"),
            4,
            "{flavor:?}: one call per rule"
        );
        assert_eq!(calls(&cluster, "RL.MHIT"), 0, "{flavor:?}");

        // The user has 1 left; the cap none: the user's hit is charged, then given back.
        let denied = gateway.send("GET", "/api/x", &[("X-User", &user)]);
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        let limits = denied.limits();
        assert_eq!(names(&limits), ["cap", "user"], "{flavor:?}: {denied:?}");
        assert_eq!(limits[0].r, 0, "{flavor:?}");
        assert_eq!(limits[1].r, 1, "{flavor:?}: after the refund");
        assert!(denied.retry_after() <= 3600, "{flavor:?}");
        assert_eq!(
            peek_remaining(&cluster, &user_key, &["3", "1h"]),
            1,
            "{flavor:?}"
        );
        assert_eq!(
            elsewhere.command_calls("RL.REFUND"),
            Some(1),
            "{flavor:?}: refunded on the user's node"
        );
        let metrics = gateway.metrics();
        assert_eq!(
            metrics.counter("rl_gateway_refunds_total", &[("rule", "user")]),
            1.0,
            "{flavor:?}"
        );
        assert_eq!(metrics.decisions("cap", "denied"), 1.0, "{flavor:?}");
        assert_eq!(metrics.decisions("user", "allowed"), 2.0, "{flavor:?}");
        // Not cached: a denial made while another request's hit may be given back may
        // not last, so the next request asks Redis again.
        let again = gateway.send("GET", "/api/x", &[("X-User", &user)]);
        assert_eq!(again.status, 429, "{flavor:?}");
        assert_eq!(metrics_denied_cached(&gateway), 0.0, "{flavor:?}");
        assert_eq!(upstream.requests(), 2, "{flavor:?}");
    });
}

fn metrics_denied_cached(gateway: &Gateway) -> f64 {
    let metrics = gateway.metrics();
    metrics.decisions("cap", "denied_cached") + metrics.decisions("user", "denied_cached")
}

#[test]
fn concurrent_clients_across_slots_never_get_more_than_any_limit() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 0);
        let upstream = Upstream::start();
        let gateway = Arc::new(gateway_on(&cluster, &upstream, crowd::USER_THEN_CAP));
        let cap_slot = cluster.keyslot("rl:{global}:cap");
        for u in 0..4 {
            assert_ne!(
                cluster.keyslot(format!("rl:{{h:u{u}}}:user")),
                cap_slot,
                "{flavor:?}: u{u} must be in another slot than the cap"
            );
        }
        let per_user = crowd::admitted_per_user(&gateway);
        let total: usize = per_user.iter().sum();
        // Never above the cap. And here exactly the cap: hits are given back only after
        // the cap denied, so until it is full no user's key holds a hit in flight, and
        // the users could take 80.
        assert_eq!(total, 50, "{flavor:?}: {per_user:?}");
        assert_eq!(upstream.requests() as usize, total, "{flavor:?}");
        // Every refund is done before its 429 is answered: what each key counts now is
        // exactly what it admitted.
        assert_eq!(
            peek_remaining(&cluster, "rl:{global}:cap", &["50", "1h"]),
            50 - total as i64,
            "{flavor:?}"
        );
        for (u, n) in per_user.iter().enumerate() {
            let key = format!("rl:{{h:u{u}}}:user");
            assert_eq!(
                peek_remaining(&cluster, &key, &["20", "1h"]),
                20 - *n as i64,
                "{flavor:?}: {key}"
            );
        }
        let refunds = gateway
            .metrics()
            .counter("rl_gateway_refunds_total", &[("rule", "user")]);
        assert!(
            refunds > 0.0,
            "{flavor:?}: the cap denied after users were charged"
        );
        assert_eq!(
            refunds,
            calls(&cluster, "RL.REFUND") as f64,
            "{flavor:?}: every refund the gateway counted reached Redis"
        );
        eprintln!("{flavor:?}: admitted {total} of 120 (per user {per_user:?}), {refunds} refunds");
    });
}
