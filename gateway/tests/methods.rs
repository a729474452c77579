//! Method case and unknown methods (issue 11, B7): methods match regardless of case, are
//! keyed and forwarded upper-cased, and a method that is neither registered nor named by
//! a rule is refused (501; 400 when it is no token or longer than 32 bytes).

mod common;
mod raw_http;
use common::*;

const RULES: &str = r#"
[[rule]]
name = "login"
methods = ["POST"]
path = "/auth/*"
per_endpoint = true
limits = ["3/15m"]
count = [401, 403]

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
    for flavor in FLAVORS {
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
    }
}

#[test]
fn unknown_and_overlong_methods_are_refused_unless_a_rule_names_them() {
    for flavor in FLAVORS {
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
    }
}
