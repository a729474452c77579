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
