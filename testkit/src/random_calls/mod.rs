//! The parts of the random-traffic test (`tests/it/random_traffic.rs`): a seeded generator of the
//! module's calls and of other clients' traffic, the reply checks, server snapshots, and
//! the slow log.

pub mod calls;
pub mod keys;
pub mod replies;
pub mod rng;
pub mod slowlog;
pub mod snapshot;
pub mod traffic;

use super::{workspace_root, Flavor, ServerConfig};
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The seed of the run: `RL_HOSTILE_SEED` to replay one, else a new one.
pub fn seed() -> u64 {
    match std::env::var("RL_HOSTILE_SEED") {
        Ok(text) if !text.trim().is_empty() => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("RL_HOSTILE_SEED={text:?} is not a u64")),
        _ => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1),
    }
}

/// How long the traffic runs per server: `RL_HOSTILE_SECONDS`, else 30 s.
pub fn traffic_duration() -> Duration {
    let seconds = std::env::var("RL_HOSTILE_SECONDS")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or(30);
    Duration::from_secs(seconds)
}

/// The module the run loads: `RL_MODULE` if set, else this checkout's release build,
/// brought up to date once. Release, because the run asserts that no call takes 1 ms:
/// a debug build needs about 2 ms for a 10,000-entry log, the release build 0.25 ms.
pub fn release_module() -> &'static PathBuf {
    static MODULE: OnceLock<PathBuf> = OnceLock::new();
    MODULE.get_or_init(|| {
        if let Some(path) = std::env::var_os("RL_MODULE").filter(|v| !v.is_empty()) {
            return PathBuf::from(path);
        }
        let root = workspace_root();
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "--release",
                "--lib",
                "-p",
                "redis-ratelimit",
            ])
            .current_dir(root)
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building the release module failed");
        let path = super::target_dir().join("release/libredis_ratelimit.so");
        assert!(path.exists(), "{} missing after the build", path.display());
        path
    })
}

/// A server with the release module (and on Redis 7.0 `policies-in-rdb yes`, without which
/// policies are refused), the slow log catching every call of 1 ms or more.
pub fn server_config(flavor: Flavor) -> ServerConfig {
    let mut config = ServerConfig::new(flavor).without_module();
    config.args.push("--loadmodule".into());
    config
        .args
        .push(release_module().to_string_lossy().into_owned());
    if flavor == Flavor::Redis {
        config.args.push("policies-in-rdb".into());
        config.args.push("yes".into());
    }
    config
        .arg(
            "slowlog-log-slower-than",
            &slowlog::THRESHOLD_US.to_string(),
        )
        .arg("slowlog-max-len", "100000")
}
