//! The deny cache: once Redis denied a key, the gateway answers that key's requests with a
//! 429 itself, without calling Redis (`RL.HIT` calls in `INFO commandstats` stand still),
//! with a Retry-After that counts down, until the retry time; other keys are not
//! affected. `capacity = 0` turns it off: then every request reaches Redis.

use std::time::Duration;
use testkit::gateway::*;

fn rules(limit: &str) -> String {
    format!(
        r#"
[[rule]]
name = "api"
path = "/**"
limits = ["{limit}"]
algorithm = "log"
"#
    )
}

fn start(redis: &Server, upstream: &Upstream, rest: &str) -> Gateway {
    Gateway::start(
        &format!(
            "{}trusted_proxies = [\"127.0.0.1/32\"]\n",
            upstream.server_line()
        ),
        &format!("{}{rest}", redis_section(redis.port(), "")),
    )
}

fn from(gateway: &Gateway, client: &str) -> Resp {
    gateway.send("GET", "/thing", &[("X-Forwarded-For", client)])
}

#[test]
fn a_denied_key_is_answered_locally_with_a_retry_after_counting_down() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let gateway = start(&redis, &upstream, &rules("1/1m"));
        let client = "203.0.113.10";

        assert_eq!(from(&gateway, client).status, 200, "{flavor:?}");
        let denied = from(&gateway, client);
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        let first_retry = denied.retry_after();
        assert!(first_retry <= 60, "{flavor:?}: {denied:?}");
        let calls = hit_calls(&redis);

        // Ask until Retry-After went down by a second: every answer in between is a 429
        // that never reached Redis.
        let mut cached = 0;
        let mut last_retry = first_retry;
        wait_until(Duration::from_secs(10), "Retry-After to count down", || {
            let resp = from(&gateway, client);
            assert_eq!(resp.status, 429, "{flavor:?}: {resp:?}");
            assert_eq!(resp.body, "Too Many Requests\n", "{flavor:?}");
            last_retry = resp.retry_after();
            assert!(last_retry <= first_retry, "{flavor:?}: {resp:?}");
            cached += 1;
            last_retry < first_retry
        });
        assert!(last_retry + 2 >= first_retry, "{flavor:?}: {last_retry}");
        assert_eq!(
            hit_calls(&redis),
            calls,
            "{flavor:?}: the {cached} cached denials did not call RL.HIT"
        );
        assert_eq!(upstream.requests(), 1, "{flavor:?}");

        let metrics = gateway.metrics();
        assert_eq!(metrics.decisions("api", "denied"), 1.0, "{}", metrics.text);
        assert_eq!(
            metrics.decisions("api", "denied_cached"),
            cached as f64,
            "{}",
            metrics.text
        );

        // Another client is decided by Redis as usual.
        let other = from(&gateway, "203.0.113.11");
        assert_eq!(other.status, 200, "{flavor:?}: {other:?}");
        assert_eq!(hit_calls(&redis), calls + 1, "{flavor:?}");
    });
}

#[test]
fn the_cache_lets_the_key_through_again_at_the_retry_time() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let gateway = start(&redis, &upstream, &rules("1/2s"));
        let client = "203.0.113.20";

        assert_eq!(from(&gateway, client).status, 200, "{flavor:?}");
        let denied = from(&gateway, client);
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        assert!(denied.retry_after() <= 2, "{flavor:?}: {denied:?}");
        let calls = hit_calls(&redis);
        wait_until(Duration::from_secs(20), "the key allowed again", || {
            from(&gateway, client).status == 200
        });
        assert!(
            hit_calls(&redis) > calls,
            "{flavor:?}: Redis decided again after the retry time"
        );
        assert_eq!(upstream.requests(), 2, "{flavor:?}");
    });
}

#[test]
fn with_capacity_0_every_request_reaches_redis() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let gateway = start(
            &redis,
            &upstream,
            &format!("[deny_cache]\ncapacity = 0\n{}", rules("1/1m")),
        );
        let client = "203.0.113.30";
        let calls = hit_calls(&redis);
        assert_eq!(from(&gateway, client).status, 200, "{flavor:?}");
        for i in 0..5 {
            let denied = from(&gateway, client);
            assert_eq!(denied.status, 429, "{flavor:?} {i}: {denied:?}");
            denied.retry_after();
        }
        assert_eq!(hit_calls(&redis), calls + 6, "{flavor:?}");
        let metrics = gateway.metrics();
        assert_eq!(metrics.decisions("api", "denied"), 5.0, "{}", metrics.text);
        assert_eq!(
            metrics.decisions("api", "denied_cached"),
            0.0,
            "{}",
            metrics.text
        );
    });
}
