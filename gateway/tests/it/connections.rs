//! `[connections]`: connections that never finish their head do not keep others from being
//! served, and are closed after `head_timeout_ms`; kept-alive connections with nothing to
//! do are closed after `idle_timeout_ms`; past `max_connections` a connection is answered
//! 503 and closed at once (counted in `rl_gateway_connections_refused_total`).
//!
//! A client that stops reading its response lets go of its connection, and one client
//! cannot hold every connection (`max_connections_per_client`).

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use testkit::gateway::raw_http;
use testkit::gateway::*;

use testkit::fixtures::NEVER_LIMITED as RULES;

/// A request head that never ends.
const STALLED: &[u8] = b"GET /stalled HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1";

/// Lets this process (and the gateway it starts, which inherits it) open `wanted` files.
fn raise_open_file_limit(wanted: u64) -> bool {
    use rlimit::Resource;
    let Ok((soft, hard)) = rlimit::getrlimit(Resource::NOFILE) else {
        return false;
    };
    if soft >= wanted {
        return true;
    }
    // Raising the hard limit needs root (CAP_SYS_RESOURCE), which CI has.
    rlimit::setrlimit(Resource::NOFILE, wanted, hard.max(wanted)).is_ok()
}

fn stalled_connection(port: u16) -> TcpStream {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.write_all(STALLED).expect("send half a head");
    stream
}

/// Whether the gateway closed `stream` (end of file or reset), without waiting.
fn closed(stream: &mut TcpStream) -> bool {
    stream.set_nonblocking(true).expect("non-blocking");
    let mut byte = [0u8; 512];
    let answer = stream.read(&mut byte);
    stream.set_nonblocking(false).expect("blocking");
    match answer {
        Ok(0) => true,
        Ok(_) => closed(stream),
        Err(error) => error.kind() != ErrorKind::WouldBlock,
    }
}

/// Waits up to `limit` for the gateway to close every one of `streams`.
fn wait_all_closed(streams: &mut [TcpStream], limit: Duration, what: &str) {
    let deadline = Instant::now() + limit;
    loop {
        let open = streams.iter_mut().map(closed).filter(|c| !c).count();
        if open == 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: {open} of {} still open after {limit:?}",
            streams.len()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `GET /` on a fresh connection: the status, `None` when the connection was refused.
fn try_get(port: u16) -> Option<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .ok()?;
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).ok()?;
    String::from_utf8_lossy(&answer)
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

#[test]
fn two_thousand_stalled_heads_do_not_delay_a_request_and_are_closed() {
    const STALLED_COUNT: usize = 2000;
    if !raise_open_file_limit(3 * STALLED_COUNT as u64 + 1000) {
        eprintln!("SKIPPED: cannot raise the open-file limit to hold {STALLED_COUNT} connections");
        return;
    }
    each_flavor(|flavor| {
        let connections = "[connections]\nmax_connections = 2500\nhead_timeout_ms = 2000\n";
        let (_redis, upstream, gateway) = stack(flavor, &format!("{connections}{RULES}"));
        let mut stalled: Vec<TcpStream> = (0..STALLED_COUNT)
            .map(|_| stalled_connection(gateway.port))
            .collect();
        let mut took: Vec<Duration> = (0..5)
            .map(|_| {
                let (status, took) = timed(|| raw_get(gateway.port, "/ok", b""));
                assert_eq!(status, 200, "{flavor:?}");
                took
            })
            .collect();
        took.sort();
        eprintln!("{flavor:?}: 5 requests beside {STALLED_COUNT} stalled connections: {took:?}");
        // The median, so that one unlucky slice of a loaded machine does not decide.
        assert!(
            took[2] < Duration::from_millis(100),
            "{flavor:?}: answered in {took:?} beside {STALLED_COUNT} stalled connections"
        );
        assert_eq!(upstream.requests(), 5, "{flavor:?}");
        assert_eq!(
            gateway
                .metrics()
                .counter("rl_gateway_connections_refused_total", &[]),
            0.0,
            "{flavor:?}"
        );
        // head_timeout_ms = 2000 (the old fixed timeout was 30 s).
        wait_all_closed(
            &mut stalled,
            Duration::from_secs(20),
            &format!("{flavor:?}"),
        );
    });
}

#[test]
fn idle_connections_are_closed_after_the_idle_timeout_and_heads_get_the_head_timeout() {
    each_flavor(|flavor| {
        let (_redis, _upstream, gateway) = stack(
            flavor,
            &format!("[connections]\nidle_timeout_ms = 500\nhead_timeout_ms = 60000\n{RULES}"),
        );
        // Kept alive after one answered request, then idle.
        let mut kept = TcpStream::connect(("127.0.0.1", gateway.port)).expect("connect");
        kept.write_all(b"GET /one HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .expect("send");
        kept.set_read_timeout(Some(Duration::from_secs(30)))
            .expect("read timeout");
        let mut first = [0u8; 12];
        kept.read_exact(&mut first).expect("the answer starts");
        assert_eq!(&first, b"HTTP/1.1 200", "{flavor:?}");
        // Connected, silent.
        let silent = TcpStream::connect(("127.0.0.1", gateway.port)).expect("connect");
        // In the middle of a head: the head timeout (60 s) applies, not the idle one.
        let mut heading = stalled_connection(gateway.port);

        let mut idle = [kept, silent];
        wait_all_closed(
            &mut idle,
            Duration::from_secs(20),
            &format!("{flavor:?} idle"),
        );
        assert!(
            !closed(&mut heading),
            "{flavor:?}: a connection sending a head is not idle"
        );
    });
}

/// The gateway's own watch is the only head timeout (hyper's is not set): a head that
/// follows an answered request on the same connection, sent with it and then a byte at a
/// time, never finished, is cut after `head_timeout_ms` though the idle timeout is long
/// and bytes keep arriving.
#[test]
fn a_trickled_head_after_an_answered_request_gets_the_head_timeout() {
    each_flavor(|flavor| {
        let (_redis, _upstream, gateway) = stack(
            flavor,
            &format!("[connections]\nidle_timeout_ms = 60000\nhead_timeout_ms = 1000\n{RULES}"),
        );
        let mut stream = TcpStream::connect(("127.0.0.1", gateway.port)).expect("connect");
        let pipelined = [
            b"GET /one HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".as_slice(),
            STALLED,
        ];
        stream.write_all(&pipelined.concat()).expect("send");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("read timeout");
        let mut first = [0u8; 12];
        stream
            .read_exact(&mut first)
            .expect("the first answer starts");
        assert_eq!(&first, b"HTTP/1.1 200", "{flavor:?}");
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            // A write may still succeed once after the close; a read then tells.
            if stream.write_all(b"x").is_err() || closed(&mut stream) {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{flavor:?}: a head trickled for 20 s is still open (head_timeout_ms = 1000)"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    });
}

#[test]
fn connections_over_max_connections_are_refused_at_once() {
    each_flavor(|flavor| {
        let (_redis, _upstream, gateway) = stack(
            flavor,
            &format!("[connections]\nmax_connections = 20\n{RULES}"),
        );
        let refused = || {
            gateway
                .metrics()
                .counter("rl_gateway_connections_refused_total", &[])
        };
        // `stack` proves the listener up with a connection of its own, which the gateway
        // may still hold a slot for while the 20 arrive: then the 20th is refused, the
        // probe's slot comes free, and the extra one takes it. Only then is it tried again.
        let mut attempts = 0;
        let (stalled, read, answer) = loop {
            attempts += 1;
            let before = refused();
            let stalled: Vec<TcpStream> =
                (0..20).map(|_| stalled_connection(gateway.port)).collect();
            let mut extra = TcpStream::connect(("127.0.0.1", gateway.port)).expect("connect");
            extra
                .set_read_timeout(Some(Duration::from_secs(20)))
                .expect("read timeout");
            let _ = extra.write_all(b"GET /extra HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
            let mut answer = Vec::new();
            let read = extra.read_to_end(&mut answer);
            let answer = String::from_utf8_lossy(&answer).into_owned();
            let served = read.is_ok() && answer.starts_with("HTTP/1.1 200");
            if !served || attempts == 3 {
                break (stalled, read, answer);
            }
            // Served: one of the 20 must have been refused in its place.
            wait_until(
                Duration::from_secs(10),
                "a stalled connection refused in the extra one's place",
                || refused() > before,
            );
            drop(stalled);
            wait_until(Duration::from_secs(20), "slots come free", || {
                try_get(gateway.port) == Some(200)
            });
        };
        // Closed at once: a 503 read before the close, or a reset (the request was unread).
        match read {
            Ok(_) => assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}"),
            Err(error) => assert!(
                matches!(
                    error.kind(),
                    ErrorKind::ConnectionReset | ErrorKind::ConnectionAborted
                ),
                "{error:?}: {answer:?}"
            ),
        }
        assert!(
            gateway
                .metrics()
                .counter("rl_gateway_connections_refused_total", &[])
                >= 1.0,
            "the admin listener has its own slots"
        );

        drop(stalled);
        wait_until(Duration::from_secs(20), "slots come free", || {
            try_get(gateway.port) == Some(200)
        });
    });
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
    each_flavor(|flavor| {
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
    });
}

/// A connection whose request was answered 200 (its answer left unread), so that the
/// gateway holds it. `stack` proves the listener up with a connection of its own, whose
/// place the gateway may not yet have given back: a connection refused for it (503, or
/// closed) is made again.
fn answered_connection(port: u16) -> TcpStream {
    for _ in 0..100 {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("read timeout");
        let mut status = [0u8; 12];
        let answered = stream
            .write_all(b"GET /held HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            .and_then(|()| stream.read_exact(&mut status));
        if answered.is_ok() && &status == b"HTTP/1.1 200" {
            return stream;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no connection was answered 200 in 100 tries");
}

#[test]
fn one_client_cannot_take_every_connection() {
    each_flavor(|flavor| {
        let (_redis, _upstream, gateway) = stack(
            flavor,
            "[connections]\nmax_connections_per_client = 2\nidle_timeout_ms = 60000\n\
             [default]\nlimits = [\"100/1m\"]\n",
        );
        // Two connections, each answered once and then kept open by a long idle timeout.
        let first = answered_connection(gateway.port);
        let _second = answered_connection(gateway.port);
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
    });
}
