//! `[connections] body_timeout_ms`: a client sending its request body a byte at a time
//! cannot hold an upstream connection (a worker of a thread-per-request upstream) for the
//! upstream timeout: once the gateway has waited `body_timeout_ms` for the body, the client
//! gets 408 and the upstream request is cut (the demo upstream, reading the body, sees it
//! break off). A large body sent at once still passes whole.
//!
//! The body is handled the same whatever decides the rules, so one server flavour is
//! enough; Redis 7.0 is the one here.
//!
//! A request with both `Transfer-Encoding` and `Content-Length` reaches the upstream as one
//! request, framed by the gateway, never with a second request smuggled in its body.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use testkit::fixtures::LOGIN_API_SEARCH;
use testkit::gateway::raw_http;
use testkit::gateway::*;

const RULES: &str =
    "[connections]\nbody_timeout_ms = 1000\n\n[default]\nlimits = [\"1000000/1h\"]\n";

/// How many `read_body=1` bodies the demo upstream saw break off.
fn broken_bodies(upstream: &Upstream) -> u64 {
    let url = format!("http://127.0.0.1:{}/__broken_bodies", upstream.port);
    let resp = send(&agent(), "GET", &url, &[]);
    assert_eq!(resp.status, 200, "{url}: {resp:?}");
    resp.body.trim().parse().unwrap_or(u64::MAX)
}

#[test]
fn a_body_sent_a_byte_at_a_time_is_cut_and_its_upstream_request_ended() {
    let (_redis, upstream, gateway) = stack(Flavor::Redis, RULES);
    assert_eq!(broken_bodies(&upstream), 0);
    let mut stream = TcpStream::connect(("127.0.0.1", gateway.port)).expect("connect");
    stream
        .write_all(
            b"POST /upload?read_body=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\
              Content-Length: 1000\r\n\r\n",
        )
        .expect("send the head");
    // One byte every 250 ms, 40 at most (10 s, far past the 1 s timeout and far short of
    // the 30 s upstream timeout, which before the fix was all that ended such a request),
    // until the gateway answers or closes.
    stream
        .set_read_timeout(Some(Duration::from_millis(250)))
        .expect("read timeout");
    let mut answer = Vec::new();
    let mut chunk = [0u8; 1024];
    let mut sent = 0;
    while sent < 40 {
        if stream.write_all(b"x").is_err() {
            break; // the gateway closed the connection
        }
        sent += 1;
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&chunk[..n]);
                break;
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
    // The rest of the answer, until the gateway closes the connection.
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("read timeout");
    while let Ok(n) = stream.read(&mut chunk) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&chunk[..n]);
    }
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.starts_with("HTTP/1.1 408 "),
        "after {sent} body bytes the gateway answered {answer:?}"
    );
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    assert!(sent < 40, "the gateway took all 40 bytes without a word");
    // The upstream's connection was closed mid-body: it saw its request end.
    wait_until(
        Duration::from_secs(5),
        "the upstream to see the body break off",
        || broken_bodies(&upstream) == 1,
    );
    assert!(
        gateway.log_lines_with("did not arrive within body_timeout_ms") >= 1,
        "{}",
        gateway.log()
    );
    assert_eq!(
        gateway
            .metrics()
            .counter("rl_gateway_request_body_timeouts_total", &[]),
        1.0
    );
    assert_eq!(
        gateway
            .metrics()
            .counter("rl_gateway_upstream_errors_total", &[]),
        0.0,
        "the client's fault, not the upstream's"
    );
    // The gateway serves on.
    assert_eq!(gateway.get("/after").status, 200);
}

#[test]
fn a_large_body_sent_at_once_still_passes_whole() {
    let (_redis, upstream, gateway) = stack(Flavor::Redis, RULES);
    let body = vec![b'x'; 4 << 20];
    let response = gateway
        .agent
        .post(&gateway.url("/upload?read_body=1"))
        .send_bytes(&body)
        .expect("a 4 MiB body is forwarded");
    assert_eq!(response.status(), 200);
    let echo = response.into_string().expect("the echo");
    assert!(echo.contains("body: 4194304\n"), "{echo}");
    assert_eq!(broken_bodies(&upstream), 0);
}

#[test]
fn transfer_encoding_with_content_length_smuggles_nothing() {
    each_flavor(|flavor| {
        let (_redis, upstream, gateway) = stack(flavor, LOGIN_API_SEARCH);
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
    });
}
