//! Rules reload without a restart: on SIGHUP, and when the file's modification time
//! changes. A file that does not load is refused as a whole; the rules in force stay.
//! Optionally (`[redis] rules_key`) a background refresher reads rules from a Redis key,
//! the seeds' "rules database cached in Redis, refreshed by a worker": while the key
//! exists its rules are in force, and when it is deleted the file's rules come back.

use crate::backend::Backend;
use crate::config::{self, Config, Mode};
use crate::logging::log;
use crate::service::Gateway;
use redis::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
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
                log!(
                    "[server], [redis] and [deny_cache] changes in {} take effect at the next restart",
                    path.display()
                );
            }
            gateway.metrics().reload(true);
            if gateway.rules_from_redis.load(Ordering::Relaxed) {
                log!(
                    "rules file {} checked ({why}); the rules from Redis stay in force until their key is deleted",
                    path.display()
                );
                return;
            }
            apply(
                gateway,
                config.rules,
                &format!("{} ({why})", path.display()),
            );
        }
        Err(error) => {
            gateway.metrics().reload(false);
            log!(
                "rules file {} refused ({why}): {error}; the previous rules stay",
                path.display()
            );
        }
    }
}

fn apply(gateway: &Gateway, rules: crate::rules::RuleSet, from: &str) {
    let count = rules.count();
    gateway.replace_rules(rules);
    log!("rules reloaded from {from}: {count} rules");
}

/// Reads `key` every `every`; applies its rules when its value changes, and the file's
/// again when it disappears. Redis being unreachable changes nothing.
pub fn spawn_redis_refresher(
    key: String,
    every: std::time::Duration,
    backend: Backend,
    path: PathBuf,
    gateway: Arc<Gateway>,
    mode: Mode,
) {
    tokio::spawn(async move {
        let mut applied: Option<Vec<u8>> = None;
        loop {
            let get = redis::cmd("GET").arg(&key).clone();
            let answer =
                tokio::time::timeout(std::time::Duration::from_secs(1), backend.call(&get)).await;
            match answer {
                Ok(Ok(Value::BulkString(bytes))) if applied.as_ref() != Some(&bytes) => {
                    let from = format!("Redis key {key}");
                    match std::str::from_utf8(&bytes)
                        .map_err(|e| e.to_string())
                        .and_then(|text| {
                            config::parse_rules_with(text, mode, &gateway.server.requests.paths)
                        }) {
                        Ok(rules) => {
                            gateway.rules_from_redis.store(true, Ordering::Relaxed);
                            gateway.metrics().reload(true);
                            apply(&gateway, rules, &from);
                        }
                        Err(error) => {
                            gateway.metrics().reload(false);
                            log!("rules in {from} refused: {error}; the previous rules stay");
                        }
                    }
                    applied = Some(bytes);
                }
                Ok(Ok(Value::Nil)) if applied.is_some() => match config::load(&path) {
                    Ok(config) => {
                        applied = None;
                        gateway.rules_from_redis.store(false, Ordering::Relaxed);
                        let from = format!("{} (Redis key {key} deleted)", path.display());
                        apply(&gateway, config.rules, &from);
                    }
                    Err(error) => log!(
                        "Redis key {key} deleted, but the rules file {} is refused: {error}; \
                         the previous rules stay",
                        path.display()
                    ),
                },
                _ => {}
            }
            tokio::time::sleep(every).await;
        }
    });
}
