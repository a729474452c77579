//! Path spellings: every spelling the upstream routes to one endpoint is one
//! budget, and the upstream receives exactly the path the decision was made on. `;`
//! parameters are stripped, encoded `/` and `\` are refused by default (or kept, or
//! unescaped, as `[requests] path_with_escaped_slashes_action` says), and paths can be
//! made case-insensitive.
//!
//! Escaped control bytes (`%00`...) are refused: an upstream that stops at the NUL would
//! route `/auth/login%00N` to `/auth/login`, a fresh per-endpoint budget for every `N`. A
//! rule whose pattern is not in canonical form (`/caf%c3%a9`, `/a/./b`, `/x;y`), which no
//! request could ever match, is refused.

use testkit::fixtures::LOGIN_API_SEARCH;
use testkit::gateway::raw_http;
use testkit::gateway::*;

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

/// Three failed logins reached the API, all charged to the one login endpoint.
const ONE_LOGIN_BUDGET: Spent = Spent {
    statuses: &[],
    served: Some(3),
    pattern: "rl:*",
    keys: &["rl:{ip:127.0.0.1}:login:POST /auth/login"],
};

/// The name of the rule the answer announces.
fn rule_of(resp: &Resp) -> String {
    resp.policy()
        .first()
        .map(|tier| tier.name.clone())
        .unwrap_or_default()
}

#[test]
fn session_id_parameters_do_not_buy_fresh_budgets() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, LOGIN);
        let post = |n| {
            let resp = gateway.post(&format!("/auth/login;jsessionid={n}?status=401"));
            if resp.status == 401 {
                assert_eq!(
                    resp.upstream_request_line(),
                    "POST /auth/login?status=401",
                    "{flavor:?}: the upstream gets the path decided on"
                );
            }
            resp.status
        };
        // 3 of 6 reach the API.
        assert_spent(
            &format!("{flavor:?}"),
            &redis,
            Some(&upstream),
            1..=6,
            post,
            Spent {
                statuses: &[401, 401, 401, 429, 429, 429],
                ..ONE_LOGIN_BUDGET
            },
        );
    });
}

#[test]
fn encoded_slashes_are_refused_by_default() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, LOGIN);
        let post = |path| {
            let resp = gateway.post(path);
            assert!(resp.body.contains("encoded"), "{flavor:?}: {}", resp.body);
            resp.status
        };
        let paths = [
            "/auth%2Flogin?status=401",
            "/auth%2flogin?status=401",
            "/auth%5Clogin?status=401",
            "/auth/x;y=%2F?status=401",
        ];
        let what = format!("{flavor:?}");
        assert_spent(
            &what,
            &redis,
            Some(&upstream),
            paths,
            post,
            Spent::all_refused(&[400; 4]),
        );
    });
}

#[test]
fn encoded_slashes_unescaped_or_kept_when_configured() {
    each_flavor(|flavor| {
        let (redis, upstream, unescaping) = stack(
            flavor,
            &format!(
                "[requests]\npath_with_escaped_slashes_action = \"unescape_and_forward\"\n{LOGIN}"
            ),
        );
        let resp = unescaping.post("/auth%2Flogin?status=401");
        assert_eq!(resp.status, 401, "{flavor:?}: {resp:?}");
        assert_eq!(rule_of(&resp), "login", "{flavor:?}");
        assert_eq!(resp.upstream_request_line(), "POST /auth/login?status=401");

        let keeping = Gateway::in_front_of(
            &upstream,
            &redis,
            &format!("[requests]\npath_with_escaped_slashes_action = \"keep_unchanged\"\n{LOGIN}"),
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
    });
}

#[test]
fn letter_case_is_one_budget_when_paths_are_case_insensitive() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(
            flavor,
            &format!(
                "[requests]\ncase_insensitive_paths = true\n{}",
                LOGIN.replace("/auth/*", "/Auth/*")
            ),
        );
        let post = |path| {
            let resp = gateway.post(&format!("{path}?status=401"));
            if resp.status == 401 {
                assert_eq!(resp.upstream_request_line(), "POST /auth/login?status=401");
            }
            resp.status
        };
        let spellings = ["/AUTH/login", "/auth/LOGIN", "/Auth/Login", "/auth/login"];
        assert_spent(
            &format!("{flavor:?}"),
            &redis,
            Some(&upstream),
            spellings,
            post,
            Spent {
                statuses: &[401, 401, 401, 429],
                ..ONE_LOGIN_BUDGET
            },
        );
    });
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
    each_flavor(|flavor| {
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
            // Absolute form (the default rule's fifth and last request a minute): the
            // upstream gets origin form, the client's authority gone.
            ("GET", "HTTP://other.test:8080/x/../a?q=1", "GET /a?q=1"),
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
    });
}

/// What the gateway does today with a slash escaped twice (`%252F`) or spelled as an
/// overlong UTF-8 sequence (`%c0%af`): neither is a `/` to an upstream that decodes once
/// and follows RFC 3629, so each is one segment of its own, an endpoint of `[default]`,
/// not the login rule, and the upstream receives it so. The hex digits after `%25` are
/// data, so `%252F` and `%252f` are two endpoints; the overlong bytes are escapes, whose
/// hex is upper-cased, so their two spellings are one. Only an upstream that decodes
/// twice, or decodes overlong UTF-8, would route it to `/auth/login`: such an upstream
/// needs a rule of its own for these spellings (see the README's canonical-path rules).
#[test]
fn double_encoded_and_overlong_slashes_are_default_endpoints() {
    let rules = LOGIN.replace("[default]\n", "[default]\nper_endpoint = true\n");
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, &rules);
        let paths = [
            "/auth%252Flogin?status=401",
            "/auth%252flogin?status=401",
            "/auth%c0%aflogin?status=401",
            "/auth%C0%AFlogin?status=401",
        ];
        assert_spent(
            &format!("{flavor:?}"),
            &redis,
            Some(&upstream),
            paths,
            |path| {
                let resp = gateway.post(path);
                assert_eq!(rule_of(&resp), "default", "{flavor:?}: {resp:?}");
                let sent = path.split('?').next().unwrap_or_default().to_uppercase();
                assert_eq!(
                    resp.upstream_request_line().to_uppercase(),
                    format!("POST {sent}?STATUS=401"),
                    "{flavor:?}: forwarded as sent (its escapes' hex upper-cased)"
                );
                resp.status
            },
            Spent {
                statuses: &[401; 4],
                served: Some(4),
                pattern: "rl:*",
                // (A key writes the path's `%` as `%25`.)
                keys: &[
                    "rl:{ip:127.0.0.1}:default:POST /auth%25252Flogin",
                    "rl:{ip:127.0.0.1}:default:POST /auth%25252flogin",
                    "rl:{ip:127.0.0.1}:default:POST /auth%25C0%25AFlogin",
                ],
            },
        );
    });
}

#[test]
fn escaped_control_bytes_are_refused() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, LOGIN_API_SEARCH);
        let post = |(n, escape)| {
            let target = format!("/auth/login{escape}{n}?status=401");
            let answer = raw_http::request(gateway.port, b"POST", target.as_bytes(), b"");
            assert!(answer.body.contains("control"), "{flavor:?}: {answer:?}");
            answer.status
        };
        let escapes = ["%00", "%00", "%0a", "%0D", "%1F", "%7f", "%00"];
        assert_spent(
            &format!("{flavor:?}"),
            &redis,
            Some(&upstream),
            escapes.into_iter().enumerate(),
            post,
            Spent::all_refused(&[400; 7]),
        );
        // Other escapes still pass, and still meet the rule.
        let answer = raw_http::request(gateway.port, b"POST", b"/auth/login%20x?status=401", b"");
        assert_eq!(answer.status, 401, "{flavor:?}: {answer:?}");
        assert_eq!(
            answer.upstream_request_line(),
            "POST /auth/login%20x?status=401"
        );
    });
}

/// `--check-config` on `[[rule]] path = <pattern>`.
fn check_pattern(pattern: &str, requests: &str) -> (bool, String) {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("rules.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:1\"\nupstream = \"http://127.0.0.1:2\"\n\
         [requests]\n{requests}\n\
         [[rule]]\nname = \"r\"\npath = \"{pattern}\"\nlimits = [\"5/1m\"]\n"
    );
    std::fs::write(&path, text).expect("write the rules");
    let output = check_config(&path);
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn a_pattern_no_canonical_path_can_match_is_refused() {
    for (pattern, requests, canonical) in [
        ("/caf%c3%a9", "", "caf%C3%A9"),
        ("/caf\u{e9}", "", "caf%C3%A9"),
        ("/%7euser/*", "", "~user"),
        ("/api/./v1/**", "", "'.'"),
        ("/api/../admin", "", "'..'"),
        ("/login;jsessionid", "", "login"),
        ("/auth%2flogin", "", "refused"),
        (
            "/auth%2flogin",
            "path_with_escaped_slashes_action = \"keep_unchanged\"",
            "auth%2Flogin",
        ),
        ("/a b", "", "a%20b"),
    ] {
        let (ok, stderr) = check_pattern(pattern, requests);
        assert!(!ok, "{pattern} under [{requests}] passed");
        assert!(
            stderr.contains("canonical") && stderr.contains(canonical),
            "{pattern}: {stderr}"
        );
    }
    for (pattern, requests) in [
        ("/caf%C3%A9/*", ""),
        ("/~user/**", ""),
        ("/Auth/*", "case_insensitive_paths = true"),
        ("/login;jsessionid", "path_parameters = \"keep\""),
        ("/%7euser", "normalize_path = false"),
        (
            "/auth%2Flogin",
            "path_with_escaped_slashes_action = \"keep_unchanged\"",
        ),
    ] {
        let (ok, stderr) = check_pattern(pattern, requests);
        assert!(ok, "{pattern} under [{requests}]: {stderr}");
    }
}
