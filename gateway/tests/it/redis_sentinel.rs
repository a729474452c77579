//! Redis Sentinel: the gateway asks the sentinels for the primary, decides on it, and after
//! a failover (`SENTINEL FAILOVER`) decides on the new primary without a restart, the
//! budget going on from what replication carried over. Three sentinels, a primary and a
//! replica, both with the module.

use std::time::{Duration, Instant};
use testkit::gateway::*;
use testkit::sentinel::Sentinels;

const RULES: &str = r#"
[[rule]]
name = "strict"
path = "/strict/**"
limits = ["100/1h"]
on_redis_failure = "closed"
"#;

const POLL: Duration = Duration::from_secs(60);

#[test]
fn the_gateway_follows_a_failover_and_the_budget_goes_on() {
    let (primary, replica) = primary_with_replica(Flavor::Redis);
    let sentinels = Sentinels::start(Flavor::Redis, primary.port(), 3, "");
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        &upstream.server_line(),
        &format!(
            "[redis]\nsentinels = {}\nmaster_name = \"{}\"\ndeadline_ms = 1000\n{RULES}",
            sentinels.toml_list(),
            Sentinels::MASTER_NAME
        ),
    );
    wait_until(POLL, "/readyz answers 200", || {
        gateway.admin_get("/readyz").status == 200
    });
    for expected in (95..=99).rev() {
        let resp = gateway.get("/strict/x");
        assert_eq!(resp.status, 200, "{resp:?}");
        assert_eq!(resp.remaining(), expected, "{resp:?}");
    }
    assert_eq!(hit_calls(&primary), 5, "the sentinels named the primary");
    wait_until(POLL, "the replica has every write", || {
        replica.master_repl_offset() >= primary.master_repl_offset()
    });

    sentinels.failover(primary.port());
    assert_eq!(sentinels.primary_port(0), replica.port());
    // Once the old primary is a replica and the gateway has found the new one, whatever
    // decides can only be the new primary.
    // The sentinels kill the old primary's clients as they reconfigure it (`CLIENT KILL
    // TYPE normal`): a query caught by that is asked again.
    wait_until(POLL, "the old primary is a replica", || {
        primary.try_info_field("replication", "role").as_deref() == Some("slave")
    });
    let found = format!("connected to Redis at 127.0.0.1:{}", replica.port());
    wait_until(POLL, "the gateway connects to the new primary", || {
        gateway.log_lines_with(&found) == 1
    });
    let deadline = Instant::now() + POLL;
    let resp = loop {
        let resp = gateway.get("/strict/x");
        if resp.status == 200 {
            break resp;
        }
        assert_eq!(
            resp.status, 503,
            "a failed decision closes the route: {resp:?}"
        );
        assert!(Instant::now() < deadline, "no decision on the new primary");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        resp.remaining(),
        94,
        "the budget goes on from the 5 replicated: {resp:?}"
    );
    assert!(hit_calls(&replica) >= 1, "the new primary decided");
    wait_until(POLL, "/readyz answers 200 again", || {
        gateway.admin_get("/readyz").status == 200
    });
    let log = gateway.log();
    assert!(
        log.contains(&format!(
            "connected to Redis at 127.0.0.1:{}",
            primary.port()
        )),
        "{log}"
    );
}

const SECRET: &str = "gw-S3ntinel-primary-pass";
const SENTINEL_SECRET: &str = "the-Sentinels-0wn-pass";

/// The sentinels ask for a password of their own and the primary's user `gw` for another:
/// both from the environment, neither logged; a wrong sentinel password leaves the
/// gateway not ready.
#[test]
fn the_sentinels_and_the_primary_each_get_their_own_password() {
    let (primary, _replica) = primary_with_replica(Flavor::Redis);
    redis::cmd("ACL")
        .arg("SETUSER")
        .arg("gw")
        .arg("on")
        .arg(format!(">{SECRET}"))
        .arg("~*")
        .arg("+@all")
        .exec(&mut primary.conn())
        .expect("ACL SETUSER");
    let sentinels =
        Sentinels::start_with_password(Flavor::Redis, primary.port(), 3, "", Some(SENTINEL_SECRET));
    let upstream = Upstream::start();
    let rest = format!(
        "[redis]\nsentinels = {}\nmaster_name = \"{}\"\ndeadline_ms = 1000\n\
         username = \"gw\"\npassword_env = \"RL_TEST_PRIMARY_PASSWORD\"\n\
         sentinel_password_env = \"RL_TEST_SENTINEL_PASSWORD\"\n{RULES}",
        sentinels.toml_list(),
        Sentinels::MASTER_NAME
    );
    let wrong = Gateway::start_with_env(
        &upstream.server_line(),
        &rest,
        &[
            ("RL_TEST_PRIMARY_PASSWORD", SECRET),
            ("RL_TEST_SENTINEL_PASSWORD", "not-it"),
        ],
    );
    wrong.wait_redis_unreachable(POLL, "a wrong password");
    assert_eq!(wrong.get("/strict/x").status, 503);
    drop(wrong);

    let gateway = Gateway::start_with_env(
        &upstream.server_line(),
        &rest,
        &[
            ("RL_TEST_PRIMARY_PASSWORD", SECRET),
            ("RL_TEST_SENTINEL_PASSWORD", SENTINEL_SECRET),
        ],
    );
    wait_until(POLL, "/readyz answers 200", || {
        gateway.admin_get("/readyz").status == 200
    });
    let resp = gateway.get("/strict/x");
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(resp.remaining(), 99, "{resp:?}");
    let clients: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query(&mut primary.conn())
        .expect("CLIENT LIST");
    assert!(clients.contains(" user=gw "), "{clients}");
    let log = gateway.log();
    for secret in [SECRET, SENTINEL_SECRET] {
        assert!(!log.contains(secret), "a password in the log:\n{log}");
    }
}
