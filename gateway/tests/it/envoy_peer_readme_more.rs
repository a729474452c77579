//! envoyproxy/ratelimit's README, "Configuration", Examples 8 to 11 (metrics of matched
//! values, wildcards, `value_to_metric`, `share_threshold`), as `envoy_peer_readme.rs` does
//! Examples 1 to 7: the YAML unchanged, the requests the text describes, on Redis 7.0 and
//! on Valkey 8.1. The peer's metric keys (`<domain>.<key>_<value>...`) are the `rule` label
//! of `rl_gateway_decisions_total` and `rl_gateway_envoy_hits_total` here.

use crate::envoy_peer_readme::on_each_server;
use std::time::Duration;
use testkit::gateway::envoy::*;

const EXAMPLE_8: &str = include_str!("peer_cases/readme/example8.yaml");
const EXAMPLE_9_TRAILING: &str = include_str!("peer_cases/readme/example9_trailing.yaml");
const EXAMPLE_9_MIDDLE: &str = include_str!("peer_cases/readme/example9_middle.yaml");
const EXAMPLE_9_MULTIPLE: &str = include_str!("peer_cases/readme/example9_multiple.yaml");
const EXAMPLE_10: &str = include_str!("peer_cases/readme/example10.yaml");
const EXAMPLE_10_WILDCARD: &str = include_str!("peer_cases/readme/example10_wildcard.yaml");
const EXAMPLE_11: &str = include_str!("peer_cases/readme/example11.yaml");
const EXAMPLE_11_METRICS: &str = include_str!("peer_cases/readme/example11_metrics.yaml");

/// Asserts that one request was allowed under metric key `rule`, in our decisions and in
/// the peer's total_hits stat.
fn counted_under(envoy: &EnvoyGateway, rule: &str) {
    let metrics = envoy.gateway.metrics();
    assert_eq!(
        metrics.decisions(rule, "allowed"),
        1.0,
        "{rule}:\n{}",
        metrics.text
    );
    let hits = metrics.envoy_hits(rule, "total_hits");
    assert_eq!(hits, 1.0, "{rule} total_hits:\n{}", metrics.text);
}

/// Example 8: key1 with detailed_metric: each unspecified value counts under its own
/// metric key (key1_unspecified_value, key1_unspecified_value2) beside key1_value1, and
/// each has its own counter. (The text says 10 and 20 a second; the YAML, a minute.)
#[test]
fn example8_detailed_metric_names_the_value() {
    on_each_server(&[("example8.yaml", EXAMPLE_8)], |_, envoy| {
        let cases = [
            ("unspecified_value", 10),
            ("unspecified_value2", 10),
            ("value1", 20),
        ];
        for (value, limit) in cases {
            let answer = envoy.ask(request("example8", vec![desc(&[("key1", value)])]));
            let expected = (Code::Ok, Some((limit, UNIT_MINUTE)), limit - 1);
            assert_status(&answer, 0, expected, value);
        }
        for (value, _) in cases {
            counted_under(envoy, &format!("example8.key1_{value}"));
        }
    });
}

/// Example 9: `value: value*` matches value1, value2, valueXYZ, each with a counter of its
/// own; another value matches nothing.
#[test]
fn example9_trailing_wildcard() {
    on_each_server(&[("example9.yaml", EXAMPLE_9_TRAILING)], |_, envoy| {
        for value in ["value1", "value2", "valueXYZ"] {
            let answer = envoy.ask(request("example9", vec![desc(&[("key1", value)])]));
            assert_status(&answer, 0, (Code::Ok, Some((20, UNIT_MINUTE)), 19), value);
        }
        let other = envoy.ask(request("example9", vec![desc(&[("key1", "other")])]));
        assert_status(&other, 0, (Code::Ok, None, 0), "no match");
    });
}

/// The answers to `matching` values of `key` (each matched, 20 a minute) and to
/// `not_matching` ones (no limit), on a gateway loading `yaml`.
fn wildcard_case(yaml: &str, key: &str, matching: &[&str], not_matching: &[&str]) {
    on_each_server(&[("example9.yaml", yaml)], |_, envoy| {
        for value in matching {
            let answer = envoy.ask(request("example9", vec![desc(&[(key, value)])]));
            assert_status(&answer, 0, (Code::Ok, Some((20, UNIT_MINUTE)), 19), value);
        }
        for value in not_matching {
            let answer = envoy.ask(request("example9", vec![desc(&[(key, value)])]));
            assert_status(&answer, 0, (Code::Ok, None, 0), value);
        }
    });
}

/// Example 9: `value: /api/*/action` matches /api/123/action and /api/user-id/action, not
/// /api/123/other.
#[test]
fn example9_middle_wildcard() {
    let matching = ["/api/123/action", "/api/user-id/action"];
    wildcard_case(EXAMPLE_9_MIDDLE, "path", &matching, &["/api/123/other"]);
}

/// Example 9: `value: /api/*/resource/*/action` matches /api/v1/resource/123/action and
/// /api/v2/resource/456/action (and, a `*` matching zero characters, not one without the
/// fixed parts).
#[test]
fn example9_several_wildcards() {
    let matching = ["/api/v1/resource/123/action", "/api/v2/resource/456/action"];
    let not_matching = ["/api/v1/resource/123/other", "/api/v1/action"];
    wildcard_case(EXAMPLE_9_MULTIPLE, "route", &matching, &not_matching);
}

/// Example 10: value_to_metric on route and http_method puts their request values into the
/// metric key: example10.route_api.http_method_GET.subject_id and
/// example10.route_web.http_method_POST.subject_id.
#[test]
fn example10_value_to_metric() {
    on_each_server(&[("example10.yaml", EXAMPLE_10)], |_, envoy| {
        let requests = [("api", "GET", "123"), ("web", "POST", "456")];
        for (route, method, subject) in requests {
            let entries = [
                ("route", route),
                ("http_method", method),
                ("subject_id", subject),
            ];
            let answer = envoy.ask(request("example10", vec![desc(&entries)]));
            assert_status(&answer, 0, (Code::Ok, Some((60, UNIT_MINUTE)), 59), route);
        }
        counted_under(envoy, "example10.route_api.http_method_GET.subject_id");
        counted_under(envoy, "example10.route_web.http_method_POST.subject_id");
    });
}

/// Example 10, with a wildcard: the full request value is in the metric key,
/// example10_wildcard.user_alice.action_readfile.resource.
#[test]
fn example10_value_to_metric_with_a_wildcard() {
    on_each_server(&[("example10.yaml", EXAMPLE_10_WILDCARD)], |_, envoy| {
        let entries = [
            ("user", "alice"),
            ("action", "readfile"),
            ("resource", "documents"),
        ];
        let answer = envoy.ask(request("example10_wildcard", vec![desc(&entries)]));
        assert_status(
            &answer,
            0,
            (Code::Ok, Some((100, UNIT_MINUTE)), 99),
            "alice",
        );
        counted_under(
            envoy,
            "example10_wildcard.user_alice.action_readfile.resource",
        );
    });
}

fn files_request(key: &str, value: &str) -> RateLimitRequest {
    request("example11", vec![desc(&[(key, value)])])
}

/// Example 11: files/* shares one 10 an hour: 5 requests for files/a.pdf and 5 for
/// files/b.csv leave files/c.txt OVER_LIMIT.
#[test]
fn example11_share_threshold_shares_one_budget() {
    on_each_server(&[("example11.yaml", EXAMPLE_11)], |_, envoy| {
        let look = request(
            "example11",
            vec![desc_hits(&[("files", "files/a.pdf")], 0, false)],
        );
        // The shared budget cannot be made fresh by a new value: start away from the
        // hour's end (a wait only when it is within a minute).
        envoy.fresh_window(look, Duration::from_secs(60));
        let mut answers = Vec::new();
        for value in ["files/a.pdf", "files/b.csv"] {
            for _ in 0..5 {
                answers.push(envoy.ask(files_request("files", value)));
            }
        }
        answers.push(envoy.ask(files_request("files", "files/c.txt")));
        assert!(
            one_window(&answers, 0),
            "the sequence crossed an hour's end"
        );
        for (i, answer) in answers[..10].iter().enumerate() {
            let left = 9 - i as u32;
            assert_status(answer, 0, (Code::Ok, Some((10, UNIT_HOUR)), left), "shared");
        }
        let over = &answers[10];
        assert_eq!(overall(over), Code::OverLimit, "{over:?}");
        assert_status(
            over,
            0,
            (Code::OverLimit, Some((10, UNIT_HOUR)), 0),
            "c.txt",
        );
    });
}

/// Example 11: files_no_share/* (share_threshold: false) keeps a budget per value: 10
/// requests for files_no_share/a.pdf exhaust it, files_no_share/b.csv is still allowed.
#[test]
fn example11_without_share_threshold_each_value_has_its_own() {
    on_each_server(&[("example11.yaml", EXAMPLE_11)], |_, envoy| {
        let answers = in_one_window(|attempt| {
            let value = format!("files_no_share/a-{attempt}.pdf");
            (0..11)
                .map(|_| envoy.ask(files_request("files_no_share", &value)))
                .collect()
        });
        assert_eq!(overall(&answers[9]), Code::Ok);
        assert_eq!(overall(&answers[10]), Code::OverLimit, "a.pdf exhausted");
        let other = envoy.ask(files_request("files_no_share", "files_no_share/b.csv"));
        assert_eq!(overall(&other), Code::Ok, "{other:?}");
        assert_status(&other, 0, (Code::Ok, Some((10, UNIT_HOUR)), 9), "b.csv");
    });
}

/// Example 11 with value_to_metric: route=api/v1, method=GET is 60 a minute, counted under
/// the wildcard's pattern. The README's text says `example11_metrics.route_api.method_GET`;
/// the peer's test of the same YAML (config_test.go, TestShareThreshold, "share_threshold
/// with value_to_metric") asserts `<domain>.route_api/*.method`, which is what its code
/// does: we assert the test's.
#[test]
fn example11_share_threshold_with_value_to_metric() {
    on_each_server(&[("example11.yaml", EXAMPLE_11_METRICS)], |_, envoy| {
        let entries = [("route", "api/v1"), ("method", "GET")];
        let answer = envoy.ask(request("example11_metrics", vec![desc(&entries)]));
        assert_status(
            &answer,
            0,
            (Code::Ok, Some((60, UNIT_MINUTE)), 59),
            "api/v1",
        );
        counted_under(envoy, "example11_metrics.route_api/*.method");
    });
}
