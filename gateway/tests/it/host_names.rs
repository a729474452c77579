//! Host names where addresses were required: the upstream's (`http://localhost:PORT`,
//! looked up for each new connection), and the listeners' (`listen = "localhost:PORT"`,
//! bound once at start on the IPv4 loopback the name resolves to).
//!
//! An upstream name that does not resolve does not stop the start (the upstream may come
//! later): its requests answer 502, counted as upstream errors. A listener name that does
//! not resolve stops the start with a message naming it.
//!
//! That a DNS change is followed without a restart is tested at the unit level, through
//! the connector's resolver (`upstream::transport`'s tests): glibc (without systemd's NSS
//! module) does not resolve `*.localhost`, and a test cannot change what a real name
//! resolves to without changing the machine's `/etc/hosts`.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use testkit::gateway::*;

#[test]
fn an_upstream_named_localhost_is_reached_and_a_listener_binds_localhost() {
    let redis = Server::start(ServerConfig::new(Flavor::Redis));
    let upstream = Upstream::start();
    let gateway = Gateway::start_listening(
        "localhost",
        &format!("upstream = \"http://localhost:{}\"\n", upstream.port),
        &format!(
            "{}[[rule]]\nname = \"all\"\npath = \"/**\"\nlimits = [\"2/1h\"]\n",
            redis_section(redis.port(), "")
        ),
    );
    // The harness reaches the main listener at 127.0.0.1: the name bound there.
    let bound = format!(
        "localhost:{} resolves to 127.0.0.1:{}",
        gateway.port, gateway.port
    );
    assert!(gateway.log().contains(&bound), "{}", gateway.log());
    // Looked up at start only to be said, beside the start.
    wait_until(START_LIMIT, "the upstream's name looked up", || {
        gateway
            .log()
            .contains("upstream host localhost resolves to 127.0.0.1")
    });
    for _ in 0..2 {
        let resp = gateway.get("/items");
        assert_eq!(resp.status, 200, "{resp:?}");
        assert_eq!(resp.upstream_request_line(), "GET /items");
    }
    assert_eq!(gateway.get("/items").status, 429, "the limit applies");
    assert_eq!(upstream.requests(), 2);
}

#[test]
fn an_upstream_name_that_does_not_resolve_starts_and_answers_502() {
    let redis = Server::start(ServerConfig::new(Flavor::Redis));
    // `.invalid` never resolves (RFC 6761).
    let gateway = Gateway::start(
        "upstream = \"http://rl-upstream.invalid:9000\"\n",
        &redis_section(redis.port(), ""),
    );
    wait_until(
        START_LIMIT,
        "the upstream's name said not to resolve",
        || {
            gateway
                .log()
                .contains("upstream host rl-upstream.invalid does not resolve")
        },
    );
    for _ in 0..2 {
        let resp = gateway.get("/x");
        assert_eq!(resp.status, 502, "{resp:?}");
    }
    let errors = gateway
        .metrics()
        .value("rl_gateway_upstream_errors_total", &[]);
    assert_eq!(errors, Some(2.0));
}

#[test]
fn a_listener_name_that_does_not_resolve_stops_the_start_naming_it() {
    let redis = Server::start(ServerConfig::new(Flavor::Redis));
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("rules.toml");
    let admin_port = free_port();
    let text = format!(
        "[server]\nlisten = \"rl-gateway.invalid:8080\"\nadmin_listen = \"127.0.0.1:{admin_port}\"\n\
         upstream = \"http://127.0.0.1:9\"\n{}",
        redis_section(redis.port(), "")
    );
    std::fs::write(&path, text).expect("write the file");
    // The name is judged by its form at load: --check-config passes.
    let checked = check_config(&path);
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    let mut child = Command::new(gateway_binary())
        .arg("--config")
        .arg(&path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("rl-gateway starts");
    let deadline = Instant::now() + START_LIMIT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("rl-gateway kept running with a listener name that does not resolve");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr)
        .expect("read stderr");
    assert!(!status.success(), "{stderr}");
    assert!(
        stderr.contains("cannot listen on rl-gateway.invalid:8080: the host name does not resolve"),
        "{stderr}"
    );
}

#[test]
fn check_config_refuses_listeners_that_are_neither_address_nor_host_port() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("rules.toml");
    for (listen_lines, expected) in [
        (
            "listen = \"localhost\"\n",
            "[server] listen 'localhost' is not an address like 127.0.0.1:8080 or a host:port",
        ),
        (
            "listen = \"127.0.0.1:1\"\nadmin_listen = \"::1:9090\"\n",
            "[server] admin_listen '::1:9090' is not an address",
        ),
    ] {
        let text = format!("[server]\n{listen_lines}upstream = \"http://127.0.0.1:9\"\n[redis]\n");
        std::fs::write(&path, text).expect("write the file");
        let output = check_config(&path);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{listen_lines}: passed");
        assert!(
            stderr.contains(expected),
            "{listen_lines}: '{stderr}' lacks '{expected}'"
        );
    }
}
