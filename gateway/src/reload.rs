//! Rules reload without a restart: on SIGHUP, and when the file's modification time
//! changes. A file that does not load is refused as a whole; the rules in force stay.

use crate::config::{self, Config};
use crate::logging::log;
use crate::service::Gateway;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::signal::unix::{signal, SignalKind};

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Watches `path` for the life of the process.
pub fn spawn(path: PathBuf, gateway: Arc<Gateway>, started_with: Config) {
    tokio::spawn(async move {
        let mut hangup = match signal(SignalKind::hangup()) {
            Ok(stream) => Some(stream),
            Err(error) => {
                log!("cannot listen for SIGHUP ({error}); reloading on file changes only");
                None
            }
        };
        let interval = started_with.server.reload_interval;
        let mut seen = modified(&path);
        loop {
            let poll = async {
                if interval.is_zero() {
                    std::future::pending::<()>().await;
                }
                tokio::time::sleep(interval).await;
            };
            let hup = async {
                match &mut hangup {
                    Some(stream) => {
                        stream.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            let why = tokio::select! {
                _ = hup => "SIGHUP",
                _ = poll => {
                    let now = modified(&path);
                    if now == seen {
                        continue;
                    }
                    seen = now;
                    "file change"
                }
            };
            reload(&path, &gateway, &started_with, why);
        }
    });
}

fn reload(path: &Path, gateway: &Gateway, started_with: &Config, why: &str) {
    match config::load(path) {
        Ok(config) => {
            if config.server != started_with.server
                || config.redis != started_with.redis
                || config.deny_cache_capacity != started_with.deny_cache_capacity
            {
                log!("[server], [redis] and [deny_cache] changes in {} take effect at the next restart", path.display());
            }
            let count = config.rules.rules.len() + usize::from(config.rules.default.is_some());
            gateway.replace_rules(config.rules);
            gateway.metrics.reload(true);
            log!(
                "rules reloaded from {} ({why}): {count} rules",
                path.display()
            );
        }
        Err(error) => {
            gateway.metrics.reload(false);
            log!(
                "rules file {} refused ({why}): {error}; the previous rules stay",
                path.display()
            );
        }
    }
}
