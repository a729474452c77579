//! A connection to a server that must be found again when it goes: the primary the
//! sentinels name (which changes on a failover), or one server reached under another name
//! than its address (`tls_server_name`).
//!
//! A background task holds it: it asks where the server is, connects, and then watches.
//! It asks again when a call sees the connection drop or a `READONLY` reply (a demoted
//! primary), and when its own check once a second finds the server gone or no longer the
//! primary: a primary that stops answering without closing the connection (a host gone)
//! gives the calls no error to see, since the decider's deadline drops them first.

use super::CONNECT_TIMEOUT;
use crate::logging::log;
use redis::aio::MultiplexedConnection;
use redis::io::AsyncDNSResolver;
use redis::sentinel::SentinelClient;
use redis::{AsyncConnectionConfig, Client, Cmd, RedisError, RedisResult, Role, Value};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::sync::Notify;

/// How often the task checks the server it holds.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How long it waits before asking again after a failed attempt.
const RETRY_AFTER: Duration = Duration::from_millis(200);

/// Where the server is found.
pub(crate) enum Locator {
    /// Asked of the sentinels, which answer with the current primary of `master_name`.
    Sentinel {
        /// The redis crate's client of the sentinels.
        client: Box<SentinelClient>,
        /// The primary's connection settings.
        config: AsyncConnectionConfig,
        /// For the log lines.
        master_name: String,
    },
    /// Always the same server.
    Fixed {
        /// Its client.
        client: Box<Client>,
        /// Its connection settings (with the resolver of `tls_server_name`).
        config: AsyncConnectionConfig,
        /// For the log lines.
        place: String,
    },
}

impl Locator {
    /// Finds the server and connects to it; the answer says where it is, for the log.
    async fn connect(&mut self) -> RedisResult<(MultiplexedConnection, String)> {
        match self {
            Locator::Sentinel {
                client,
                config,
                master_name,
            } => {
                let primary = client.async_get_client().await?;
                let place = format!(
                    "{} (primary of {master_name})",
                    primary.get_connection_info().addr()
                );
                let connection = primary
                    .get_multiplexed_async_connection_with_config(config)
                    .await?;
                Ok((connection, place))
            }
            Locator::Fixed {
                client,
                config,
                place,
            } => {
                let connection = client
                    .get_multiplexed_async_connection_with_config(config)
                    .await?;
                Ok((connection, place.clone()))
            }
        }
    }

    /// The `host:port` of the server, when it is always the same one.
    fn fixed_node(&self) -> Option<String> {
        match self {
            Locator::Sentinel { .. } => None,
            Locator::Fixed { place, .. } => Some(node(place).to_owned()),
        }
    }

    /// Whether the server behind `connection` is still the one to talk to.
    async fn still_good(&self, connection: &mut MultiplexedConnection) -> bool {
        let check = async {
            match self {
                Locator::Sentinel { .. } => {
                    let role: RedisResult<Role> = redis::cmd("ROLE").query_async(connection).await;
                    matches!(role, Ok(Role::Primary { .. }))
                }
                Locator::Fixed { .. } => {
                    let pong: RedisResult<Value> = redis::cmd("PING").query_async(connection).await;
                    pong.is_ok()
                }
            }
        };
        tokio::time::timeout(CONNECT_TIMEOUT, check)
            .await
            .unwrap_or(false)
    }
}

/// The connection in use, and its number (which connection a failed call used).
#[derive(Clone)]
struct Current {
    generation: u64,
    connection: MultiplexedConnection,
}

/// Shared by the backend's clones and the task that keeps it connected.
pub struct Located {
    current: RwLock<Option<Current>>,
    /// The `host:port` of the server last connected to (kept after it is lost: the
    /// failures that follow are that server's), for the log.
    node: RwLock<Option<String>>,
    /// The highest generation a call found broken.
    broken: AtomicU64,
    wake: Notify,
}

impl Located {
    /// Starts the task that finds and connects the server; returns at once.
    pub(crate) fn start(locator: Locator) -> Arc<Located> {
        let located = Arc::new(Located {
            current: RwLock::new(None),
            node: RwLock::new(None),
            broken: AtomicU64::new(0),
            wake: Notify::new(),
        });
        tokio::spawn(keep_connected(located.clone(), locator));
        located
    }

    /// The `host:port` of the server last connected to, if any yet.
    pub(crate) fn node(&self) -> Option<String> {
        self.node.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// `cmd` on the current connection; an error that says the server is gone or demoted
    /// has the task find it again (this call's error stands: the decision is already late).
    pub(crate) async fn call(&self, cmd: &Cmd) -> RedisResult<Value> {
        let current = self
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let Some(mut current) = current else {
            return Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::NotConnected,
                "no connection to the Redis primary yet",
            )));
        };
        let result = cmd.query_async(&mut current.connection).await;
        if let Err(error) = &result {
            if lost(error) {
                self.broken.fetch_max(current.generation, Ordering::Relaxed);
                self.wake.notify_one();
            }
        }
        result
    }
}

/// The address that begins a place (`host:port (primary of name)`, `host:port as name`),
/// for the log's `redis_node` field.
fn node(place: &str) -> &str {
    place.split_once(' ').map_or(place, |(address, _)| address)
}

/// The errors after which the same connection will not do: dropped, or a replica now.
fn lost(error: &RedisError) -> bool {
    error.is_connection_dropped()
        || error.is_io_error()
        || error.is_unrecoverable_error()
        || error.code() == Some("READONLY")
}

async fn keep_connected(located: Arc<Located>, mut locator: Locator) {
    let mut generation = 0u64;
    let mut failures = 0u32;
    loop {
        let attempt = tokio::time::timeout(CONNECT_TIMEOUT * 3, locator.connect()).await;
        let (mut connection, place) = match attempt {
            Ok(Ok(found)) => found,
            Ok(Err(error)) => {
                failures += 1;
                // The first failure and then one in fifty (every ten seconds or so).
                if failures % 50 == 1 {
                    log!(
                        failure = "connection";
                        if_some redis_node = locator.fixed_node();
                        "Redis not reachable ({error}); asking again"
                    );
                }
                tokio::time::sleep(RETRY_AFTER).await;
                continue;
            }
            Err(_) => {
                failures += 1;
                if failures % 50 == 1 {
                    log!(
                        failure = "timeout";
                        if_some redis_node = locator.fixed_node();
                        "Redis not reachable (no answer in time); asking again"
                    );
                }
                continue;
            }
        };
        failures = 0;
        generation += 1;
        *located.current.write().unwrap_or_else(|e| e.into_inner()) = Some(Current {
            generation,
            connection: connection.clone(),
        });
        *located.node.write().unwrap_or_else(|e| e.into_inner()) = Some(node(&place).to_owned());
        log!(redis_node = node(&place); "connected to Redis at {place}");
        loop {
            tokio::select! {
                _ = located.wake.notified() => {
                    if located.broken.load(Ordering::Relaxed) >= generation {
                        break;
                    }
                }
                _ = tokio::time::sleep(CHECK_EVERY) => {
                    if !locator.still_good(&mut connection).await {
                        break;
                    }
                }
            }
        }
        // Calls fail at once until the next connection, rather than wait on this one.
        *located.current.write().unwrap_or_else(|e| e.into_inner()) = None;
        log!(
            redis_node = node(&place);
            "lost Redis at {place} (gone, or no longer the primary); finding it again"
        );
    }
}

/// The resolver of `tls_server_name`: the client connects to "the name", which this
/// resolves to the URL's own host.
pub(crate) struct ResolveTo {
    /// The URL's host.
    pub(crate) host: String,
    /// The URL's port.
    pub(crate) port: u16,
}

impl AsyncDNSResolver for ResolveTo {
    fn resolve<'a, 'b: 'a>(
        &'a self,
        _host: &'b str,
        _port: u16,
    ) -> redis::RedisFuture<'a, Box<dyn Iterator<Item = SocketAddr> + Send + 'a>> {
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((self.host.as_str(), self.port))
                .await?
                .collect();
            Ok(Box::new(found.into_iter()) as Box<dyn Iterator<Item = SocketAddr> + Send>)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::node;

    #[test]
    fn the_node_field_is_the_address_of_the_place() {
        assert_eq!(node("10.0.0.7:6380 (primary of main)"), "10.0.0.7:6380");
        assert_eq!(node("127.0.0.1:6390 as redis.test"), "127.0.0.1:6390");
        assert_eq!(node("127.0.0.1:6390"), "127.0.0.1:6390");
    }
}
