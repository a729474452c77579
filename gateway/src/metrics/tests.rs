//! The rendering of each family, the hot path's counts, and the bound on rule labels.

use super::*;

/// Every family once, introduced by its HELP and TYPE, in a fixed order (dashboards and
/// diffs of two scrapes rely on it), and the labelled counters of each kind rendered.
#[test]
fn renders_each_family_once_in_a_fixed_order() {
    let metrics = Metrics::default();
    metrics.lease_releasing(ReleaseCause::Error);
    metrics.reload(false);
    metrics.envoy(EnvoyResult::OverLimit);
    let text = metrics.render(false);
    let families: Vec<&str> = text
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|rest| rest.split(' ').next().unwrap_or_default())
        .collect();
    assert_eq!(
        families,
        [
            "rl_gateway_decisions_total",
            "rl_gateway_leases_total",
            "rl_gateway_lease_releases_total",
            "rl_gateway_leases_held",
            "rl_gateway_envoy_total",
            "rl_gateway_envoy_hits_total",
            "rl_gateway_fail_open_total",
            "rl_gateway_refunds_total",
            "rl_gateway_redis_latency_seconds",
            "rl_gateway_breaker_open",
            "rl_gateway_rule_reloads_total",
            "rl_gateway_upstream_errors_total",
            "rl_gateway_request_body_timeouts_total",
            "rl_gateway_request_body_errors_total",
            "rl_gateway_connections_refused_total",
            "rl_gateway_module_errors_total",
            "rl_gateway_local_quota_decisions_total",
            "rl_gateway_local_quota_units_taken_total",
            "rl_gateway_local_quota_units_given_back_total",
        ]
    );
    assert_eq!(text.matches("# HELP ").count(), families.len());
    assert!(text.contains("rl_gateway_lease_releases_total{cause=\"error\"} 1\n"));
    assert!(text.contains("rl_gateway_rule_reloads_total{result=\"refused\"} 1\n"));
    assert!(text.contains("rl_gateway_rule_reloads_total{result=\"ok\"} 0\n"));
    assert!(text.contains("rl_gateway_envoy_total{result=\"over_limit\"} 1\n"));
    assert!(text.contains("rl_gateway_breaker_open 0\n"));
}

#[test]
fn renders_counts_and_cumulative_buckets() {
    let metrics = Metrics::default();
    metrics.decision("login", Outcome::Allowed);
    metrics.decision("login", Outcome::Allowed);
    metrics.decision("login", Outcome::Denied);
    metrics.fail_open(Failure::Timeout);
    metrics.refund("login");
    metrics.module_error("login");
    metrics.module_error("login");
    metrics.redis_latency(Duration::from_micros(80));
    metrics.redis_latency(Duration::from_secs(1));
    let text = metrics.render(true);
    assert!(text.contains("rl_gateway_decisions_total{rule=\"login\",outcome=\"allowed\"} 2\n"));
    assert!(text.contains("rl_gateway_decisions_total{rule=\"login\",outcome=\"denied\"} 1\n"));
    assert!(text.contains("rl_gateway_decisions_total{rule=\"login\",outcome=\"fail_open\"} 0\n"));
    assert!(text.contains("rl_gateway_fail_open_total{reason=\"timeout\"} 1\n"));
    assert!(text.contains("rl_gateway_refunds_total{rule=\"login\"} 1\n"));
    // prometheus-client writes a bound as Go's client does: 0.00005 as 5e-05.
    assert!(text.contains("rl_gateway_redis_latency_seconds_bucket{le=\"5e-05\"} 0\n"));
    assert!(text.contains("rl_gateway_redis_latency_seconds_bucket{le=\"0.0001\"} 1\n"));
    assert!(text.contains("rl_gateway_redis_latency_seconds_bucket{le=\"+Inf\"} 2\n"));
    assert!(text.contains("rl_gateway_redis_latency_seconds_count 2\n"));
    assert!(text.contains("rl_gateway_breaker_open 1\n"));
    assert!(text.contains("rl_gateway_module_errors_total{rule=\"login\"} 2\n"));
}

#[test]
fn envoy_hits_add_up_per_rule_and_stat() {
    let metrics = Metrics::default();
    let hits = HitCounts {
        total: 5,
        over_limit: 2,
        near_limit: 1,
        within_limit: 3,
        shadow_mode: 0,
    };
    metrics.envoy_hits("api.user", &hits);
    metrics.envoy_hits("api.user", &hits);
    let text = metrics.render(false);
    let line = |stat: &str, n: u64| {
        format!("rl_gateway_envoy_hits_total{{rule=\"api.user\",stat=\"{stat}\"}} {n}\n")
    };
    for (stat, n) in [
        ("total_hits", 10),
        ("over_limit", 4),
        ("near_limit", 2),
        ("within_limit", 6),
        ("shadow_mode", 0),
    ] {
        assert!(text.contains(&line(stat, n)), "{stat}: {text}");
    }
}

#[test]
fn leases_are_counted_and_the_held_gauge_follows_them() {
    let metrics = Metrics::default();
    metrics.lease_acquired("llm");
    metrics.lease_acquired("llm");
    metrics.lease_denied("llm");
    metrics.lease_releasing(ReleaseCause::Dropped);
    metrics.lease_released("llm", true);
    let text = metrics.render(false);
    assert!(text.contains("rl_gateway_leases_total{rule=\"llm\",event=\"acquired\"} 2\n"));
    assert!(text.contains("rl_gateway_leases_total{rule=\"llm\",event=\"denied\"} 1\n"));
    assert!(text.contains("rl_gateway_leases_total{rule=\"llm\",event=\"released\"} 1\n"));
    assert!(text.contains("rl_gateway_lease_releases_total{cause=\"dropped\"} 1\n"));
    assert!(text.contains("rl_gateway_leases_held 1\n"));
    metrics.lease_released("llm", false);
    metrics.lease_released("llm", false);
    assert!(metrics.render(false).contains("rl_gateway_leases_held 0\n"));
}

/// Names made of request values (`detailed_metric`, `value_to_metric`) are bounded: past
/// the cap, new names are counted under one label, and the names held keep counting.
#[test]
fn rule_labels_are_bounded() {
    let metrics = Metrics::default();
    for i in 0..MAX_RULE_LABELS + 5 {
        metrics.decision(&format!("api.user_{i}"), Outcome::Allowed);
    }
    metrics.decision("api.user_0", Outcome::Allowed);
    let text = metrics.render(false);
    let series = text
        .lines()
        .filter(|l| {
            l.starts_with("rl_gateway_decisions_total{") && l.contains("outcome=\"allowed\"")
        })
        .count();
    assert_eq!(series, MAX_RULE_LABELS + 1);
    assert!(
        text.contains(&format!(
            "rl_gateway_decisions_total{{rule=\"{OTHER_RULE_LABEL}\",outcome=\"allowed\"}} 5\n"
        )),
        "the overflow"
    );
    assert!(
        text.contains("rl_gateway_decisions_total{rule=\"api.user_0\",outcome=\"allowed\"} 2\n")
    );
}
/// The hot path, 100,000 decisions and latencies over 10 rules, each counted. Also the work
/// of a micro-benchmark under callgrind (`valgrind --tool=callgrind` on the release test
/// binary with the filter `metrics::tests::bench_`), whose instructions per call compare
/// builds.
#[test]
fn bench_decisions() {
    let metrics = Metrics::default();
    let rules: Vec<String> = (0..10).map(|i| format!("rule_{i}")).collect();
    for i in 0..100_000 {
        metrics.decision(&rules[i % 10], Outcome::Allowed);
        metrics.redis_latency(Duration::from_micros(i as u64 % 500));
    }
    assert!(metrics
        .render(false)
        .contains("rule=\"rule_9\",outcome=\"allowed\"} 10000\n"));
}

/// A scrape of 100 rules' decisions and Envoy hits, rendered 10 times, each holding every
/// series (the callgrind work of a scrape, as above).
#[test]
fn bench_render() {
    let metrics = Metrics::default();
    let hits = HitCounts {
        total: 1,
        ..HitCounts::default()
    };
    for i in 0..100 {
        metrics.decision(&format!("rule_{i}"), Outcome::Allowed);
        metrics.envoy_hits(&format!("domain.key_{i}"), &hits);
    }
    for _ in 0..10 {
        let text = metrics.render(false);
        assert!(
            text.contains("rule=\"rule_99\",outcome=\"allowed\"} 1\n"),
            "{text}"
        );
        assert!(text.len() > 100 * 8 * 40, "{} bytes", text.len());
    }
}

/// A rule's name is a label value: `\`, `"` and newlines are escaped, as the text format
/// requires (an Envoy descriptor's name can hold a request's value).
#[test]
fn rule_labels_are_escaped() {
    let metrics = Metrics::default();
    metrics.refund("a\"b\\c\nd");
    let text = metrics.render(false);
    assert!(
        text.contains("rl_gateway_refunds_total{rule=\"a\\\"b\\\\c\\nd\"} 1\n"),
        "{text}"
    );
}
