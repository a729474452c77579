//! Shared harness of the gateway's integration tests: real processes on free loopback ports,
//! each killed when its handle is dropped.
//!
//! - Redis / Valkey with the module: the crate's root, re-exported here.
//! - [`Upstream`]: the `demo-upstream` binary, which echoes each request (method, path and
//!   query on the first line of the body, then one `name: value` line per request header)
//!   and counts what it served (`GET /__requests`).
//! - [`Gateway`]: the `rl-gateway` binary, run with a TOML file written into its own
//!   temporary directory, stderr and stdout going to a log file there.
//! - [`paced`] and [`windows`]: a crowd of clients at a steady pace over several gateways,
//!   every request timed, and the module's aligned windows each was decided in.
//!
//! HTTP goes through ureq 2; [`Resp`] is every answer, whatever its status, with helpers
//! that parse `RateLimit-Policy` and `RateLimit` as RFC 8941 Lists (sfv).
pub mod crowd;
pub mod envoy;
mod http;
mod metrics;
pub mod paced;
mod process;
mod quota;
pub mod raw_http;
mod spent;
pub mod tls_upstream;
pub mod windows;

pub use http::*;
pub use metrics::*;
pub use process::*;
pub use quota::*;

pub use spent::{assert_spent, Spent};

pub use crate::{
    each_flavor, free_port, primary_with_replica, wait_until, workspace_root, Flavor, Server,
    ServerConfig, FLAVORS,
};

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// How long a process may take to come up (a debug build on a busy 2-core machine).
pub const START_LIMIT: Duration = Duration::from_secs(30);

/// The path of the gateway binary Cargo built for these tests.
pub fn gateway_binary() -> PathBuf {
    built_binary("rl-gateway")
}

/// The path of the demo upstream binary Cargo built for these tests.
pub fn upstream_binary() -> PathBuf {
    built_binary("demo-upstream")
}

/// A binary of rl-gateway that Cargo built before it ran the gateway's integration tests:
/// `CARGO_BIN_EXE_<name>` when Cargo set it at run time, else the one beside the `deps/`
/// directory the running test binary is in (`target/debug/deps/it-…`), where Cargo puts
/// a package's binaries. (`env!("CARGO_BIN_EXE_…")` only works in the package's own tests.)
fn built_binary(name: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(format!("CARGO_BIN_EXE_{name}")) {
        return PathBuf::from(path);
    }
    let test_binary = std::env::current_exe().expect("the test binary's path");
    let profile_dir = test_binary
        .parent()
        .and_then(Path::parent)
        .unwrap_or_else(|| {
            panic!(
                "{} is not in <target>/<profile>/deps",
                test_binary.display()
            )
        });
    let path = profile_dir.join(name);
    assert!(
        path.exists(),
        "{} missing: build rl-gateway's binaries",
        path.display()
    );
    path
}

/// Sends `kill -<signal> <pid>` (`STOP`, `CONT`, `HUP`, `TERM`...), which must succeed.
pub fn signal(pid: u32, signal: &str) {
    assert!(pid != 0, "no process to send SIG{signal} to");
    let status = Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid} failed");
}

/// Keeps a process stopped (SIGSTOP) and continues it (SIGCONT) when dropped, also when
/// the test panics, so that nothing is left frozen.
pub struct Stopped {
    pid: u32,
    resumed: bool,
}

impl Stopped {
    pub fn new(pid: u32) -> Stopped {
        signal(pid, "STOP");
        Stopped {
            pid,
            resumed: false,
        }
    }

    pub fn resume(mut self) {
        self.cont();
    }

    fn cont(&mut self) {
        if !self.resumed {
            self.resumed = true;
            let _ = Command::new("kill")
                .arg("-CONT")
                .arg(self.pid.to_string())
                .status();
        }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        self.cont();
    }
}

// Redis helpers

/// The key names matching `pattern` (`KEYS`), sorted.
pub fn keys(server: &Server, pattern: &str) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(pattern)
        .query(&mut server.conn())
        .expect("KEYS");
    // The gateways' heartbeat (`<key_prefix>gateways`) is not a budget.
    keys.retain(|key| !key.ends_with("gateways") || key.contains('{'));
    keys.sort();
    keys
}

/// `RL.PEEK key <spec>`: what a hit would answer now, nothing counted.
pub fn peek(server: &Server, key: &str, spec: &str) -> crate::Reply {
    crate::rl(&mut server.conn(), "RL.PEEK", key.as_bytes(), spec)
}

/// `RL.HIT` calls the server has run so far (0 before the first).
pub fn hit_calls(server: &Server) -> i64 {
    server.command_calls("RL.HIT").unwrap_or(0)
}

/// A server of `flavor` with the module, able to hold named policies (Redis 7.0 needs
/// `policies-in-rdb yes` for `RL.POLICY SET`).
pub fn server_with_policies(flavor: Flavor) -> Server {
    let config = ServerConfig::new(flavor);
    let config = match flavor {
        Flavor::Redis => config.module_arg("policies-in-rdb").module_arg("yes"),
        Flavor::Valkey => config,
    };
    config.start()
}

/// Times one call.
pub fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let value = f();
    (value, start.elapsed())
}

/// `rl_gateway_lease_releases_total{cause}`: lease releases started for `cause`.
pub fn release_cause(gateway: &Gateway, cause: &str) -> f64 {
    gateway
        .metrics()
        .counter("rl_gateway_lease_releases_total", &[("cause", cause)])
}

/// The gauge `rl_gateway_leases_held`: leases the gateway holds now.
pub fn leases_held(gateway: &Gateway) -> f64 {
    gateway
        .metrics()
        .value("rl_gateway_leases_held", &[])
        .expect("the gauge is always there")
}

/// Sends `GET path` on its own thread, reading only the head; the answer's status (0
/// when the connection broke).
pub fn in_flight(gateway: &Gateway, path: &str) -> std::thread::JoinHandle<u16> {
    let url = gateway.url(path);
    let agent = gateway.agent.clone();
    std::thread::spawn(move || match agent.get(&url).call() {
        Ok(resp) => resp.status(),
        Err(ureq::Error::Status(status, _)) => status,
        Err(_) => 0,
    })
}
