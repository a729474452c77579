//! Redis Sentinel, Redis's and Valkey's own: the gateway asks the sentinels for the
//! primary, decides on it, and after a failover (`SENTINEL FAILOVER`) or the primary's
//! death decides on the new primary without a restart, the budget going on from what
//! replication carried over. Three sentinels, a primary and a replica, both with the module.

use std::time::{Duration, Instant};
use testkit::gateway::*;
use testkit::sentinel::Sentinels;

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

/// How the primary goes away.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// `SENTINEL FAILOVER`: the primary is demoted to a replica, in order.
    Failover,
    /// The primary is killed (SIGKILL): the sentinels take it for down after a second
    /// without answers, then elect and promote the replica.
    Killed,
}

#[test]
fn the_gateway_follows_a_failover_and_the_budget_goes_on() {
    each_flavor(|flavor| follows(flavor, Loss::Failover));
}

#[test]
fn the_gateway_follows_the_promotion_when_the_primary_is_killed() {
    each_flavor(|flavor| follows(flavor, Loss::Killed));
}

/// Five decisions on the primary, the primary lost as `loss` says, then decisions on the
/// promoted replica without a restart, the budget going on from the five replicated. The
/// gap (how long from the loss, or from the old primary's demotion, to the first decision
/// on the new primary, and how many requests were refused meanwhile, one every 50 ms: the
/// rule fails closed) is printed, not asserted.
fn follows(flavor: Flavor, loss: Loss) {
    let (primary, replica) = primary_with_replica(flavor);
    let sentinels = Sentinels::start(flavor, primary.port(), 3, "");
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
    let old_port = primary.port();
    let mut lost = Instant::now();
    match loss {
        Loss::Failover => {
            sentinels.failover(old_port);
            // Once the old primary is a replica and the gateway has found the new one,
            // whatever decides can only be the new primary. The sentinels kill the old
            // primary's clients as they reconfigure it (`CLIENT KILL TYPE normal`): a
            // query caught by that is asked again.
            wait_until(POLL, "the old primary is a replica", || {
                primary.try_info_field("replication", "role").as_deref() == Some("slave")
            });
            // From here on the old primary refuses writes (READONLY): the gap counts from
            // its demotion, not from the sentinels' own steps before it.
            lost = Instant::now();
        }
        Loss::Killed => drop(primary),
    }
    let (resp, refused) = first_decision_after(&gateway);
    let gap = lost.elapsed();
    println!(
        "{flavor:?}, primary {loss:?}: the first decision on the new primary {} ms after, \
         {refused} requests refused (503) meanwhile",
        gap.as_millis()
    );
    assert_eq!(sentinels.primary_port(0), replica.port());
    assert_eq!(
        resp.remaining(),
        94,
        "the budget goes on from the 5 replicated: {resp:?}"
    );
    assert!(hit_calls(&replica) >= 1, "the new primary decided");
    let found = format!("connected to Redis at 127.0.0.1:{}", replica.port());
    assert_eq!(gateway.log_lines_with(&found), 1, "{}", gateway.log());
    wait_until(POLL, "/readyz answers 200 again", || {
        gateway.admin_get("/readyz").status == 200
    });
    let log = gateway.log();
    assert!(
        log.contains(&format!("connected to Redis at 127.0.0.1:{old_port}")),
        "{log}"
    );
}

/// Asks every 50 ms until a request is decided (200); the answer and how many were refused
/// before it (503: a failed decision closes this rule). Anything else fails the test.
fn first_decision_after(gateway: &Gateway) -> (Resp, usize) {
    let deadline = Instant::now() + POLL;
    let mut refused = 0;
    loop {
        let resp = gateway.get("/strict/x");
        if resp.status == 200 {
            return (resp, refused);
        }
        assert_eq!(
            resp.status, 503,
            "a failed decision closes the route: {resp:?}"
        );
        refused += 1;
        assert!(Instant::now() < deadline, "no decision on the new primary");
        std::thread::sleep(Duration::from_millis(50));
    }
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
