//! What one client's connections may hold (`[connections]`): how many connections are
//! served at once, how long a request head may take, how long a request body may keep the
//! gateway waiting, and how long a kept-alive connection may sit idle. Without them, clients that open connections and never finish a request
//! (slowloris) would hold the gateway's sockets and memory for as long as they like.

use crate::logging::log;
use serde::Deserialize;
use std::time::Duration;

/// `[connections]`, checked: the caps every listener holds each connection to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections served at once, per listener. One more is accepted, answered 503 and
    /// closed at once, so that it neither waits in the kernel's queue nor holds a slot.
    pub(crate) max_connections: usize,
    /// Connections one client (not a trusted proxy) may hold at once; 0: no such cap.
    pub(crate) max_connections_per_client: usize,
    /// From the first byte of a request head to its end.
    pub(crate) head_timeout: Duration,
    /// With no request in progress: from the connection's start, or the end of the last
    /// response, to the first byte of the next request.
    pub(crate) idle_timeout: Duration,
    /// How long a write to the client may wait without a byte going out (nginx's
    /// `send_timeout`): a client that stops reading its response would otherwise hold its
    /// connection, and an upstream connection, for good.
    pub(crate) send_timeout: Duration,
    /// How long, summed over the whole body, a request's body may keep the gateway (and its
    /// upstream connection) waiting for the client's next bytes; see `request_body.rs`.
    pub(crate) body_timeout: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            max_connections: 10_000,
            max_connections_per_client: 0,
            head_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(5),
            send_timeout: Duration::from_secs(30),
            // An API's bodies arrive in well under a second; 10 s leaves room for a few
            // MB from a slow client while holding an upstream worker a third of the time
            // the upstream timeout would.
            body_timeout: Duration::from_secs(10),
        }
    }
}

/// The `[connections]` section of the file: per listener.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
#[schemars(extend("x-reload" = "restart"))]
pub(crate) struct ConnectionSection {
    /// At least 1: connections served at once, per listener. One more is accepted,
    /// answered 503 and closed at once, so that it neither waits in the kernel's queue nor
    /// holds a slot.
    max_connections: usize,
    /// Connections one client (its `[client_ip]` network) may hold at once; `0`: no cap;
    /// trusted proxies are not capped.
    max_connections_per_client: usize,
    /// 1 to 86400000: from the first byte of a request head to its end, else the connection
    /// is closed.
    head_timeout_ms: u64,
    /// 1 to 86400000: with no request in progress, from the connection's start or the end
    /// of the last response to the first byte of the next request.
    idle_timeout_ms: u64,
    /// 1 to 86400000: how long a write to the client may wait without a byte going out
    /// (nginx's `send_timeout`); a client that stops reading its response would otherwise
    /// hold its connection, and an upstream connection, for good.
    send_timeout_ms: u64,
    /// 1 to 86400000: how long, summed over the whole body, a request's body may keep the
    /// gateway (and its upstream connection) waiting for the client's next bytes; past it
    /// 408.
    body_timeout_ms: u64,
}

impl Default for ConnectionSection {
    fn default() -> Self {
        let limits = ConnectionLimits::default();
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        ConnectionSection {
            max_connections: limits.max_connections,
            max_connections_per_client: limits.max_connections_per_client,
            head_timeout_ms: ms(limits.head_timeout),
            idle_timeout_ms: ms(limits.idle_timeout),
            send_timeout_ms: ms(limits.send_timeout),
            body_timeout_ms: ms(limits.body_timeout),
        }
    }
}

/// A day: longer timeouts are a mistake, and would overflow nothing but help nobody.
const LONGEST_MS: u64 = 86_400_000;

impl ConnectionSection {
    pub(crate) fn limits(self) -> Result<ConnectionLimits, String> {
        if self.max_connections == 0 {
            return Err("[connections] max_connections must be at least 1".into());
        }
        let timeout = |name: &str, ms: u64| {
            if (1..=LONGEST_MS).contains(&ms) {
                Ok(Duration::from_millis(ms))
            } else {
                Err(format!("[connections] {name} must be 1 to {LONGEST_MS}"))
            }
        };
        Ok(ConnectionLimits {
            max_connections: self.max_connections,
            max_connections_per_client: self.max_connections_per_client,
            head_timeout: timeout("head_timeout_ms", self.head_timeout_ms)?,
            idle_timeout: timeout("idle_timeout_ms", self.idle_timeout_ms)?,
            send_timeout: timeout("send_timeout_ms", self.send_timeout_ms)?,
            body_timeout: timeout("body_timeout_ms", self.body_timeout_ms)?,
        })
    }
}

/// Raises the soft limit on open files to the hard limit (the kernel's default soft limit,
/// 1024, is far below `max_connections`), and says so when even that is too low: each
/// proxied connection may hold a client socket and an upstream socket.
pub fn raise_open_file_limit(limits: &ConnectionLimits) {
    let wanted = u64::try_from(limits.max_connections)
        .unwrap_or(u64::MAX)
        .saturating_mul(2)
        .saturating_add(256);
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(got) if got < wanted => log!(
            "open-file limit {got} is below the {wanted} that max_connections = {} may need; \
             raise the hard limit (ulimit -Hn) or lower max_connections",
            limits.max_connections
        ),
        Ok(_) => {}
        Err(error) => log!("cannot raise the open-file limit: {error}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn section(max_connections: usize, head: u64, idle: u64) -> ConnectionSection {
        ConnectionSection {
            max_connections,
            max_connections_per_client: 0,
            head_timeout_ms: head,
            idle_timeout_ms: idle,
            send_timeout_ms: 1_000,
            body_timeout_ms: 2_000,
        }
    }

    #[test]
    fn defaults_are_below_the_old_30_seconds() {
        let limits = ConnectionSection::default().limits().unwrap();
        assert_eq!(limits, ConnectionLimits::default());
        assert!(limits.head_timeout < Duration::from_secs(30));
        assert!(limits.idle_timeout <= limits.head_timeout);
    }

    #[test]
    fn mistakes_are_named() {
        assert!(section(0, 1, 1)
            .limits()
            .unwrap_err()
            .contains("max_connections"));
        assert!(section(1, 0, 1)
            .limits()
            .unwrap_err()
            .contains("head_timeout_ms"));
        assert!(section(1, 1, 0)
            .limits()
            .unwrap_err()
            .contains("idle_timeout_ms"));
        assert!(section(1, 1, LONGEST_MS + 1).limits().is_err());
        assert_eq!(
            section(7, 250, 500).limits(),
            Ok(ConnectionLimits {
                max_connections: 7,
                max_connections_per_client: 0,
                head_timeout: Duration::from_millis(250),
                idle_timeout: Duration::from_millis(500),
                send_timeout: Duration::from_millis(1_000),
                body_timeout: Duration::from_millis(2_000),
            })
        );
        let no_send = ConnectionSection {
            send_timeout_ms: 0,
            ..section(1, 1, 1)
        };
        assert!(no_send.limits().unwrap_err().contains("send_timeout_ms"));
        for body_timeout_ms in [0, LONGEST_MS + 1, u64::MAX] {
            let body = ConnectionSection {
                body_timeout_ms,
                ..section(1, 1, 1)
            };
            let error = body.limits().unwrap_err();
            assert_eq!(
                error, "[connections] body_timeout_ms must be 1 to 86400000",
                "{body_timeout_ms}"
            );
        }
    }
}
