//! TLS to a Redis Cluster: three primaries that serve TLS beside their plain ports, the
//! cluster bus on TLS too (`tls-cluster yes`, without which the nodes would announce their
//! plain ports to a TLS client). The gateway is given one node's `rediss://` URL and the
//! CA: it learns the other primaries' TLS ports from `CLUSTER SLOTS`, and each decision
//! counts on the primary that serves its key. With a CA that did not sign the nodes it is
//! not ready and each rule fails as its `on_redis_failure` says. On every flavour built
//! with TLS ([`each_tls_flavor`]).

use std::time::Duration;
use testkit::gateway::*;
use testkit::tls::{each_tls_flavor, Pki, TlsCluster};

const RULES: &str = r#"
[[rule]]
name = "strict"
path = "/strict/**"
key = "header:X-User"
limits = ["5/1h"]
on_redis_failure = "closed"

[[rule]]
name = "lenient"
path = "/open/**"
key = "header:X-User"
limits = ["5/1h"]
on_redis_failure = "open"
"#;

/// How long a probe of Redis may take to be seen on `/readyz` (a debug build, busy).
const POLL: Duration = Duration::from_secs(30);

/// A gateway seeded with the TLS port of `seed` alone, trusting `pki`'s `ca`.
fn gateway_on(upstream: &Upstream, seed: u16, pki: &Pki, ca: &str) -> Gateway {
    Gateway::start(
        &upstream.server_line(),
        &format!(
            "[redis]\ncluster = [\"rediss://127.0.0.1:{seed}\"]\ndeadline_ms = 1000\n\
             tls_ca_file = \"{}\"\n{RULES}",
            pki.toml_path(ca)
        ),
    )
}

#[test]
fn decisions_count_on_the_primary_of_each_key_over_tls_and_fail_with_another_ca() {
    each_tls_flavor(|flavor| {
        let pki = Pki::new();
        let tls = TlsCluster::start(flavor, &pki, 3, 0);
        let cluster = &tls.cluster;
        let primaries = cluster.primaries();
        let upstream = Upstream::start();
        let seed = tls.tls_port(primaries[0]);
        let gateway = gateway_on(&upstream, seed, &pki, "ca.pem");
        wait_until(POLL, "/readyz answers 200", || {
            gateway.admin_get("/readyz").status == 200
        });
        // A user whose key lives on each primary in turn: the two primaries the gateway
        // was not given are reached at the TLS ports CLUSTER SLOTS named.
        let users: Vec<String> = primaries
            .iter()
            .map(|p| {
                cluster
                    .tag_on(p, "h:user")
                    .trim_start_matches("h:")
                    .to_owned()
            })
            .collect();
        for user in &users {
            for expected in [4, 3] {
                let resp = gateway.send("GET", "/strict/x", &[("X-User", user)]);
                assert_eq!(resp.status, 200, "{flavor:?} {user}: {resp:?}");
                assert_eq!(resp.remaining(), expected, "{flavor:?} {user}: {resp:?}");
                assert!(resp.fail_open_reason().is_none(), "{flavor:?}: {resp:?}");
            }
        }
        for (primary, user) in primaries.iter().zip(&users) {
            assert_eq!(
                hit_calls(primary),
                2,
                "{flavor:?}: hits on {}",
                primary.port()
            );
            let held = keys(primary, "*");
            assert_eq!(held.len(), 1, "{flavor:?} {}: {held:?}", primary.port());
            assert!(held[0].contains(&format!("{{h:{user}}}")), "{held:?}");
        }
        drop(gateway);

        let other = gateway_on(&upstream, seed, &pki, "other-ca.pem");
        other.wait_redis_unreachable(POLL, "a CA that did not sign the nodes");
        assert_eq!(other.admin_get("/readyz").status, 503, "{flavor:?}");
        let headers = [("X-User", users[1].as_str())];
        let resp = other.send("GET", "/strict/x", &headers);
        assert_eq!(resp.status, 503, "{flavor:?}: {resp:?}");
        let resp = other.send("GET", "/open/x", &headers);
        assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
        assert!(resp.fail_open_reason().is_some(), "{flavor:?}: {resp:?}");
        for primary in &primaries {
            assert_eq!(
                hit_calls(primary),
                2,
                "{flavor:?}: nothing more reached Redis"
            );
        }
    });
}
