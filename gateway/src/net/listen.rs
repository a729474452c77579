//! Where a listener binds (`[server] listen`, `admin_listen`, `[envoy] listen`): an address
//! (`127.0.0.1:8080`, `[::1]:8080`, `0.0.0.0:8080`) or a host name and a port
//! (`localhost:8080`, `gw.internal:8080`).
//!
//! A name is resolved once, when the listener is bound at start, not at load: a reload
//! then never waits on DNS, and `--check-config` judges the file, not the machine it runs
//! on. A name that resolves to several addresses is bound on one of them, the first IPv4
//! one if there is any: as Go's `net.Listen` does, so as envoyproxy/ratelimit's `HOST` and
//! `GRPC_HOST` do, and so that `localhost` is the `127.0.0.1` that most clients and
//! probes use even where it also resolves to `::1`. To listen on every interface, the
//! address is `0.0.0.0` or `[::]`.

use crate::logging::log;
use rustls::pki_types::DnsName;
use std::fmt;
use std::net::SocketAddr;
use tokio::net::TcpListener;

/// Where a listener binds, as the file says it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListenAddress {
    /// An address and a port.
    Address(SocketAddr),
    /// A host name and a port, resolved when the listener is bound.
    Name {
        /// The name, as written.
        host: String,
        /// The port.
        port: u16,
    },
}

impl ListenAddress {
    /// `text` as an address (`127.0.0.1:8080`, `[::1]:8080`) or a `host:port` whose host is
    /// a DNS name; `None` when it is neither.
    pub fn parse(text: &str) -> Option<ListenAddress> {
        if let Ok(address) = text.parse::<SocketAddr>() {
            return Some(ListenAddress::Address(address));
        }
        let (host, port) = text.rsplit_once(':')?;
        let port = port.parse::<u16>().ok()?;
        // An IPv6 address without brackets, or a bracketed one that is not IPv6, or a
        // name with a character DNS does not allow: a mistake, not a name to look up.
        if host.contains([':', '[', ']']) || DnsName::try_from(host).is_err() {
            return None;
        }
        // A name all digits and dots is an IPv4 address gone wrong (`127.0.0.300`).
        if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
            return None;
        }
        Some(ListenAddress::Name {
            host: host.to_owned(),
            port,
        })
    }

    /// The address to bind: the address itself, or the one the name resolves to now (the
    /// first IPv4 address, else the first).
    pub async fn resolve(&self) -> Result<SocketAddr, ListenError> {
        let (host, port) = match self {
            ListenAddress::Address(address) => return Ok(*address),
            ListenAddress::Name { host, port } => (host, *port),
        };
        let unresolved = |why: String| ListenError::Unresolved {
            address: self.clone(),
            why,
        };
        let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), port))
            .await
            .map_err(|e| unresolved(e.to_string()))?
            .collect();
        found
            .iter()
            .find(|a| a.is_ipv4())
            .or(found.first())
            .copied()
            .ok_or_else(|| unresolved("it has no address".into()))
    }

    /// Resolves the address and binds a listener there.
    pub async fn bind(&self) -> Result<TcpListener, ListenError> {
        let address = self.resolve().await?;
        let listener = TcpListener::bind(address)
            .await
            .map_err(|error| ListenError::Bind {
                address: self.clone(),
                resolved: address,
                error,
            })?;
        if let ListenAddress::Name { .. } = self {
            log!("{self} resolves to {address}: listening there");
        }
        Ok(listener)
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddress::Address(address) => address.fmt(f),
            ListenAddress::Name { host, port } => write!(f, "{host}:{port}"),
        }
    }
}

/// Why a listener could not be bound at start.
#[derive(Debug)]
pub enum ListenError {
    /// The host name does not resolve (or resolves to nothing).
    Unresolved {
        /// As configured.
        address: ListenAddress,
        /// What the resolver said.
        why: String,
    },
    /// The address is taken, not this machine's, or needs a privilege.
    Bind {
        /// As configured.
        address: ListenAddress,
        /// What it resolved to (itself, for an address).
        resolved: SocketAddr,
        /// What the system said.
        error: std::io::Error,
    },
}

impl fmt::Display for ListenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenError::Unresolved { address, why } => write!(
                f,
                "cannot listen on {address}: the host name does not resolve ({why})"
            ),
            ListenError::Bind {
                address: ListenAddress::Address(_),
                resolved,
                error,
            } => write!(f, "cannot listen on {resolved}: {error}"),
            ListenError::Bind {
                address,
                resolved,
                error,
            } => write!(f, "cannot listen on {address} ({resolved}): {error}"),
        }
    }
}

impl std::error::Error for ListenError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ListenError::Bind { error, .. } => Some(error),
            ListenError::Unresolved { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_names_are_told_apart_and_mistakes_refused() {
        let address = |text: &str| ListenAddress::Address(text.parse().unwrap());
        assert_eq!(
            ListenAddress::parse("127.0.0.1:8080"),
            Some(address("127.0.0.1:8080"))
        );
        assert_eq!(
            ListenAddress::parse("[::1]:8080"),
            Some(address("[::1]:8080"))
        );
        let name = ListenAddress::parse("localhost:8080").unwrap();
        assert_eq!(
            name,
            ListenAddress::Name {
                host: "localhost".into(),
                port: 8080
            }
        );
        assert_eq!(name.to_string(), "localhost:8080");
        for wrong in [
            "localhost",
            "localhost:",
            "localhost:http",
            "localhost:65536",
            ":8080",
            "::1:8080",
            "[::1:8080",
            "[localhost]:8080",
            "127.0.0.300:8080",
            "bad host:8080",
            "a/b:8080",
            "http://localhost:8080",
        ] {
            assert_eq!(ListenAddress::parse(wrong), None, "{wrong}");
        }
    }

    #[tokio::test]
    async fn localhost_binds_its_ipv4_loopback_and_an_unknown_name_is_said() {
        let localhost = ListenAddress::parse("localhost:0").unwrap();
        let listener = localhost.bind().await.unwrap();
        let bound = listener.local_addr().unwrap();
        assert!(bound.ip().is_loopback(), "{bound}");
        assert!(bound.is_ipv4(), "{bound}: the IPv4 loopback is preferred");
        // `.invalid` never resolves (RFC 6761).
        let unknown = ListenAddress::parse("rl-gateway-test.invalid:8080").unwrap();
        let error = unknown.bind().await.unwrap_err().to_string();
        assert!(
            error.starts_with(
                "cannot listen on rl-gateway-test.invalid:8080: the host name does not resolve"
            ),
            "{error}"
        );
    }
}
