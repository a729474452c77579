//! The Envoy service against what a caller controls: each test is one attempt by a caller that
//! controls the gRPC request (its descriptors, `hits_addend`, `is_negative_hits`, limit
//! overrides) or the connection, against the real gateway and redis-server.

use envoy_types::pb::google::protobuf::UInt64Value;
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use testkit::gateway::envoy::*;
use testkit::gateway::*;

const DESCRIPTORS: &str = r#"
domain: callers
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: wide
    limit_override: replace
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: howe
    rate_limit: {unit: month, requests_per_unit: 5, tz: Australia/Lord_Howe, anchor: 31}
  - key: kiri
    rate_limit: {unit: day, requests_per_unit: 5, tz: Pacific/Kiritimati}
"#;

const SECOND: i32 = 1;
const MINUTE: i32 = 2;
const DAY: i32 = 4;
const MONTH: i32 = 5;
const YEAR: i32 = 6;
const WEEK: i32 = 7;

fn start() -> (Server, EnvoyGateway) {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let envoy = EnvoyGateway::on(&redis, &[("callers.yaml", DESCRIPTORS)]);
    (redis, envoy)
}

fn ask(envoy: &mut EnvoyGateway, descriptors: Vec<RateLimitDescriptor>) -> RateLimitResponse {
    envoy.ask(request("callers", descriptors))
}

/// One descriptor repeated is as many hits as copies: RL.MHIT decides every key from what
/// was stored before the call, so two copies of one key in one call would both be allowed
/// by the same last unit, and the second write would overwrite the first.
#[test]
fn copies_of_one_descriptor_are_each_a_hit() {
    let (_redis, mut envoy) = start();
    let sixteen = vec![desc(&[("user", "a")]); 16];
    let answer = ask(&mut envoy, sixteen);
    assert_eq!(overall(&answer), Code::OverLimit, "16 hits under 3/minute");
    // Nothing of the refused request stays counted.
    let answer = ask(&mut envoy, vec![desc(&[("user", "a")])]);
    assert_eq!(overall(&answer), Code::Ok);
    assert_eq!(remaining(&answer, 0), 2);

    // Three copies spend the three units at once.
    let answer = ask(&mut envoy, vec![desc(&[("user", "b")]); 3]);
    assert_eq!(overall(&answer), Code::Ok);
    let answer = ask(&mut envoy, vec![desc(&[("user", "b")])]);
    assert_eq!(overall(&answer), Code::OverLimit);

    // Copies with hits of their own: 2 + 2 is over 3.
    let answer = ask(
        &mut envoy,
        vec![
            desc_hits(&[("user", "c")], 2, false),
            desc_hits(&[("user", "c")], 2, false),
        ],
    );
    assert_eq!(overall(&answer), Code::OverLimit);
}

/// Copies of a refund give back once each, never above the limit; copies of a look count
/// nothing.
#[test]
fn copies_of_a_refund_or_a_look_are_each_their_own() {
    let (_redis, mut envoy) = start();
    for _ in 0..3 {
        ask(&mut envoy, vec![desc(&[("user", "m")])]);
    }
    let mut look = desc(&[("user", "m")]);
    look.hits_addend = Some(UInt64Value { value: 0 });
    let answer = ask(&mut envoy, vec![look; 16]);
    assert_eq!(
        overall(&answer),
        Code::OverLimit,
        "a look at a spent budget"
    );
    let refund = desc_hits(&[("user", "m")], 1, true);
    let answer = ask(&mut envoy, vec![refund.clone(), refund]);
    assert_eq!(overall(&answer), Code::Ok, "{}", envoy.gateway.log());
    for i in 0..2 {
        let answer = ask(&mut envoy, vec![desc(&[("user", "m")])]);
        assert_eq!(overall(&answer), Code::Ok, "refunded hit {i}");
    }
    assert_eq!(
        overall(&ask(&mut envoy, vec![desc(&[("user", "m")])])),
        Code::OverLimit
    );
    // Sixteen refunds of u32::MAX leave the limit, no more.
    let answer = ask(
        &mut envoy,
        vec![desc_hits(&[("user", "m")], u64::from(u32::MAX), true); 16],
    );
    assert_eq!(overall(&answer), Code::Ok);
    for i in 0..3 {
        let answer = ask(&mut envoy, vec![desc(&[("user", "m")])]);
        assert_eq!(overall(&answer), Code::Ok, "hit {i}");
    }
    assert_eq!(
        overall(&ask(&mut envoy, vec![desc(&[("user", "m")])])),
        Code::OverLimit
    );
}

/// Copies that bring different overrides each spend the node's budget too.
#[test]
fn copies_with_different_overrides_each_spend_the_node_budget() {
    let (_redis, mut envoy) = start();
    let pair = || {
        vec![
            desc_limit(&[("user", "d")], 10, MINUTE),
            desc_limit(&[("user", "d")], 20, MINUTE),
        ]
    };
    assert_eq!(overall(&ask(&mut envoy, pair())), Code::Ok);
    // Two more hits on a node of 3 that has 2.
    assert_eq!(overall(&ask(&mut envoy, pair())), Code::OverLimit);

    // Under replace, two copies of a 1/minute override: the second is over.
    let answer = ask(
        &mut envoy,
        vec![
            desc_limit(&[("wide", "d")], 1, MINUTE),
            desc_limit(&[("wide", "d")], 1, MINUTE),
        ],
    );
    assert_eq!(overall(&answer), Code::OverLimit);
}

/// A value holding `:limit=` text is escaped: it is neither the override's own key nor
/// shares a budget with it.
#[test]
fn a_value_that_spells_an_override_key_has_a_key_of_its_own() {
    let (_redis, mut envoy) = start();
    assert_eq!(
        overall(&ask(
            &mut envoy,
            vec![desc_limit(&[("user", "e")], 1, MINUTE)]
        )),
        Code::Ok
    );
    assert_eq!(
        overall(&ask(
            &mut envoy,
            vec![desc_limit(&[("user", "e")], 1, MINUTE)]
        )),
        Code::OverLimit
    );
    for value in [
        "e:limit=1/minute",
        "e%3Alimit%3D1/minute",
        "e:limit=1%2Fminute",
    ] {
        let answer = ask(&mut envoy, vec![desc(&[("user", value)])]);
        assert_eq!(overall(&answer), Code::Ok, "{value}");
        assert_eq!(remaining(&answer, 0), 2, "{value}: a fresh key of 3");
    }
}

/// A refund never leaves more than the limit, and a refund without the override gives
/// nothing back to the override's own key.
#[test]
fn refunds_open_no_more_than_the_limit() {
    let (_redis, mut envoy) = start();
    let answer = ask(&mut envoy, vec![desc_hits(&[("user", "f")], 1000, true)]);
    assert_eq!(overall(&answer), Code::Ok);
    for i in 0..3 {
        let answer = ask(&mut envoy, vec![desc(&[("user", "f")])]);
        assert_eq!(overall(&answer), Code::Ok, "hit {i}");
    }
    assert_eq!(
        overall(&ask(&mut envoy, vec![desc(&[("user", "f")])])),
        Code::OverLimit
    );

    for _ in 0..2 {
        let answer = ask(&mut envoy, vec![desc_limit(&[("user", "g")], 2, MINUTE)]);
        assert_eq!(overall(&answer), Code::Ok);
    }
    // The node's key (1 left) is refunded; the override's own key (0 left) is not.
    ask(&mut envoy, vec![desc_hits(&[("user", "g")], 2, true)]);
    assert_eq!(
        overall(&ask(
            &mut envoy,
            vec![desc_limit(&[("user", "g")], 2, MINUTE)]
        )),
        Code::OverLimit
    );
    // A look (hits_addend 0) counts nothing, with or without the override.
    for _ in 0..5 {
        let mut look = desc_limit(&[("user", "h")], 1, MINUTE);
        look.hits_addend = Some(UInt64Value { value: 0 });
        assert_eq!(overall(&ask(&mut envoy, vec![look])), Code::Ok);
    }
    assert_eq!(
        overall(&ask(
            &mut envoy,
            vec![desc_limit(&[("user", "h")], 1, MINUTE)]
        )),
        Code::Ok
    );
}

/// u32::MAX everywhere and calendar overrides in odd zones are answered, and the gateway
/// goes on serving.
#[test]
fn huge_numbers_and_odd_zones_are_answered() {
    let (_redis, mut envoy) = start();
    let answer = ask(
        &mut envoy,
        vec![desc_limit(&[("user", "i")], u32::MAX, SECOND)],
    );
    assert_eq!(overall(&answer), Code::Ok, "the node's 3 still allow one");
    let answer = ask(
        &mut envoy,
        vec![desc_hits(&[("user", "j")], u64::from(u32::MAX), false)],
    );
    assert_eq!(overall(&answer), Code::OverLimit);
    // A request-level hits_addend of u32::MAX on 16 descriptors.
    let many: Vec<_> = (0..16)
        .map(|i| desc(&[("user", &format!("k{i}") as &str)]))
        .collect();
    let mut big = request("callers", many);
    big.hits_addend = u32::MAX;
    assert_eq!(overall(&envoy.ask(big)), Code::OverLimit);
    let answer = ask(&mut envoy, vec![desc(&[("user", "k0")])]);
    assert_eq!(
        remaining(&answer, 0),
        2,
        "nothing of the refused request counted"
    );

    for key in ["howe", "kiri", "user", "wide"] {
        for unit in [SECOND, MINUTE, DAY, WEEK, MONTH, YEAR] {
            for n in [1, u32::MAX] {
                let answer = ask(&mut envoy, vec![desc_limit(&[(key, "z")], n, unit)]);
                assert!(
                    Code::try_from(answer.statuses[0].code).is_ok(),
                    "{key} {unit} {n}"
                );
                let reset = answer.statuses[0].duration_until_reset.unwrap_or_default();
                assert!(reset.seconds <= 366 * 86_400, "{key} {unit} {n}: {reset:?}");
            }
            let zero = ask(&mut envoy, vec![desc_limit(&[(key, "y")], 0, unit)]);
            assert_eq!(overall(&zero), Code::OverLimit, "{key} {unit} 0");
        }
    }
    let answer = ask(&mut envoy, vec![desc(&[("user", "alive")])]);
    assert_eq!(overall(&answer), Code::Ok, "{}", envoy.gateway.log());
}

/// A literal HPACK header field, without indexing and without Huffman coding.
fn literal(block: &mut Vec<u8>, name: &str, value: &str) {
    block.push(0);
    block.push(name.len() as u8);
    block.extend_from_slice(name.as_bytes());
    block.push(value.len() as u8);
    block.extend_from_slice(value.as_bytes());
}

fn frame(out: &mut Vec<u8>, kind: u8, flags: u8, stream: u32, payload: &[u8]) {
    let len = payload.len() as u32;
    out.extend_from_slice(&len.to_be_bytes()[1..]);
    out.push(kind);
    out.push(flags);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
}

/// A call whose body never ends (a gRPC message of 100 bytes of which 10 come) is ended
/// by the gateway within `request_timeout_ms`, with a status or a reset of the stream.
#[test]
fn a_body_that_never_ends_is_cut_off_by_the_request_timeout() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = EnvoyGateway::start_with(
        &redis_section(redis.port(), ""),
        "request_timeout_ms = 300",
        &[("callers.yaml", DESCRIPTORS)],
    );
    let mut socket = TcpStream::connect(("127.0.0.1", envoy.grpc_port)).expect("connect");
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    frame(&mut out, 4, 0, 0, &[]);
    let mut block = Vec::new();
    literal(&mut block, ":method", "POST");
    literal(&mut block, ":scheme", "http");
    literal(
        &mut block,
        ":path",
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
    );
    literal(&mut block, ":authority", "localhost");
    literal(&mut block, "content-type", "application/grpc");
    literal(&mut block, "te", "trailers");
    // END_HEADERS, not END_STREAM.
    frame(&mut out, 1, 0x4, 1, &block);
    let mut body = vec![0u8, 0, 0, 0, 100];
    body.extend_from_slice(&[0u8; 10]);
    frame(&mut out, 0, 0, 1, &body);
    socket.write_all(&out).expect("write");
    socket
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    // Frames until stream 1 ends: HEADERS with END_STREAM (the trailers) or RST_STREAM.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    let ended = loop {
        let mut chunk = [0u8; 4096];
        match socket.read(&mut chunk) {
            Ok(0) => break false,
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break false,
        }
        let mut at = 0;
        let mut ended = false;
        while got.len() >= at + 9 {
            let len = u32::from_be_bytes([0, got[at], got[at + 1], got[at + 2]]) as usize;
            let (kind, flags) = (got[at + 3], got[at + 4]);
            let stream = u32::from_be_bytes([got[at + 5], got[at + 6], got[at + 7], got[at + 8]])
                & 0x7fff_ffff;
            if got.len() < at + 9 + len {
                break;
            }
            if stream == 1 && (kind == 3 || (kind == 1 && flags & 0x1 != 0)) {
                ended = true;
            }
            at += 9 + len;
        }
        if ended {
            break true;
        }
        assert!(
            Instant::now() < deadline,
            "stream 1 still open after 10 s with request_timeout_ms = 300"
        );
    };
    assert!(
        ended,
        "the connection was closed instead of the stream ended"
    );
    let answer = ask(&mut envoy, vec![desc(&[("user", "after")])]);
    assert_eq!(overall(&answer), Code::Ok);
}
