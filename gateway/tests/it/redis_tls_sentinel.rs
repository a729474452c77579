//! Redis Sentinel over TLS (`tls = true`): three sentinels, a primary and its replica, each
//! serving TLS beside its plain port, the replica linked and the sentinels watching over
//! TLS, so the sentinels name TLS ports. The gateway asks the sentinels over TLS, decides
//! on the primary over TLS, and after `SENTINEL FAILOVER` decides on the promoted replica
//! without a restart; with a CA that did not sign them it finds no primary and is not
//! ready. On every flavour built with TLS ([`each_tls_flavor`]), with its own sentinel.

use std::time::{Duration, Instant};
use testkit::gateway::*;
use testkit::sentinel::Sentinels;
use testkit::tls::{each_tls_flavor, tls_primary_with_replica, Pki, TlsSentinels};

/// GCRA over 30 days, not a fixed window of an hour: the budget carried across the
/// failover is checked to the unit, and a fixed window's end (on the clock's hour) between
/// the decisions would start it afresh; a GCRA unit comes back only after 7.2 hours.
const RULES: &str = r#"
[[rule]]
name = "strict"
path = "/strict/**"
limits = ["100/30d"]
algorithm = "gcra"
on_redis_failure = "closed"
"#;

const POLL: Duration = Duration::from_secs(60);

fn gateway_on(upstream: &Upstream, sentinels: &TlsSentinels, pki: &Pki, ca: &str) -> Gateway {
    Gateway::start(
        &upstream.server_line(),
        &format!(
            "[redis]\nsentinels = {}\nmaster_name = \"{}\"\ntls = true\n\
             tls_ca_file = \"{}\"\ndeadline_ms = 1000\n{RULES}",
            sentinels.toml_list(),
            Sentinels::MASTER_NAME,
            pki.toml_path(ca)
        ),
    )
}

#[test]
fn the_gateway_finds_the_primary_over_tls_and_follows_a_failover() {
    each_tls_flavor(|flavor| {
        let pki = Pki::new();
        let ((primary, primary_tls), (replica, replica_tls)) =
            tls_primary_with_replica(flavor, &pki);
        let tls = TlsSentinels::start(flavor, &pki, primary_tls, 3);
        let upstream = Upstream::start();

        let wrong = gateway_on(&upstream, &tls, &pki, "other-ca.pem");
        wrong.wait_redis_unreachable(POLL, "a CA that did not sign the sentinels");
        assert_eq!(wrong.get("/strict/x").status, 503, "{flavor:?}");
        drop(wrong);
        assert_eq!(hit_calls(&primary), 0, "{flavor:?}: nothing reached Redis");

        let gateway = gateway_on(&upstream, &tls, &pki, "ca.pem");
        wait_until(POLL, "/readyz answers 200", || {
            gateway.admin_get("/readyz").status == 200
        });
        for expected in [99, 98, 97] {
            let resp = gateway.get("/strict/x");
            assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
            assert_eq!(resp.remaining(), expected, "{flavor:?}: {resp:?}");
        }
        assert_eq!(hit_calls(&primary), 3, "{flavor:?}: decided on the primary");
        let found = |port: u16| format!("connected to Redis at 127.0.0.1:{port}");
        assert_eq!(
            gateway.log_lines_with(&found(primary_tls)),
            1,
            "{}",
            gateway.log()
        );
        wait_until(POLL, "the replica has every write", || {
            replica.master_repl_offset() >= primary.master_repl_offset()
        });

        tls.sentinels.failover(primary_tls);
        assert_eq!(tls.sentinels.primary_port(0), replica_tls, "{flavor:?}");
        wait_until(POLL, "the old primary is a replica", || {
            primary.try_info_field("replication", "role").as_deref() == Some("slave")
        });
        let resp = first_decision(&gateway);
        assert_eq!(
            resp.remaining(),
            96,
            "{flavor:?}: the budget goes on: {resp:?}"
        );
        assert!(
            hit_calls(&replica) >= 1,
            "{flavor:?}: the new primary decided"
        );
        assert_eq!(
            gateway.log_lines_with(&found(replica_tls)),
            1,
            "{}",
            gateway.log()
        );
    });
}

/// Asks every 50 ms until a request is decided (200); a failed decision closes the rule
/// (503) meanwhile, anything else fails the test.
fn first_decision(gateway: &Gateway) -> Resp {
    let deadline = Instant::now() + POLL;
    loop {
        let resp = gateway.get("/strict/x");
        if resp.status == 200 {
            return resp;
        }
        assert_eq!(resp.status, 503, "{resp:?}");
        assert!(Instant::now() < deadline, "no decision on the new primary");
        std::thread::sleep(Duration::from_millis(50));
    }
}
