//! How each kind of connection is made from `[redis]`: the client of one server, of a
//! Cluster, or of the sentinels, with TLS (the redis crate's rustls) and the credentials
//! read from where the settings say. Nothing here connects: the clients connect lazily.

use super::located::{Located, Locator, ResolveTo};
use super::{ConnectError, CONNECT_TIMEOUT};
use crate::config::{host_port, RedisConnection, RedisSettings, TlsSettings};
use base64::Engine;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClientBuilder;
use redis::sentinel::{SentinelClientBuilder, SentinelServerType};
use redis::{
    AsyncConnectionConfig, ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, ProtocolVersion,
    TlsCertificates, TlsMode,
};
use std::time::Duration;

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
                return named_server(info, name, certificates(tls), bad_url);
            }
            redis::Client::build_with_tls(info, certificates(tls)).map_err(bad_url)?
        }
    };
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
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
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_dns_resolver(ResolveTo { host, port });
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
        .connection_timeout(CONNECT_TIMEOUT);
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
    let config = AsyncConnectionConfig::new().set_connection_timeout(Some(CONNECT_TIMEOUT));
    Ok(super::Link::Located(Located::start(Locator::Sentinel {
        client: Box::new(client),
        config,
        master_name: master_name.to_string(),
    })))
}
