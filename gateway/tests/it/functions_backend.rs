//! rl-gateway on a server that cannot load modules, the stand-in for a managed Redis or
//! Valkey (no module, `enable-module-command no`), on Redis 7.0 and Valkey 8.1: with
//! `[redis] backend = "auto"` (the default) it finds the Functions library and decides
//! through it (`FCALL`), the same rules, headers, refunds and Envoy answers as on the
//! module; with neither the module nor the library, or a library of another version, it is
//! not ready and says what to run; `functions_load = "if-missing"` loads its own copy, on
//! every primary of a cluster too.

use std::time::Duration;
use testkit::cluster::{connect, Cluster, NodeSetup};
use testkit::functions::fcall_reply;
use testkit::gateway::envoy::*;
use testkit::gateway::*;

/// How long the first probe may take to be seen on `/readyz` on a busy machine.
const PROBE: Duration = Duration::from_secs(20);

/// A server that cannot load modules, with the library loaded.
fn managed_with_library(flavor: Flavor) -> Server {
    let redis = ServerConfig::managed(flavor).start();
    redis.load_functions();
    redis
}

/// Waits until `/readyz` answers 200.
fn wait_ready(gateway: &Gateway, what: &str) {
    wait_until(PROBE, &format!("{what}: /readyz 200"), || {
        gateway.admin_get("/readyz").status == 200
    });
}

/// Waits until `/readyz` answers 503 with `reason` in its body; returns the body.
fn wait_not_ready(gateway: &Gateway, reason: &str, what: &str) -> String {
    let mut body = String::new();
    wait_until(PROBE, &format!("{what}: /readyz 503 '{reason}'"), || {
        let resp = gateway.admin_get("/readyz");
        body = resp.body;
        resp.status == 503 && body.contains(reason)
    });
    body
}

/// `FCALL_RO rl_version 0` on `con`: the version of the library there.
fn version_on(con: &mut redis::Connection) -> redis::RedisResult<String> {
    redis::cmd("FCALL_RO").arg("rl_version").arg(0).query(con)
}

const RULES: &str = r#"
[[rule]]
name = "api"
path = "/api/**"
limits = ["3/1h"]
"#;

#[test]
fn auto_decides_through_the_library_with_the_modules_answers() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack_on(managed_with_library(flavor), RULES);
        wait_ready(&gateway, &format!("{flavor:?}"));
        assert_eq!(
            gateway.log_lines_with("deciding through the Functions library ratelimit"),
            1,
            "{flavor:?}: {}",
            gateway.log()
        );
        for expected in [2, 1, 0] {
            let resp = gateway.get("/api/items");
            assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
            assert_eq!(resp.remaining(), expected, "{flavor:?}: {resp:?}");
            let policy = resp.policy();
            assert_eq!(policy.len(), 1, "{flavor:?}: {resp:?}");
            assert_eq!((policy[0].q, policy[0].w), (3, Some(3600)), "{flavor:?}");
        }
        let denied = gateway.get("/api/items");
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        assert!(denied.retry_after() > 0, "{flavor:?}: {denied:?}");
        assert_eq!(upstream.requests(), 3, "{flavor:?}");
        // The budget is the library's key, read back by the library as the module's RL.PEEK.
        let look = fcall_reply(
            &mut redis.conn(),
            "rl_peek",
            "rl:{ip:127.0.0.1}:api",
            &["3", "1h"],
        );
        assert!(!look.allowed, "{flavor:?}: {look:?}");
        assert_eq!(look.remaining, 0, "{flavor:?}: {look:?}");
        assert!(redis.command_calls("FCALL").unwrap_or(0) >= 4, "{flavor:?}");
    });
}

#[test]
fn every_algorithm_limits_through_the_library() {
    each_flavor(|flavor| {
        let rules: String = ["fixed", "sliding", "log", "token", "gcra"]
            .iter()
            .map(|algo| {
                format!(
                    "[[rule]]\nname = \"{algo}\"\npath = \"/{algo}\"\nlimits = [\"3/1h\"]\n\
                     algorithm = \"{algo}\"\n"
                )
            })
            .collect();
        let (_redis, _upstream, gateway) = stack_on(managed_with_library(flavor), &rules);
        wait_ready(&gateway, &format!("{flavor:?}"));
        for algo in ["fixed", "sliding", "log", "token", "gcra"] {
            let statuses: Vec<u16> = (0..4)
                .map(|_| gateway.get(&format!("/{algo}")).status)
                .collect();
            assert_eq!(statuses, [200, 200, 200, 429], "{flavor:?} {algo}");
        }
    });
}

/// A per-client budget for the whole API, stacked on a stricter one for one endpoint.
const STACKED: &str = r#"
[[rule]]
name = "per-ip"
path = "/api/**"
limits = ["5/1h", "100/1d"]
stack = true

[[rule]]
name = "orders"
path = "/api/orders"
limits = ["2/1h"]
"#;

#[test]
fn stacked_rules_are_charged_all_or_nothing_by_the_library() {
    each_flavor(|flavor| {
        let (redis, _upstream, gateway) = stack_on(managed_with_library(flavor), STACKED);
        wait_ready(&gateway, &format!("{flavor:?}"));
        let first = gateway.get("/api/orders");
        assert_eq!(first.status, 200, "{flavor:?}: {first:?}");
        // The library answers RESP2 arrays under RESP3 too: a rule of several limits is
        // shown by its binding one (the module's map names each).
        let remaining: Vec<i64> = first.limits().iter().map(|t| t.r).collect();
        assert_eq!(remaining, [4, 1], "{flavor:?}: {first:?}");
        assert_eq!(gateway.get("/api/orders").status, 200, "{flavor:?}");
        let denied = gateway.get("/api/orders");
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        // The denial charged neither rule: the per-client budget still has 3.
        let look = fcall_reply(
            &mut redis.conn(),
            "rl_peek",
            "rl:{ip:127.0.0.1}:per-ip",
            &["5", "1h", "100", "1d"],
        );
        assert_eq!(look.remaining + i64::from(look.allowed), 3, "{flavor:?}");
    });
}

#[test]
fn a_concurrency_lease_is_taken_and_given_back_by_the_library() {
    const KEY: &str = "rl:{ip:127.0.0.1}:llm:lease";
    let held = |redis: &Server| -> i64 {
        let reply: Vec<redis::Value> = redis::cmd("FCALL")
            .arg("rl_leases")
            .arg(1)
            .arg(KEY)
            .arg(1)
            .query(&mut redis.conn())
            .expect("FCALL rl_leases");
        match reply.first() {
            Some(redis::Value::Int(n)) => *n,
            other => panic!("rl_leases answered {other:?}"),
        }
    };
    each_flavor(|flavor| {
        let rules = "[[rule]]\nname = \"llm\"\npath = \"/slow\"\nconcurrency = 1\n\
                     lease_ttl = \"300s\"\n";
        let (redis, upstream, gateway) = stack_on(managed_with_library(flavor), rules);
        wait_ready(&gateway, &format!("{flavor:?}"));
        let first = in_flight(&gateway, "/slow?hold=1");
        wait_until(PROBE, "the request reaches the upstream", || {
            upstream.requests() == 1
        });
        assert_eq!(held(&redis), 1, "{flavor:?}");
        let extra = gateway.get("/slow?hold=1");
        assert_eq!(extra.status, 429, "{flavor:?}: {extra:?}");
        upstream.release_held();
        assert_eq!(first.join().expect("the request"), 200, "{flavor:?}");
        wait_until(PROBE, "the lease is given back", || held(&redis) == 0);
        assert_eq!(upstream.requests(), 1, "{flavor:?}");
    });
}

/// Only failed logins use the budget: charged first, refunded when the status is another.
const COUNTED: &str = r#"
[[rule]]
name = "login"
methods = ["POST"]
path = "/auth/login"
limits = ["2/1h"]
count = [401]
"#;

#[test]
fn count_by_status_refunds_through_the_library() {
    each_flavor(|flavor| {
        let (_redis, upstream, gateway) = stack_on(managed_with_library(flavor), COUNTED);
        wait_ready(&gateway, &format!("{flavor:?}"));
        for i in 0..4 {
            let resp = gateway.post("/auth/login");
            assert_eq!(resp.status, 200, "{flavor:?} success {i}: {resp:?}");
        }
        for i in 0..2 {
            let resp = gateway.post("/auth/login?status=401");
            assert_eq!(resp.status, 401, "{flavor:?} failure {i}: {resp:?}");
        }
        let denied = gateway.post("/auth/login");
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        assert_eq!(upstream.requests(), 6, "{flavor:?}");
    });
}

const FAILURES: &str = r#"
[[rule]]
name = "open"
path = "/open/**"
limits = ["100/1h"]
on_redis_failure = "open"

[[rule]]
name = "closed"
path = "/closed/**"
limits = ["100/1h"]
on_redis_failure = "closed"
"#;

#[test]
fn a_lost_server_fails_each_rule_open_or_closed_on_the_library() {
    each_flavor(|flavor| {
        let (redis, _upstream, gateway) = stack_on(managed_with_library(flavor), FAILURES);
        wait_ready(&gateway, &format!("{flavor:?}"));
        for path in ["/open/x", "/closed/x"] {
            let resp = gateway.get(path);
            assert_eq!(resp.status, 200, "{flavor:?} {path}: {resp:?}");
            assert_eq!(resp.remaining(), 99, "{flavor:?} {path}: {resp:?}");
        }
        let _config = redis.shutdown("NOSAVE");
        let open = gateway.get("/open/x");
        assert_eq!(open.status, 200, "{flavor:?}: {open:?}");
        assert!(open.fail_open_reason().is_some(), "{flavor:?}: {open:?}");
        assert!(!open.has_ratelimit_headers(), "{flavor:?}: {open:?}");
        let closed = gateway.get("/closed/x");
        assert_eq!(closed.status, 503, "{flavor:?}: {closed:?}");
    });
}

const DESCRIPTORS: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 2
"#;

#[test]
fn envoy_descriptors_are_decided_by_the_library() {
    each_flavor(|flavor| {
        let redis = managed_with_library(flavor);
        let mut envoy = EnvoyGateway::on(&redis, &[("api.yaml", DESCRIPTORS)]);
        wait_ready(&envoy.gateway, &format!("{flavor:?}"));
        let ask = || request("api", vec![desc(&[("user", "u1")])]);
        for expected in [1, 0] {
            let answer = envoy.ask(ask());
            assert_eq!(overall(&answer), Code::Ok, "{flavor:?}: {answer:?}");
            assert_eq!(remaining(&answer, 0), expected, "{flavor:?}: {answer:?}");
        }
        let answer = envoy.ask(ask());
        assert_eq!(overall(&answer), Code::OverLimit, "{flavor:?}: {answer:?}");
        assert!(redis.command_calls("FCALL").unwrap_or(0) >= 3, "{flavor:?}");
    });
}

#[test]
fn neither_module_nor_library_is_not_ready_and_names_both_fixes() {
    each_flavor(|flavor| {
        let (_redis, upstream, gateway) = stack_on(ServerConfig::managed(flavor).start(), RULES);
        let body = wait_not_ready(&gateway, "neither the module", &format!("{flavor:?}"));
        assert!(body.contains("Functions library ratelimit"), "{body}");
        let log = gateway.log();
        let line = log
            .lines()
            .find(|line| line.contains("neither the module"))
            .unwrap_or_else(|| panic!("{flavor:?}: no log line: {log}"));
        for fix in ["--loadmodule", "functions_load", "FUNCTION LOAD"] {
            assert!(line.contains(fix), "{flavor:?}: '{fix}' not in {line}");
        }
        // Rules decide as their failure settings say (an unknown command is an error
        // reply, which closes a rule by default): nothing unlimited reaches the API.
        let resp = gateway.get("/api/items");
        assert_eq!(resp.status, 503, "{flavor:?}: {resp:?}");
        assert_eq!(upstream.requests(), 0, "{flavor:?}");
    });
}

/// A library of the same name, of another version.
const OTHER_VERSION: &str = "#!lua name=ratelimit\n\
    redis.register_function{function_name='rl_version', \
    callback=function() return '0.0.1-other' end, flags={'no-writes'}}\n\
    redis.register_function('rl_hit', function() return {1, 9, 9, 0, 0} end)\n";

/// Loads [`OTHER_VERSION`] into `redis`.
fn load_other_version(redis: &Server) {
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(OTHER_VERSION)
        .query(&mut redis.conn())
        .expect("FUNCTION LOAD the other version");
}

/// A gateway in front of `upstream` deciding [`RULES`] on `redis`, with `extra` lines in
/// its `[redis]` section.
fn with_rules(upstream: &Upstream, redis: &Server, extra: &str) -> Gateway {
    Gateway::start(
        &upstream.server_line(),
        &format!("{}{RULES}", redis_section(redis.port(), extra)),
    )
}

#[test]
fn a_library_of_another_version_is_never_used_nor_replaced() {
    each_flavor(|flavor| {
        let redis = ServerConfig::managed(flavor).start();
        load_other_version(&redis);
        let upstream = Upstream::start();
        let gateway = with_rules(&upstream, &redis, "functions_load = \"if-missing\"");
        let body = wait_not_ready(&gateway, "0.0.1-other", &format!("{flavor:?}"));
        assert!(body.contains(env!("CARGO_PKG_VERSION")), "{body}");
        assert!(
            gateway.log_lines_with("never replaces") >= 1,
            "{flavor:?}: {}",
            gateway.log()
        );
        assert_eq!(
            version_on(&mut redis.conn()).expect("rl_version"),
            "0.0.1-other",
            "{flavor:?}: left as it was"
        );
        // Its rl_hit would allow everything: the gateway never calls it.
        let resp = gateway.get("/api/items");
        assert_eq!(resp.status, 503, "{flavor:?}: {resp:?}");
        assert_eq!(upstream.requests(), 0, "{flavor:?}");
        assert_eq!(redis.command_calls("FCALL"), None, "{flavor:?}");
    });
}

#[test]
fn backend_functions_with_another_version_calls_neither_it_nor_the_module() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        load_other_version(&redis);
        let upstream = Upstream::start();
        let gateway = with_rules(&upstream, &redis, "backend = \"functions\"");
        wait_not_ready(&gateway, "0.0.1-other", &format!("{flavor:?}"));
        let resp = gateway.get("/api/items");
        assert_eq!(resp.status, 503, "{flavor:?}: {resp:?}");
        assert_eq!(upstream.requests(), 0, "{flavor:?}");
        assert_eq!(redis.command_calls("FCALL"), None, "{flavor:?}");
        assert_eq!(redis.command_calls("RL.HIT"), None, "{flavor:?}");
        assert!(
            gateway.log_lines_with("no backend to decide with") >= 1,
            "{flavor:?}: {}",
            gateway.log()
        );
    });
}

#[test]
fn if_missing_loads_the_gateways_own_library() {
    each_flavor(|flavor| {
        let redis = ServerConfig::managed(flavor).start();
        let upstream = Upstream::start();
        let gateway = with_rules(&upstream, &redis, "functions_load = \"if-missing\"");
        wait_ready(&gateway, &format!("{flavor:?}"));
        assert_eq!(
            version_on(&mut redis.conn()).expect("rl_version"),
            env!("CARGO_PKG_VERSION"),
            "{flavor:?}"
        );
        assert_eq!(
            gateway.log_lines_with("loaded the Functions library ratelimit"),
            1,
            "{flavor:?}: {}",
            gateway.log()
        );
        let statuses: Vec<u16> = (0..4).map(|_| gateway.get("/api/items").status).collect();
        assert_eq!(statuses, [200, 200, 200, 429], "{flavor:?}");
    });
}

#[test]
fn auto_prefers_the_module_where_both_are_there() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        redis.load_functions();
        let (redis, _upstream, gateway) = stack_on(redis, RULES);
        wait_ready(&gateway, &format!("{flavor:?}"));
        gateway.get("/api/items");
        assert!(
            gateway.log_lines_with("RL.HIT known") >= 1,
            "{}",
            gateway.log()
        );
        assert_eq!(redis.command_calls("RL.HIT"), Some(1), "{flavor:?}");
        assert_eq!(redis.command_calls("FCALL"), None, "{flavor:?}");
    });
}

#[test]
fn backend_module_wants_the_module_even_where_the_library_is() {
    each_flavor(|flavor| {
        let redis = managed_with_library(flavor);
        let upstream = Upstream::start();
        let gateway = with_rules(&upstream, &redis, "backend = \"module\"");
        wait_not_ready(&gateway, "RL.HIT unknown", &format!("{flavor:?}"));
        assert_eq!(redis.command_calls("FCALL"), None, "{flavor:?}");
    });
}

/// A gateway on `cluster` (its primaries as seeds), keyed by `X-User`, 2 per hour, with
/// `[redis]` lines `extra`.
fn cluster_gateway(cluster: &Cluster, upstream: &Upstream, extra: &str) -> Gateway {
    let seeds = cluster.gateway_seeds();
    Gateway::start(
        &upstream.server_line(),
        &format!(
            "[redis]\ncluster = [{}]\ndeadline_ms = 1000\n{extra}\n[default]\n\
             key = \"header:X-User\"\nlimits = [\"2/1h\"]\n",
            seeds
        ),
    )
}

/// Every primary holds the library of this version, and decides its own users by it.
fn assert_library_decides_on_every_primary(cluster: &Cluster, gateway: &Gateway, what: &str) {
    for primary in cluster.primaries() {
        let port = primary.port();
        let version = version_on(&mut connect(port));
        assert_eq!(
            version.as_deref().ok(),
            Some(env!("CARGO_PKG_VERSION")),
            "{what} {port}"
        );
        // A user whose key lives on this primary is decided there, by the library.
        let user = cluster.tag_on(primary, "h:user");
        let user = user.trim_start_matches("h:");
        let statuses: Vec<u16> = (0..3)
            .map(|_| gateway.send("GET", "/x", &[("X-User", user)]).status)
            .collect();
        assert_eq!(statuses, [200, 200, 429], "{what} {port}");
        assert!(
            primary.command_calls("FCALL").unwrap_or(0) >= 3,
            "{what} {port}"
        );
        assert_eq!(primary.command_calls("RL.HIT"), None, "{what} {port}");
    }
}

#[test]
fn auto_loads_the_library_on_every_primary_of_a_managed_cluster() {
    each_flavor(|flavor| {
        let cluster = Cluster::start_with(flavor, 3, 0, &NodeSetup::managed());
        let upstream = Upstream::start();
        let gateway = cluster_gateway(&cluster, &upstream, "functions_load = \"if-missing\"");
        wait_ready(&gateway, &format!("{flavor:?}"));
        assert_eq!(
            gateway.log_lines_with("loaded the Functions library ratelimit"),
            3,
            "{flavor:?}: one line per primary: {}",
            gateway.log()
        );
        assert_library_decides_on_every_primary(&cluster, &gateway, &format!("{flavor:?}"));
        // One primary loses it: the first call that finds it gone has the gateway probe
        // again, and load it there again.
        let primary = cluster.primaries()[1];
        let _: String = redis::cmd("FUNCTION")
            .arg("DELETE")
            .arg("ratelimit")
            .query(&mut connect(primary.port()))
            .expect("FUNCTION DELETE");
        let user = cluster.tag_on(primary, "h:other");
        let user = user.trim_start_matches("h:");
        let resp = gateway.send("GET", "/x", &[("X-User", user)]);
        assert_eq!(resp.status, 503, "{flavor:?}: {resp:?}");
        wait_until(PROBE, "the library is loaded there again", || {
            version_on(&mut connect(primary.port())).is_ok()
        });
        wait_ready(&gateway, &format!("{flavor:?} after the reload"));
        let resp = gateway.send("GET", "/x", &[("X-User", user)]);
        assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
        assert_eq!(resp.remaining(), 1, "{flavor:?}: {resp:?}");
    });
}

#[test]
fn backend_functions_uses_the_library_where_the_module_is_loaded_too() {
    each_flavor(|flavor| {
        let cluster = Cluster::start(flavor, 3, 0);
        // The library on one primary only: the gateway is not ready until every primary
        // has it.
        let first = cluster.primaries()[0].port();
        testkit::functions::load_functions(&mut connect(first));
        let upstream = Upstream::start();
        let gateway = cluster_gateway(&cluster, &upstream, "backend = \"functions\"");
        let body = wait_not_ready(
            &gateway,
            "is not loaded on 127.0.0.1:",
            &format!("{flavor:?}"),
        );
        assert!(!body.contains("neither the module"), "{flavor:?}: {body}");
        for primary in cluster.primaries() {
            testkit::functions::load_functions(&mut connect(primary.port()));
        }
        wait_ready(&gateway, &format!("{flavor:?} once every primary has it"));
        assert_library_decides_on_every_primary(&cluster, &gateway, &format!("{flavor:?}"));
    });
}

#[test]
fn a_library_deleted_under_the_gateway_is_looked_for_again() {
    each_flavor(|flavor| {
        let (redis, _upstream, gateway) = stack_on(managed_with_library(flavor), RULES);
        wait_ready(&gateway, &format!("{flavor:?}"));
        assert_eq!(gateway.get("/api/items").status, 200, "{flavor:?}");
        let _: String = redis::cmd("FUNCTION")
            .arg("DELETE")
            .arg("ratelimit")
            .query(&mut redis.conn())
            .expect("FUNCTION DELETE");
        // The call that finds it gone is an error reply (closed by default), and has the
        // next beat probe again: not ready, saying so.
        let resp = gateway.get("/api/items");
        assert_eq!(resp.status, 503, "{flavor:?}: {resp:?}");
        wait_not_ready(&gateway, "neither the module", &format!("{flavor:?}"));
        redis.load_functions();
        wait_ready(&gateway, &format!("{flavor:?} once loaded again"));
        let resp = gateway.get("/api/items");
        assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
    });
}

#[test]
fn after_a_restart_the_server_is_probed_again_and_if_missing_loads_it_again() {
    each_flavor(|flavor| {
        let redis = ServerConfig::managed(flavor).start();
        let upstream = Upstream::start();
        let gateway = with_rules(&upstream, &redis, "functions_load = \"if-missing\"");
        wait_ready(&gateway, &format!("{flavor:?}"));
        // Restarted empty (no RDB, so no library): the gateway finds it and loads it again.
        let redis = redis.shutdown("NOSAVE").start();
        wait_until(PROBE, "the library is loaded again", || {
            version_on(&mut redis.conn()).is_ok()
        });
        wait_ready(&gateway, &format!("{flavor:?} after the restart"));
        assert_eq!(
            gateway.log_lines_with("loaded the Functions library ratelimit"),
            2,
            "{flavor:?}: {}",
            gateway.log()
        );
        let statuses: Vec<u16> = (0..4).map(|_| gateway.get("/api/items").status).collect();
        assert_eq!(statuses, [200, 200, 200, 429], "{flavor:?}");
    });
}
