//! A Redis that answers slowly but within `deadline_ms`: the gateway's deadline is the one
//! that decides, never the redis crate's own wait for an answer (500 ms by default, on one
//! server and on a Sentinel's primary). A decision Redis answers late but in time is
//! Redis's, on a fail-open and on a fail-closed rule alike, on either kind; a local-quota
//! refill answered as late is held; a stall past the deadline still decides as
//! `on_redis_failure` says. A Cluster's client, whose wait bounds a whole call, waits as
//! long, and so does a server reached over TLS under `tls_server_name`.
//!
//! Redis is stalled by SIGSTOP while the requests wait, and resumed: no assertion here is
//! on how long anything took.

use crate::local_quota::{allowed_in_a_row, global, quota, rule, settled_count, spec};
use std::time::Duration;
use testkit::cluster::Cluster;
use testkit::gateway::*;
use testkit::sentinel::Sentinels;
use testkit::tls::{each_tls_flavor, tls_server, Pki};

/// Far above the redis crate's own 500 ms, and above [`STALL`] with room for a busy machine.
const DEADLINE_MS: u64 = 2500;

/// How long Redis is stopped while calls wait for it: longer than the crate's 500 ms.
const STALL: Duration = Duration::from_millis(900);

const RULES: &str = r#"
[[rule]]
name = "lenient"
path = "/open/**"
limits = ["100/1h"]
on_redis_failure = "open"

[[rule]]
name = "strict"
path = "/strict/**"
limits = ["100/1h"]
on_redis_failure = "closed"
"#;

/// Redis or Valkey, the upstream, and a gateway with [`RULES`] under [`DEADLINE_MS`].
fn slow_stack(flavor: Flavor) -> (Server, Upstream, Gateway) {
    let redis = ServerConfig::new(flavor).start();
    let upstream = Upstream::start();
    let redis_section = redis_section_with(redis.port(), &format!("deadline_ms = {DEADLINE_MS}"));
    let gateway = started(&upstream, &redis_section);
    (redis, upstream, gateway)
}

/// A gateway with `redis_section` and [`RULES`], once Redis has decided for both rules.
fn started(upstream: &Upstream, redis_section: &str) -> Gateway {
    let gateway = Gateway::start(&upstream.server_line(), &format!("{redis_section}{RULES}"));
    for path in ["/open/warm", "/strict/warm"] {
        wait_until(Duration::from_secs(20), "a decision by Redis", || {
            gateway.get(path).has_ratelimit_headers()
        });
    }
    gateway
}

/// `GET` of each of `paths`, all sent while `servers` are stopped; they are resumed after
/// `stall`, or with `None` once every answer is in.
fn during_a_stall(
    gateway: &Gateway,
    servers: &[&Server],
    paths: &[&str],
    stall: Option<Duration>,
) -> Vec<Resp> {
    let stopped: Vec<Stopped> = servers.iter().map(|s| Stopped::new(s.pid())).collect();
    std::thread::scope(|scope| {
        let requests: Vec<_> = paths
            .iter()
            .map(|&path| scope.spawn(move || gateway.get(path)))
            .collect();
        let stopped = match stall {
            Some(stall) => {
                std::thread::sleep(stall);
                stopped.into_iter().for_each(Stopped::resume);
                Vec::new()
            }
            None => stopped,
        };
        let answers = requests
            .into_iter()
            .map(|request| request.join().expect("a request"))
            .collect();
        drop(stopped);
        answers
    })
}

/// How many more decisions of each `(rule, outcome)` `after` counts than `before`.
fn more_decisions(before: &Metrics, after: &Metrics, of: &[(&str, &str)]) -> Vec<f64> {
    of.iter()
        .map(|&(rule, outcome)| after.decisions(rule, outcome) - before.decisions(rule, outcome))
        .collect()
}

#[test]
fn a_stall_within_the_deadline_is_waited_out_and_redis_decides() {
    each_flavor(|flavor| {
        let (redis, _upstream, gateway) = slow_stack(flavor);
        waits_out_a_stall(&gateway, &[&redis], &format!("{flavor:?}"));
    });
}

/// The primary a sentinel names is reached by a connection of another kind than one
/// server's: it waits as long.
#[test]
fn a_stall_of_a_sentinels_primary_is_waited_out_too() {
    each_flavor(|flavor| {
        // No replica, and one sentinel short of its quorum of two: never a failover.
        let redis = ServerConfig::new(flavor).start();
        let sentinels = Sentinels::start(flavor, redis.port(), 1, "");
        let upstream = Upstream::start();
        let redis_section = format!(
            "[redis]\nsentinels = {}\nmaster_name = \"{}\"\ndeadline_ms = {DEADLINE_MS}\n",
            sentinels.toml_list(),
            Sentinels::MASTER_NAME
        );
        let gateway = started(&upstream, &redis_section);
        waits_out_a_stall(
            &gateway,
            &[&redis],
            &format!("{flavor:?} through a sentinel"),
        );
    });
}

/// A server reached under `tls_server_name` is connected another way than by its URL alone
/// (the name the certificate is checked against is not the address): it waits as long.
#[test]
fn a_stall_of_a_server_reached_under_tls_server_name_is_waited_out_too() {
    each_tls_flavor(|flavor| {
        let pki = Pki::new();
        // The certificate names redis.test only; the gateway reaches it at 127.0.0.1.
        let (redis, tls_port) = tls_server(flavor, &pki, "named", false);
        let upstream = Upstream::start();
        let redis_section = format!(
            "[redis]\nurl = \"rediss://127.0.0.1:{tls_port}\"\ntls_ca_file = \"{}\"\n\
             tls_server_name = \"redis.test\"\ndeadline_ms = {DEADLINE_MS}\n",
            pki.toml_path("ca.pem")
        );
        let gateway = started(&upstream, &redis_section);
        let what = format!("{flavor:?} under tls_server_name");
        waits_out_a_stall(&gateway, &[&redis], &what);
    });
}

/// A Cluster's client has a wait of its own too (for the whole call, retries and all): a
/// stall of every primary within the deadline is waited out there as well.
#[test]
fn a_stall_of_a_clusters_primaries_is_waited_out_too() {
    each_flavor(|flavor| {
        // No replicas: nothing is failed over, and the stall is far shorter than the nodes'
        // own timeout.
        let cluster = Cluster::start(flavor, 3, 0);
        let upstream = Upstream::start();
        let redis_section = format!(
            "[redis]\ncluster = [{}]\ndeadline_ms = {DEADLINE_MS}\n",
            cluster.gateway_seeds()
        );
        let gateway = started(&upstream, &redis_section);
        let primaries = cluster.primaries();
        waits_out_a_stall(&gateway, &primaries, &format!("{flavor:?} on a Cluster"));
    });
}

/// A request of each rule sent while `servers` stall for [`STALL`] is decided by Redis:
/// counted there, neither failed open nor closed.
fn waits_out_a_stall(gateway: &Gateway, servers: &[&Server], what: &str) {
    let paths = ["/open/a", "/strict/a"];
    let left_before: Vec<i64> = paths.iter().map(|p| gateway.get(p).remaining()).collect();
    let before = gateway.metrics();
    let answers = during_a_stall(gateway, servers, &paths, Some(STALL));
    for ((path, resp), left) in paths.iter().zip(&answers).zip(left_before) {
        let what = format!("{what}: {path} while Redis stalled");
        assert_eq!(resp.status, 200, "{what}: {resp:?}\n{}", gateway.log());
        assert!(resp.has_ratelimit_headers(), "{what}: Redis's: {resp:?}");
        assert_eq!(resp.fail_open_reason(), None, "{what}: {resp:?}");
        assert_eq!(resp.remaining(), left - 1, "{what}: counted by Redis");
    }
    let after = gateway.metrics();
    let of = [
        ("lenient", "allowed"),
        ("strict", "allowed"),
        ("lenient", "fail_open"),
        ("strict", "fail_closed"),
    ];
    assert_eq!(
        more_decisions(&before, &after, &of),
        [1.0, 1.0, 0.0, 0.0],
        "{what}: {of:?}"
    );
    assert_eq!(
        after.fail_open("timeout"),
        before.fail_open("timeout"),
        "{what}"
    );
}

#[test]
fn a_stall_past_the_deadline_decides_as_on_redis_failure_says() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = slow_stack(flavor);
        let (forwarded, before) = (upstream.requests(), gateway.metrics());
        let answers = during_a_stall(&gateway, &[&redis], &["/open/b", "/strict/b"], None);
        let (open, strict) = (&answers[0], &answers[1]);
        assert_eq!(open.status, 200, "{flavor:?}: {open:?}");
        assert!(!open.has_ratelimit_headers(), "{flavor:?}: {open:?}");
        assert_eq!(
            open.fail_open_reason().as_deref(),
            Some("timeout"),
            "{flavor:?}: {open:?}"
        );
        assert_eq!(strict.status, 503, "{flavor:?}: {strict:?}");
        assert_eq!(
            upstream.requests(),
            forwarded + 1,
            "{flavor:?}: the open one"
        );
        let after = gateway.metrics();
        let of = [("lenient", "fail_open"), ("strict", "fail_closed")];
        assert_eq!(
            more_decisions(&before, &after, &of),
            [1.0, 1.0],
            "{flavor:?}: {of:?}"
        );
        assert_eq!(
            after.fail_open("timeout") - before.fail_open("timeout"),
            1.0,
            "{flavor:?}"
        );
    });
}

#[test]
fn a_refill_answered_late_but_within_the_deadline_is_held() {
    each_flavor(|flavor| {
        let what = format!("{flavor:?}");
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let gateway = Gateway::start(
            &upstream.server_line(),
            &format!(
                "{}{}{}",
                redis_section_with(redis.port(), &format!("deadline_ms = {DEADLINE_MS}")),
                quota(1000, 60000, 50),
                rule("api", "/**", "global", "1000/1d", "fixed")
            ),
        );
        let (key, words) = (global("api"), spec("1000/1d", "fixed"));
        allowed_in_a_row(&gateway, "/x", 60, 1000, 1000, &what);
        let held = settled_count(&redis, &key, &words) - 60;
        assert!(held >= 2, "{what}: the gateway holds units: {held}");
        let taken = || {
            gateway
                .metrics()
                .counter("rl_gateway_local_quota_units_taken_total", &[])
        };
        let taken_before = taken();

        // The held units are spent while Redis stalls: the refill asked half-way waits.
        let frozen = Stopped::new(redis.pid());
        allowed_in_a_row(&gateway, "/x", held, 1000 - 60, 0, &what);
        std::thread::sleep(STALL);
        frozen.resume();

        // Its answer came within the deadline: its units are the gateway's, not counted in
        // Redis for nobody.
        wait_until(Duration::from_secs(10), "the refill's units taken", || {
            taken() > taken_before
        });
        let calls = decision_calls(&redis);
        let admitted = 60 + held;
        let shown: Vec<i64> = (0..3).map(|_| gateway.get("/x").remaining()).collect();
        let left: Vec<i64> = (1..=3).map(|i| 1000 - admitted - i).collect();
        assert_eq!(shown, left, "{what}: what the next answers show left");
        assert_eq!(
            decision_calls(&redis),
            calls,
            "{what}: decided from the refill"
        );
    });
}
