//! Method case and unknown methods: methods match regardless of case, are
//! keyed and forwarded upper-cased, and a method that is neither registered nor named by
//! a rule is refused (501; 400 when it is no token or longer than 32 bytes). A `_method`
//! query parameter naming another method is refused like an override header, since
//! Rack, Symfony, Laravel and Express's `method-override` run that method instead; and
//! `CONNECT`, which asks for a tunnel, is refused before any rule is charged.
//!
//! `HEAD` spends the budget of `GET` (Flask, Django, Rails and Go's ServeMux run the GET
//! handler for it), and `X-HTTP-Method-Override` naming another method is refused (a POST
//! saying DELETE would escape a DELETE rule at an upstream that honours it).

use testkit::fixtures::LOGIN_API_SEARCH;
use testkit::gateway::raw_http;
use testkit::gateway::*;

const RULES: &str = r#"
[[rule]]
name = "login"
methods = ["POST"]
path = "/auth/*"
per_endpoint = true
limits = ["3/15m"]
count = [401, 403]

[[rule]]
name = "delete"
methods = ["DELETE"]
path = "/items/*"
limits = ["1/1m"]

[[rule]]
name = "purge"
methods = ["purge"]
path = "/cache/**"
limits = ["100/1m"]

[default]
limits = ["5/1m"]
"#;

#[test]
fn lower_case_post_meets_the_post_rule() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, RULES);
        let post = |method: &str| {
            let answer = raw_http::request(
                gateway.port,
                method.as_bytes(),
                b"/auth/login?status=401",
                b"",
            );
            if answer.status == 401 {
                assert_eq!(
                    answer.upstream_request_line(),
                    "POST /auth/login?status=401",
                    "{flavor:?}: forwarded upper-cased"
                );
            }
            answer.status
        };
        assert_spent(
            &format!("{flavor:?}"),
            &redis,
            Some(&upstream),
            ["post", "Post", "pOST", "post"],
            post,
            Spent {
                statuses: &[401, 401, 401, 429],
                served: Some(3),
                pattern: "rl:*",
                keys: &["rl:{ip:127.0.0.1}:login:POST /auth/login"],
            },
        );
    });
}

#[test]
fn unknown_and_overlong_methods_are_refused_unless_a_rule_names_them() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, RULES);
        let refused: [&[u8]; 4] = [b"BREW", b"brew", &[b'M'; 33], &[b'M'; 2000]];
        assert_spent(
            &format!("{flavor:?}: refused"),
            &redis,
            Some(&upstream),
            refused,
            |method| raw_http::request(gateway.port, method, b"/pot", b"").status,
            Spent::all_refused(&[501, 501, 400, 400]),
        );

        // Registered methods pass; a rule's own method passes, in any case.
        for (method, line) in [
            ("propfind", "PROPFIND /dav"),
            ("purge", "PURGE /cache/x"),
            ("PURGE", "PURGE /cache/x"),
        ] {
            let target = line.split(' ').nth(1).unwrap_or("/");
            let answer = raw_http::request(gateway.port, method.as_bytes(), target.as_bytes(), b"");
            assert_eq!(answer.status, 200, "{flavor:?}: {answer:?}");
            assert_eq!(answer.upstream_request_line(), line, "{flavor:?}");
        }
        assert_eq!(
            keys(&redis, "rl:*"),
            vec![
                "rl:{ip:127.0.0.1}:default".to_string(),
                "rl:{ip:127.0.0.1}:purge".to_string()
            ],
            "{flavor:?}"
        );
    });
}

#[test]
fn a_method_query_parameter_naming_another_method_is_refused() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, RULES);
        // Each spelling a framework's parser reads as `_method=DELETE`.
        let targets: [&[u8]; 9] = [
            b"/items/1?_method=DELETE",
            b"/items/2?_method=delete",
            b"/items/3?%5Fmethod=DELETE",
            b"/items/4?_METHOD=Delete",
            b"/items/5?_method=DEL%45TE",
            b"/items/6?_method=POST&_method=DELETE",
            b"/items/7?a=1;_method=DELETE",
            b"/items/8?.method=DELETE",
            b"/items/9?_method=+DELETE+",
        ];
        assert_spent(
            &format!("{flavor:?}: refused"),
            &redis,
            Some(&upstream),
            targets,
            |target| {
                let answer = raw_http::request(gateway.port, b"POST", target, b"");
                if answer.status == 400 {
                    assert!(answer.body.contains("_method"), "{flavor:?}: {answer:?}");
                }
                answer.status
            },
            Spent::all_refused(&[400; 9]),
        );
        // Naming the request's own method, or another parameter, changes nothing.
        for target in [
            &b"/items/1?_method=post"[..],
            b"/items/1?q=_method%3DDELETE",
        ] {
            let answer = raw_http::request(gateway.port, b"POST", target, b"");
            assert_eq!(answer.status, 200, "{flavor:?}: {answer:?}");
        }

        // Check mode: the query of the URI the proxy reports.
        let checked = ServerConfig::new(flavor).start();
        let checker = Gateway::start(
            "mode = \"check\"\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
            &format!(
                "{}[[rule]]\nname = \"delete\"\nmethods = [\"DELETE\"]\npath = \"/items/*\"\n\
                 limits = [\"1/1m\"]\n[default]\nlimits = [\"5/1m\"]\n",
                redis_section(checked.port(), "")
            ),
        );
        assert_spent(
            &format!("{flavor:?}: check mode"),
            &checked,
            None,
            ["/items/1?%5Fmethod=DELETE", "/items/1?a=1&_method=delete#x"],
            |uri| {
                let lines = format!("X-Original-Method: POST\r\nX-Original-URI: {uri}\r\n");
                raw_http::request(checker.port, b"GET", b"/_ratelimit", lines.as_bytes()).status
            },
            Spent {
                statuses: &[400, 400],
                served: None,
                pattern: "*",
                keys: &[],
            },
        );

        // `keep`: passed on as before, for an upstream that ignores it.
        let (_redis, _upstream, gateway) = stack(
            flavor,
            &format!("[requests]\nmethod_override_headers = \"keep\"\n{RULES}"),
        );
        let answer = raw_http::request(gateway.port, b"POST", b"/items/1?_method=DELETE", b"");
        assert_eq!(answer.status, 200, "{flavor:?}: {answer:?}");
        assert_eq!(
            answer.upstream_request_line(),
            "POST /items/1?_method=DELETE",
            "{flavor:?}"
        );
    });
}

#[test]
fn connect_is_refused_before_any_rule_is_charged() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, RULES);
        let targets: [&[u8]; 3] = [b"/auth/login", b"/items/1", b"127.0.0.1:80"];
        assert_spent(
            &format!("{flavor:?}: proxy mode"),
            &redis,
            Some(&upstream),
            targets,
            |target| raw_http::request(gateway.port, b"CONNECT", target, b"").status,
            Spent::all_refused(&[400; 3]),
        );
        let answer = raw_http::request(gateway.port, b"connect", b"/auth/login", b"");
        assert_eq!(answer.status, 400, "{flavor:?}: {answer:?}");
        assert_eq!(upstream.requests(), 0, "{flavor:?}");

        // Check mode (which counts every answer: no `count`): the proxy reporting a
        // CONNECT, or the check request being one.
        let redis = ServerConfig::new(flavor).start();
        let gateway = Gateway::start(
            "mode = \"check\"\ntrusted_proxies = [\"127.0.0.1/32\"]\n",
            &format!(
                "{}[[rule]]\nname = \"login\"\npath = \"/auth/*\"\nlimits = [\"3/15m\"]\n\
                 [default]\nlimits = [\"5/1m\"]\n",
                redis_section(redis.port(), "")
            ),
        );
        let asked = [
            (
                "GET",
                "X-Original-Method: CONNECT\r\nX-Original-URI: /auth/login\r\n",
            ),
            (
                "GET",
                "X-Original-Method: connect\r\nX-Original-URI: /items/1\r\n",
            ),
            ("CONNECT", ""),
        ];
        assert_spent(
            &format!("{flavor:?}: check mode"),
            &redis,
            None,
            asked,
            |(method, headers)| {
                raw_http::request(
                    gateway.port,
                    method.as_bytes(),
                    b"/auth/login",
                    headers.as_bytes(),
                )
                .status
            },
            Spent {
                statuses: &[400; 3],
                served: None,
                pattern: "*",
                keys: &[],
            },
        );
    });
}

#[test]
fn head_spends_the_budget_of_get() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, LOGIN_API_SEARCH);
        // One endpoint, one budget.
        assert_spent(
            &format!("{flavor:?}"),
            &redis,
            Some(&upstream),
            ["HEAD", "GET", "HEAD", "head"],
            |method| raw_http::request(gateway.port, method.as_bytes(), b"/search", b"").status,
            Spent {
                statuses: &[200, 200, 429, 429],
                served: Some(2),
                pattern: "rl:*",
                keys: &["rl:{ip:127.0.0.1}:search:GET /search"],
            },
        );
        // A HEAD is still forwarded as a HEAD.
        let (_redis, _upstream, gateway) = stack(flavor, LOGIN_API_SEARCH);
        let answer = raw_http::request(gateway.port, b"HEAD", b"/search", b"");
        assert_eq!(answer.status, 200, "{flavor:?}");
        assert!(answer.body.is_empty(), "{flavor:?}: {answer:?}");
    });
}

const DELETE_RULE: &str = r#"
[[rule]]
name = "delete"
methods = ["DELETE"]
path = "/items/*"
limits = ["2/1m"]

[default]
limits = ["100/1m"]
"#;

#[test]
fn a_method_override_header_naming_another_method_is_refused() {
    each_flavor(|flavor| {
        let (redis, upstream, gateway) = stack(flavor, DELETE_RULE);
        let post = |(n, header): (usize, &str)| {
            let target = format!("/items/{n}");
            let answer =
                raw_http::request(gateway.port, b"POST", target.as_bytes(), header.as_bytes());
            assert!(answer.body.contains("override"), "{flavor:?}: {answer:?}");
            answer.status
        };
        let overrides = [
            "X-HTTP-Method-Override: DELETE\r\n",
            "X-HTTP-Method: delete\r\n",
            "X-Method-Override: DELETE\r\n",
            "X-HTTP-Method-Override: DELETE\r\n",
        ];
        assert_spent(
            &format!("{flavor:?}"),
            &redis,
            Some(&upstream),
            overrides.into_iter().enumerate(),
            post,
            Spent::all_refused(&[400; 4]),
        );
        // Naming the request's own method changes nothing.
        let answer = raw_http::request(
            gateway.port,
            b"POST",
            b"/items/1",
            b"X-HTTP-Method-Override: post\r\n",
        );
        assert_eq!(answer.status, 200, "{flavor:?}: {answer:?}");

        // "keep": for an upstream known to ignore them, passed on.
        let (_redis, upstream, gateway) = stack(
            flavor,
            &format!("[requests]\nmethod_override_headers = \"keep\"\n{DELETE_RULE}"),
        );
        let answer = raw_http::request(
            gateway.port,
            b"POST",
            b"/items/1",
            b"X-HTTP-Method-Override: DELETE\r\n",
        );
        assert_eq!(answer.status, 200, "{flavor:?}: {answer:?}");
        assert!(
            answer.body.contains("x-http-method-override: DELETE"),
            "{flavor:?}: {answer:?}"
        );
        assert_eq!(upstream.requests(), 1, "{flavor:?}");
    });
}
