//! The gateway's own log cannot be flooded by requests: a line that one request causes
//! (an upstream error, a client's broken body) is written at most once a second per kind,
//! the next one saying how many were left out. Before, every such request wrote a line:
//! about 800 a second from one client sending broken chunked bodies.
//!
//! The log lines do not depend on the server deciding the rules, so one flavour is enough.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use testkit::gateway::*;

use testkit::fixtures::NEVER_LIMITED as RULES;
const LEFT_OUT: &str = "more since the last line)";

/// Sends `request` on a connection of its own and reads the answer to its end (the
/// gateway closes the connection after it); returns the status line.
fn exchange(port: u16, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    stream.write_all(request).expect("send");
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    answer.lines().next().unwrap_or_default().to_owned()
}

/// Sends `request` until the gateway's log holds a line saying how many were left out
/// (which needs more than a second of requests), 3,000 times or 60 s at most; returns
/// how many were sent, each answered `status`.
fn flood(gateway: &Gateway, request: &[u8], status: &str) -> usize {
    let give_up = Instant::now() + Duration::from_secs(60);
    let mut sent = 0;
    while sent < 3000 && Instant::now() < give_up {
        for _ in 0..50 {
            let line = exchange(gateway.port, request);
            assert!(line.starts_with(status), "answered {line:?}");
            sent += 1;
        }
        if sent >= 300 && gateway.log_lines_with(LEFT_OUT) > 0 {
            break;
        }
    }
    sent
}

#[test]
fn broken_chunked_bodies_write_a_line_a_second_not_a_line_a_request() {
    let (_redis, _upstream, gateway) = stack(Flavor::Redis, RULES);
    // A chunk size that is not hex: the body breaks off after its first chunk, on its way
    // to an upstream that reads it.
    let broken: &[u8] = b"POST /upload?read_body=1 HTTP/1.1\r\nHost: 127.0.0.1\r\n\
        Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n";
    let sent = flood(&gateway, broken, "HTTP/1.1 400");
    let log = gateway.log();
    let lines = log
        .lines()
        .filter(|l| l.contains("client error") || l.contains("upstream error"))
        .count();
    eprintln!("{lines} error lines for {sent} requests");
    assert!(lines >= 1, "the first is written: {log}");
    assert!(
        lines * 10 <= sent,
        "{lines} error lines for {sent} requests:\n{log}"
    );
    // Each is counted, however few are logged.
    let counted = gateway
        .metrics()
        .counter("rl_gateway_request_body_errors_total", &[]);
    assert_eq!(counted, sent as f64);
    assert!(log.contains(LEFT_OUT), "{log}");
    assert!(log.contains("the request body broke off"), "{log}");
    // The gateway serves on.
    assert_eq!(gateway.get("/after").status, 200);
}

#[test]
fn upstream_errors_write_a_line_a_second_not_a_line_a_request() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    // Nothing listens there: every request is an upstream error (connection refused).
    let gateway = Gateway::start(
        &format!("upstream = \"http://127.0.0.1:{}\"\n", free_port()),
        &format!("{}{RULES}", redis_section(redis.port(), "")),
    );
    let request: &[u8] = b"GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let sent = flood(&gateway, request, "HTTP/1.1 502");
    let log = gateway.log();
    let lines = gateway.log_lines_with("upstream error");
    eprintln!("{lines} upstream error lines for {sent} requests");
    assert!(lines >= 1, "the first is written: {log}");
    assert_eq!(
        gateway
            .metrics()
            .counter("rl_gateway_upstream_errors_total", &[]),
        sent as f64,
        "each is counted, however few are logged"
    );
    assert!(
        lines * 10 <= sent,
        "{lines} upstream error lines for {sent} requests:\n{log}"
    );
    assert!(log.contains(LEFT_OUT), "{log}");
    // The reason, not only hyper's "client error (Connect)".
    assert!(log.contains("refused"), "{log}");
}
