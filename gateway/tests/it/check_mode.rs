//! `mode = "check"`: the gateway answers whether a request may pass (for a proxy such as
//! nginx's `auth_request`), deciding on the method and path from the pair of headers
//! `check_headers` names (`X-Original-Method` / `X-Original-URI` by default,
//! `X-Forwarded-Method` / `X-Forwarded-Uri` for Traefik), read only from a trusted proxy,
//! else on its own method and path: 200 with an empty body and the RateLimit headers, or
//! `check_deny_status` (429 by default) with Retry-After; fail-open is a 200 that says so
//! in `X-RateLimit-Fail-Open`, fail-closed a 503.
//!
//! A trusted proxy sending the URI header without the method header is refused, not
//! checked as the check request's own GET (which a POST rule never matches).

use testkit::gateway::raw_http;
use testkit::gateway::*;

const RULES: &str = r#"
[[rule]]
name = "login"
methods = ["POST"]
path = "/auth/*"
limits = ["2/1h"]
algorithm = "log"
on_redis_failure = "closed"

[default]
limits = ["100/1h"]
algorithm = "log"
"#;

/// A check-mode gateway that trusts its loopback peer (the tests play the proxy).
fn start(redis_port: u16, server_lines: &str) -> Gateway {
    start_trusting(redis_port, "[\"127.0.0.1/32\"]", server_lines)
}

fn start_trusting(redis_port: u16, trusted: &str, server_lines: &str) -> Gateway {
    Gateway::start(
        &format!("mode = \"check\"\ntrusted_proxies = {trusted}\n{server_lines}"),
        &format!("{}{RULES}", redis_section(redis_port, "")),
    )
}

/// The name of the one tier the answer announces.
fn rule_of(resp: &Resp) -> String {
    let policy = resp.policy();
    assert_eq!(policy.len(), 1, "{resp:?}");
    policy[0].name.clone()
}

const ORIGINAL_LOGIN: [(&str, &str); 2] = [
    ("X-Original-Method", "POST"),
    ("X-Original-URI", "/auth/login?user=alice"),
];

#[test]
fn the_original_method_and_uri_decide_then_200_turns_into_429() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let gateway = start(redis.port(), "");

        for expected in [1, 0] {
            let resp = gateway.send("GET", "/auth-check", &ORIGINAL_LOGIN);
            assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
            assert_eq!(resp.body, "", "{flavor:?}: an allowed check has no body");
            assert_eq!(
                resp.policy(),
                vec![PolicyTier {
                    name: "login".into(),
                    q: 2,
                    w: Some(3600)
                }],
                "{flavor:?}"
            );
            assert_eq!(resp.remaining(), expected, "{flavor:?}: {resp:?}");
        }
        let denied = gateway.send("GET", "/auth-check", &ORIGINAL_LOGIN);
        assert_eq!(denied.status, 429, "{flavor:?}: {denied:?}");
        denied.retry_after();
        assert_eq!(rule_of(&denied), "login", "{flavor:?}");
        assert_eq!(denied.remaining(), 0, "{flavor:?}");

        // The original method decides: a GET of the same URI is the default rule's.
        let resp = gateway.send(
            "POST",
            "/auth/login",
            &[
                ("X-Original-Method", "GET"),
                ("X-Original-URI", "/auth/login"),
            ],
        );
        assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
        assert_eq!(rule_of(&resp), "default", "{flavor:?}");

        // Only the configured pair is read: X-Forwarded-* (which a proxy of the other
        // kind passes through from the client) is ignored.
        let resp = gateway.send(
            "GET",
            "/",
            &[
                ("X-Forwarded-Method", "POST"),
                ("X-Forwarded-Uri", "/auth/other"),
            ],
        );
        assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
        assert_eq!(rule_of(&resp), "default", "{flavor:?}");

        // Neither: the request's own method and path.
        let resp = gateway.post("/auth/login");
        assert_eq!(resp.status, 429, "{flavor:?}: {resp:?}");
        assert_eq!(rule_of(&resp), "login", "{flavor:?}");
        let resp = gateway.get("/auth/login");
        assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
        assert_eq!(rule_of(&resp), "default", "{flavor:?}");

        assert_eq!(
            keys(&redis, "*"),
            vec![
                "rl:{ip:127.0.0.1}:default".to_string(),
                "rl:{ip:127.0.0.1}:login".to_string(),
            ],
            "{flavor:?}"
        );
    });
}

#[test]
fn traefik_headers_when_configured_and_none_from_an_untrusted_peer() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let traefik = start(redis.port(), "check_headers = \"x-forwarded\"\n");
        let forwarded_login = [
            ("X-Forwarded-Method", "POST"),
            ("X-Forwarded-Uri", "/auth/login"),
        ];
        let resp = traefik.send("GET", "/", &forwarded_login);
        assert_eq!(rule_of(&resp), "login", "{flavor:?}: {resp:?}");
        // The other pair is the client's own: ignored.
        let resp = traefik.send("GET", "/", &ORIGINAL_LOGIN);
        assert_eq!(rule_of(&resp), "default", "{flavor:?}: {resp:?}");

        // A peer that is not a trusted proxy cannot name another request.
        let untrusted = start_trusting(redis.port(), "[]", "");
        let resp = untrusted.send("GET", "/", &ORIGINAL_LOGIN);
        assert_eq!(rule_of(&resp), "default", "{flavor:?}: {resp:?}");
        let resp = untrusted.send("POST", "/auth/login", &[]);
        assert_eq!(
            rule_of(&resp),
            "login",
            "{flavor:?}: its own method and path"
        );
    });
}

#[test]
fn check_deny_status_is_honoured() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let gateway = start(redis.port(), "check_deny_status = 403\n");
        for _ in 0..2 {
            let resp = gateway.send("GET", "/", &ORIGINAL_LOGIN);
            assert_eq!(resp.status, 200, "{flavor:?}: {resp:?}");
        }
        for _ in 0..2 {
            let denied = gateway.send("GET", "/", &ORIGINAL_LOGIN);
            assert_eq!(denied.status, 403, "{flavor:?}: {denied:?}");
            denied.retry_after();
            assert_eq!(rule_of(&denied), "login", "{flavor:?}");
            assert_eq!(denied.remaining(), 0, "{flavor:?}");
        }
    });
}

#[test]
fn without_redis_a_check_fails_open_with_a_header_or_closed_with_503() {
    let nobody = free_port();
    let gateway = start(nobody, "");
    let open = gateway.send(
        "GET",
        "/",
        &[
            ("X-Original-Method", "GET"),
            ("X-Original-URI", "/anything"),
        ],
    );
    assert_eq!(open.status, 200, "{open:?}");
    let reason = open
        .header("x-ratelimit-fail-open")
        .unwrap_or_else(|| panic!("no X-RateLimit-Fail-Open on the answer: {open:?}"));
    assert!(
        reason == "connection" || reason == "breaker",
        "reason {reason:?}"
    );
    assert!(!open.has_ratelimit_headers(), "{open:?}");

    let closed = gateway.send("GET", "/", &ORIGINAL_LOGIN);
    assert_eq!(closed.status, 503, "{closed:?}");
    assert!(!closed.has_ratelimit_headers(), "{closed:?}");

    let metrics = gateway.metrics();
    metrics.assert_decisions(
        "without Redis",
        // The default rule's on_redis_failure is "local": its local limit let it through.
        &[
            ("default", "local_allowed", 1.0),
            ("login", "fail_closed", 1.0),
        ],
    );
}

const CHECK_RULES: &str = r#"
[[rule]]
name = "login"
methods = ["POST"]
path = "/auth/*"
limits = ["2/1h"]
"#;

#[test]
fn a_trusted_proxy_sending_the_uri_without_the_method_is_refused() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let gateway = Gateway::start(
            "mode = \"check\"\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
            &format!("{}{CHECK_RULES}", redis_section(redis.port(), "")),
        );
        // nginx set up with X-Original-URI only: every login would be checked as a GET,
        // which the POST rule never matches.
        let check = |headers: &[u8]| {
            let answer = raw_http::request(gateway.port, b"GET", b"/_ratelimit", headers);
            assert!(answer.body.contains("without the other"), "{flavor:?}");
            answer.status
        };
        let halves: [&[u8]; 2] = [
            b"X-Original-URI: /auth/login\r\n",
            b"X-Original-Method: POST\r\n",
        ];
        assert_spent(
            &format!("{flavor:?}"),
            &redis,
            None,
            halves.into_iter().flat_map(|half| [half; 3]),
            check,
            Spent {
                served: None,
                ..Spent::all_refused(&[400; 6])
            },
        );
        // Both: the rule holds; neither: the check request itself (Envoy's ext_authz).
        let both = b"X-Original-Method: POST\r\nX-Original-URI: /auth/login\r\n";
        let statuses: Vec<u16> = (0..3)
            .map(|_| raw_http::request(gateway.port, b"GET", b"/_ratelimit", both).status)
            .collect();
        assert_eq!(statuses, [200, 200, 429], "{flavor:?}");
        let own = raw_http::request(gateway.port, b"POST", b"/auth/login", b"");
        assert_eq!(own.status, 429, "{flavor:?}: the same endpoint, spent");
    });
}
