//! `concurrency = N` rules against a client trying to hold more than N
//! requests in flight, to leak slots so that others are locked out, or to make the gateway
//! hold leases for good. Every test runs Redis 7.0 and then Valkey 8.1 with the module,
//! the demo upstream and the gateway binary, and ends by checking that `RL.LEASES` shows
//! nothing held and that `rl_gateway_leases_held` came back to 0 with every lease
//! accounted for.
//!
//! Nothing waits for a time to pass and then asserts: each wait is a poll with a deadline,
//! and a lease_ttl of 300 s (far beyond every poll) tells a slot the gateway gave back from
//! one that merely expired.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use testkit::gateway::*;

const LONG_TTL: &str = "300s";
const POLL: Duration = Duration::from_secs(30);
/// The lease key of rule `llm` for the test client.
const LEASE_KEY: &str = "rl:{ip:127.0.0.1}:llm:lease";

fn rule(path: &str, n: u64, rest: &str) -> String {
    format!(
        "[[rule]]\nname = \"llm\"\npath = \"{path}\"\nconcurrency = {n}\nlease_ttl = \
         \"{LONG_TTL}\"\n{rest}\n"
    )
}

/// `RL.LEASES key max`: how many leases are held now.
fn held(redis: &Server, key: &str) -> i64 {
    let reply: Vec<i64> = redis::cmd("RL.LEASES")
        .arg(key)
        .arg(10)
        .query(&mut redis.conn())
        .expect("RL.LEASES");
    reply[0]
}

fn lease_metric(gateway: &Gateway, rule: &str, event: &str) -> f64 {
    gateway.metrics().counter(
        "rl_gateway_leases_total",
        &[("rule", rule), ("event", event)],
    )
}

/// Runs `test` on Redis 7.0, then on Valkey 8.1.
fn on_each(test: fn(Flavor)) {
    each_flavor(|flavor| {
        test(flavor);
    });
}

/// Nothing held in Redis, the gauge at 0, and every lease taken given back or given up on:
/// the gauge neither drifted nor went below zero.
fn assert_all_given_back(redis: &Server, gateway: &Gateway, rules: &[&str], what: &str) {
    for rule in rules {
        let key = format!("rl:{{ip:127.0.0.1}}:{rule}:lease");
        wait_until(POLL, &format!("{what}: {key} holds nothing"), || {
            held(redis, &key) == 0
        });
    }
    wait_until(POLL, &format!("{what}: the gauge is back to 0"), || {
        leases_held(gateway) == 0.0
    });
    for rule in rules {
        let acquired = lease_metric(gateway, rule, "acquired");
        let ended =
            lease_metric(gateway, rule, "released") + lease_metric(gateway, rule, "release_failed");
        assert_eq!(acquired, ended, "{what}: rule {rule}: taken vs given back");
    }
}

/// A raw connection to the gateway, with a generous read timeout.
fn connect(gateway: &Gateway) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", gateway.port)).expect("connect");
    stream.set_read_timeout(Some(POLL)).expect("read timeout");
    stream
}

/// Reads until `needle` has arrived (or the connection ends); what was read.
fn read_until(stream: &mut TcpStream, needle: &str) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 8192];
    while !String::from_utf8_lossy(&seen).contains(needle) {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&seen).into_owned()
}

/// Reads one response with a `Content-Length` body; its status.
fn read_response(stream: &mut TcpStream) -> u16 {
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !seen.ends_with(b"\r\n\r\n") {
        match stream.read(&mut byte) {
            Ok(1) => seen.push(byte[0]),
            other => panic!("{other:?} after {:?}", String::from_utf8_lossy(&seen)),
        }
    }
    let head = String::from_utf8_lossy(&seen).into_owned();
    let length: usize = head
        .to_ascii_lowercase()
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    if let Err(error) = stream.read_exact(&mut body) {
        panic!("the body of {head}: {error}");
    }
    statuses(&head).first().copied().unwrap_or(0)
}

fn read_to_end(stream: &mut TcpStream) -> String {
    let mut seen = Vec::new();
    let _ = stream.read_to_end(&mut seen);
    String::from_utf8_lossy(&seen).into_owned()
}

/// The status codes of every response in `text`, in order.
fn statuses(text: &str) -> Vec<u16> {
    text.match_indices("HTTP/1.1 ")
        .filter_map(|(at, _)| text.get(at + 9..at + 12)?.parse().ok())
        .collect()
}

/// One request, written as given (`Connection: close` added); the status of its answer.
fn raw(gateway: &Gateway, head: &str) -> u16 {
    let mut stream = connect(gateway);
    stream
        .write_all(format!("{head}\r\nHost: t\r\nConnection: close\r\n\r\n").as_bytes())
        .expect("send");
    let text = read_to_end(&mut stream);
    statuses(&text).first().copied().unwrap_or(0)
}

/// The sockets of `/proc/net/tcp` whose local port is `port`: (remote port, state, bytes
/// waiting to be read).
fn sockets_on(port: u16) -> Vec<(u16, u8, u64)> {
    let text = std::fs::read_to_string("/proc/net/tcp").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let local = u16::from_str_radix(fields.get(1)?.rsplit(':').next()?, 16).ok()?;
            let remote = u16::from_str_radix(fields.get(2)?.rsplit(':').next()?, 16).ok()?;
            let state = u8::from_str_radix(fields.get(3)?, 16).ok()?;
            let rx = u64::from_str_radix(fields.get(4)?.rsplit(':').next()?, 16).ok()?;
            (local == port).then_some((remote, state, rx))
        })
        .collect()
}

/// Whether Redis (stopped) has request bytes waiting on a connection: the gateway's call
/// was sent.
fn redis_has_unread_bytes(redis: &Server) -> bool {
    sockets_on(redis.port()).iter().any(|&(_, _, rx)| rx > 0)
}

/// How many times Redis ran `command` (as the module names it), from `INFO commandstats`.
fn calls(redis: &Server, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut redis.conn())
        .expect("INFO");
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

#[test]
fn every_spelling_of_one_endpoint_spends_one_budget() {
    on_each(every_spelling_of_one_endpoint_spends_one_budget_on);
}

fn every_spelling_of_one_endpoint_spends_one_budget_on(flavor: Flavor) {
    // Per endpoint, the strictest case: method and path are part of the key.
    let (redis, upstream, gateway) = stack(flavor, &rule("/api/**", 1, "per_endpoint = true"));
    let first = in_flight(&gateway, "/api/x?hold=1");
    wait_until(POLL, "the request reaches the upstream", || {
        upstream.requests() == 1
    });
    let variants = [
        ("GET /api/x HTTP/1.1", 429),
        ("HEAD /api/x HTTP/1.1", 429),
        ("get /api/x HTTP/1.1", 429),
        ("Get /api/x?other=1 HTTP/1.1", 429),
        ("GET //api/x HTTP/1.1", 429),
        ("GET /api//x HTTP/1.1", 429),
        ("GET /api/./x HTTP/1.1", 429),
        ("GET /api/y/../x HTTP/1.1", 429),
        ("GET /api/x/ HTTP/1.1", 429),
        ("GET /api/x;jsessionid=1 HTTP/1.1", 429),
        ("GET /api/%78 HTTP/1.1", 429),
        ("GET /%61pi/x HTTP/1.1", 429),
        ("GET http://t/api/x HTTP/1.1", 429),
        ("GET /api%2Fx HTTP/1.1", 400),
        ("GET /api/x%2F HTTP/1.1", 400),
    ];
    for (head, expected) in variants {
        assert_eq!(raw(&gateway, head), expected, "{head}");
    }
    assert_eq!(upstream.requests(), 1, "none of them was forwarded");
    assert_eq!(held(&redis, "rl:{ip:127.0.0.1}:llm:lease:GET /api/x"), 1);
    upstream.release_held();
    assert_eq!(first.join().expect("the thread"), 200);
    wait_until(POLL, "the slot is given back", || {
        held(&redis, "rl:{ip:127.0.0.1}:llm:lease:GET /api/x") == 0
    });
    wait_until(POLL, "the gauge is back to 0", || {
        leases_held(&gateway) == 0.0
    });
    assert_eq!(lease_metric(&gateway, "llm", "acquired"), 1.0);
    assert_eq!(lease_metric(&gateway, "llm", "denied"), 13.0);
}

#[test]
fn an_upgrade_takes_no_slot_and_escapes_none() {
    on_each(an_upgrade_takes_no_slot_and_escapes_none_on);
}

fn an_upgrade_takes_no_slot_and_escapes_none_on(flavor: Flavor) {
    let (redis, upstream, gateway) = stack(flavor, &rule("/ws/**", 1, ""));
    let ws = "GET /ws/chat HTTP/1.1\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
              Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==";
    // Refused before any decision: no lease is taken, so none can outlive its request, and
    // no upgraded connection runs beside the limit.
    for connection in ["Upgrade", "keep-alive, Upgrade", "UPGRADE", "close,upgrade"] {
        let mut stream = connect(&gateway);
        stream
            .write_all(format!("{ws}\r\nHost: t\r\nConnection: {connection}\r\n\r\n").as_bytes())
            .expect("send");
        let text = read_to_end(&mut stream);
        assert_eq!(statuses(&text), [501], "Connection: {connection}: {text}");
    }
    assert_eq!(
        raw(
            &gateway,
            "GET /ws/chat HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: h2c"
        ),
        501
    );
    // CONNECT (a tunnel) has no path to decide on.
    assert_eq!(raw(&gateway, "CONNECT 127.0.0.1:1 HTTP/1.1"), 400);
    assert_eq!(upstream.requests(), 0);
    assert_eq!(lease_metric(&gateway, "llm", "acquired"), 0.0);

    // `Upgrade` without `Connection: upgrade` is no upgrade: a plain request, counted.
    let first = in_flight(&gateway, "/ws/chat?hold=1");
    wait_until(POLL, "the request reaches the upstream", || {
        upstream.requests() == 1
    });
    assert_eq!(
        raw(&gateway, "GET /ws/chat HTTP/1.1\r\nUpgrade: websocket"),
        429
    );
    upstream.release_held();
    assert_eq!(first.join().expect("the thread"), 200);
    wait_until(POLL, "the slot is free", || held(&redis, LEASE_KEY) == 0);
    let mut stream = connect(&gateway);
    stream
        .write_all(
            b"GET /ws/chat HTTP/1.1\r\nUpgrade: websocket\r\nHost: t\r\nConnection: close\r\n\r\n",
        )
        .expect("send");
    let text = read_to_end(&mut stream);
    assert_eq!(statuses(&text), [200], "{text}");
    assert!(
        !text.to_ascii_lowercase().contains("upgrade: websocket"),
        "the upstream never sees the Upgrade header: {text}"
    );
    assert_all_given_back(&redis, &gateway, &["llm"], "upgrades");
}

#[test]
fn pipelined_requests_take_the_slot_one_after_another() {
    on_each(pipelined_requests_take_the_slot_one_after_another_on);
}

fn pipelined_requests_take_the_slot_one_after_another_on(flavor: Flavor) {
    let (redis, upstream, gateway) = stack(flavor, &rule("/p", 1, ""));
    let mut stream = connect(&gateway);
    stream
        .write_all(
            b"GET /p?hold=1 HTTP/1.1\r\nHost: t\r\n\r\n\
              GET /p HTTP/1.1\r\nHost: t\r\n\r\n\
              GET /p HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        )
        .expect("send");
    wait_until(POLL, "the first request reaches the upstream", || {
        upstream.requests() == 1
    });
    assert_eq!(held(&redis, LEASE_KEY), 1);
    // The connection's later requests wait their turn: hyper serves one at a time, so one
    // connection never holds more than one slot.
    assert_eq!(raw(&gateway, "GET /p HTTP/1.1"), 429, "another client");
    assert_eq!(upstream.requests(), 1);
    upstream.release_held();
    let text = read_to_end(&mut stream);
    assert_eq!(statuses(&text), [200, 200, 200], "{text}");
    assert_eq!(lease_metric(&gateway, "llm", "acquired"), 3.0);
    assert_all_given_back(&redis, &gateway, &["llm"], "pipelining");
}

/// 50 `GET target` one after another on one connection, each sent once the last answer
/// is read: every one answered `status`.
fn fifty_in_a_row(gateway: &Gateway, target: &str, status: u16) {
    let mut stream = connect(gateway);
    let request = format!("GET {target} HTTP/1.1\r\nHost: t\r\n\r\n");
    for i in 0..50 {
        stream.write_all(request.as_bytes()).expect("send");
        assert_eq!(read_response(&mut stream), status, "request {i}");
    }
}

#[test]
fn a_sequence_of_requests_on_one_connection_never_meets_its_own_lease() {
    on_each(a_sequence_of_requests_on_one_connection_never_meets_its_own_lease_on);
}

fn a_sequence_of_requests_on_one_connection_never_meets_its_own_lease_on(flavor: Flavor) {
    // A client that sends its next request once it has its answer: the lease of the answer
    // it has is given back before it can ask again, on one connection and pipelined.
    let (redis, _upstream, gateway) = stack(flavor, &rule("/seq", 1, ""));
    fifty_in_a_row(&gateway, "/seq", 200);
    let mut stream = connect(&gateway);
    let mut pipelined = b"GET /seq HTTP/1.1\r\nHost: t\r\n\r\n".repeat(20);
    pipelined.extend_from_slice(b"GET /seq HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
    stream.write_all(&pipelined).expect("send");
    let text = read_to_end(&mut stream);
    assert_eq!(statuses(&text), [200; 21], "{text}");
    assert_all_given_back(&redis, &gateway, &["llm"], "sequence");
}

#[test]
fn a_sequence_of_bodiless_answers_never_meets_its_own_lease() {
    on_each(a_sequence_of_bodiless_answers_never_meets_its_own_lease_on);
}

fn a_sequence_of_bodiless_answers_never_meets_its_own_lease_on(flavor: Flavor) {
    // A 204 (like a HEAD's answer) has no body to hold back: its lease is given back
    // before the answer is sent.
    let (redis, _upstream, gateway) = stack(flavor, &rule("/seq", 1, ""));
    fifty_in_a_row(&gateway, "/seq?status=204", 204);
    assert_all_given_back(&redis, &gateway, &["llm"], "bodiless sequence");
}

#[test]
fn expect_100_continue_is_answered_only_with_a_slot() {
    on_each(expect_100_continue_is_answered_only_with_a_slot_on);
}

fn expect_100_continue_is_answered_only_with_a_slot_on(flavor: Flavor) {
    let (redis, upstream, gateway) = stack(flavor, &rule("/up", 1, ""));
    let head = "POST /up?read_body=1 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\
                Expect: 100-continue\r\nConnection: close\r\n\r\n";
    let mut stream = connect(&gateway);
    stream.write_all(head.as_bytes()).expect("send the head");
    let text = read_until(&mut stream, "\r\n\r\n");
    assert!(text.starts_with("HTTP/1.1 100"), "{text}");
    assert_eq!(held(&redis, LEASE_KEY), 1, "held while the body is awaited");
    stream.write_all(b"hello").expect("send the body");
    let text = read_to_end(&mut stream);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(text.contains("body: 5"), "{text}");
    wait_until(POLL, "the slot is free", || held(&redis, LEASE_KEY) == 0);

    // With the slot taken, the answer is 429 at once: no 100, and the body is never sent.
    let first = in_flight(&gateway, "/up?hold=1");
    wait_until(POLL, "the request reaches the upstream", || {
        upstream.requests() == 2
    });
    let mut stream = connect(&gateway);
    stream.write_all(head.as_bytes()).expect("send the head");
    let text = read_to_end(&mut stream);
    assert_eq!(statuses(&text), [429], "{text}");
    upstream.release_held();
    assert_eq!(first.join().expect("the thread"), 200);
    assert_all_given_back(&redis, &gateway, &["llm"], "expect");
}

#[test]
fn a_slow_upload_holds_its_slot_until_it_ends_breaks_off_or_times_out() {
    on_each(a_slow_upload_holds_its_slot_until_it_ends_breaks_off_or_times_out_on);
}

fn a_slow_upload_holds_its_slot_until_it_ends_breaks_off_or_times_out_on(flavor: Flavor) {
    let (redis, upstream, gateway) = stack(flavor, &rule("/up", 1, ""));
    let head = "POST /up?read_body=1 HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\
                Connection: close\r\n\r\n";
    // The request is in flight while its body arrives: it holds its slot.
    let mut slow = connect(&gateway);
    slow.write_all(format!("{head}abc").as_bytes())
        .expect("send");
    wait_until(POLL, "the lease is taken", || held(&redis, LEASE_KEY) == 1);
    assert_eq!(raw(&gateway, "GET /up HTTP/1.1"), 429);
    slow.write_all(b"defghij").expect("the rest");
    let text = read_to_end(&mut slow);
    assert!(text.contains("body: 10"), "{text}");
    wait_until(POLL, "given back at the end", || {
        held(&redis, LEASE_KEY) == 0
    });

    // Given up half way: the slot is given back.
    let mut gone = connect(&gateway);
    gone.write_all(format!("{head}abc").as_bytes())
        .expect("send");
    wait_until(POLL, "the lease is taken", || held(&redis, LEASE_KEY) == 1);
    drop(gone);
    wait_until(POLL, "given back when the client goes", || {
        held(&redis, LEASE_KEY) == 0
    });
    assert_all_given_back(&redis, &gateway, &["llm"], "upload");
    drop(gateway);

    // Stalled: upstream_timeout_ms ends it with a 504, and the slot with it.
    let gateway = Gateway::start(
        &format!("{}upstream_timeout_ms = 1000\n", upstream.server_line()),
        &format!("{}{}", redis_section(redis.port(), ""), rule("/up", 1, "")),
    );
    let mut stalled = connect(&gateway);
    stalled
        .write_all(format!("{head}abc").as_bytes())
        .expect("send");
    let text = read_until(&mut stalled, "\r\n\r\n");
    assert!(text.starts_with("HTTP/1.1 504"), "{text}");
    assert_eq!(release_cause(&gateway, "error"), 1.0);
    assert_all_given_back(&redis, &gateway, &["llm"], "stalled upload");
}

#[test]
fn a_client_that_stops_reading_loses_its_connection_and_its_slot() {
    on_each(a_client_that_stops_reading_loses_its_connection_and_its_slot_on);
}

fn a_client_that_stops_reading_loses_its_connection_and_its_slot_on(flavor: Flavor) {
    let redis = ServerConfig::new(flavor).start();
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        &upstream.server_line(),
        &format!(
            "{}[connections]\nsend_timeout_ms = 500\n{}",
            redis_section(redis.port(), ""),
            rule("/big", 1, "")
        ),
    );
    // 64 KiB chunks without end: far more than the sockets' buffers hold.
    let mut reader = connect(&gateway);
    reader
        .write_all(
            b"GET /big?drip_ms=0&chunks=1000000&chunk_bytes=65536 HTTP/1.1\r\nHost: t\r\n\r\n",
        )
        .expect("send");
    let text = read_until(&mut reader, "drip");
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert_eq!(held(&redis, LEASE_KEY), 1);
    // ... and reads no more.
    wait_until(
        POLL,
        "send_timeout cuts the connection and frees the slot",
        || held(&redis, LEASE_KEY) == 0,
    );
    assert_eq!(
        gateway.get("/big?drip_ms=0&chunks=2").status,
        200,
        "the slot is free for another"
    );
    drop(reader);
    assert_all_given_back(&redis, &gateway, &["llm"], "stopped reading");
}

#[test]
fn upstream_failures_give_the_lease_back() {
    on_each(upstream_failures_give_the_lease_back_on);
}

fn upstream_failures_give_the_lease_back_on(flavor: Flavor) {
    let redis = ServerConfig::new(flavor).start();
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        &format!("{}upstream_timeout_ms = 1000\n", upstream.server_line()),
        &format!("{}{}", redis_section(redis.port(), ""), rule("/u", 1, "")),
    );
    // The upstream's own 502 and 503: answers like any other.
    assert_eq!(gateway.get("/u?status=502").status, 502);
    assert_eq!(gateway.get("/u?status=503").status, 503);
    wait_until(POLL, "given back", || held(&redis, LEASE_KEY) == 0);
    // No answer in time: 504.
    assert_eq!(gateway.get("/u?delay_ms=20000").status, 504);
    wait_until(POLL, "given back", || held(&redis, LEASE_KEY) == 0);
    // The upstream cuts its answer mid-body: the client's is cut too.
    let mut stream = connect(&gateway);
    stream
        .write_all(b"GET /u?drip_ms=1&chunks=100&abort_after=3 HTTP/1.1\r\nHost: t\r\n\r\n")
        .expect("send");
    let text = read_to_end(&mut stream);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    assert!(!text.ends_with("0\r\n\r\n"), "the body has no end: {text}");
    wait_until(POLL, "given back", || held(&redis, LEASE_KEY) == 0);
    assert_eq!(
        release_cause(&gateway, "error"),
        2.0,
        "504 and the cut body"
    );
    // The upstream dies while a request waits for it: 502.
    let waiting = in_flight(&gateway, "/u?hold=1");
    wait_until(POLL, "the request reaches the upstream", || {
        upstream.requests() == 5
    });
    drop(upstream);
    assert_eq!(waiting.join().expect("the thread"), 502);
    assert_eq!(
        gateway.get("/u").status,
        502,
        "the slot is free, nothing listens"
    );
    assert_eq!(release_cause(&gateway, "error"), 4.0);
    assert_all_given_back(&redis, &gateway, &["llm"], "upstream failures");
}

#[test]
fn a_reload_gives_back_leases_under_the_key_they_were_taken_with() {
    on_each(a_reload_gives_back_leases_under_the_key_they_were_taken_with_on);
}

fn a_reload_gives_back_leases_under_the_key_they_were_taken_with_on(flavor: Flavor) {
    let (redis, upstream, gateway) = stack(flavor, &rule("/slow", 2, ""));
    let first: Vec<_> = (0..2)
        .map(|_| in_flight(&gateway, "/slow?hold=1"))
        .collect();
    wait_until(POLL, "both reach the upstream", || upstream.requests() == 2);
    assert_eq!(held(&redis, LEASE_KEY), 2);
    // The same rule, one slot now: the two held count against it.
    gateway.rewrite(&format!(
        "{}{}",
        redis_section(redis.port(), ""),
        rule("/slow", 1, "")
    ));
    wait_until(POLL, "the reload", || {
        gateway.metrics().reloads("ok") >= 1.0
    });
    assert_eq!(gateway.get("/slow").status, 429);
    // Renamed: a fresh key, while the old leases are still held.
    gateway.rewrite(&format!(
        "{}{}",
        redis_section(redis.port(), ""),
        rule("/slow", 1, "").replace("\"llm\"", "\"renamed\"")
    ));
    wait_until(POLL, "the second reload", || {
        gateway.metrics().reloads("ok") >= 2.0
    });
    let renamed = in_flight(&gateway, "/slow?hold=1");
    wait_until(POLL, "it reaches the upstream", || upstream.requests() == 3);
    assert_eq!(held(&redis, "rl:{ip:127.0.0.1}:renamed:lease"), 1);
    assert_eq!(held(&redis, LEASE_KEY), 2);
    upstream.release_held();
    for request in first {
        assert_eq!(request.join().expect("the thread"), 200);
    }
    assert_eq!(renamed.join().expect("the thread"), 200);
    assert_all_given_back(&redis, &gateway, &["llm", "renamed"], "reload");
}

#[test]
fn a_client_gone_while_its_lease_is_being_taken_leaves_no_slot_held() {
    on_each(a_client_gone_while_its_lease_is_being_taken_leaves_no_slot_held_on);
}

fn a_client_gone_while_its_lease_is_being_taken_leaves_no_slot_held_on(flavor: Flavor) {
    // A deadline long enough that the gateway is still waiting for RL.ACQUIRE when the
    // client goes: the request is dropped with the call in flight.
    let redis = ServerConfig::new(flavor).start();
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        &upstream.server_line(),
        &format!(
            "{}{}",
            redis_section_with(redis.port(), "deadline_ms = 20000"),
            rule("/slow", 1, "")
        ),
    );
    let stopped = Stopped::new(redis.pid());
    let mut client = connect(&gateway);
    let client_port = client.local_addr().expect("local address").port();
    client
        .write_all(b"GET /slow HTTP/1.1\r\nHost: t\r\n\r\n")
        .expect("send");
    wait_until(POLL, "RL.ACQUIRE reaches the stopped Redis", || {
        redis_has_unread_bytes(&redis)
    });
    drop(client);
    // The gateway closes its side once hyper sees the client gone (dropping the request).
    wait_until(POLL, "the gateway lets go of the connection", || {
        !sockets_on(gateway.port)
            .iter()
            .any(|&(remote, _, _)| remote == client_port)
    });
    stopped.resume();
    wait_until(POLL, "Redis runs the RL.ACQUIRE", || {
        calls(&redis, "RL.ACQUIRE") == 1
    });
    assert_eq!(upstream.requests(), 0, "never forwarded");
    wait_until(POLL, "the lease Redis took is given back", || {
        held(&redis, LEASE_KEY) == 0
    });
    wait_until(POLL, "counted as reclaimed", || {
        lease_metric(&gateway, "llm", "reclaimed") == 1.0
    });
    assert_eq!(gateway.get("/slow").status, 200, "the slot is free");
    assert_all_given_back(&redis, &gateway, &["llm"], "gone mid-acquire");
}

#[test]
fn a_lease_redis_takes_after_the_deadline_is_given_back() {
    on_each(a_lease_redis_takes_after_the_deadline_is_given_back_on);
}

fn a_lease_redis_takes_after_the_deadline_is_given_back_on(flavor: Flavor) {
    for failure in ["open", "closed"] {
        let redis = ServerConfig::new(flavor).start();
        let upstream = Upstream::start();
        let gateway = Gateway::start(
            &upstream.server_line(),
            &format!(
                "{}{}",
                redis_section_with(redis.port(), "deadline_ms = 200"),
                rule("/slow", 1, &format!("on_redis_failure = \"{failure}\""))
            ),
        );
        let stopped = Stopped::new(redis.pid());
        let expected = if failure == "open" { 200 } else { 503 };
        assert_eq!(gateway.get("/slow").status, expected, "{failure}");
        stopped.resume();
        wait_until(POLL, "Redis runs the RL.ACQUIRE", || {
            calls(&redis, "RL.ACQUIRE") == 1
        });
        wait_until(POLL, "the late lease is given back", || {
            held(&redis, LEASE_KEY) == 0
        });
        wait_until(POLL, "counted as reclaimed", || {
            lease_metric(&gateway, "llm", "reclaimed") == 1.0
        });
        assert_eq!(
            gateway.get("/slow").status,
            200,
            "{failure}: the slot is free"
        );
        assert_all_given_back(&redis, &gateway, &["llm"], failure);
    }
}

/// Rule `llm` (`concurrency = n`) on `/slow` and a plain rule on `/plain`, whose timed-out
/// decisions open the breaker (5 in a row), which then stays open for 20 s.
fn breaker_stack(flavor: Flavor, n: u64) -> (Server, Upstream, Gateway) {
    let redis = ServerConfig::new(flavor).start();
    let upstream = Upstream::start();
    let gateway = Gateway::start(
        &upstream.server_line(),
        &format!(
            "{}{}[[rule]]\nname = \"plain\"\npath = \"/plain\"\nlimits = [\"100/1h\"]\n",
            redis_section_with(
                redis.port(),
                "deadline_ms = 300\nbreaker_failures = 5\nbreaker_open_ms = 20000"
            ),
            rule("/slow", n, "")
        ),
    );
    (redis, upstream, gateway)
}

#[test]
fn releases_while_redis_is_stopped_neither_pile_up_nor_hold_slots() {
    on_each(releases_while_redis_is_stopped_neither_pile_up_nor_hold_slots_on);
}

fn releases_while_redis_is_stopped_neither_pile_up_nor_hold_slots_on(flavor: Flavor) {
    let (redis, upstream, gateway) = breaker_stack(flavor, 3);
    let requests: Vec<_> = (0..3)
        .map(|_| in_flight(&gateway, "/slow?hold=1"))
        .collect();
    wait_until(POLL, "all reach the upstream", || upstream.requests() == 3);
    let stopped = Stopped::new(redis.pid());
    // Decisions that time out open the circuit breaker meanwhile (5 in a row).
    for _ in 0..5 {
        assert_eq!(gateway.get("/plain").status, 200, "fail open");
    }
    assert!(gateway
        .admin_get("/metrics")
        .body
        .contains("rl_gateway_breaker_open 1"));
    upstream.release_held();
    for request in requests {
        assert_eq!(request.join().expect("the thread"), 200);
    }
    // The releases wait for Redis a bounded time, then are given up on: no task is left
    // waiting, even while Redis stays stopped.
    wait_until(POLL, "the gauge is back to 0 with Redis stopped", || {
        leases_held(&gateway) == 0.0
    });
    stopped.resume();
    // Given back once Redis runs again, long before lease_ttl.
    wait_until(POLL, "the slots are free", || held(&redis, LEASE_KEY) == 0);
    assert_all_given_back(&redis, &gateway, &["llm"], "redis stopped");
}

#[test]
fn releases_due_while_the_breaker_is_open_still_reach_redis() {
    on_each(releases_due_while_the_breaker_is_open_still_reach_redis_on);
}

fn releases_due_while_the_breaker_is_open_still_reach_redis_on(flavor: Flavor) {
    let (redis, upstream, gateway) = breaker_stack(flavor, 1);
    let request = in_flight(&gateway, "/slow?hold=1");
    wait_until(POLL, "it reaches the upstream", || upstream.requests() == 1);
    let stopped = Stopped::new(redis.pid());
    for _ in 0..5 {
        assert_eq!(gateway.get("/plain").status, 200, "fail open");
    }
    // Redis is back, but the breaker stays open for breaker_open_ms: the response that
    // ends now must still give its slot back.
    stopped.resume();
    upstream.release_held();
    assert_eq!(request.join().expect("the thread"), 200);
    wait_until(POLL, "the slot is given back", || {
        held(&redis, LEASE_KEY) == 0
    });
    assert_all_given_back(&redis, &gateway, &["llm"], "breaker open");
}
