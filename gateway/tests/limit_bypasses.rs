//! Ways around a limit that once worked, each pinned shut:
//! - a rule's key header sent twice: the gateway counted the first value while upstreams
//!   that read the last (PHP behind nginx) or all of them saw another client, so any first
//!   value bought a fresh budget;
//! - `HEAD` escaped a `GET` rule, though HEAD is GET without a body and Flask, Django,
//!   Rails and Go's ServeMux run the GET handler for it;
//! - `%00` and other escaped control bytes reached the upstream: one that stops at the NUL
//!   routes `/auth/login%00N` to `/auth/login`, a fresh per-endpoint budget for every `N`;
//! - a rule whose path pattern is not in canonical form (`/caf%c3%a9`, `/a/./b`, `/x;y`)
//!   matched no request ever, so the endpoint it was written for had no limit;
//! - a client that stopped reading its response held its connection for good;
//! - `X-HTTP-Method-Override: DELETE` on a POST escaped a DELETE rule at an upstream that
//!   honours it;
//! - in check mode, a proxy sending the URI header without the method header was checked
//!   as the check request's own GET, which a POST rule never matches;
//! - `trusted_proxies = ["0.0.0.0/0"]` let every client choose its address;
//! - one client could hold every connection (`max_connections_per_client`).
//!
//! And one check that holds already and must keep holding: a request with both
//! `Transfer-Encoding` and `Content-Length` reaches the upstream as one request, framed by
//! the gateway, never with a second request smuggled in its body.

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
name = "api"
path = "/api/**"
key = "header:X-Api-Key"
limits = ["2/1m"]

[[rule]]
name = "search"
methods = ["GET"]
path = "/search"
per_endpoint = true
limits = ["2/1m"]

[default]
limits = ["100/1m"]
"#;

#[test]
fn a_key_header_sent_twice_is_refused() {
    for flavor in FLAVORS {
        let (redis, upstream, gateway) = stack(flavor, RULES);
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
    }
}

#[test]
fn head_spends_the_budget_of_get() {
    for flavor in FLAVORS {
        let (redis, upstream, gateway) = stack(flavor, RULES);
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
        let (_redis, _upstream, gateway) = stack(flavor, RULES);
        let answer = raw_http::request(gateway.port, b"HEAD", b"/search", b"");
        assert_eq!(answer.status, 200, "{flavor:?}");
        assert!(answer.body.is_empty(), "{flavor:?}: {answer:?}");
    }
}

#[test]
fn escaped_control_bytes_are_refused() {
    for flavor in FLAVORS {
        let (redis, upstream, gateway) = stack(flavor, RULES);
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
    }
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

#[test]
fn transfer_encoding_with_content_length_smuggles_nothing() {
    for flavor in FLAVORS {
        let (_redis, upstream, gateway) = stack(flavor, RULES);
        let smuggled = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";
        let chunked = format!("0\r\n\r\n{smuggled}");
        let request = format!(
            "POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\
             Transfer-Encoding: chunked\r\n\r\n{chunked}",
            chunked.len()
        );
        let answer = raw_http::send(gateway.port, request.as_bytes());
        assert_eq!(answer.status, 200, "{flavor:?}: {answer:?}");
        assert_eq!(answer.upstream_request_line(), "POST /upload");
        assert!(!answer.body.contains("/smuggled"), "{flavor:?}: {answer:?}");
        // Content-Length was dropped for Transfer-Encoding (RFC 9112, 6.3), and the hop's
        // framing was not passed on as it came.
        assert!(
            !answer
                .body
                .lines()
                .any(|line| line.to_ascii_lowercase().starts_with("content-length:")),
            "{flavor:?}: {answer:?}"
        );
        assert_eq!(upstream.requests(), 1, "{flavor:?}: one request, not two");
        // Transfer-Encoding that does not end in chunked cannot be framed: refused.
        let request = "POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\
                       Content-Length: 3\r\n\r\nabc";
        let answer = raw_http::send(gateway.port, request.as_bytes());
        assert_eq!(answer.status, 400, "{flavor:?}: {answer:?}");
        assert_eq!(upstream.requests(), 1, "{flavor:?}");
    }
}

/// An upstream that answers `GET /big` with a body of 1 GiB, written as fast as the
/// gateway takes it, and anything else with `ok`.
fn big_upstream() -> u16 {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    match stream.read(&mut byte) {
                        Ok(1) => head.push(byte[0]),
                        _ => return,
                    }
                }
                if head.starts_with(b"GET /big ") {
                    let size: u64 = 1 << 30;
                    let _ = write!(stream, "HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n");
                    let chunk = vec![0u8; 64 * 1024];
                    // Until the gateway lets go of the connection.
                    while stream.write_all(&chunk).is_ok() {}
                } else {
                    let _ = stream.write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    );
                }
            });
        }
    });
    port
}

#[test]
fn a_client_that_stops_reading_its_response_lets_go_of_its_connection() {
    use std::io::{Read, Write};
    for flavor in FLAVORS {
        let redis = ServerConfig::new(flavor).start();
        let upstream = big_upstream();
        let gateway = Gateway::start(
            &format!("upstream = \"http://127.0.0.1:{upstream}\"\n"),
            &format!(
                "{}[connections]\nmax_connections = 1\nsend_timeout_ms = 500\n\
                 [default]\nlimits = [\"100/1m\"]\n",
                redis_section(redis.port(), "")
            ),
        );
        // A reads the start of its answer, then nothing more. (The slot may still be held
        // by the connection that saw the gateway ready: then A is refused and tries again.)
        let mut reader = None;
        wait_until(
            std::time::Duration::from_secs(30),
            "A's request is served",
            || {
                let mut stream =
                    std::net::TcpStream::connect(("127.0.0.1", gateway.port)).expect("A");
                stream
                    .set_read_timeout(Some(std::time::Duration::from_secs(30)))
                    .expect("timeout");
                stream
                    .write_all(b"GET /big HTTP/1.1\r\nHost: x\r\n\r\n")
                    .expect("A's request");
                let mut start = [0u8; 12];
                let served = stream.read_exact(&mut start).is_ok() && &start == b"HTTP/1.1 200";
                if served {
                    reader = Some(stream);
                }
                served
            },
        );
        let mut reader = reader.expect("A was served");
        // While A's response goes out, A holds the only slot.
        let small = || raw_http::request(gateway.port, b"GET", b"/small", b"").status;
        assert_eq!(small(), 503, "{flavor:?}: A holds the slot");
        // A's writes stall once the socket buffers are full; 500 ms later A is let go.
        wait_until(
            std::time::Duration::from_secs(30),
            "the stalled connection is closed",
            || small() == 200,
        );
        // A finds its connection closed (after what the buffers held), not 1 GiB.
        let mut rest = Vec::new();
        let read = reader.read_to_end(&mut rest);
        assert!(
            read.is_err() || rest.len() < 256 << 20,
            "{flavor:?}: {} bytes",
            rest.len()
        );
    }
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
    for flavor in FLAVORS {
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
    }
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
    for flavor in FLAVORS {
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
    }
}

#[test]
fn trusting_every_address_is_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("rules.toml");
    for (nets, ok) in [
        ("\"0.0.0.0/0\"", false),
        ("\"::/0\"", false),
        ("\"10.0.0.0/8\", \"0.0.0.0/0\"", false),
        ("\"10.0.0.0/8\", \"::1\"", true),
    ] {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:1\"\nupstream = \"http://127.0.0.1:2\"\n\
             trusted_proxies = [{nets}]\n[default]\nlimits = [\"5/1m\"]\n"
        );
        std::fs::write(&path, text).expect("write the rules");
        let output = check_config(&path);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.success(), ok, "{nets}: {stderr}");
        if !ok {
            assert!(stderr.contains("trusts every address"), "{nets}: {stderr}");
        }
    }
}

#[test]
fn one_client_cannot_take_every_connection() {
    for flavor in FLAVORS {
        let (_redis, _upstream, gateway) = stack(
            flavor,
            "[connections]\nmax_connections_per_client = 2\nidle_timeout_ms = 60000\n\
             [default]\nlimits = [\"100/1m\"]\n",
        );
        // Two connections that say nothing, kept open by a long idle timeout.
        let first = std::net::TcpStream::connect(("127.0.0.1", gateway.port)).expect("first");
        let _second = std::net::TcpStream::connect(("127.0.0.1", gateway.port)).expect("second");
        // The status of one more request, 0 when the connection was reset instead (the
        // gateway closes a refused connection without reading it).
        let third = || {
            use std::io::{Read, Write};
            let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", gateway.port)) else {
                return 0;
            };
            let _ = stream.set_read_timeout(Some(std::time::Duration::from_secs(30)));
            let _ = stream.write_all(b"GET /a HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
            let mut answer = Vec::new();
            let _ = stream.read_to_end(&mut answer);
            String::from_utf8_lossy(&answer)
                .split_whitespace()
                .nth(1)
                .and_then(|code| code.parse::<u16>().ok())
                .unwrap_or(0)
        };
        wait_until(
            std::time::Duration::from_secs(30),
            "a third connection of the client is refused",
            || matches!(third(), 503 | 0),
        );
        drop(first);
        wait_until(
            std::time::Duration::from_secs(30),
            "with one closed, the client is served again",
            || third() == 200,
        );
    }
}
