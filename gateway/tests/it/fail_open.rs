//! When Redis cannot decide, a fail-open rule (`on_redis_failure = "open"`) forwards the request with
//! `X-RateLimit-Fail-Open: <reason>` added for the upstream, and the client's answer has no
//! RateLimit headers: Redis never started (`connection`), stopped with SIGSTOP (`timeout`,
//! every answer within the deadline plus a margin), error replies (`error` for an unknown
//! command, on a rule with `on_module_error = "open"`, since an error reply closes a rule
//! by default; `unavailable` for READONLY and OOM), and the circuit breaker (`breaker`) that
//! stops calling Redis after `breaker_failures` failures in a row and closes again once
//! Redis answers.

use std::time::Duration;
use testkit::gateway::*;

const RULES: &str = r#"
[[rule]]
name = "api"
path = "/**"
limits = ["100/1h"]
algorithm = "log"
on_module_error = "open"
on_redis_failure = "open"
"#;

/// What a debug build on a busy machine may add to `deadline_ms` for one whole request
/// (the decision, forwarding, the upstream's answer).
const MARGIN: Duration = Duration::from_millis(250);

/// A fail-open answer: the upstream's 200, told why, and no RateLimit headers for the
/// client. Returns the reason.
fn assert_failed_open(resp: &Resp, what: &str) -> String {
    assert_eq!(resp.status, 200, "{what}: {resp:?}");
    assert!(
        resp.upstream_request_line().starts_with("GET /"),
        "{what}: forwarded to the upstream: {resp:?}"
    );
    assert!(
        !resp.has_ratelimit_headers(),
        "{what}: no RateLimit headers when failing open: {resp:?}"
    );
    resp.fail_open_reason()
        .unwrap_or_else(|| panic!("{what}: the upstream got no X-RateLimit-Fail-Open: {resp:?}"))
}

// The deadline is generous: the point is how a refused connection is classified, and on a
// loaded machine even a refused local connect can take longer than a tight deadline.
#[test]
fn redis_never_started_fails_open_with_connection_then_breaker() {
    let nobody = free_port();
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        &upstream.server_line(),
        &format!(
            "{}{RULES}",
            redis_section_with(
                nobody,
                "deadline_ms = 1000\nbreaker_failures = 3\nbreaker_open_ms = 60000"
            )
        ),
    );
    let reasons: Vec<String> = (0..10)
        .map(|i| assert_failed_open(&gateway.get(&format!("/x/{i}")), &format!("request {i}")))
        .collect();
    assert_eq!(reasons[0], "connection", "{reasons:?}");
    assert!(
        reasons.iter().all(|r| r == "connection" || r == "breaker"),
        "{reasons:?}"
    );
    assert!(
        reasons[3..].iter().all(|r| r == "breaker"),
        "after 3 failures the breaker is open: {reasons:?}"
    );
    assert_eq!(upstream.requests(), 10);

    let connection = reasons.iter().filter(|r| *r == "connection").count() as f64;
    let breaker = reasons.iter().filter(|r| *r == "breaker").count() as f64;
    let metrics = gateway.metrics();
    assert_eq!(
        metrics.fail_open("connection"),
        connection,
        "{}",
        metrics.text
    );
    assert_eq!(metrics.fail_open("breaker"), breaker, "{}", metrics.text);
    assert_eq!(
        metrics.decisions("api", "fail_open"),
        10.0,
        "{}",
        metrics.text
    );
    assert_eq!(metrics.decisions("api", "allowed"), 0.0, "{}", metrics.text);
    assert_eq!(
        metrics.value("rl_gateway_breaker_open", &[]),
        Some(1.0),
        "{}",
        metrics.text
    );
}

#[test]
fn a_stopped_redis_answers_within_the_deadline_then_the_breaker_opens_and_closes() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let deadline_ms = 20;
        let gateway = Gateway::start(
            &upstream.server_line(),
            &format!(
                "{}{RULES}",
                redis_section_with(
                    redis.port(),
                    &format!(
                        "deadline_ms = {deadline_ms}\nbreaker_failures = 3\nbreaker_open_ms = 1000\n\
                         breaker_silence_ms = 0"
                    )
                )
            ),
        );
        // Healthy first (polled: a debug build's very first decision may be slow).
        wait_until(Duration::from_secs(20), "a decision by Redis", || {
            let resp = gateway.get("/warm");
            resp.status == 200 && resp.has_ratelimit_headers()
        });

        let before = gateway.metrics();
        let stopped = Stopped::new(redis.pid());
        let mut reasons = Vec::new();
        for i in 0..8 {
            let (resp, took) = timed(|| gateway.get(&format!("/stopped/{i}")));
            let reason = assert_failed_open(&resp, &format!("{flavor:?} request {i}"));
            assert!(
                took <= Duration::from_millis(deadline_ms) + MARGIN,
                "{flavor:?} request {i} ({reason}) took {took:?}, over the {deadline_ms} ms \
                 deadline plus {MARGIN:?}"
            );
            reasons.push(reason);
        }
        assert_eq!(
            reasons[..3],
            ["timeout", "timeout", "timeout"],
            "{flavor:?}: {reasons:?}"
        );
        assert_eq!(
            reasons[3], "breaker",
            "{flavor:?}: three failures in a row open the breaker: {reasons:?}"
        );
        assert!(
            reasons.iter().all(|r| r == "timeout" || r == "breaker"),
            "{flavor:?}: {reasons:?}"
        );
        let metrics = gateway.metrics();
        for reason in ["timeout", "breaker"] {
            let seen = reasons.iter().filter(|r| *r == reason).count() as f64;
            assert_eq!(
                metrics.fail_open(reason) - before.fail_open(reason),
                seen,
                "{flavor:?} {reason}:\n{}",
                metrics.text
            );
        }
        assert_eq!(
            metrics.decisions("api", "fail_open") - before.decisions("api", "fail_open"),
            8.0,
            "{flavor:?}:\n{}",
            metrics.text
        );

        stopped.resume();
        // The breaker lets a call through after breaker_open_ms; Redis answers again.
        wait_until(Duration::from_secs(20), "decisions by Redis again", || {
            let resp = gateway.get("/resumed");
            resp.status == 200 && resp.has_ratelimit_headers() && resp.fail_open_reason().is_none()
        });
        assert_eq!(
            gateway.metrics().value("rl_gateway_breaker_open", &[]),
            Some(0.0),
            "{flavor:?}"
        );
    });
}

/// Starts a gateway in front of `redis_port` whose breaker never opens during the test.
fn gateway_for(redis_port: u16, upstream: &Upstream) -> Gateway {
    Gateway::start(
        &upstream.server_line(),
        &format!(
            "{}{RULES}",
            redis_section(redis_port, "breaker_failures = 1000")
        ),
    )
}

fn assert_reason_three_times(gateway: &Gateway, expected: &str, what: &str) {
    for i in 0..3 {
        let resp = gateway.get(&format!("/e/{i}"));
        let reason = assert_failed_open(&resp, what);
        assert_eq!(reason, expected, "{what} request {i}: {resp:?}");
    }
    let metrics = gateway.metrics();
    assert_eq!(
        metrics.fail_open(expected),
        3.0,
        "{what}:\n{}",
        metrics.text
    );
    assert_eq!(
        metrics.decisions("api", "fail_open"),
        3.0,
        "{what}:\n{}",
        metrics.text
    );
}

#[test]
fn an_unknown_command_fails_open_as_error() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).without_module().start();
        let upstream = Upstream::start();
        let gateway = gateway_for(redis.port(), &upstream);
        assert_reason_three_times(&gateway, "error", &format!("{flavor:?} without the module"));
        assert_eq!(upstream.requests(), 3);
    });
}

#[test]
fn a_read_only_replica_fails_open_as_unavailable() {
    each_flavor(|flavor| {
        let (_primary, replica) = primary_with_replica(flavor);
        let upstream = Upstream::start();
        let gateway = gateway_for(replica.port(), &upstream);
        assert_reason_three_times(&gateway, "unavailable", &format!("{flavor:?} replica"));
    });
}

#[test]
fn out_of_memory_fails_open_as_unavailable() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor)
            .arg("maxmemory", "1")
            .arg("maxmemory-policy", "noeviction")
            .start();
        let upstream = Upstream::start();
        let gateway = gateway_for(redis.port(), &upstream);
        assert_reason_three_times(&gateway, "unavailable", &format!("{flavor:?} OOM"));
    });
}

#[test]
fn the_fail_open_header_name_is_configurable() {
    let nobody = free_port();
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        &upstream.server_line(),
        &format!(
            "{}[headers]\nfail_open = \"X-Limiter-Bypassed\"\n{RULES}",
            redis_section(nobody, "")
        ),
    );
    let resp = gateway.get("/x");
    assert_eq!(resp.status, 200, "{resp:?}");
    let reason = resp
        .upstream_saw_header("x-limiter-bypassed")
        .unwrap_or_else(|| panic!("the upstream got no X-Limiter-Bypassed: {resp:?}"));
    assert!(reason == "connection" || reason == "breaker", "{reason:?}");
    assert!(
        resp.fail_open_reason().is_none(),
        "the default name is not used: {resp:?}"
    );
}

#[test]
fn a_fail_open_header_sent_by_the_client_never_reaches_the_upstream() {
    each_flavor(|flavor| {
        let (_redis, _upstream, gateway) = stack(flavor, RULES);
        let resp = gateway.send("GET", "/forged", &[("X-RateLimit-Fail-Open", "timeout")]);
        assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
        assert!(
            resp.has_ratelimit_headers(),
            "{flavor:?}: decided: {resp:?}"
        );
        assert_eq!(
            resp.fail_open_reason(),
            None,
            "{flavor:?}: the forged mark is dropped"
        );
    });
}
