//! Check mode and the bytes of the trusted headers: nginx passes
//! `$request_uri` raw, UTF-8 included. When the trusted proxy sends `X-Original-URI` (or
//! `X-Original-Method`), its bytes are the request, canonicalised and checked like any
//! path; a header that cannot be a path or a method gets 400 (501 for an unknown method),
//! never the check request's own path, which no rule expects.

use testkit::gateway::raw_http;
use testkit::gateway::*;

const RULES: &str = r#"
[[rule]]
name = "login"
methods = ["POST"]
path = "/auth/*"
per_endpoint = true
limits = ["2/1h"]

[default]
limits = ["100/1h"]
"#;

fn start(redis: &Server) -> Gateway {
    Gateway::start(
        "mode = \"check\"\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
        &format!("{}{RULES}", redis_section(redis.port(), "")),
    )
}

/// `GET /_ratelimit` with `X-Original-Method: <method>` and `X-Original-URI: <uri>`.
fn check(gateway: &Gateway, method: &[u8], uri: &[u8]) -> raw_http::RawAnswer {
    let mut headers = b"X-Original-Method: ".to_vec();
    headers.extend_from_slice(method);
    headers.extend_from_slice(b"\r\nX-Original-URI: ");
    headers.extend_from_slice(uri);
    headers.extend_from_slice(b"\r\n");
    raw_http::request(gateway.port, b"GET", b"/_ratelimit", &headers)
}

fn rule_of(answer: &raw_http::RawAnswer) -> String {
    answer
        .header("ratelimit-policy")
        .map(|policy| parse_policy(policy)[0].name.clone())
        .unwrap_or_default()
}

#[test]
fn raw_utf8_in_the_original_uri_meets_its_rule() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let gateway = start(&redis);
        // Raw UTF-8 and its percent-encoded spelling are one endpoint.
        let spellings: [&[u8]; 3] = [
            "/auth/café?x=1".as_bytes(),
            b"/auth/caf%C3%A9",
            "/auth/./café;jsessionid=9".as_bytes(),
        ];
        let post = |uri| {
            let answer = check(&gateway, b"POST", uri);
            if answer.status == 200 {
                assert_eq!(rule_of(&answer), "login", "{flavor:?}: {answer:?}");
            }
            answer.status
        };
        assert_spent(
            &format!("{flavor:?}"),
            &redis,
            None,
            spellings,
            post,
            Spent {
                statuses: &[200, 200, 429],
                served: None,
                pattern: "rl:*",
                // (A key writes the path's `%` as `%25`.)
                keys: &["rl:{ip:127.0.0.1}:login:POST /auth/caf%25C3%25A9"],
            },
        );
        // nginx reports an absolute-form target as sent: its path decides.
        let answer = check(&gateway, b"post", b"http://api.example/auth/other?x");
        assert_eq!(rule_of(&answer), "login", "{flavor:?}: {answer:?}");
    });
}

#[test]
fn a_trusted_header_that_cannot_be_a_request_is_refused_not_ignored() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let gateway = start(&redis);
        let cases: [(&[u8], &[u8]); 7] = [
            (b"POST", b"auth/login"),
            (b"POST", b""),
            (b"POST", b"/auth/%zz"),
            (b"POST", b"/auth%2Flogin"),
            (b"POST", b"/auth/\x7flogin"),
            (b"BREW", b"/auth/login"),
            ("PÖST".as_bytes(), b"/auth/login"),
        ];
        assert_spent(
            &format!("{flavor:?}"),
            &redis,
            None,
            cases,
            |(method, uri)| check(&gateway, method, uri).status,
            Spent {
                served: None,
                ..Spent::all_refused(&[400, 400, 400, 400, 400, 501, 400])
            },
        );
        // A second URI header (say, the client's, passed through beside the proxy's).
        let answer = raw_http::request(
            gateway.port,
            b"GET",
            b"/_ratelimit",
            b"X-Original-Method: POST\r\nX-Original-URI: /auth/login\r\nX-Original-URI: /other\r\n",
        );
        assert_eq!(answer.status, 400, "{flavor:?}: {answer:?}");
        assert!(keys(&redis, "*").is_empty(), "{flavor:?}: nothing counted");
    });
}
