//! The admin listener: `/healthz`, and `/metrics` in the Prometheus text format with the
//! decision counters, the Redis latency histogram and the breaker gauge holding the right
//! values after a known sequence of requests. SIGTERM stops the gateway.

use testkit::gateway::*;

const RULES: &str = r#"
[[rule]]
name = "api"
path = "/api/**"
limits = ["3/1h"]
algorithm = "log"

[default]
limits = ["100/1h"]
algorithm = "log"
"#;

#[test]
fn healthz_answers_ok() {
    let (_redis, upstream, gateway) = stack(Flavor::Redis, RULES);
    let resp = gateway.admin_get("/healthz");
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(resp.body.trim(), "ok", "{resp:?}");
    assert_eq!(
        upstream.requests(),
        0,
        "the admin listener forwards nothing"
    );
}

#[test]
fn metrics_count_decisions_and_redis_latency() {
    each_flavor(|flavor| {
        let (_redis, _upstream, gateway) = stack(flavor, RULES);
        let statuses: Vec<u16> = (0..5).map(|_| gateway.get("/api/x").status).collect();
        assert_eq!(statuses, [200, 200, 200, 429, 429], "{flavor:?}");
        for _ in 0..2 {
            assert_eq!(gateway.get("/other").status, 200, "{flavor:?}");
        }

        let metrics = gateway.metrics();
        let text = &metrics.text;
        // The first 429 was Redis's; the second came from the deny cache.
        metrics.assert_decisions(
            &format!("{flavor:?}"),
            &[
                ("api", "allowed", 3.0),
                ("api", "denied", 1.0),
                ("api", "denied_cached", 1.0),
                ("default", "allowed", 2.0),
                ("api", "shadow_denied", 0.0),
                ("api", "fail_open", 0.0),
                ("api", "fail_closed", 0.0),
            ],
        );
        assert_eq!(
            metrics.value("rl_gateway_breaker_open", &[]),
            Some(0.0),
            "{flavor:?}:\n{text}"
        );

        // The histogram: one observation per call to Redis (3 + 1 + 2 at least),
        // cumulative buckets ending in +Inf = _count.
        let count = metrics
            .value("rl_gateway_redis_latency_seconds_count", &[])
            .unwrap_or_else(|| panic!("{flavor:?}: no latency count:\n{text}"));
        assert!(count >= 6.0, "{flavor:?}: {count}\n{text}");
        let sum = metrics
            .value("rl_gateway_redis_latency_seconds_sum", &[])
            .unwrap_or_else(|| panic!("{flavor:?}: no latency sum:\n{text}"));
        assert!(sum > 0.0 && sum.is_finite(), "{flavor:?}: {sum}\n{text}");
        let mut buckets: Vec<(f64, f64)> = metrics
            .samples()
            .into_iter()
            .filter(|s| s.name == "rl_gateway_redis_latency_seconds_bucket")
            .map(|s| {
                let le = s
                    .labels
                    .iter()
                    .find(|(k, _)| k == "le")
                    .map(|(_, v)| v.clone())
                    .expect("a bucket has le");
                let le = if le == "+Inf" {
                    f64::INFINITY
                } else {
                    le.parse().expect("le is a number")
                };
                (le, s.value)
            })
            .collect();
        assert!(buckets.len() >= 2, "{flavor:?}:\n{text}");
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        assert!(
            buckets.windows(2).all(|w| w[0].1 <= w[1].1),
            "{flavor:?}: buckets are cumulative: {buckets:?}"
        );
        assert_eq!(
            *buckets.last().expect("buckets"),
            (f64::INFINITY, count),
            "{flavor:?}: the +Inf bucket is the count"
        );
    });
}

#[test]
fn sigterm_stops_the_gateway() {
    let (_redis, _upstream, mut gateway) = stack(Flavor::Valkey, RULES);
    assert_eq!(gateway.get("/other").status, 200);
    assert!(gateway.running());
    gateway.terminate();
    assert!(!gateway.running());
}

/// HTTP rules beside `[envoy]` for [`the_series_scraped_are_pinned`]: one limited, one
/// whose policy no one set (each call a module error), and the default.
const PINNED_RULES: &str = r#"
[[rule]]
name = "api"
path = "/api/**"
limits = ["1/1h"]
algorithm = "log"

[[rule]]
name = "strict"
path = "/strict/**"
policy = "gw-never-set"

[default]
limits = ["100/1h"]
algorithm = "log"
"#;

/// The Envoy side: a plain limit and a `detailed_metric` one, whose label shows the value.
const PINNED_DESCRIPTORS: &str = r#"
domain: pin
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 1
  - key: tenant
    detailed_metric: true
    rate_limit:
      unit: hour
      requests_per_unit: 5
"#;

/// Every family's HELP and TYPE lines, in the order they are written.
const PINNED_FAMILIES: &str = r#"
# HELP rl_gateway_decisions_total Requests a rule applied to, by rule and outcome.
# TYPE rl_gateway_decisions_total counter
# HELP rl_gateway_leases_total Leases of concurrency rules, by rule and event (acquired, denied, released, release_failed, reclaimed, renewed, lost).
# TYPE rl_gateway_leases_total counter
# HELP rl_gateway_lease_releases_total Lease releases started, by cause (end of the response, upstream error, client gone).
# TYPE rl_gateway_lease_releases_total counter
# HELP rl_gateway_leases_held Leases this gateway holds now (taken, not yet given back).
# TYPE rl_gateway_leases_held gauge
# HELP rl_gateway_envoy_total ShouldRateLimit calls by answer, and descriptors no rule limits (unknown_domain, no_match).
# TYPE rl_gateway_envoy_total counter
# HELP rl_gateway_envoy_hits_total Hits (hits_addend units) of Envoy descriptors, by rule and stat (total_hits, over_limit, near_limit, within_limit, shadow_mode), as envoyproxy/ratelimit counts them.
# TYPE rl_gateway_envoy_hits_total counter
# HELP rl_gateway_fail_open_total Decisions Redis could not make, by reason.
# TYPE rl_gateway_fail_open_total counter
# HELP rl_gateway_refunds_total Hits given back because the response status does not count.
# TYPE rl_gateway_refunds_total counter
# HELP rl_gateway_redis_latency_seconds Time of each Redis call that answered.
# TYPE rl_gateway_redis_latency_seconds histogram
# HELP rl_gateway_breaker_open Whether the circuit breaker skips Redis now.
# TYPE rl_gateway_breaker_open gauge
# HELP rl_gateway_rule_reloads_total Rule file reloads, by result.
# TYPE rl_gateway_rule_reloads_total counter
# HELP rl_gateway_upstream_errors_total Requests the upstream could not answer (502).
# TYPE rl_gateway_upstream_errors_total counter
# HELP rl_gateway_request_body_timeouts_total Request bodies not received within body_timeout_ms, their upstream request cut (408).
# TYPE rl_gateway_request_body_timeouts_total counter
# HELP rl_gateway_request_body_errors_total Request bodies that broke off (400): bad chunked framing, or the client gone.
# TYPE rl_gateway_request_body_errors_total counter
# HELP rl_gateway_connections_refused_total Connections over max_connections, answered 503 and closed.
# TYPE rl_gateway_connections_refused_total counter
# HELP rl_gateway_module_errors_total Error replies of the module (a misconfiguration: a missing policy, a refused rule), by rule.
# TYPE rl_gateway_module_errors_total counter
# HELP rl_gateway_local_quota_decisions_total Requests decided from units of local quota held, without a Redis call.
# TYPE rl_gateway_local_quota_decisions_total counter
# HELP rl_gateway_local_quota_units_taken_total Units of local quota taken from Redis (RL.TAKE).
# TYPE rl_gateway_local_quota_units_taken_total counter
# HELP rl_gateway_local_quota_units_given_back_total Units of local quota given back to Redis unspent (RL.REFUND).
# TYPE rl_gateway_local_quota_units_given_back_total counter
"#;

/// Every series (name and labels, without the value) a scrape holds after the requests of
/// [`the_series_scraped_are_pinned`], sorted. The 50 µs bucket's bound is written as the
/// Prometheus project's clients write it (`5e-05`; `0.00005` before prometheus-client).
const PINNED_SERIES: &str = r#"
rl_gateway_breaker_open
rl_gateway_connections_refused_total
rl_gateway_decisions_total{rule="api",outcome="allowed"}
rl_gateway_decisions_total{rule="api",outcome="denied"}
rl_gateway_decisions_total{rule="api",outcome="denied_cached"}
rl_gateway_decisions_total{rule="api",outcome="fail_closed"}
rl_gateway_decisions_total{rule="api",outcome="fail_open"}
rl_gateway_decisions_total{rule="api",outcome="local_allowed"}
rl_gateway_decisions_total{rule="api",outcome="local_denied"}
rl_gateway_decisions_total{rule="api",outcome="shadow_denied"}
rl_gateway_decisions_total{rule="default",outcome="allowed"}
rl_gateway_decisions_total{rule="default",outcome="denied"}
rl_gateway_decisions_total{rule="default",outcome="denied_cached"}
rl_gateway_decisions_total{rule="default",outcome="fail_closed"}
rl_gateway_decisions_total{rule="default",outcome="fail_open"}
rl_gateway_decisions_total{rule="default",outcome="local_allowed"}
rl_gateway_decisions_total{rule="default",outcome="local_denied"}
rl_gateway_decisions_total{rule="default",outcome="shadow_denied"}
rl_gateway_decisions_total{rule="pin.tenant_acme",outcome="allowed"}
rl_gateway_decisions_total{rule="pin.tenant_acme",outcome="denied"}
rl_gateway_decisions_total{rule="pin.tenant_acme",outcome="denied_cached"}
rl_gateway_decisions_total{rule="pin.tenant_acme",outcome="fail_closed"}
rl_gateway_decisions_total{rule="pin.tenant_acme",outcome="fail_open"}
rl_gateway_decisions_total{rule="pin.tenant_acme",outcome="local_allowed"}
rl_gateway_decisions_total{rule="pin.tenant_acme",outcome="local_denied"}
rl_gateway_decisions_total{rule="pin.tenant_acme",outcome="shadow_denied"}
rl_gateway_decisions_total{rule="pin.user",outcome="allowed"}
rl_gateway_decisions_total{rule="pin.user",outcome="denied"}
rl_gateway_decisions_total{rule="pin.user",outcome="denied_cached"}
rl_gateway_decisions_total{rule="pin.user",outcome="fail_closed"}
rl_gateway_decisions_total{rule="pin.user",outcome="fail_open"}
rl_gateway_decisions_total{rule="pin.user",outcome="local_allowed"}
rl_gateway_decisions_total{rule="pin.user",outcome="local_denied"}
rl_gateway_decisions_total{rule="pin.user",outcome="shadow_denied"}
rl_gateway_decisions_total{rule="strict",outcome="allowed"}
rl_gateway_decisions_total{rule="strict",outcome="denied"}
rl_gateway_decisions_total{rule="strict",outcome="denied_cached"}
rl_gateway_decisions_total{rule="strict",outcome="fail_closed"}
rl_gateway_decisions_total{rule="strict",outcome="fail_open"}
rl_gateway_decisions_total{rule="strict",outcome="local_allowed"}
rl_gateway_decisions_total{rule="strict",outcome="local_denied"}
rl_gateway_decisions_total{rule="strict",outcome="shadow_denied"}
rl_gateway_envoy_hits_total{rule="pin.tenant_acme",stat="near_limit"}
rl_gateway_envoy_hits_total{rule="pin.tenant_acme",stat="over_limit"}
rl_gateway_envoy_hits_total{rule="pin.tenant_acme",stat="shadow_mode"}
rl_gateway_envoy_hits_total{rule="pin.tenant_acme",stat="total_hits"}
rl_gateway_envoy_hits_total{rule="pin.tenant_acme",stat="within_limit"}
rl_gateway_envoy_hits_total{rule="pin.user",stat="near_limit"}
rl_gateway_envoy_hits_total{rule="pin.user",stat="over_limit"}
rl_gateway_envoy_hits_total{rule="pin.user",stat="shadow_mode"}
rl_gateway_envoy_hits_total{rule="pin.user",stat="total_hits"}
rl_gateway_envoy_hits_total{rule="pin.user",stat="within_limit"}
rl_gateway_envoy_total{result="invalid_argument"}
rl_gateway_envoy_total{result="no_match"}
rl_gateway_envoy_total{result="ok"}
rl_gateway_envoy_total{result="over_limit"}
rl_gateway_envoy_total{result="override_ignored"}
rl_gateway_envoy_total{result="shadow_mode"}
rl_gateway_envoy_total{result="unavailable"}
rl_gateway_envoy_total{result="unknown_domain"}
rl_gateway_fail_open_total{reason="breaker"}
rl_gateway_fail_open_total{reason="connection"}
rl_gateway_fail_open_total{reason="error"}
rl_gateway_fail_open_total{reason="timeout"}
rl_gateway_fail_open_total{reason="unavailable"}
rl_gateway_lease_releases_total{cause="dropped"}
rl_gateway_lease_releases_total{cause="end"}
rl_gateway_lease_releases_total{cause="error"}
rl_gateway_leases_held
rl_gateway_local_quota_decisions_total
rl_gateway_local_quota_units_given_back_total
rl_gateway_local_quota_units_taken_total
rl_gateway_module_errors_total{rule="strict"}
rl_gateway_redis_latency_seconds_bucket{le="+Inf"}
rl_gateway_redis_latency_seconds_bucket{le="0.0001"}
rl_gateway_redis_latency_seconds_bucket{le="0.00025"}
rl_gateway_redis_latency_seconds_bucket{le="0.0005"}
rl_gateway_redis_latency_seconds_bucket{le="0.001"}
rl_gateway_redis_latency_seconds_bucket{le="0.0025"}
rl_gateway_redis_latency_seconds_bucket{le="0.005"}
rl_gateway_redis_latency_seconds_bucket{le="0.01"}
rl_gateway_redis_latency_seconds_bucket{le="0.025"}
rl_gateway_redis_latency_seconds_bucket{le="0.05"}
rl_gateway_redis_latency_seconds_bucket{le="0.1"}
rl_gateway_redis_latency_seconds_bucket{le="5e-05"}
rl_gateway_redis_latency_seconds_count
rl_gateway_redis_latency_seconds_sum
rl_gateway_request_body_errors_total
rl_gateway_request_body_timeouts_total
rl_gateway_rule_reloads_total{result="ok"}
rl_gateway_rule_reloads_total{result="refused"}
rl_gateway_upstream_errors_total
"#;

/// The names, labels, label values and HELP texts of `/metrics` are an interface
/// (dashboards, alerts, recording rules): a scrape of a gateway with HTTP rules and
/// `[envoy]`, after requests that reach every kind of family, holds exactly these.
#[test]
fn the_series_scraped_are_pinned() {
    use testkit::gateway::envoy::*;
    let redis = server_with_policies(Flavor::Redis);
    let mut envoy = EnvoyGateway::start_with(
        &format!("{}{PINNED_RULES}", redis_section(redis.port(), "")),
        "",
        &[("pin.yaml", PINNED_DESCRIPTORS)],
    );
    let gateway = &envoy.gateway;
    let statuses: Vec<u16> = ["/api/x", "/api/x", "/other", "/strict/x"]
        .iter()
        .map(|path| gateway.get(path).status)
        .collect();
    assert_eq!(statuses, [200, 429, 200, 503]);
    let user = || request("pin", vec![desc(&[("user", "alice")])]);
    assert_eq!(overall(&envoy.ask(user())), Code::Ok);
    assert_eq!(overall(&envoy.ask(user())), Code::OverLimit);
    let tenant = request("pin", vec![desc(&[("tenant", "acme")])]);
    assert_eq!(overall(&envoy.ask(tenant)), Code::Ok);
    let unknown = request("nowhere", vec![desc(&[("user", "bob")])]);
    assert_eq!(overall(&envoy.ask(unknown)), Code::Ok);

    let metrics = envoy.gateway.metrics();
    let families: Vec<&str> = metrics
        .text
        .lines()
        .filter(|line| line.starts_with("# "))
        .collect();
    let mut series: Vec<String> = metrics
        .samples()
        .into_iter()
        .map(|sample| {
            let labels: Vec<String> = sample
                .labels
                .iter()
                .map(|(name, value)| format!("{name}={value:?}"))
                .collect();
            match labels.is_empty() {
                true => sample.name,
                false => format!("{}{{{}}}", sample.name, labels.join(",")),
            }
        })
        .collect();
    series.sort();
    assert_eq!(
        families.join("\n"),
        PINNED_FAMILIES.trim(),
        "{}",
        metrics.text
    );
    assert_eq!(series.join("\n"), PINNED_SERIES.trim(), "{}", metrics.text);
}
