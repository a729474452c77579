//! The connection to Redis: one server through the `redis` crate's ConnectionManager
//! (multiplexed, reconnects by itself), Redis Cluster through its async cluster client
//! (routes each key to its slot's primary and follows MOVED and failovers), or the primary
//! that Redis Sentinel names, found again after a failover (`located`). All speak RESP3,
//! so that multi-tier replies name every tier, and any of them may be TLS.
//!
//! - `connect`: the clients made from `[redis]` (TLS, credentials);
//! - `located`: the connection that follows a Sentinel-managed primary;
//! - `functions`: the Functions library, and a module command as its `FCALL`;
//! - `probe`: which of the two the server offers (`[redis] backend`), the library loaded
//!   where allowed.

mod connect;
pub(crate) mod functions;
pub mod located;
pub mod probe;

use crate::config::{BackendChoice, FunctionsLoad, RedisSettings, RedisTarget, SecretError};
use crate::failure::Failure;
use crate::logging::log;
use redis::aio::ConnectionManager;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use redis::{Cmd, RedisError, RedisResult, Value};
use std::borrow::Cow;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// How long one connection attempt may take; a decision's own deadline is much shorter and
/// is applied on top, so this only bounds the work done in the background.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// Why no connection to Redis can be set up (Redis down is no such reason: the connection
/// is made lazily and retried).
#[derive(Debug)]
pub enum ConnectError {
    /// The URL of a single server does not parse, or names what the client cannot use.
    Url {
        /// The URL as configured, its password (if any) hidden.
        url: String,
        /// What the client said of it.
        source: RedisError,
    },
    /// The connection manager of a single server could not be made.
    Manager(RedisError),
    /// The cluster client could not be made from the URLs.
    Cluster(RedisError),
    /// The client of the sentinels could not be made.
    Sentinel(RedisError),
    /// A password could not be read from where `[redis]` says it is.
    Secret(SecretError),
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConnectError::Url { url, source } => write!(f, "redis url '{url}': {source}"),
            ConnectError::Manager(source) => write!(f, "redis: {source}"),
            ConnectError::Cluster(source) => write!(f, "redis cluster: {source}"),
            ConnectError::Sentinel(source) => write!(f, "redis sentinels: {source}"),
            ConnectError::Secret(source) => source.fmt(f),
        }
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ConnectError::Url { source, .. }
            | ConnectError::Manager(source)
            | ConnectError::Cluster(source)
            | ConnectError::Sentinel(source) => Some(source),
            ConnectError::Secret(source) => Some(source),
        }
    }
}

/// The connection to Redis the service decides through, and which backend answers its
/// calls; clones share both.
#[derive(Clone)]
pub struct Backend {
    link: Link,
    answering: Arc<Answering>,
}

/// Which backend answers: what `[redis]` allows, and what the last probe found.
struct Answering {
    choice: BackendChoice,
    load: FunctionsLoad,
    /// Where the module's commands go: [`MODULE`], [`LIBRARY`] (as its `FCALL`) or
    /// [`NEITHER`] (refused here, never sent).
    state: AtomicU8,
    /// Set when a call found the library gone (`FUNCTION DELETE`, `FUNCTION FLUSH`, a
    /// failover to a node without it): the heartbeat probes again at its next beat.
    lost_library: AtomicBool,
}

/// The module's commands go out as they are.
const MODULE: u8 = 0;
/// The module's commands go out as the library's `FCALL`.
const LIBRARY: u8 = 1;
/// The module's commands are refused in the gateway: see [`no_backend`].
const NEITHER: u8 = 2;

/// What a module command gets while no backend of the right kind and version answers: an
/// error reply of its own, so that each rule decides as its `on_module_error` says, as it
/// would on the server's `unknown command`.
fn no_backend() -> RedisError {
    const LINE: &[u8] = b"-ERR no backend to decide with: neither the module nor the \
        Functions library of this gateway's version is usable; /readyz and the log say \
        what to load\r\n";
    match redis::parse_redis_value(LINE).and_then(Value::extract_error) {
        Err(error) => error,
        // Cannot be: the line is an error reply.
        Ok(_) => RedisError::from((redis::ErrorKind::Client, "no backend to decide with")),
    }
}

/// The kind of connection.
#[derive(Clone)]
enum Link {
    /// One server, reconnected by the manager when it drops; its `host:port`, for the log.
    Single(ConnectionManager, Arc<str>),
    /// Filled by a background task once the cluster first answers.
    Cluster(Arc<RwLock<Option<ClusterConnection>>>),
    /// The primary the sentinels name (or one server under `tls_server_name`), found
    /// again by a background task when it goes.
    Located(Arc<located::Located>),
}

impl Backend {
    /// Starts connecting; never waits for Redis, which may be down when the gateway starts.
    /// Reads the passwords `settings` point to, which fails if one cannot be read.
    pub fn connect(settings: &RedisSettings) -> Result<Backend, ConnectError> {
        let link = Backend::link(settings)?;
        let answering = Arc::new(Answering {
            choice: settings.backend,
            load: settings.functions_load,
            // Until the first probe: the module, unless only the library will do.
            state: AtomicU8::new(match settings.backend {
                BackendChoice::Functions => LIBRARY,
                BackendChoice::Module | BackendChoice::Auto => MODULE,
            }),
            lost_library: AtomicBool::new(false),
        });
        Ok(Backend { link, answering })
    }

    /// The connection `settings` name.
    fn link(settings: &RedisSettings) -> Result<Link, ConnectError> {
        match &settings.target {
            RedisTarget::Single(url) => connect::single(url, settings),
            RedisTarget::Sentinel {
                sentinels,
                master_name,
            } => connect::sentinel(sentinels, master_name, settings),
            RedisTarget::Cluster(urls) => {
                let client = connect::cluster(urls, settings)?
                    .build()
                    .map_err(ConnectError::Cluster)?;
                let slot = Arc::new(RwLock::new(None));
                let filled = slot.clone();
                tokio::spawn(async move {
                    let mut failures = 0u32;
                    loop {
                        match client.get_async_connection().await {
                            Ok(connection) => {
                                *filled.write().unwrap_or_else(|e| e.into_inner()) =
                                    Some(connection);
                                log!("connected to the Redis Cluster");
                                return;
                            }
                            Err(e) => {
                                failures += 1;
                                // The first failure and then one in fifty (every 25 s or
                                // so): a cluster down at start is one state, not a line
                                // every retry.
                                if failures % 50 == 1 {
                                    log!(
                                        failure = classify(&e).label();
                                        "Redis Cluster not reachable yet ({e}); retrying"
                                    );
                                }
                                tokio::time::sleep(Duration::from_millis(500)).await;
                            }
                        }
                    }
                });
                Ok(Link::Cluster(slot))
            }
        }
    }

    /// Waits up to `limit` for Redis to answer a PING, so that a gateway started together
    /// with Redis does not fail open its first requests. Redis down is not an error: the
    /// gateway then starts anyway and fails open until Redis answers.
    pub async fn wait_ready(&self, limit: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let ping = redis::cmd("PING");
            let answer = tokio::time::timeout(Duration::from_millis(250), self.call(&ping)).await;
            if matches!(answer, Ok(Ok(_))) {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Whether the module's commands go out as the library's `FCALL` (what the last probe
    /// found, or `backend = "functions"`).
    pub(crate) fn uses_library(&self) -> bool {
        self.answering.state.load(Ordering::Relaxed) == LIBRARY
    }

    /// `cmd` as it is sent: a module command as the library's `FCALL` when the library
    /// answers, or refused here when neither backend does (a library of another version
    /// must never be called, nor the module when only the library is wanted). The one
    /// place the two backends differ on the way out.
    pub(crate) fn outgoing<'a>(&self, cmd: &'a Cmd) -> RedisResult<Cow<'a, Cmd>> {
        let state = self.answering.state.load(Ordering::Relaxed);
        if state == MODULE {
            return Ok(Cow::Borrowed(cmd));
        }
        match (functions::as_fcall(cmd), state) {
            (Some(fcall), LIBRARY) => Ok(Cow::Owned(fcall)),
            (Some(_), _) => Err(no_backend()),
            (None, _) => Ok(Cow::Borrowed(cmd)),
        }
    }

    /// Sends the module's commands to what the probe found.
    pub(crate) fn answered_by(&self, found: Option<probe::Found>) {
        let state = match found {
            Some(probe::Found::Module) => MODULE,
            Some(probe::Found::Library) => LIBRARY,
            None => NEITHER,
        };
        self.answering.state.store(state, Ordering::Relaxed);
    }

    /// Notes an error reply that says the library is not there (any more), for the
    /// heartbeat to probe again.
    pub(crate) fn saw(&self, error: &RedisError) {
        if self.uses_library() && probe::says_no_library(error) {
            self.answering.lost_library.store(true, Ordering::Relaxed);
        }
    }

    /// Whether a call found the library gone since the last time this was asked.
    pub(crate) fn take_lost_library(&self) -> bool {
        self.answering.lost_library.swap(false, Ordering::Relaxed)
    }

    pub(crate) async fn call(&self, cmd: &Cmd) -> RedisResult<Value> {
        match &self.link {
            Link::Single(manager, _) => cmd.query_async(&mut manager.clone()).await,
            Link::Located(located) => located.call(cmd).await,
            Link::Cluster(slot) => {
                let connection = slot.read().unwrap_or_else(|e| e.into_inner()).clone();
                match connection {
                    Some(mut connection) => cmd.query_async(&mut connection).await,
                    None => Err(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::NotConnected,
                        "no connection to the Redis Cluster yet",
                    ))),
                }
            }
        }
    }
}

impl Backend {
    /// The server the calls go to, `host:port`, for the log's `redis_node` field: the one
    /// of the URL, or the one last connected to (the primary the sentinels named); `None`
    /// for a Cluster, whose calls go to many, and before a primary was first found.
    pub(crate) fn node(&self) -> Option<String> {
        match &self.link {
            Link::Single(_, node) => Some(node.to_string()),
            Link::Located(located) => located.node(),
            Link::Cluster(_) => None,
        }
    }

    /// Whether this is Redis Cluster, where keys in different slots cannot be in one call.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.link, Link::Cluster(_))
    }

    /// `cmd`, sent in a cluster to the primary of `key`'s slot: for the commands whose
    /// first argument is not a key (`RL.MHIT numkeys key ...`), which the cluster client
    /// would otherwise route by that argument and reach the owner only after a `MOVED`.
    pub(crate) async fn call_for_key(&self, cmd: &Cmd, key: &str) -> RedisResult<Value> {
        match &self.link {
            Link::Single(..) | Link::Located(_) => self.call(cmd).await,
            Link::Cluster(slot) => {
                let connection = slot.read().unwrap_or_else(|e| e.into_inner()).clone();
                match connection {
                    Some(mut connection) => {
                        let route = Route::with_key(key, SlotAddr::Master);
                        let routing =
                            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(route));
                        connection.route_command(cmd.clone(), routing).await
                    }
                    None => Err(RedisError::from(std::io::Error::new(
                        std::io::ErrorKind::NotConnected,
                        "no connection to the Redis Cluster yet",
                    ))),
                }
            }
        }
    }
}

/// Whether two keys are in one Cluster slot (their hash tags, or whole names, hash to the
/// same slot, by the cluster client's own function): only then can one `RL.MHIT` take both.
pub(crate) fn same_slot(a: &str, b: &str) -> bool {
    Slot::for_key(a) == Slot::for_key(b)
}

/// The failure an error stands for. Replies saying the server cannot take writes now are
/// `Unavailable`; other replies are `Error`; everything without a reply is `Connection`.
pub(crate) fn classify(error: &RedisError) -> Failure {
    const UNAVAILABLE: [&str; 8] = [
        "OOM",
        "LOADING",
        "READONLY",
        "MASTERDOWN",
        "CLUSTERDOWN",
        "TRYAGAIN",
        "BUSY",
        "NOREPLICAS",
    ];
    if error.is_timeout() {
        return Failure::Timeout;
    }
    match error.code() {
        Some(code) if UNAVAILABLE.contains(&code) => Failure::Unavailable,
        Some(_) if !error.is_io_error() && !error.is_connection_dropped() => Failure::Error,
        _ => Failure::Connection,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings for `target` with every other `[redis]` field at its default.
    fn settings_for(target: RedisTarget) -> RedisSettings {
        let mut settings = crate::config::parse_after_server("[redis]\n")
            .expect("the default [redis] loads")
            .redis;
        settings.target = target;
        settings
    }

    #[test]
    fn a_url_that_does_not_parse_is_named_in_the_error() {
        let target = RedisTarget::Single("http://127.0.0.1:6379".into());
        let Err(error) = Backend::connect(&settings_for(target)) else {
            panic!("connected to an http url");
        };
        assert!(matches!(error, ConnectError::Url { .. }));
        let text = error.to_string();
        assert!(
            text.starts_with("redis url 'http://127.0.0.1:6379': "),
            "{text}"
        );
        let source = std::error::Error::source(&error).expect("the client's error");
        assert!(text.ends_with(&source.to_string()), "{text}");
    }

    #[tokio::test]
    async fn the_module_commands_go_where_the_probe_found_a_backend() {
        let target = RedisTarget::Single("redis://127.0.0.1:1".into());
        let backend = Backend::connect(&settings_for(target)).expect("a lazy client");
        let mut hit = redis::cmd("RL.HIT");
        hit.arg("k").arg(5).arg("1s");
        let mut get = redis::cmd("GET");
        get.arg("k");
        let first_word = |cmd: &Cmd| match cmd.args_iter().next() {
            Some(redis::Arg::Simple(word)) => String::from_utf8_lossy(word).into_owned(),
            _ => String::new(),
        };
        let sent = |cmd: &Cmd| backend.outgoing(cmd).map(|c| first_word(&c));
        assert_eq!(
            sent(&hit).ok().as_deref(),
            Some("RL.HIT"),
            "auto: the module first"
        );
        backend.answered_by(Some(probe::Found::Library));
        assert_eq!(sent(&hit).ok().as_deref(), Some("FCALL"));
        assert_eq!(sent(&get).ok().as_deref(), Some("GET"));
        backend.answered_by(None);
        let refused = sent(&hit).expect_err("neither: refused in the gateway");
        assert_eq!(
            classify(&refused),
            Failure::Error,
            "decided by on_module_error"
        );
        assert_eq!(refused.code(), Some("ERR"));
        assert!(
            refused.to_string().contains("no backend to decide with"),
            "{refused}"
        );
        assert_eq!(
            sent(&get).ok().as_deref(),
            Some("GET"),
            "other commands pass"
        );
        backend.answered_by(Some(probe::Found::Module));
        assert_eq!(sent(&hit).ok().as_deref(), Some("RL.HIT"));
    }

    #[test]
    fn keys_with_one_hash_tag_share_a_slot() {
        assert!(same_slot("rl:{user1}:a", "rl:{user1}:b"));
        assert!(!same_slot("rl:{user1}:a", "rl:{user2}:a"));
    }
}
