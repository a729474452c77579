//! Host names where addresses were required: the upstream's (`http://localhost:PORT`,
//! looked up for each new connection), and the listeners' (`listen = "localhost:PORT"`,
//! bound once at start on the IPv4 loopback the name resolves to).
//!
//! An upstream name that does not resolve does not stop the start (the upstream may come
//! later): its requests answer 502, counted as upstream errors. A listener name that does
//! not resolve stops the start with a message naming it.
//!
//! That a DNS change is followed without a restart is tested here on the real resolver:
//! glibc (without systemd's NSS module) does not resolve `*.localhost`, so the gateway runs
//! in a mount namespace of its own (`unshare --mount`, root needed, else the test says so
//! and skips) where the test's own file is bind-mounted over `/etc/hosts`; rewriting that
//! file moves the name. The unit tests of `upstream::transport` do the same through the
//! connector's resolver, everywhere.

use std::process::{Child, Command, Stdio};
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

/// A demo upstream on `address` (any loopback address), killed on drop.
struct DemoUpstream {
    child: Child,
    base: String,
    agent: ureq::Agent,
}

impl DemoUpstream {
    fn start(address: &str) -> DemoUpstream {
        let child = Command::new(upstream_binary())
            .arg("--listen")
            .arg(address)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("demo-upstream starts");
        let upstream = DemoUpstream {
            child,
            base: format!("http://{address}"),
            agent: agent(),
        };
        wait_until(START_LIMIT, &format!("demo-upstream on {address}"), || {
            upstream
                .agent
                .get(&format!("{}/__requests", upstream.base))
                .call()
                .is_ok()
        });
        upstream
    }

    fn requests(&self) -> u64 {
        let resp = send(
            &self.agent,
            "GET",
            &format!("{}/__requests", self.base),
            &[],
        );
        resp.body.trim().parse().expect("a count")
    }

    fn release_held(&self) {
        let resp = send(&self.agent, "GET", &format!("{}/__release", self.base), &[]);
        assert_eq!(resp.status, 200, "{resp:?}");
    }
}

impl Drop for DemoUpstream {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// rl-gateway run with `config` in a mount namespace where `hosts` is `/etc/hosts`, killed
/// on drop; `None`, saying why, where such a namespace cannot be made.
struct NamespacedGateway {
    child: Child,
    log: std::path::PathBuf,
}

impl NamespacedGateway {
    fn start(config: &std::path::Path, hosts: &std::path::Path, admin_port: u16) -> Option<Self> {
        let log = config.with_file_name("gateway.log");
        let log_file = std::fs::File::create(&log).expect("the log file");
        let child = Command::new("unshare")
            .args(["--mount", "--propagation", "private", "sh", "-c"])
            .arg("mount --bind \"$0\" /etc/hosts && exec \"$1\" --config \"$2\"")
            .arg(hosts)
            .arg(gateway_binary())
            .arg(config)
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().expect("log handle"))
            .stderr(log_file)
            .spawn();
        let Ok(child) = child else {
            eprintln!("SKIPPED: no `unshare` command (util-linux)");
            return None;
        };
        let mut gateway = NamespacedGateway { child, log };
        let health = format!("http://127.0.0.1:{admin_port}/healthz");
        let deadline = Instant::now() + START_LIMIT;
        while agent().get(&health).call().is_err() {
            if let Ok(Some(_)) = gateway.child.try_wait() {
                let log = std::fs::read_to_string(&gateway.log).unwrap_or_default();
                // Only the namespace's making may fail here; a gateway that fails is a failure.
                assert!(
                    log.starts_with("unshare:") || log.starts_with("mount:"),
                    "rl-gateway exited: {log}"
                );
                eprintln!("SKIPPED: cannot make a mount namespace (root is needed): {log}");
                return None;
            }
            assert!(Instant::now() < deadline, "rl-gateway did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(gateway)
    }
}

impl Drop for NamespacedGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            eprintln!("--- rl-gateway log ---\n{log}\n---");
        }
    }
}

#[test]
fn a_dns_change_of_the_upstream_is_followed_by_the_next_new_connection() {
    let redis = Server::start(ServerConfig::new(Flavor::Redis));
    // Two upstreams on one port at two loopback addresses: the one that counts a request
    // says where the name pointed when its connection was made.
    let port = free_port();
    let first = DemoUpstream::start(&format!("127.0.0.2:{port}"));
    let second = DemoUpstream::start(&format!("127.0.0.3:{port}"));
    let dir = tempfile::tempdir().expect("temp dir");
    let hosts = dir.path().join("hosts");
    let point = |address: &str| {
        // Written in place: the bind mount holds this file, not its name.
        std::fs::write(
            &hosts,
            format!("127.0.0.1 localhost\n{address} rl-up.test\n"),
        )
        .expect("write the hosts file");
    };
    point("127.0.0.2");
    let (main_port, admin_port) = (free_port(), free_port());
    let config = dir.path().join("rules.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:{main_port}\"\nadmin_listen = \"127.0.0.1:{admin_port}\"\n\
         upstream = \"http://rl-up.test:{port}\"\n{}",
        redis_section(redis.port(), "")
    );
    std::fs::write(&config, text).expect("write the config");
    let Some(_gateway) = NamespacedGateway::start(&config, &hosts, admin_port) else {
        return;
    };
    let url = move |path: &str| format!("http://127.0.0.1:{main_port}{path}");
    let client = agent();
    assert_eq!(send(&client, "GET", &url("/one"), &[]).status, 200);
    assert_eq!((first.requests(), second.requests()), (1, 0));

    point("127.0.0.3");
    // The pooled connection to the first is still open: kept busy by a held request, so
    // that the next request needs a new connection, which looks the name up again.
    let held = std::thread::spawn(move || send(&agent(), "GET", &url("/held?hold=1"), &[]));
    wait_until(
        START_LIMIT,
        "the held request at the first upstream",
        || first.requests() == 2,
    );
    let resp = send(
        &client,
        "GET",
        &format!("http://127.0.0.1:{main_port}/two"),
        &[],
    );
    assert_eq!(resp.status, 200, "{resp:?}");
    assert_eq!(resp.upstream_request_line(), "GET /two");
    assert_eq!(
        (first.requests(), second.requests()),
        (2, 1),
        "the new connection went where the name points now"
    );
    first.release_held();
    assert_eq!(held.join().expect("the held request").status, 200);
}
