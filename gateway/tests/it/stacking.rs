//! Rule stacking (`stack = true`): several rules apply to one request and all must allow
//! it. On one server (Redis 7.0 and Valkey 8.1) every applying key goes into one
//! `RL.MHIT`: counted in all or in none, a denial writes nothing. Each rule's failure
//! fails open or closed as that rule says. The Cluster paths (keys in one slot and keys in
//! different slots, charged in order and given back) are in `stacking_cluster.rs`.

use testkit::gateway::*;
use testkit::get_bytes;

use std::sync::Arc;

/// A per-client budget for the whole API, stacked on a stricter one for one endpoint.
const RULES: &str = r#"
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

const PER_IP: &str = "rl:{ip:127.0.0.1}:per-ip";
const ORDERS: &str = "rl:{ip:127.0.0.1}:orders";

/// What `key` has left under `tiers`, asked with RL.PEEK (nothing written), which answers
/// what a hit would leave: one more when it would be allowed.
fn peek_remaining(redis: &Server, key: &str, tiers: &[&str]) -> i64 {
    let values: Vec<i64> = redis::cmd("RL.PEEK")
        .arg(key)
        .arg(tiers)
        .query(&mut redis.conn())
        .expect("RL.PEEK");
    values[2] + values[0]
}

fn names(tiers: &[LimitTier]) -> Vec<&str> {
    tiers.iter().map(|t| t.name.as_str()).collect()
}

#[test]
fn stacked_rules_are_all_counted_in_one_call_and_all_listed() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, RULES);
        let first = gateway.get("/api/orders");
        assert_eq!(first.status, 200, "{flavor:?}: {first:?}");
        let limits = first.limits();
        assert_eq!(
            names(&limits),
            ["per-ip-1", "per-ip-2", "orders"],
            "{flavor:?}: every limit of every applying rule, in rule order: {first:?}"
        );
        assert_eq!(
            limits.iter().map(|t| t.r).collect::<Vec<_>>(),
            [4, 99, 1],
            "{flavor:?}"
        );
        let policy = first.policy();
        assert_eq!(
            policy.iter().map(|p| (p.q, p.w)).collect::<Vec<_>>(),
            [(5, Some(3600)), (100, Some(86400)), (2, Some(3600))],
            "{flavor:?}"
        );
        assert_eq!(
            peek_remaining(&redis, PER_IP, &["5", "1h", "100", "1d"]),
            4,
            "{flavor:?}"
        );
        assert_eq!(
            peek_remaining(&redis, ORDERS, &["2", "1h"]),
            1,
            "{flavor:?}"
        );
        // One call decided both rules.
        assert_eq!(redis.command_calls("RL.MHIT"), Some(1), "{flavor:?}");
        assert_eq!(redis.command_calls("RL.HIT"), None, "{flavor:?}");

        // Another endpoint: only the stacking rule applies (no default), on its own key.
        let items = gateway.get("/api/items");
        assert_eq!(items.status, 200, "{flavor:?}: {items:?}");
        assert_eq!(
            names(&items.limits()),
            ["per-ip-1", "per-ip-2"],
            "{flavor:?}"
        );
        assert_eq!(items.limits()[0].r, 3, "{flavor:?}: the same per-ip budget");
        assert_eq!(upstream.requests(), 2, "{flavor:?}");
    });
}

#[test]
fn a_denial_by_one_rule_counts_in_none_and_names_the_binding_rule() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, RULES);
        for _ in 0..2 {
            assert_eq!(gateway.get("/api/orders").status, 200, "{flavor:?}");
        }
        let per_ip_before = get_bytes(&mut redis.conn(), PER_IP);
        let orders_before = get_bytes(&mut redis.conn(), ORDERS);
        let offset_before = redis.master_repl_offset();

        let denied = gateway.get("/api/orders");
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        assert_eq!(denied.body, "Too Many Requests\n", "{flavor:?}");
        let limits = denied.limits();
        assert_eq!(
            names(&limits),
            ["orders", "per-ip-1", "per-ip-2"],
            "{flavor:?}: the binding rule first, then the others: {denied:?}"
        );
        assert_eq!(limits[0].r, 0, "{flavor:?}");
        assert_eq!(limits[1].r, 3, "{flavor:?}: per-ip still has 3, none taken");
        let policy = denied.policy();
        assert_eq!(policy[0].name, "orders", "{flavor:?}");
        // Retry-After is the binding rule's wait: within its hour.
        let retry = denied.retry_after();
        assert!(retry <= 3600, "{flavor:?}: {retry}");

        assert_eq!(
            get_bytes(&mut redis.conn(), PER_IP),
            per_ip_before,
            "{flavor:?}: the allowing rule's key is not written"
        );
        assert_eq!(
            get_bytes(&mut redis.conn(), ORDERS),
            orders_before,
            "{flavor:?}"
        );
        assert_eq!(
            redis.master_repl_offset(),
            offset_before,
            "{flavor:?}: nothing propagated"
        );
        assert_eq!(
            peek_remaining(&redis, PER_IP, &["5", "1h", "100", "1d"]),
            3,
            "{flavor:?}"
        );

        // The per-ip budget is whole for the rest of the API: 3 more.
        for expected in [2, 1, 0] {
            let resp = gateway.get("/api/items");
            assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
            assert_eq!(resp.limits()[0].r, expected, "{flavor:?}");
        }
        let over = gateway.get("/api/items");
        assert_eq!(over.status, 429, "{flavor:?}: {over:?}");
        assert_eq!(
            names(&over.limits()),
            ["per-ip-1", "per-ip-2"],
            "{flavor:?}"
        );
        assert_eq!(upstream.requests(), 5, "{flavor:?}");

        let metrics = gateway.metrics();
        metrics.assert_decisions(
            &format!("{flavor:?}"),
            &[
                ("per-ip", "allowed", 5.0),
                ("per-ip", "denied", 1.0),
                ("orders", "allowed", 2.0),
                ("orders", "denied", 1.0),
            ],
        );
        assert_eq!(
            metrics.counter("rl_gateway_refunds_total", &[("rule", "per-ip")]),
            0.0,
            "{flavor:?}: one call, nothing to give back"
        );
    });
}

#[test]
fn concurrent_clients_never_get_more_than_any_limit() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, crowd::USER_THEN_CAP);
        let gateway = Arc::new(gateway);
        let per_user = crowd::admitted_per_user(&gateway);
        let total: usize = per_user.iter().sum();
        // One call per request, all or nothing: the cap is reached exactly.
        assert_eq!(total, 50, "{flavor:?}: {per_user:?}");
        assert_eq!(upstream.requests(), 50, "{flavor:?}");
        // What is counted is exactly what was admitted.
        assert_eq!(
            peek_remaining(&redis, "rl:{global}:cap", &["50", "1h"]),
            0,
            "{flavor:?}"
        );
        for (u, n) in per_user.iter().enumerate() {
            let key = format!("rl:{{h:u{u}}}:user");
            assert_eq!(
                peek_remaining(&redis, &key, &["20", "1h"]),
                20 - *n as i64,
                "{flavor:?}: {key}"
            );
        }
    });
}

#[test]
fn a_fail_closed_rule_that_cannot_be_decided_answers_503_even_if_the_others_allow() {
    // "orders" names a policy that does not exist: the module answers an error, which
    // closes that rule by default. The RL.MHIT fails as a whole; each rule is then asked
    // on its own, and per-ip's hit is given back.
    let rules = |on_module_error: &str| {
        format!(
            "[[rule]]\nname = \"per-ip\"\npath = \"/api/**\"\nlimits = [\"5/1h\"]\nstack = true\n\
             [[rule]]\nname = \"orders\"\npath = \"/api/orders\"\npolicy = \"missing\"\n\
             on_module_error = \"{on_module_error}\"\n"
        )
    };
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, &rules("closed"));
        let resp = gateway.get("/api/orders");
        assert_eq!(resp.status, 503, "{flavor:?}: {resp:?}");
        assert!(!resp.has_ratelimit_headers(), "{flavor:?}: {resp:?}");
        assert_eq!(upstream.requests(), 0, "{flavor:?}");
        assert_eq!(
            peek_remaining(&redis, PER_IP, &["5", "1h"]),
            5,
            "{flavor:?}: per-ip's hit was given back"
        );
        let metrics = gateway.metrics();
        assert_eq!(
            metrics.decisions("orders", "fail_closed"),
            1.0,
            "{flavor:?}"
        );
        assert_eq!(
            metrics.counter("rl_gateway_refunds_total", &[("rule", "per-ip")]),
            1.0,
            "{flavor:?}"
        );
        assert_eq!(
            metrics.counter("rl_gateway_module_errors_total", &[("rule", "orders")]),
            1.0,
            "{flavor:?}: the error is the rule's, named"
        );
        drop(gateway);

        let gateway = Gateway::in_front_of(&upstream, &redis, &rules("open"));
        let resp = gateway.get("/api/orders");
        assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
        assert_eq!(
            resp.fail_open_reason().as_deref(),
            Some("error"),
            "{flavor:?}"
        );
        assert_eq!(
            names(&resp.limits()),
            ["per-ip"],
            "{flavor:?}: the rule that decided is shown: {resp:?}"
        );
        assert_eq!(resp.limits()[0].r, 4, "{flavor:?}");
        assert_eq!(
            peek_remaining(&redis, PER_IP, &["5", "1h"]),
            4,
            "{flavor:?}"
        );
    });
}

#[test]
fn redis_down_closes_a_request_when_any_applying_rule_fails_closed() {
    let nobody = free_port();
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        &upstream.server_line(),
        &format!(
            "{}[[rule]]\nname = \"lenient\"\npath = \"/**\"\nlimits = [\"5/1h\"]\nstack = true\n\
             on_redis_failure = \"open\"\n\
             [[rule]]\nname = \"strict\"\npath = \"/strict\"\nkey = \"global\"\nlimits = [\"5/1h\"]\n\
             on_redis_failure = \"closed\"\n",
            redis_section(nobody, "")
        ),
    );
    let closed = gateway.get("/strict");
    assert_eq!(closed.status, 503, "{closed:?}");
    let open = gateway.get("/other");
    assert_eq!(open.status, 200, "{open:?}");
    assert!(open.fail_open_reason().is_some(), "{open:?}");
    assert_eq!(upstream.requests(), 1);
    let metrics = gateway.metrics();
    assert_eq!(metrics.decisions("strict", "fail_closed"), 1.0);
    assert_eq!(metrics.decisions("lenient", "fail_open"), 2.0);
}

#[test]
fn check_mode_stacks_too() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let gateway = Gateway::start(
            "mode = \"check\"\n",
            &format!("{}{RULES}", redis_section(redis.port(), "")),
        );
        for expected in [1, 0] {
            let resp = gateway.get("/api/orders");
            assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
            assert_eq!(resp.limits()[2].r, expected, "{flavor:?}");
        }
        let denied = gateway.get("/api/orders");
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        assert_eq!(denied.limits()[0].name, "orders", "{flavor:?}");
        assert_eq!(
            peek_remaining(&redis, PER_IP, &["5", "1h", "100", "1d"]),
            3,
            "{flavor:?}"
        );
    });
}
