//! `[redis]`: where Redis is (one server, a Cluster, or a primary the sentinels name) and
//! how to reach it (TLS, an ACL user and where its password is kept), checked.
//!
//! Everything that can be judged from the file is judged here, at load; the TLS files are
//! read by [`RedisSettings::read_files`](super::RedisSettings::read_files) when the file is
//! loaded from disk (`--check-config` included). Passwords are read only at start, from the
//! environment or a file the gateway is given, and never appear in a message.

use super::pem::{read_certificates, read_client};
use super::schema::RedisSection;
use redis::IntoConnectionInfo;
use rustls::pki_types::ServerName;
use std::fmt;
use std::path::{Path, PathBuf};

/// Which Redis the gateway talks to: `[redis] url`, `cluster`, or `sentinels`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisTarget {
    /// One server, by URL (`redis://127.0.0.1:6379` when nothing is set).
    Single(String),
    /// A cluster, by the URLs of its seed nodes.
    Cluster(Vec<String>),
    /// The primary that the sentinels name, followed across failovers.
    Sentinel {
        /// The sentinels' `host:port`, asked in this order.
        sentinels: Vec<String>,
        /// The name they monitor the primary under.
        master_name: String,
    },
}

/// How the gateway reaches the servers beyond their address: TLS and credentials.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RedisConnection {
    /// Set when the connection is TLS (`rediss://`, or `tls = true` with sentinels).
    pub tls: Option<TlsSettings>,
    /// `[redis] username`: the ACL user, when the URL names none.
    pub username: Option<String>,
    /// Where the password is kept, when not in the URL.
    pub password: Option<SecretSource>,
    /// The ACL user the sentinels ask for.
    pub sentinel_username: Option<String>,
    /// Where the sentinels' password is kept.
    pub sentinel_password: Option<SecretSource>,
}

/// `[redis] tls_*`: the files as configured and, once read, what they hold.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TlsSettings {
    /// `tls_ca_file`: the CAs to trust instead of the system's.
    pub ca_file: Option<PathBuf>,
    /// `tls_cert_file` and `tls_key_file`: the client certificate and its key.
    pub client_files: Option<(PathBuf, PathBuf)>,
    /// `tls_server_name`: what the server's certificate must name, when not the URL's host.
    pub server_name: Option<String>,
    /// The files' contents, read at load ([`super::load`]); empty for a parsed text.
    pub material: TlsMaterial,
}

/// The PEM contents of the TLS files. Kept out of `Debug`: the key is a secret.
#[derive(Clone, PartialEq, Default)]
pub struct TlsMaterial {
    /// The CA bundle.
    pub ca: Option<Vec<u8>>,
    /// The client certificate chain and its private key.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

impl fmt::Debug for TlsMaterial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsMaterial")
            .field("ca", &self.ca.as_ref().map(|_| "<read>"))
            .field("client", &self.client.as_ref().map(|_| "<read>"))
            .finish()
    }
}

/// Where a password is kept: an environment variable or a file. The value itself is read
/// only when the gateway connects ([`SecretSource::read`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretSource {
    /// The setting it came from (`password_env`, `sentinel_password_file`, ...), for errors.
    pub setting: &'static str,
    /// The variable or the file.
    pub place: SecretPlace,
}

/// The variable or the file a password is read from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretPlace {
    /// An environment variable, by name.
    Env(String),
    /// A file; its contents less a trailing newline.
    File(PathBuf),
}

/// A password that could not be read. Its message names the setting and the variable or
/// file, never what was (or was not) in it.
#[derive(Debug)]
pub struct SecretError {
    setting: &'static str,
    place: SecretPlace,
    why: SecretMissing,
}

#[derive(Debug)]
enum SecretMissing {
    Unset,
    Empty,
    Unreadable(std::io::ErrorKind),
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let setting = self.setting;
        match (&self.place, &self.why) {
            (SecretPlace::Env(name), SecretMissing::Unset) => write!(
                f,
                "[redis] {setting}: the environment variable {name} is not set (or not UTF-8)"
            ),
            (SecretPlace::Env(name), _) => {
                write!(
                    f,
                    "[redis] {setting}: the environment variable {name} is empty"
                )
            }
            (SecretPlace::File(path), SecretMissing::Unreadable(kind)) => write!(
                f,
                "[redis] {setting} '{}': cannot read it ({kind})",
                path.display()
            ),
            (SecretPlace::File(path), _) => {
                write!(
                    f,
                    "[redis] {setting} '{}': the file is empty",
                    path.display()
                )
            }
        }
    }
}

impl std::error::Error for SecretError {}

impl SecretSource {
    /// The password: the variable's value, or the file's contents less one trailing
    /// newline (`\n` or `\r\n`, as `echo` and editors leave). Empty is refused: no server
    /// takes an empty password, and an empty secret is a mount or a variable gone wrong.
    pub fn read(&self) -> Result<String, SecretError> {
        let fail = |why| SecretError {
            setting: self.setting,
            place: self.place.clone(),
            why,
        };
        let value = match &self.place {
            SecretPlace::Env(name) => {
                std::env::var(name).map_err(|_| fail(SecretMissing::Unset))?
            }
            SecretPlace::File(path) => {
                let mut text = std::fs::read_to_string(path)
                    .map_err(|e| fail(SecretMissing::Unreadable(e.kind())))?;
                if text.ends_with('\n') {
                    text.pop();
                    if text.ends_with('\r') {
                        text.pop();
                    }
                }
                text
            }
        };
        if value.is_empty() {
            return Err(fail(SecretMissing::Empty));
        }
        Ok(value)
    }
}

/// `url`, `cluster` or `sentinels` + `master_name`: exactly one of them, or none (the
/// default server).
pub(super) fn redis_target(section: &mut RedisSection) -> Result<RedisTarget, String> {
    let (url, cluster, sentinels) = (
        section.url.take(),
        section.cluster.take(),
        section.sentinels.take(),
    );
    let master_name = section.master_name.take();
    let target = match (url, cluster, sentinels) {
        (Some(_), Some(_), _) => return Err("[redis] has both url and cluster: choose one".into()),
        (Some(_), _, Some(_)) | (_, Some(_), Some(_)) => {
            return Err(
                "[redis] sentinels is a third way to find Redis, beside url and cluster: \
                 choose one"
                    .into(),
            )
        }
        (Some(url), None, None) => RedisTarget::Single(url),
        (None, Some(urls), None) if urls.is_empty() => {
            return Err("[redis] cluster needs at least one node URL".into())
        }
        (None, Some(urls), None) => RedisTarget::Cluster(urls),
        (None, None, Some(sentinels)) => sentinel_target(sentinels, master_name.as_deref())?,
        (None, None, None) => RedisTarget::Single("redis://127.0.0.1:6379".into()),
    };
    if master_name.is_some() && !matches!(target, RedisTarget::Sentinel { .. }) {
        return Err("[redis] master_name goes with sentinels".into());
    }
    Ok(target)
}

fn sentinel_target(
    sentinels: Vec<String>,
    master_name: Option<&str>,
) -> Result<RedisTarget, String> {
    if sentinels.is_empty() {
        return Err("[redis] sentinels needs at least one host:port".into());
    }
    for sentinel in &sentinels {
        host_port(sentinel).ok_or_else(|| {
            format!("[redis] sentinels: '{sentinel}' is not a host:port like 10.0.0.5:26379")
        })?;
    }
    match master_name {
        None => Err(
            "[redis] sentinels needs master_name: the name they monitor the primary \
                     under"
                .into(),
        ),
        Some("") => Err("[redis] master_name is empty".into()),
        Some(name) => Ok(RedisTarget::Sentinel {
            sentinels,
            master_name: name.into(),
        }),
    }
}

/// `host:port` (or `[v6]:port`) split, or `None` when it is not one.
pub(crate) fn host_port(text: &str) -> Option<(String, u16)> {
    let (host, port) = text.rsplit_once(':')?;
    let port = port.parse::<u16>().ok().filter(|p| *p != 0)?;
    let host = match host.strip_prefix('[') {
        Some(v6) => v6
            .strip_suffix(']')?
            .parse::<std::net::Ipv6Addr>()
            .ok()?
            .to_string(),
        None if host.is_empty() || host.contains([':', '/', '@']) => return None,
        None => host.to_string(),
    };
    Some((host, port))
}

/// The URLs' user and password, checked: whether any names a password, and whether any
/// names a user. Cluster nodes must agree (the cluster client takes one pair).
fn url_credentials(target: &RedisTarget) -> Result<(bool, bool), String> {
    let urls = match target {
        RedisTarget::Single(url) => std::slice::from_ref(url),
        RedisTarget::Cluster(urls) => urls.as_slice(),
        RedisTarget::Sentinel { .. } => return Ok((false, false)),
    };
    let (mut password, mut user) = (false, false);
    for url in urls {
        let info = url
            .as_str()
            .into_connection_info()
            .map_err(|e| format!("[redis] '{}': {e}", redacted(url)))?;
        password |= info.redis_settings().password().is_some();
        user |= info.redis_settings().username().is_some();
    }
    Ok((password, user))
}

/// Whether the URLs ask for TLS (`rediss://`); a cluster's must all agree.
fn urls_want_tls(target: &RedisTarget) -> Result<Option<bool>, String> {
    let urls = match target {
        RedisTarget::Single(url) => std::slice::from_ref(url),
        RedisTarget::Cluster(urls) => urls.as_slice(),
        RedisTarget::Sentinel { .. } => return Ok(None),
    };
    let tls: Vec<bool> = urls.iter().map(|u| u.starts_with("rediss://")).collect();
    if tls.iter().any(|t| *t) && !tls.iter().all(|t| *t) {
        return Err(
            "[redis] cluster mixes rediss:// and redis:// nodes: a cluster is TLS throughout \
             or not at all"
                .into(),
        );
    }
    Ok(Some(tls.first().copied().unwrap_or(false)))
}

/// TLS, the user and the password sources, checked against `target` and each other.
pub(super) fn redis_connection(
    section: &mut RedisSection,
    target: &RedisTarget,
) -> Result<RedisConnection, String> {
    let tls = tls_settings(section, target)?;
    let (url_password, url_user) = url_credentials(target)?;
    let password = secret_source(
        ("password_env", section.password_env.take()),
        ("password_file", section.password_file.take()),
    )?;
    if url_password && password.is_some() {
        return Err(
            "[redis] the url has a password and password_env or password_file gives another: \
             keep one (out of the url is better: the file then holds no secret)"
                .into(),
        );
    }
    let username = non_empty("username", section.username.take())?;
    if url_user && username.is_some() {
        return Err("[redis] the url names a user and so does username: keep one".into());
    }
    let sentinel_username = non_empty("sentinel_username", section.sentinel_username.take())?;
    let sentinel_password = secret_source(
        (
            "sentinel_password_env",
            section.sentinel_password_env.take(),
        ),
        (
            "sentinel_password_file",
            section.sentinel_password_file.take(),
        ),
    )?;
    if !matches!(target, RedisTarget::Sentinel { .. })
        && (sentinel_username.is_some() || sentinel_password.is_some())
    {
        return Err("[redis] sentinel_username and sentinel_password_* go with sentinels".into());
    }
    Ok(RedisConnection {
        tls,
        username,
        password,
        sentinel_username,
        sentinel_password,
    })
}

fn non_empty(setting: &str, value: Option<String>) -> Result<Option<String>, String> {
    match value {
        Some(v) if v.is_empty() => Err(format!("[redis] {setting} is empty")),
        other => Ok(other),
    }
}

/// At most one of an `_env` and a `_file` setting.
fn secret_source(
    env: (&'static str, Option<String>),
    file: (&'static str, Option<String>),
) -> Result<Option<SecretSource>, String> {
    match (env.1, file.1) {
        (Some(_), Some(_)) => Err(format!(
            "[redis] {} and {} both give the password: keep one",
            env.0, file.0
        )),
        (Some(name), None) if name.is_empty() || name.contains('=') => Err(format!(
            "[redis] {} must name an environment variable",
            env.0
        )),
        (Some(name), None) => Ok(Some(SecretSource {
            setting: env.0,
            place: SecretPlace::Env(name),
        })),
        (None, Some(path)) if path.is_empty() => Err(format!("[redis] {} is empty", file.0)),
        (None, Some(path)) => Ok(Some(SecretSource {
            setting: file.0,
            place: SecretPlace::File(path.into()),
        })),
        (None, None) => Ok(None),
    }
}

fn tls_settings(
    section: &mut RedisSection,
    target: &RedisTarget,
) -> Result<Option<TlsSettings>, String> {
    let wanted =
        match (urls_want_tls(target)?, section.tls) {
            (Some(_), Some(_)) => return Err(
                "[redis] tls goes with sentinels; a url or cluster asks for TLS by its scheme, \
                 rediss://"
                    .into(),
            ),
            (Some(by_url), None) => by_url,
            (None, tls) => tls.unwrap_or(false),
        };
    let ca_file = section.tls_ca_file.take();
    let client = match (section.tls_cert_file.take(), section.tls_key_file.take()) {
        (Some(cert), Some(key)) => Some((PathBuf::from(cert), PathBuf::from(key))),
        (Some(_), None) => {
            return Err("[redis] tls_cert_file needs tls_key_file (the certificate's key)".into())
        }
        (None, Some(_)) => {
            return Err("[redis] tls_key_file needs tls_cert_file (the key's certificate)".into())
        }
        (None, None) => None,
    };
    let server_name = section.tls_server_name.take();
    if !wanted {
        if ca_file.is_some() || client.is_some() || server_name.is_some() {
            return Err(
                "[redis] tls_* settings need TLS: a rediss:// url or cluster, or tls = true \
                 with sentinels"
                    .into(),
            );
        }
        return Ok(None);
    }
    if let Some(name) = &server_name {
        server_name_allowed(name, target)?;
    }
    Ok(Some(TlsSettings {
        ca_file: ca_file.map(PathBuf::from),
        client_files: client,
        server_name,
        material: TlsMaterial::default(),
    }))
}

/// `tls_server_name` is for one server: a Cluster's nodes and a Sentinel's primary are
/// reached at the addresses they announce, which their certificates must name.
fn server_name_allowed(name: &str, target: &RedisTarget) -> Result<(), String> {
    if !matches!(target, RedisTarget::Single(_)) {
        return Err(
            "[redis] tls_server_name is for a single server (url): the nodes of a cluster \
             and the primary the sentinels name are reached at the addresses they announce, \
             which their certificates must name"
                .into(),
        );
    }
    if ServerName::try_from(name).is_err() {
        return Err(format!(
            "[redis] tls_server_name '{name}' is not a host name or an IP address"
        ));
    }
    Ok(())
}

/// `url` with any password in it replaced by `***`, for messages.
pub(crate) fn redacted(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split_once(':').map_or(userinfo, |(user, _)| user);
            let hidden = if userinfo.contains(':') { ":***" } else { "" };
            format!("{scheme}://{user}{hidden}@{host}{tail}")
        }
        None => url.to_string(),
    }
}

impl TlsSettings {
    /// Makes relative paths relative to `base` (the configuration file's directory), then
    /// reads and checks each file: readable, and PEM holding what the setting says.
    pub(super) fn read_files(&mut self, base: Option<&Path>) -> Result<(), String> {
        let resolve = |path: &mut PathBuf| {
            if let (true, Some(dir)) = (path.is_relative(), base) {
                *path = dir.join(&*path);
            }
        };
        if let Some(path) = &mut self.ca_file {
            resolve(path);
            self.material.ca = Some(read_certificates("redis", "tls_ca_file", path)?);
        }
        if let Some((cert, key)) = &mut self.client_files {
            resolve(cert);
            resolve(key);
            self.material.client = Some(read_client(
                "redis",
                ["tls_cert_file", "tls_key_file"],
                cert,
                key,
            )?);
        }
        Ok(())
    }
}

impl RedisConnection {
    /// Makes a relative `password_file` relative to `base` and reads the TLS files.
    pub(super) fn read_files(&mut self, base: Option<&Path>) -> Result<(), String> {
        for source in [&mut self.password, &mut self.sentinel_password]
            .into_iter()
            .flatten()
        {
            if let (SecretPlace::File(path), Some(dir)) = (&mut source.place, base) {
                if path.is_relative() {
                    *path = dir.join(&*path);
                }
            }
        }
        match &mut self.tls {
            Some(tls) => tls.read_files(base),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
#[path = "redis_connection_tests.rs"]
mod tests;
