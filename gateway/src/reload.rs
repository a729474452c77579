//! Rules reload without a restart: on SIGHUP, and when the file's modification time
//! changes. A file that does not load is refused as a whole; the rules in force stay.
//! Optionally (`[redis] rules_key`) a background refresher reads rules from a Redis key,
//! the seeds' "rules database cached in Redis, refreshed by a worker": while the key
//! exists its rules are in force, and when it is deleted the file's rules come back.

use crate::app::Gateway;
use crate::config::{self, Config};
use crate::decider::redis::Backend;
use crate::logging::log;
use crate::rules::RuleSet;
use redis::Value;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::signal::unix::{signal, SignalKind};

/// Where the rules come from: the file, and while `[redis] rules_key` exists and its last
/// value loaded, that key instead. Reload owns it; the file watcher and the Redis
/// refresher share it, so that a change of the file waits while the key's rules are in
/// force.
pub struct RuleSource {
    path: PathBuf,
    /// The configuration the gateway started with: what a reloaded file is compared to,
    /// and the mode and path policy the rules in Redis are checked for.
    started_with: Config,
    /// Whether the rules in force came from the Redis key.
    from_redis: AtomicBool,
}

impl RuleSource {
    /// The rules of the file at `path`, which the gateway started with as `started_with`.
    pub fn new(path: PathBuf, started_with: Config) -> RuleSource {
        RuleSource {
            path,
            started_with,
            from_redis: AtomicBool::new(false),
        }
    }

    fn rules_from_redis(&self) -> bool {
        self.from_redis.load(Ordering::Relaxed)
    }

    fn set_rules_from_redis(&self, from_redis: bool) {
        self.from_redis.store(from_redis, Ordering::Relaxed);
    }

    /// The rules a value of the Redis key holds, checked as the file's rules are.
    fn parse_redis_value(&self, bytes: &[u8]) -> Result<RuleSet, String> {
        let server = &self.started_with.server;
        std::str::from_utf8(bytes)
            .map_err(|e| e.to_string())
            .and_then(|text| {
                Ok(config::parse_rules_with(
                    text,
                    server.mode,
                    &server.requests.paths,
                )?)
            })
    }
}

/// Follows the rule source for the life of the process: the file (on SIGHUP and when it
/// changes) and, with `[redis] rules_key`, that key through `backend`.
pub fn spawn(source: RuleSource, backend: Backend, gateway: Arc<Gateway>) {
    let source = Arc::new(source);
    let redis = &source.started_with.redis;
    if let Some(key) = redis.rules_key.clone() {
        spawn_redis_refresher(
            key,
            redis.rules_refresh,
            backend,
            source.clone(),
            gateway.clone(),
        );
    }
    spawn_file_watcher(source, gateway);
}

fn modified(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Watches the file for the life of the process.
fn spawn_file_watcher(source: Arc<RuleSource>, gateway: Arc<Gateway>) {
    tokio::spawn(async move {
        let path = &source.path;
        let mut hangup = match signal(SignalKind::hangup()) {
            Ok(stream) => Some(stream),
            Err(error) => {
                log!("cannot listen for SIGHUP ({error}); reloading on file changes only");
                None
            }
        };
        let interval = source.started_with.server.reload_interval;
        let mut seen = modified(path);
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
                _ = hup => {
                    // This reload reads the file as it is now: the poll is not to read
                    // the same change again (a second reload, a second line).
                    seen = modified(path);
                    "SIGHUP"
                }
                _ = poll => {
                    let now = modified(path);
                    if now == seen {
                        continue;
                    }
                    seen = now;
                    "file change"
                }
            };
            reload(&source, &gateway, why);
        }
    });
}

fn reload(source: &RuleSource, gateway: &Gateway, why: &str) {
    let (path, started_with) = (&source.path, &source.started_with);
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
            if source.rules_from_redis() {
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
                outcome = "refused";
                "rules file {} refused ({why}): {error}; the previous rules stay",
                path.display()
            );
        }
    }
}

fn apply(gateway: &Gateway, rules: RuleSet, from: &str) {
    let count = rules.count();
    gateway.replace_rules(rules);
    log!(outcome = "ok"; "rules reloaded from {from}: {count} rules");
}

/// Reads `key` every `every`; applies its rules when its value changes, and the file's
/// again when it disappears. Redis being unreachable changes nothing.
fn spawn_redis_refresher(
    key: String,
    every: std::time::Duration,
    backend: Backend,
    source: Arc<RuleSource>,
    gateway: Arc<Gateway>,
) {
    tokio::spawn(async move {
        let mut applied: Option<Vec<u8>> = None;
        // The file refused after the key was deleted, logged once per error rather than
        // at every read of the key.
        let mut refused: Option<String> = None;
        loop {
            let get = redis::cmd("GET").arg(&key).clone();
            let answer =
                tokio::time::timeout(std::time::Duration::from_secs(1), backend.call(&get)).await;
            match answer {
                Ok(Ok(Value::BulkString(bytes))) if applied.as_ref() != Some(&bytes) => {
                    let from = format!("Redis key {key}");
                    match source.parse_redis_value(&bytes) {
                        Ok(rules) => {
                            source.set_rules_from_redis(true);
                            gateway.metrics().reload(true);
                            apply(&gateway, rules, &from);
                        }
                        Err(error) => {
                            gateway.metrics().reload(false);
                            log!(
                                outcome = "refused";
                                "rules in {from} refused: {error}; the previous rules stay"
                            );
                        }
                    }
                    applied = Some(bytes);
                }
                Ok(Ok(Value::Nil)) if applied.is_some() => match config::load(&source.path) {
                    Ok(config) => {
                        applied = None;
                        refused = None;
                        source.set_rules_from_redis(false);
                        let from = format!("{} (Redis key {key} deleted)", source.path.display());
                        apply(&gateway, config.rules, &from);
                    }
                    Err(error) => {
                        let text = error.to_string();
                        if refused.as_deref() != Some(text.as_str()) {
                            log!(
                                outcome = "refused";
                                "Redis key {key} deleted, but the rules file {} is refused: \
                                 {text}; the previous rules stay",
                                source.path.display()
                            );
                            refused = Some(text);
                        }
                    }
                },
                _ => {}
            }
            tokio::time::sleep(every).await;
        }
    });
}
