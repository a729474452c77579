//! Path spellings (issue 11, B6): every spelling the upstream routes to one endpoint is one
//! budget, and the upstream receives exactly the path the decision was made on. `;`
//! parameters are stripped, encoded `/` and `\` are refused by default (or kept, or
//! unescaped, as `[requests] path_with_escaped_slashes_action` says), and paths can be
//! made case-insensitive.

mod common;
mod raw_http;
use common::*;

const LOGIN: &str = r#"
[[rule]]
name = "login"
methods = ["POST"]
path = "/auth/*"
per_endpoint = true
limits = ["3/15m"]
count = [401, 403]

[default]
limits = ["5/1m"]
"#;

/// The name of the rule the answer announces.
fn rule_of(resp: &Resp) -> String {
    resp.policy()
        .first()
        .map(|tier| tier.name.clone())
        .unwrap_or_default()
}

#[test]
fn session_id_parameters_do_not_buy_fresh_budgets() {
    for flavor in FLAVORS {
        let (redis, upstream, gateway) = stack(flavor, LOGIN);
        let statuses: Vec<u16> = (1..=6)
            .map(|n| {
                let resp = gateway.post(&format!("/auth/login;jsessionid={n}?status=401"));
                if resp.status == 401 {
                    assert_eq!(
                        resp.upstream_request_line(),
                        "POST /auth/login?status=401",
                        "{flavor:?}: the upstream gets the path decided on"
                    );
                }
                resp.status
            })
            .collect();
        assert_eq!(statuses, [401, 401, 401, 429, 429, 429], "{flavor:?}");
        assert_eq!(upstream.requests(), 3, "{flavor:?}: 3 of 6 reached the API");
        assert_eq!(
            keys(&redis, "rl:*"),
            vec!["rl:{ip:127.0.0.1}:login:POST /auth/login".to_string()],
            "{flavor:?}"
        );
    }
}

#[test]
fn encoded_slashes_are_refused_by_default() {
    for flavor in FLAVORS {
        let (redis, upstream, gateway) = stack(flavor, LOGIN);
        for path in [
            "/auth%2Flogin?status=401",
            "/auth%2flogin?status=401",
            "/auth%5Clogin?status=401",
            "/auth/x;y=%2F?status=401",
        ] {
            let resp = gateway.post(path);
            assert_eq!(resp.status, 400, "{flavor:?} {path}: {resp:?}");
            assert!(resp.body.contains("encoded"), "{flavor:?}: {}", resp.body);
        }
        assert_eq!(upstream.requests(), 0, "{flavor:?}: nothing forwarded");
        assert!(keys(&redis, "*").is_empty(), "{flavor:?}: nothing counted");
    }
}

#[test]
fn encoded_slashes_unescaped_or_kept_when_configured() {
    for flavor in FLAVORS {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let unescaping = Gateway::start(
            &upstream.server_line(),
            &format!(
                "{}[requests]\npath_with_escaped_slashes_action = \"unescape_and_forward\"\n{LOGIN}",
                redis_section(redis.port(), "")
            ),
        );
        let resp = unescaping.post("/auth%2Flogin?status=401");
        assert_eq!(resp.status, 401, "{flavor:?}: {resp:?}");
        assert_eq!(rule_of(&resp), "login", "{flavor:?}");
        assert_eq!(resp.upstream_request_line(), "POST /auth/login?status=401");

        let keeping = Gateway::start(
            &upstream.server_line(),
            &format!(
                "{}[requests]\npath_with_escaped_slashes_action = \"keep_unchanged\"\n{LOGIN}",
                redis_section(redis.port(), "")
            ),
        );
        let resp = keeping.post("/auth%2flogin?status=401");
        assert_eq!(resp.status, 401, "{flavor:?}: {resp:?}");
        assert_eq!(
            rule_of(&resp),
            "default",
            "{flavor:?}: one segment, not /auth/*"
        );
        assert_eq!(
            resp.upstream_request_line(),
            "POST /auth%2Flogin?status=401"
        );
    }
}

#[test]
fn letter_case_is_one_budget_when_paths_are_case_insensitive() {
    for flavor in FLAVORS {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let gateway = Gateway::start(
            &upstream.server_line(),
            &format!(
                "{}[requests]\ncase_insensitive_paths = true\n{}",
                redis_section(redis.port(), ""),
                LOGIN.replace("/auth/*", "/Auth/*")
            ),
        );
        let spellings = ["/AUTH/login", "/auth/LOGIN", "/Auth/Login", "/auth/login"];
        let statuses: Vec<u16> = spellings
            .iter()
            .map(|path| {
                let resp = gateway.post(&format!("{path}?status=401"));
                if resp.status == 401 {
                    assert_eq!(resp.upstream_request_line(), "POST /auth/login?status=401");
                }
                resp.status
            })
            .collect();
        assert_eq!(statuses, [401, 401, 401, 429], "{flavor:?}");
        assert_eq!(upstream.requests(), 3, "{flavor:?}");
        assert_eq!(
            keys(&redis, "rl:*"),
            vec!["rl:{ip:127.0.0.1}:login:POST /auth/login".to_string()],
            "{flavor:?}"
        );
    }
}

#[test]
fn case_sensitive_by_default() {
    let (_redis, _upstream, gateway) = stack(Flavor::Redis, LOGIN);
    let resp = gateway.post("/AUTH/login?status=401");
    assert_eq!(rule_of(&resp), "default", "{resp:?}");
    assert_eq!(resp.upstream_request_line(), "POST /AUTH/login?status=401");
}

#[test]
fn the_upstream_receives_the_canonical_path_and_the_query_as_sent() {
    for flavor in FLAVORS {
        let (redis, _upstream, gateway) = stack(flavor, LOGIN);
        // Written byte for byte: ureq's URL parser would resolve the dots itself.
        let cases = [
            (
                "GET",
                "//a/./b/../c/%7e?x=%2F&y=%zz",
                "GET /a/c/~?x=%2F&y=%zz",
            ),
            ("GET", "/a/b/?q", "GET /a/b/?q"),
            ("GET", "/x/%2e%2E/auth/%6Cogin;v=1", "GET /auth/login"),
            ("GET", "/caf%c3%a9/%3a", "GET /caf%C3%A9/%3A"),
            (
                "POST",
                "/x/../auth/./login?status=401",
                "POST /auth/login?status=401",
            ),
        ];
        for (method, sent, received) in cases {
            let answer = raw_http::request(gateway.port, method.as_bytes(), sent.as_bytes(), b"");
            assert!(
                matches!(answer.status, 200 | 401),
                "{flavor:?} {sent}: {answer:?}"
            );
            assert_eq!(
                answer.upstream_request_line(),
                received,
                "{flavor:?} {sent}"
            );
        }
        // The dot-segment spelling of the login endpoint charged the login endpoint.
        assert!(
            keys(&redis, "rl:*").contains(&"rl:{ip:127.0.0.1}:login:POST /auth/login".to_string()),
            "{flavor:?}: {:?}",
            keys(&redis, "rl:*")
        );
        let answer = raw_http::request(gateway.port, b"GET", b"/a%zz", b"");
        assert_eq!(
            answer.status, 400,
            "{flavor:?}: a broken escape: {answer:?}"
        );
    }
}
