//! `on_redis_failure = "closed"`: when Redis cannot decide, the route answers 503 and
//! forwards nothing, while a fail-open route of the same config still passes.

use testkit::gateway::*;

const RULES: &str = r#"
[[rule]]
name = "strict"
path = "/strict/**"
limits = ["100/1h"]
algorithm = "log"
on_redis_failure = "closed"

[[rule]]
name = "lenient"
path = "/open/**"
limits = ["100/1h"]
algorithm = "log"
on_redis_failure = "open"
"#;

fn assert_closed(gateway: &Gateway, what: &str) {
    let resp = gateway.get("/strict/thing");
    assert_eq!(resp.status, 503, "{what}: {resp:?}");
    assert_eq!(resp.body, "Service Unavailable\n", "{what}");
    assert!(!resp.has_ratelimit_headers(), "{what}: {resp:?}");
}

fn assert_open(gateway: &Gateway, what: &str) {
    let resp = gateway.get("/open/thing");
    assert_eq!(resp.status, 200, "{what}: {resp:?}");
    assert!(
        resp.fail_open_reason().is_some(),
        "{what}: the upstream is told: {resp:?}"
    );
    assert!(!resp.has_ratelimit_headers(), "{what}: {resp:?}");
}

#[test]
fn redis_never_started_closes_the_strict_route_only() {
    let nobody = free_port();
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        &upstream.server_line(),
        &format!("{}{RULES}", redis_section(nobody, "")),
    );
    for i in 0..3 {
        assert_closed(&gateway, &format!("strict {i}"));
    }
    assert_eq!(
        upstream.requests(),
        0,
        "a fail-closed request is not forwarded"
    );
    for i in 0..2 {
        assert_open(&gateway, &format!("lenient {i}"));
    }
    assert_eq!(upstream.requests(), 2);
    let metrics = gateway.metrics();
    metrics.assert_decisions(
        "Redis never started",
        &[
            ("strict", "fail_closed", 3.0),
            ("lenient", "fail_open", 2.0),
        ],
    );
}

#[test]
fn redis_going_down_closes_the_strict_route_that_worked_before() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, RULES);
        let resp = gateway.get("/strict/thing");
        assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
        assert_eq!(resp.remaining(), 99, "{flavor:?}: {resp:?}");
        assert!(resp.fail_open_reason().is_none(), "{flavor:?}: {resp:?}");

        drop(redis);
        assert_closed(&gateway, &format!("{flavor:?} after Redis went away"));
        assert_open(&gateway, &format!("{flavor:?} after Redis went away"));
        assert_eq!(upstream.requests(), 2, "{flavor:?}");
    });
}
