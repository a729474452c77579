//! Reverse-proxy details: a header the client names in `Connection` is gone before the
//! decision (so it cannot choose the budget it never shows the upstream), spellings of one
//! path share one budget, upgrades are refused with 501, and an upstream slower than
//! `upstream_timeout_ms` gets the client a 504.

use testkit::gateway::*;

const RULES: &str = r#"
[[rule]]
name = "keyed"
path = "/keyed"
key = "header:X-Api-Key"
limits = ["100/1h"]

[default]
per_endpoint = true
limits = ["100/1h"]
"#;

#[test]
fn a_key_header_named_in_connection_does_not_choose_the_budget() {
    let (redis, _upstream, gateway) = stack(Flavor::Redis, RULES);
    let resp = gateway.send(
        "GET",
        "/keyed",
        &[("X-Api-Key", "fresh-budget"), ("Connection", "X-Api-Key")],
    );
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(
        resp.upstream_saw_header("x-api-key"),
        None,
        "stripped for the upstream"
    );
    assert_eq!(
        keys(&redis, "rl:*"),
        vec!["rl:{ip:127.0.0.1}:keyed".to_string()]
    );
}

#[test]
fn spellings_of_one_path_share_one_budget() {
    let (redis, _upstream, gateway) = stack(Flavor::Redis, RULES);
    let remaining: Vec<i64> = ["/home", "//home/", "/./home", "/x/../home", "/%68ome"]
        .iter()
        .map(|path| gateway.get(path).remaining())
        .collect();
    assert_eq!(remaining, [99, 98, 97, 96, 95]);
    assert_eq!(
        keys(&redis, "rl:*"),
        vec!["rl:{ip:127.0.0.1}:default:GET /home".to_string()]
    );
}

#[test]
fn upgrades_are_refused_and_a_slow_upstream_is_a_504() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        &format!("{}upstream_timeout_ms = 300\n", upstream.server_line()),
        &format!("{}{RULES}", redis_section(redis.port(), "")),
    );
    let before = upstream.requests();
    let resp = gateway.send(
        "GET",
        "/chat",
        &[("Connection", "Upgrade"), ("Upgrade", "websocket")],
    );
    assert_eq!(resp.status, 501, "{resp:?}");
    assert_eq!(upstream.requests(), before, "not forwarded");

    let (resp, took) = timed(|| gateway.get("/slow?delay_ms=3000"));
    assert_eq!(resp.status, 504, "{resp:?}");
    assert_eq!(resp.body, "Gateway Timeout\n");
    assert!(
        took.as_millis() < 2500,
        "answered at the timeout, not the upstream's pace: {took:?}"
    );
    assert_eq!(gateway.get("/fast").status, 200);
}
