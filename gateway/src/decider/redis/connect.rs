//! How each kind of connection is made from `[redis]`: the client of one server, of a
//! Cluster, or of the sentinels, with TLS (the redis crate's rustls) and the credentials
//! read from where the settings say. Nothing here connects: the clients connect lazily.

use super::located::{Located, Locator, ResolveTo};
use super::{ConnectError, CONNECT_TIMEOUT};
use crate::config::{host_port, RedisConnection, RedisSettings, TlsSettings};
use crate::decider::MIN_RELEASE_DEADLINE;
use base64::Engine;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, ProtocolVersion,
    TlsCertificates, TlsMode,
};
use std::time::Duration;

/// How long the redis crate lets a call wait for its answer before failing it itself (its
/// own default: 500 ms on one server or a primary, none in a Cluster). It must never be
/// what decides: the gateway bounds its own waits, and a `deadline_ms` above the crate's
/// would otherwise be cut short (the call failed open or closed while the user allowed
/// longer, a local-quota refill counted in Redis and held by nobody). So it is longer than
/// the longest of them, with a second to spare so that the gateway's timer always fires
/// first:
/// - a decision's call: two deadlines at most (a second one when Redis answered other calls
///   meanwhile, see `calls.rs`);
/// - the calls off the request path: the deadline or 1 s, whichever is longer (refills,
///   releases, renewals) or 1 s (give-backs, write-backs, the heartbeat with its probe and
///   `FUNCTION LOAD`, the rules key, the check of a located server).
///
/// What it bounds alone: a charge that missed its deadline, awaited in the background to
/// give it back if Redis ran it (and a refund's task, each attempt). It thus stays finite,
/// so that a server that never answers does not keep them forever. `deadline_ms` changes
/// take effect at a restart only (`reload.rs`), the connection with them.
fn response_timeout(deadline: Duration) -> Duration {
    const SPARE: Duration = Duration::from_secs(1);
    deadline
        .saturating_mul(2)
        .max(MIN_RELEASE_DEADLINE)
        .saturating_add(SPARE)
}

/// The settings of a connection to one server found by a [`Locator`].
fn server_config(settings: &RedisSettings) -> AsyncConnectionConfig {
    AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(response_timeout(settings.deadline)))
}

/// The user and password for the servers (or the sentinels), read now.
struct Credentials {
    username: Option<String>,
    password: Option<String>,
}

fn credentials(connection: &RedisConnection, sentinel: bool) -> Result<Credentials, ConnectError> {
    let (username, source) = match sentinel {
        false => (&connection.username, &connection.password),
        true => (&connection.sentinel_username, &connection.sentinel_password),
    };
    let password = match source {
        Some(source) => Some(source.read().map_err(ConnectError::Secret)?),
        None => None,
    };
    Ok(Credentials {
        username: username.clone(),
        password,
    })
}

/// The certificates the redis crate checks servers with and presents to them.
fn certificates(tls: &TlsSettings) -> TlsCertificates {
    let root_cert = match &tls.material.ca {
        Some(ca) => Some(ca.clone()),
        None => fallback_roots(),
    };
    TlsCertificates {
        client_tls: tls
            .material
            .client
            .as_ref()
            .map(|(cert, key)| ClientTlsConfig {
                client_cert: cert.clone(),
                client_key: key.clone(),
            }),
        root_cert,
    }
}

/// Without `tls_ca_file` the redis crate trusts the system's roots; where the system has
/// none (a distroless or scratch image), Mozilla's roots instead, which the crate takes as
/// PEM like a CA file.
fn fallback_roots() -> Option<Vec<u8>> {
    if !rustls_native_certs::load_native_certs().certs.is_empty() {
        return None;
    }
    let mut pem = Vec::new();
    for certificate in webpki_root_certs::TLS_SERVER_ROOT_CERTS {
        let body = base64::engine::general_purpose::STANDARD.encode(certificate.as_ref());
        pem.extend_from_slice(b"-----BEGIN CERTIFICATE-----\n");
        for line in body.as_bytes().chunks(64) {
            pem.extend_from_slice(line);
            pem.push(b'\n');
        }
        pem.extend_from_slice(b"-----END CERTIFICATE-----\n");
    }
    Some(pem)
}

/// rustls needs one crypto provider for the process; the gateway builds in ring alone.
fn install_crypto_provider() {
    // Err only when one is installed already (a second connect, a test), which is as good.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub(super) fn single(url: &str, settings: &RedisSettings) -> Result<super::Link, ConnectError> {
    let connection = &settings.connection;
    let bad_url = |source| ConnectError::Url {
        url: crate::config::redacted(url),
        source,
    };
    let info = url.into_connection_info().map_err(bad_url)?;
    let creds = credentials(connection, false)?;
    let mut redis_settings = info
        .redis_settings()
        .clone()
        .set_protocol(ProtocolVersion::RESP3);
    if let Some(user) = creds.username {
        redis_settings = redis_settings.set_username(user);
    }
    if let Some(password) = creds.password {
        redis_settings = redis_settings.set_password(password);
    }
    let info = info.set_redis_settings(redis_settings);
    let node: std::sync::Arc<str> = info.addr().to_string().into();
    let client = match &connection.tls {
        None => redis::Client::open(info).map_err(bad_url)?,
        Some(tls) => {
            install_crypto_provider();
            if let Some(name) = &tls.server_name {
                let config = server_config(settings);
                return named_server(info, name, certificates(tls), config, bad_url);
            }
            redis::Client::build_with_tls(info, certificates(tls)).map_err(bad_url)?
        }
    };
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(response_timeout(settings.deadline)))
        .set_number_of_retries(1)
        .set_max_delay(Duration::from_millis(200));
    let manager =
        ConnectionManager::new_lazy_with_config(client, config).map_err(ConnectError::Manager)?;
    Ok(super::Link::Single(manager, node))
}

/// One server whose certificate names `name` rather than the URL's host: the client is
/// told the server is `name` (what rustls checks the certificate against), and a resolver
/// of its own sends `name` to the URL's host.
fn named_server(
    info: redis::ConnectionInfo,
    name: &str,
    certificates: TlsCertificates,
    config: AsyncConnectionConfig,
    bad_url: impl Fn(redis::RedisError) -> ConnectError,
) -> Result<super::Link, ConnectError> {
    let ConnectionAddr::TcpTls { host, port, .. } = info.addr().clone() else {
        return Err(bad_url(redis::RedisError::from((
            redis::ErrorKind::InvalidClientConfig,
            "tls_server_name needs a rediss:// url with a host",
        ))));
    };
    let named = info.clone().set_addr(ConnectionAddr::TcpTls {
        host: name.to_string(),
        port,
        insecure: false,
        tls_params: None,
    });
    let client = redis::Client::build_with_tls(named, certificates).map_err(bad_url)?;
    let config = config.set_dns_resolver(ResolveTo { host, port });
    // The address shows its port already.
    let place = format!("{} as {name}", info.addr());
    Ok(super::Link::Located(Located::start(Locator::Fixed {
        client: Box::new(client),
        config,
        place,
    })))
}

pub(super) fn cluster(
    urls: &[String],
    settings: &RedisSettings,
) -> Result<ClusterClientBuilder, ConnectError> {
    let connection = &settings.connection;
    let creds = credentials(connection, false)?;
    let mut builder = ClusterClientBuilder::new(urls.to_vec())
        .use_protocol(ProtocolVersion::RESP3)
        .connection_timeout(CONNECT_TIMEOUT)
        // The whole call's bound alone, not each attempt's (`response_timeout`): the
        // cluster client sends a call again once an attempt times out, and a hit sent twice
        // would count twice.
        .overall_response_timeout(Some(response_timeout(settings.deadline)));
    if let Some(user) = creds.username {
        builder = builder.username(user);
    }
    if let Some(password) = creds.password {
        builder = builder.password(password);
    }
    if let Some(tls) = &connection.tls {
        install_crypto_provider();
        builder = builder.tls(TlsMode::Secure).certs(certificates(tls));
    }
    Ok(builder)
}

pub(super) fn sentinel(
    sentinels: &[String],
    master_name: &str,
    settings: &RedisSettings,
) -> Result<super::Link, ConnectError> {
    let connection = &settings.connection;
    let tls = connection.tls.as_ref();
    let addresses = sentinels
        .iter()
        .filter_map(|s| host_port(s))
        .map(|(host, port)| match tls {
            None => ConnectionAddr::Tcp(host, port),
            Some(_) => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: false,
                tls_params: None,
            },
        });
    let mut builder =
        SentinelClientBuilder::new(addresses, master_name, SentinelServerType::Master)
            .map_err(ConnectError::Sentinel)?
            .set_client_to_redis_protocol(ProtocolVersion::RESP3);
    let primary = credentials(connection, false)?;
    if let Some(user) = primary.username {
        builder = builder.set_client_to_redis_username(user);
    }
    if let Some(password) = primary.password {
        builder = builder.set_client_to_redis_password(password);
    }
    let own = credentials(connection, true)?;
    if let Some(user) = own.username {
        builder = builder.set_client_to_sentinel_username(user);
    }
    if let Some(password) = own.password {
        builder = builder.set_client_to_sentinel_password(password);
    }
    if let Some(tls) = tls {
        install_crypto_provider();
        builder = builder
            .set_client_to_redis_tls_mode(TlsMode::Secure)
            .set_client_to_redis_certificates(certificates(tls))
            .set_client_to_sentinel_tls_mode(TlsMode::Secure)
            .set_client_to_sentinel_certificates(certificates(tls));
    }
    let client = builder.build().map_err(ConnectError::Sentinel)?;
    let config = server_config(settings);
    Ok(super::Link::Located(Located::start(Locator::Sentinel {
        client: Box::new(client),
        config,
        master_name: master_name.to_string(),
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_crate_waits_longer_than_the_gateway_ever_does() {
        for ms in [1, 5, 499, 500, 1500, 60_000] {
            let deadline = Duration::from_millis(ms);
            let waited = response_timeout(deadline);
            assert!(waited > deadline * 2, "{ms}: {waited:?}");
            assert!(
                waited > deadline.max(MIN_RELEASE_DEADLINE),
                "{ms}: {waited:?}"
            );
        }
        assert_eq!(
            response_timeout(Duration::MAX),
            Duration::MAX,
            "no overflow"
        );
    }
}
