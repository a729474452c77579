//! The shape of allowed and denied answers in proxy mode: `RateLimit-Policy` and `RateLimit`
//! parsed as RFC 8941 Lists, the remaining count going down request by request, the 429
//! (`Retry-After`, body, not forwarded), several tiers, and the legacy `X-RateLimit-*`
//! headers only when configured.
//!
//! Limits use `ALGO log` with windows of a minute or more: exact counts that no window
//! edge can reset in the middle of a test.
//!
//! A rule's key header sent twice is refused: counting the first value while an upstream
//! that reads the last (PHP behind nginx) or all of them sees another client would let any
//! first value buy a fresh budget.

use std::time::Duration;
use testkit::fixtures::LOGIN_API_SEARCH;
use testkit::gateway::raw_http;
use testkit::gateway::*;

const RULES: &str = r#"
[[rule]]
name = "api"
path = "/api/**"
limits = ["5/1h"]
algorithm = "log"

[[rule]]
name = "multi"
path = "/multi/**"
limits = ["3/1m", "10/1h"]
algorithm = "log"

[[rule]]
name = "short"
path = "/short/**"
limits = ["1/900ms"]
algorithm = "log"

[[rule]]
name = "odd"
path = "/odd/**"
limits = ["5/1500ms"]
algorithm = "log"
"#;

fn start(flavor: Flavor, headers: &str) -> (Server, Upstream, Gateway) {
    stack(flavor, &format!("{headers}\n{RULES}"))
}

const LEGACY: [&str; 3] = [
    "x-ratelimit-limit",
    "x-ratelimit-remaining",
    "x-ratelimit-reset",
];

#[test]
fn five_allowed_with_remaining_four_to_zero_then_a_429_with_parsable_headers() {
    each_flavor(|flavor| {
        let (_redis, upstream, gateway) = start(flavor, "");
        for (i, expected_r) in [4, 3, 2, 1, 0].into_iter().enumerate() {
            let resp = gateway.get(&format!("/api/items/{i}?x=1"));
            assert_eq!(resp.status, 200, "{flavor:?} request {i}: {resp:?}");
            assert_eq!(
                resp.upstream_request_line(),
                format!("GET /api/items/{i}?x=1"),
                "{flavor:?}: the upstream's answer is passed on"
            );
            assert_eq!(
                resp.policy(),
                vec![PolicyTier {
                    name: "api".into(),
                    q: 5,
                    w: Some(3600)
                }],
                "{flavor:?} request {i}"
            );
            let limits = resp.limits();
            assert_eq!(limits.len(), 1, "{flavor:?}: {resp:?}");
            assert_eq!(limits[0].name, "api");
            assert_eq!(limits[0].r, expected_r, "{flavor:?} request {i}: {resp:?}");
            assert!(
                (1..=3600).contains(&limits[0].t),
                "{flavor:?}: t is whole seconds until the reset, up to the window: {resp:?}"
            );
            assert!(resp.fail_open_reason().is_none(), "{flavor:?}: {resp:?}");
            for name in LEGACY {
                assert!(
                    !resp.has(name),
                    "{flavor:?}: {name} without legacy: {resp:?}"
                );
            }
        }
        assert_eq!(upstream.requests(), 5, "{flavor:?}");

        let denied = gateway.get("/api/items/6");
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        assert_eq!(denied.body, "Too Many Requests\n", "{flavor:?}");
        let retry_after = denied.retry_after();
        assert!(
            retry_after <= 3600,
            "{flavor:?}: Retry-After within the window: {denied:?}"
        );
        assert_eq!(
            denied.policy(),
            vec![PolicyTier {
                name: "api".into(),
                q: 5,
                w: Some(3600)
            }],
            "{flavor:?}"
        );
        let limits = denied.limits();
        assert_eq!(limits.len(), 1, "{flavor:?}: {denied:?}");
        assert_eq!((limits[0].name.as_str(), limits[0].r), ("api", 0));
        assert!((1..=3600).contains(&limits[0].t), "{flavor:?}: {denied:?}");
        for name in LEGACY {
            assert!(!denied.has(name), "{flavor:?}: {name} without legacy");
        }
        assert_eq!(
            upstream.requests(),
            5,
            "{flavor:?}: a denied request is not forwarded"
        );
    });
}

#[test]
fn the_upstreams_status_passes_through_with_the_headers() {
    each_flavor(|flavor| {
        let (_redis, upstream, gateway) = start(flavor, "");
        let resp = gateway.send("DELETE", "/api/thing?status=404", &[("X-Custom", "kept")]);
        assert_eq!(resp.status, 404, "{flavor:?}: {resp:?}");
        assert_eq!(resp.upstream_request_line(), "DELETE /api/thing?status=404");
        assert_eq!(
            resp.upstream_saw_header("x-custom").as_deref(),
            Some("kept"),
            "{flavor:?}: request headers are forwarded"
        );
        assert_eq!(resp.remaining(), 4, "{flavor:?}: {resp:?}");
        assert_eq!(upstream.requests(), 1);
    });
}

#[test]
fn a_multi_tier_rule_names_and_counts_every_tier() {
    each_flavor(|flavor| {
        let (_redis, upstream, gateway) = start(flavor, "");
        let expected_policy = vec![
            PolicyTier {
                name: "multi-1".into(),
                q: 3,
                w: Some(60),
            },
            PolicyTier {
                name: "multi-2".into(),
                q: 10,
                w: Some(3600),
            },
        ];
        for (i, (r1, r2)) in [(2, 9), (1, 8), (0, 7)].into_iter().enumerate() {
            let resp = gateway.get("/multi/x");
            assert_eq!(resp.status, 200, "{flavor:?} request {i}: {resp:?}");
            assert_eq!(resp.policy(), expected_policy, "{flavor:?}");
            let limits = resp.limits();
            let got: Vec<(&str, i64)> = limits.iter().map(|l| (l.name.as_str(), l.r)).collect();
            assert_eq!(
                got,
                vec![("multi-1", r1), ("multi-2", r2)],
                "{flavor:?} request {i}: {resp:?}"
            );
            assert!((1..=60).contains(&limits[0].t), "{flavor:?}: {resp:?}");
            assert!((1..=3600).contains(&limits[1].t), "{flavor:?}: {resp:?}");
        }
        let denied = gateway.get("/multi/x");
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        assert!(
            denied.retry_after() <= 60,
            "{flavor:?}: the minute tier binds: {denied:?}"
        );
        assert_eq!(denied.policy(), expected_policy, "{flavor:?}");
        let got: Vec<(String, i64)> = denied.limits().into_iter().map(|l| (l.name, l.r)).collect();
        assert_eq!(
            got,
            vec![("multi-1".to_string(), 0), ("multi-2".to_string(), 7)],
            "{flavor:?}: the binding tier has r=0, the other keeps its count: {denied:?}"
        );
        assert_eq!(upstream.requests(), 3, "{flavor:?}");
    });
}

#[test]
fn legacy_headers_describe_the_binding_tier_only_when_configured() {
    each_flavor(|flavor| {
        let (_redis, _upstream, gateway) = start(flavor, "[headers]\nlegacy = true\n");
        let resp = gateway.get("/api/a");
        assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
        assert_eq!(resp.header("x-ratelimit-limit").as_deref(), Some("5"));
        assert_eq!(resp.header("x-ratelimit-remaining").as_deref(), Some("4"));
        let reset: u64 = resp
            .header("x-ratelimit-reset")
            .unwrap_or_else(|| panic!("{flavor:?}: no X-RateLimit-Reset: {resp:?}"))
            .parse()
            .expect("X-RateLimit-Reset is whole seconds");
        assert!((1..=3600).contains(&reset), "{flavor:?}: {resp:?}");
        assert!(resp.has_ratelimit_headers(), "{flavor:?}: still sent");

        // Two tiers: the minute tier has the least remaining, so it is the one described.
        let resp = gateway.get("/multi/a");
        assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
        assert_eq!(resp.header("x-ratelimit-limit").as_deref(), Some("3"));
        assert_eq!(resp.header("x-ratelimit-remaining").as_deref(), Some("2"));
        let reset: u64 = resp
            .header("x-ratelimit-reset")
            .expect("X-RateLimit-Reset")
            .parse()
            .expect("whole seconds");
        assert!((1..=60).contains(&reset), "{flavor:?}: {resp:?}");

        for _ in 0..4 {
            gateway.get("/api/a");
        }
        let denied = gateway.get("/api/a");
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        assert_eq!(denied.header("x-ratelimit-limit").as_deref(), Some("5"));
        assert_eq!(denied.header("x-ratelimit-remaining").as_deref(), Some("0"));
        assert!(denied.has("x-ratelimit-reset"), "{flavor:?}: {denied:?}");
    });
}

#[test]
fn windows_and_waits_below_whole_seconds_round_up() {
    each_flavor(|flavor| {
        let (_redis, _upstream, gateway) = start(flavor, "");

        let resp = gateway.get("/odd/x");
        assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
        assert_eq!(
            resp.policy(),
            vec![PolicyTier {
                name: "odd".into(),
                q: 5,
                w: Some(2)
            }],
            "{flavor:?}: 1500 ms is announced as 2 s"
        );
        let t = resp.limits()[0].t;
        assert!((1..=2).contains(&t), "{flavor:?}: {resp:?}");

        // A 900 ms window: whatever is left of it rounds up to 1 s, never 0. Asked until a
        // second request lands within the window of the first (a stalled machine may miss).
        let mut denied = None;
        wait_until(Duration::from_secs(20), "a 429 within 900 ms", || {
            let resp = gateway.get("/short/x");
            match resp.status {
                200 => {
                    assert_eq!(
                        resp.policy(),
                        vec![PolicyTier {
                            name: "short".into(),
                            q: 1,
                            w: Some(1)
                        }],
                        "{flavor:?}"
                    );
                    assert_eq!(resp.limits()[0].t, 1, "{flavor:?}: {resp:?}");
                    false
                }
                _ => {
                    denied = Some(resp);
                    true
                }
            }
        });
        let denied = denied.expect("a denial");
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        assert_eq!(denied.retry_after(), 1, "{flavor:?}: {denied:?}");
        let limits = denied.limits();
        assert_eq!((limits[0].r, limits[0].t), (0, 1), "{flavor:?}: {denied:?}");
    });
}

#[test]
fn a_key_header_sent_twice_is_refused() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, LOGIN_API_SEARCH);
        let get = |headers: String| {
            let answer = raw_http::request(gateway.port, b"GET", b"/api/x", headers.as_bytes());
            if answer.status == 400 {
                assert!(
                    answer.body.to_ascii_lowercase().contains("x-api-key"),
                    "{flavor:?}: {answer:?}"
                );
            }
            answer.status
        };
        let twice = (0..4).map(|n| format!("X-Api-Key: fresh-{n}\r\nX-Api-Key: victim\r\n"));
        assert_spent(
            &format!("{flavor:?}: twice"),
            &redis,
            Some(&upstream),
            twice,
            get,
            Spent {
                pattern: "rl:*",
                ..Spent::all_refused(&[400; 4])
            },
        );
        // Once, it is the key as before; absent, the client's address is.
        let once = ["X-Api-Key: victim\r\n"; 3].map(String::from);
        assert_spent(
            &format!("{flavor:?}: once, then absent"),
            &redis,
            None,
            once.into_iter().chain([String::new()]),
            get,
            Spent {
                statuses: &[200, 200, 429, 200],
                served: None,
                pattern: "rl:*",
                keys: &["rl:{h:victim}:api", "rl:{ip:127.0.0.1}:api"],
            },
        );
    });
}
