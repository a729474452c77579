//! When Redis cannot decide within the deadline, each Envoy descriptor answers as its
//! `on_failure` says (ok, over_limit, unavailable), quickly and counted in the metrics.

use std::time::{Duration, Instant};
use testkit::gateway::envoy::*;
use testkit::gateway::*;

const DESCRIPTORS: &str = r#"
domain: api
on_failure: ok
descriptors:
  - key: open
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: closed
    on_failure: over_limit
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: strict
    on_failure: unavailable
    rate_limit: {unit: hour, requests_per_unit: 100}
"#;

/// The slack over the deadline for a debug build on a busy 2-core machine.
const MARGIN: Duration = Duration::from_millis(250);

#[test]
fn a_stopped_redis_fails_open_closed_or_unavailable_within_the_deadline() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let deadline_ms = 30;
        let mut envoy = EnvoyGateway::start(
            &redis_section_with(
                redis.port(),
                &format!("deadline_ms = {deadline_ms}\nbreaker_failures = 1000"),
            ),
            &[("api.yaml", DESCRIPTORS)],
        );
        // Healthy first (polled: a debug build's first decision may be slow).
        wait_until(Duration::from_secs(20), "a decision by Redis", || {
            let answer = envoy.ask(request("api", vec![desc(&[("open", "warm")])]));
            answer.statuses[0].current_limit.is_some() && remaining(&answer, 0) < 100
        });
        let before = envoy.gateway.metrics();
        let stopped = Stopped::new(redis.pid());
        let timed = |envoy: &mut EnvoyGateway, key: &str| {
            let started = Instant::now();
            let answer = envoy.call(request("api", vec![desc(&[(key, "x")])]));
            let took = started.elapsed();
            assert!(
                took <= Duration::from_millis(deadline_ms) + MARGIN,
                "{flavor:?} {key}: {took:?}"
            );
            answer
        };
        for _ in 0..3 {
            let open = timed(&mut envoy, "open").expect("answered");
            assert_eq!(overall(&open), Code::Ok, "{flavor:?}: {open:?}");
            let closed = timed(&mut envoy, "closed").expect("answered");
            assert_eq!(overall(&closed), Code::OverLimit, "{flavor:?}: {closed:?}");
            let strict = timed(&mut envoy, "strict").expect_err("UNAVAILABLE");
            assert_eq!(strict.code(), tonic::Code::Unavailable, "{flavor:?}");
        }
        // Several descriptors: the strictest answer wins, every one counted.
        let mixed = envoy.call(request(
            "api",
            vec![desc(&[("open", "y")]), desc(&[("closed", "y")])],
        ));
        assert_eq!(overall(&mixed.expect("answered")), Code::OverLimit);
        let metrics = envoy.gateway.metrics();
        let delta = |name: &str, labels: &[(&str, &str)]| {
            metrics.counter(name, labels) - before.counter(name, labels)
        };
        assert_eq!(
            delta("rl_gateway_fail_open_total", &[("reason", "timeout")]),
            4.0,
            "{}",
            metrics.text
        );
        assert_eq!(
            delta(
                "rl_gateway_decisions_total",
                &[("rule", "api.closed"), ("outcome", "fail_closed")]
            ),
            4.0,
            "{}",
            metrics.text
        );
        assert_eq!(
            delta(
                "rl_gateway_decisions_total",
                &[("rule", "api.strict"), ("outcome", "fail_closed")]
            ),
            3.0
        );
        assert_eq!(
            delta("rl_gateway_envoy_total", &[("result", "unavailable")]),
            3.0
        );
        stopped.resume();
        wait_until(Duration::from_secs(20), "decisions by Redis again", || {
            let answer = envoy.ask(request("api", vec![desc(&[("strict", "z")])]));
            overall(&answer) == Code::Ok && answer.statuses[0].duration_until_reset.is_some()
        });
    });
}

/// A descriptor without `on_failure` is limited locally (`local`, the default) while Redis
/// cannot decide: its limit divided by the live gateways (one here), OK then OVER_LIMIT,
/// counted as `local_allowed` and `local_denied`.
#[test]
fn a_stopped_redis_leaves_a_descriptor_its_local_limit() {
    const LOCAL: &str = "domain: api\ndescriptors:\n  - key: local\n    rate_limit: {unit: hour, requests_per_unit: 3}\n";
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let mut envoy = EnvoyGateway::start(
            &redis_section_with(redis.port(), "deadline_ms = 30"),
            &[("api.yaml", LOCAL)],
        );
        wait_until(Duration::from_secs(20), "a decision by Redis", || {
            let answer = envoy.ask(request("api", vec![desc(&[("local", "warm")])]));
            answer.statuses[0].current_limit.is_some() && remaining(&answer, 0) < 3
        });
        let stopped = Stopped::new(redis.pid());
        let codes: Vec<Code> = (0..6)
            .map(|_| overall(&envoy.ask(request("api", vec![desc(&[("local", "x")])]))))
            .collect();
        stopped.resume();
        assert_eq!(
            codes,
            [
                Code::Ok,
                Code::Ok,
                Code::Ok,
                Code::OverLimit,
                Code::OverLimit,
                Code::OverLimit
            ],
            "{flavor:?}"
        );
        let metrics = envoy.gateway.metrics();
        let metric = "api.local";
        assert_eq!(
            metrics.decisions(metric, "local_allowed"),
            3.0,
            "{}",
            metrics.text
        );
        assert_eq!(
            metrics.decisions(metric, "local_denied"),
            3.0,
            "{}",
            metrics.text
        );
    });
}
