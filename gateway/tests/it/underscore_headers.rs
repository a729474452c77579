//! Header names with `_`: CGI and the stacks built on its variables (Python's wsgiref,
//! older gunicorn, FastCGI, Rack) read `X_Api_Key` as `X-Api-Key`, so an underscore
//! spelling of a header the gateway compares by name escaped it: `X_HTTP_Method_Override`
//! ran deletes past a DELETE rule, `X_Api_Key` was keyed by the client's address while the
//! upstream authenticated the key, and `X_RateLimit_Fail_Open` forged the gateway's own
//! mark. `[requests] headers_with_underscores_action` (Envoy's name) refuses such requests
//! by default, drops the headers with `drop_header`, and with `allow` forwards them while
//! the gateway reads each underscore spelling as the hyphenated header.

use testkit::gateway::raw_http;
use testkit::gateway::*;

const RULES: &str = r#"
[[rule]]
name = "delete"
methods = ["DELETE"]
path = "/items/*"
limits = ["1/1m"]

[[rule]]
name = "api"
path = "/api/**"
key = "header:X-Api-Key"
limits = ["3/1m"]

[default]
limits = ["100/1m"]
"#;

/// The rules under `[requests] headers_with_underscores_action = <action>`.
fn rules_with(action: &str) -> String {
    format!("[requests]\nheaders_with_underscores_action = \"{action}\"\n{RULES}")
}

/// The requests of the three bypasses, each with its header under the underscore spelling.
const BYPASSES: [(&[u8], &[u8], &[u8]); 3] = [
    (b"POST", b"/items/1", b"X_HTTP_Method_Override: DELETE\r\n"),
    (b"GET", b"/api/orders", b"X_Api_Key: K1\r\n"),
    (b"GET", b"/plain", b"X_RateLimit_Fail_Open: timeout\r\n"),
];

/// Whether the demo upstream's echo lists a request header named `name` (lower case).
fn upstream_saw(answer: &raw_http::RawAnswer, name: &str) -> bool {
    answer
        .body
        .lines()
        .skip(1)
        .any(|line| line.split_once(':').is_some_and(|(n, _)| n.trim() == name))
}

#[test]
fn underscore_header_names_are_refused_by_default() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, RULES);
        assert_spent(
            &format!("{flavor:?}"),
            &redis,
            Some(&upstream),
            BYPASSES,
            |(method, target, header)| {
                let answer = raw_http::request(gateway.port, method, target, header);
                if answer.status == 400 {
                    // The body names the header and the setting that lets it through.
                    let name = String::from_utf8_lossy(header);
                    let name = name.split(':').next().unwrap_or("").to_ascii_lowercase();
                    assert!(answer.body.contains(&name), "{flavor:?}: {answer:?}");
                    assert!(
                        answer.body.contains("headers_with_underscores_action"),
                        "{flavor:?}: {answer:?}"
                    );
                }
                answer.status
            },
            Spent::all_refused(&[400, 400, 400]),
        );
    });
}

#[test]
fn dropped_underscore_headers_never_reach_the_upstream() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, &rules_with("drop_header"));
        let answers: Vec<raw_http::RawAnswer> = BYPASSES
            .iter()
            .map(|(method, target, header)| raw_http::request(gateway.port, method, target, header))
            .collect();
        for (answer, name) in answers.iter().zip([
            "x_http_method_override",
            "x_api_key",
            "x_ratelimit_fail_open",
        ]) {
            assert_eq!(answer.status, 200, "{flavor:?}: {answer:?}");
            assert!(!upstream_saw(answer, name), "{flavor:?}: {answer:?}");
        }
        assert_eq!(upstream.requests(), 3, "{flavor:?}");
        // Without its header the API request is keyed by the client's address.
        assert_eq!(
            keys(&redis, "rl:*"),
            ["rl:{ip:127.0.0.1}:api", "rl:{ip:127.0.0.1}:default"],
            "{flavor:?}"
        );
    });
}

#[test]
fn allowed_underscore_headers_are_read_as_their_hyphenated_names() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, &rules_with("allow"));
        // The method override under its underscore spelling is still an override.
        let answer = raw_http::request(gateway.port, BYPASSES[0].0, BYPASSES[0].1, BYPASSES[0].2);
        assert_eq!(answer.status, 400, "{flavor:?}: {answer:?}");
        // The key header under either spelling is one key; under both, two values of one
        // header, which the upstream may read either way: refused.
        let spellings: [&[u8]; 5] = [
            b"X_Api_Key: K1\r\n",
            b"X-Api-Key: K1\r\n",
            b"x_api-KEY: K1\r\n",
            b"X_Api_Key: K1\r\n",
            b"X-Api-Key: K2\r\nX_Api_Key: K1\r\n",
        ];
        assert_spent(
            &format!("{flavor:?}: the key header"),
            &redis,
            Some(&upstream),
            spellings,
            |header| raw_http::request(gateway.port, b"GET", b"/api/orders", header).status,
            Spent {
                statuses: &[200, 200, 200, 429, 400],
                served: Some(3),
                pattern: "rl:*",
                keys: &["rl:{h:K1}:api"],
            },
        );
        // The fail-open mark is the gateway's: a client's, under any spelling, is removed.
        let answer = raw_http::request(gateway.port, BYPASSES[2].0, BYPASSES[2].1, BYPASSES[2].2);
        assert_eq!(answer.status, 200, "{flavor:?}: {answer:?}");
        assert!(
            !upstream_saw(&answer, "x_ratelimit_fail_open"),
            "{flavor:?}: {answer:?}"
        );
        // Any other underscore header passes as it came.
        let answer = raw_http::request(gateway.port, b"GET", b"/plain", b"X_Trace_Id: 7\r\n");
        assert_eq!(answer.status, 200, "{flavor:?}: {answer:?}");
        assert!(
            upstream_saw(&answer, "x_trace_id"),
            "{flavor:?}: {answer:?}"
        );
    });
}

/// A check-mode gateway trusting 127.0.0.1, with `requests` as its `[requests]` lines.
fn check_gateway(redis: &Server, requests: &str) -> Gateway {
    Gateway::start(
        "mode = \"check\"\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
        &format!(
            "{}[requests]\n{requests}\n{RULES}",
            redis_section(redis.port(), "")
        ),
    )
}

/// The proxy's check of `method uri`, passing on the client's `headers`.
fn check(gateway: &Gateway, method: &str, uri: &str, headers: &str) -> u16 {
    let lines = format!("X-Original-Method: {method}\r\nX-Original-URI: {uri}\r\n{headers}");
    raw_http::request(gateway.port, b"GET", b"/_ratelimit", lines.as_bytes()).status
}

#[test]
fn check_mode_refuses_underscore_headers_or_reads_them_as_hyphens() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        // The default: refused.
        let gateway = check_gateway(&redis, "");
        assert_spent(
            &format!("{flavor:?}: reject_request"),
            &redis,
            None,
            [
                ("POST", "/items/1", "X_HTTP_Method_Override: DELETE\r\n"),
                ("GET", "/api/orders", "X_Api_Key: K1\r\n"),
            ],
            |(method, uri, headers)| check(&gateway, method, uri, headers),
            Spent {
                statuses: &[400, 400],
                served: None,
                pattern: "*",
                keys: &[],
            },
        );
        drop(gateway);
        // `allow`: the override is still one, the key header still the key.
        let gateway = check_gateway(&redis, "headers_with_underscores_action = \"allow\"");
        assert_spent(
            &format!("{flavor:?}: allow"),
            &redis,
            None,
            [
                ("POST", "/items/1", "X_HTTP_Method_Override: DELETE\r\n"),
                ("GET", "/api/orders", "X_Api_Key: K1\r\n"),
                ("GET", "/api/orders", "X-Api-Key: K1\r\n"),
            ],
            |(method, uri, headers)| check(&gateway, method, uri, headers),
            Spent {
                statuses: &[400, 200, 200],
                served: None,
                pattern: "rl:*",
                keys: &["rl:{h:K1}:api"],
            },
        );
    });
}

#[test]
fn check_mode_cannot_drop_headers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("check.toml");
    let text = "[server]\nlisten = \"127.0.0.1:1\"\nadmin_listen = \"127.0.0.1:2\"\n\
                mode = \"check\"\n[redis]\nurl = \"redis://127.0.0.1:3\"\n\
                [requests]\nheaders_with_underscores_action = \"drop_header\"\n\
                [default]\nlimits = [\"5/1m\"]\n";
    std::fs::write(&path, text).expect("write");
    let out = check_config(&path);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("headers_with_underscores_action = \"drop_header\" needs mode = \"proxy\""),
        "{stderr}"
    );
}
