//! The Envoy gRPC listener's bounds (`[envoy]` max_connections, handshake_timeout_ms, and
//! the fixed cap on a request's header list), tried with raw sockets and with tonic's
//! client against the real gateway.

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::Duration;
use testkit::gateway::envoy::*;
use testkit::gateway::*;

const DESCRIPTORS: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000}
"#;

fn ok_call(envoy: &mut EnvoyGateway, user: &str) -> bool {
    envoy
        .call(request("api", vec![desc(&[("user", user)])]))
        .is_ok_and(|answer| overall(&answer) == Code::Ok)
}

/// Whether the gateway closes `socket` (EOF or a reset) before `within`.
fn closed_by_the_gateway(socket: &mut TcpStream, within: Duration) -> bool {
    socket.set_read_timeout(Some(within)).expect("a timeout");
    let mut byte = [0u8; 64];
    loop {
        match socket.read(&mut byte) {
            Ok(0) => return true,
            // The server may send its own SETTINGS first: keep reading.
            Ok(_) => continue,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return false
            }
            Err(_) => return true,
        }
    }
}

#[test]
fn a_socket_that_sends_no_preface_is_closed_and_a_served_one_is_not() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = EnvoyGateway::start_with(
        &redis_section(redis.port(), ""),
        "handshake_timeout_ms = 300",
        &[("api.yaml", DESCRIPTORS)],
    );
    assert!(ok_call(&mut envoy, "a"), "{}", envoy.gateway.log());
    let address = format!("127.0.0.1:{}", envoy.grpc_port);
    let mut silent = TcpStream::connect(&address).expect("connect");
    assert!(closed_by_the_gateway(&mut silent, Duration::from_secs(20)));
    // Half a preface, then nothing: closed too.
    let mut partial = TcpStream::connect(&address).expect("connect");
    partial.write_all(b"PRI * HTTP/2.0\r\n").expect("write");
    assert!(closed_by_the_gateway(&mut partial, Duration::from_secs(20)));
    // The client's connection made its handshake long ago: still served.
    std::thread::sleep(Duration::from_millis(600));
    assert!(ok_call(&mut envoy, "b"), "{}", envoy.gateway.log());
}

#[test]
fn connections_over_max_connections_are_closed_at_once() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = EnvoyGateway::start_with(
        &redis_section(redis.port(), ""),
        "max_connections = 3\nhandshake_timeout_ms = 600000",
        &[("api.yaml", DESCRIPTORS)],
    );
    // The test's client holds one connection; two idle sockets take the other slots.
    assert!(ok_call(&mut envoy, "a"));
    let address = format!("127.0.0.1:{}", envoy.grpc_port);
    let mut idle: Vec<TcpStream> = (0..2)
        .map(|_| TcpStream::connect(&address).expect("connect"))
        .collect();
    // Accepted and held: not closed (the handshake timeout is 10 minutes).
    for socket in &mut idle {
        assert!(!closed_by_the_gateway(socket, Duration::from_millis(300)));
    }
    let mut extra = TcpStream::connect(&address).expect("the kernel accepts");
    assert!(
        closed_by_the_gateway(&mut extra, Duration::from_secs(20)),
        "the fourth connection is closed"
    );
    // The client holding a slot is still served. (A new gRPC client is not asked here: the
    // test's client reconnecting would give up its own slot first, and whether the gateway
    // has seen that close before the new connection arrives is the scheduler's choice; the
    // fourth socket above is the new client.)
    assert!(
        ok_call(&mut envoy, "b"),
        "the client holding a slot was not served"
    );
    // Once the idle sockets go, new clients are served again.
    drop(idle);
    wait_until(Duration::from_secs(20), "a client served again", || {
        envoy.reconnect().is_ok() && ok_call(&mut envoy, "c")
    });
}

#[test]
fn an_oversized_header_list_is_refused_and_the_service_goes_on() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = EnvoyGateway::on(&redis, &[("api.yaml", DESCRIPTORS)]);
    let one = || request("api", vec![desc(&[("user", "h")])]);
    let small = envoy.call_with_metadata(one(), "x-note", &"n".repeat(4096));
    assert!(small.is_ok(), "{small:?}");
    let huge = envoy.call_with_metadata(one(), "x-note", &"n".repeat(64 * 1024));
    assert!(huge.is_err(), "a 64 KiB header list was taken: {huge:?}");
    wait_until(Duration::from_secs(20), "served after the refusal", || {
        envoy.reconnect().is_ok() && ok_call(&mut envoy, "after")
    });
}
