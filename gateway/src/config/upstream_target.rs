//! `[server] upstream` and its TLS settings (`upstream_ca_file`, `upstream_cert_file`,
//! `upstream_key_file`, `upstream_server_name`), checked.
//!
//! The URL is judged at parse; the files are read, and the rustls configuration they make
//! is built once to be judged, when the file is loaded from disk ([`super::load`],
//! `--check-config` included), so that a bad file stops the start rather than failing
//! every request. The system's roots, used when no CA file is given, are read at start
//! ([`UpstreamTls::client_config`]), not at load.
//!
//! There is no setting to skip the verification of the upstream's certificate: a gateway
//! that forwards its clients' requests and credentials over a connection anyone on the
//! path can take over is not one to offer; a private CA is what `upstream_ca_file` is for.

use super::pem::{read_certificates, read_client};
use super::schema::ServerSection;
use super::TlsMaterial;
use rustls::client::ClientConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, DnsName, PrivateKeyDer, ServerName};
use rustls::RootCertStore;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// `[server] upstream`, checked: where allowed requests go, and how.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UpstreamTarget {
    /// `scheme://authority` of the upstream; a host name in it is resolved for each new
    /// connection (hyper-util's `GaiResolver`), so that a DNS change is followed.
    pub(crate) base: hyper::Uri,
    /// Set for `https://`.
    pub(crate) tls: Option<UpstreamTls>,
}

/// The TLS of an `https://` upstream.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct UpstreamTls {
    /// `upstream_ca_file`: the CAs to trust instead of the system's.
    pub(crate) ca_file: Option<PathBuf>,
    /// `upstream_cert_file` and `upstream_key_file`: the client certificate and its key.
    pub(crate) client_files: Option<(PathBuf, PathBuf)>,
    /// What the certificate must name and SNI says: `upstream_server_name`, else the URL's
    /// host.
    pub(crate) server_name: ServerName<'static>,
    /// The files' contents, read at load ([`super::load`]); empty for a parsed text.
    pub(crate) material: TlsMaterial,
}

/// Where the roots that verify the upstream's certificate came from (for the start's log).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Roots {
    /// `upstream_ca_file`.
    CaFile,
    /// The system's store (rustls-native-certs).
    System,
    /// Mozilla's (webpki-root-certs), the system having none (a distroless image).
    Mozilla,
}

/// `upstream` and its TLS settings from `section`; `None` without an upstream.
pub(super) fn upstream_target(
    section: &mut ServerSection,
) -> Result<Option<UpstreamTarget>, String> {
    let tls_settings = [
        ("upstream_ca_file", section.upstream_ca_file.is_some()),
        ("upstream_cert_file", section.upstream_cert_file.is_some()),
        ("upstream_key_file", section.upstream_key_file.is_some()),
        (
            "upstream_server_name",
            section.upstream_server_name.is_some(),
        ),
    ];
    let Some(url) = section.upstream.take() else {
        if let Some((name, _)) = tls_settings.iter().find(|(_, set)| *set) {
            return Err(format!("[server] {name} needs an https:// upstream"));
        }
        return Ok(None);
    };
    let (base, host) = upstream_uri(&url)?;
    if base.scheme_str() == Some("http") {
        if let Some((name, _)) = tls_settings.iter().find(|(_, set)| *set) {
            return Err(format!(
                "[server] {name} needs an https:// upstream; '{url}' is plain HTTP"
            ));
        }
        return Ok(Some(UpstreamTarget { base, tls: None }));
    }
    let client_files = match (
        section.upstream_cert_file.take(),
        section.upstream_key_file.take(),
    ) {
        (Some(cert), Some(key)) => Some((PathBuf::from(cert), PathBuf::from(key))),
        (Some(_), None) => {
            return Err(
                "[server] upstream_cert_file needs upstream_key_file (the certificate's key)"
                    .into(),
            )
        }
        (None, Some(_)) => {
            return Err(
                "[server] upstream_key_file needs upstream_cert_file (the key's certificate)"
                    .into(),
            )
        }
        (None, None) => None,
    };
    let server_name = match section.upstream_server_name.take() {
        Some(name) => ServerName::try_from(name.clone()).map_err(|_| {
            format!("[server] upstream_server_name '{name}' is not a host name or an IP address")
        })?,
        None => ServerName::try_from(host)
            .map_err(|_| format!("[server] upstream '{url}': its host is not a server name"))?,
    };
    let tls = UpstreamTls {
        ca_file: section.upstream_ca_file.take().map(PathBuf::from),
        client_files,
        server_name,
        material: TlsMaterial::default(),
    };
    Ok(Some(UpstreamTarget {
        base,
        tls: Some(tls),
    }))
}

/// The URL checked (`http://` or `https://`, a host that is an address or a DNS name, no
/// user, path or query), and its host without the brackets of an IPv6 address.
fn upstream_uri(url: &str) -> Result<(hyper::Uri, String), String> {
    let bad = || {
        format!(
            "[server] upstream '{url}' must be like http://127.0.0.1:9000 or \
             https://api.internal:8443"
        )
    };
    let uri: hyper::Uri = url.parse().map_err(|_| bad())?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(bad());
    }
    let authority = uri.authority().ok_or_else(bad)?;
    if authority.as_str().contains('@') {
        return Err(format!(
            "[server] upstream '{url}' must not carry a user or password"
        ));
    }
    if authority.port_u16() == Some(0) {
        return Err(format!("[server] upstream '{url}': port 0 is not a port"));
    }
    let host = authority.host();
    let bare = match host.strip_prefix('[') {
        // The URI parser accepts only an IPv6 address between brackets.
        Some(v6) => v6.strip_suffix(']').ok_or_else(bad)?,
        None if host.parse::<std::net::Ipv4Addr>().is_ok() => host,
        // All digits and dots but no IPv4 address (`127.0.0.300`): a typo, not a name.
        None if host.bytes().all(|b| b.is_ascii_digit() || b == b'.') => return Err(bad()),
        None => {
            DnsName::try_from(host).map_err(|_| bad())?;
            host
        }
    };
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(format!(
            "[server] upstream '{url}' must have no path or query"
        ));
    }
    Ok((uri.clone(), bare.to_owned()))
}

impl UpstreamTarget {
    /// Reads the TLS files, relative paths taken from `base` (the configuration file's
    /// directory), and builds the TLS configuration once to judge them.
    pub(super) fn read_files(&mut self, base: Option<&Path>) -> Result<(), String> {
        match &mut self.tls {
            Some(tls) => tls.read_files(base),
            None => Ok(()),
        }
    }
}

impl UpstreamTls {
    fn read_files(&mut self, base: Option<&Path>) -> Result<(), String> {
        let resolve = |path: &mut PathBuf| {
            if let (true, Some(dir)) = (path.is_relative(), base) {
                *path = dir.join(&*path);
            }
        };
        if let Some(path) = &mut self.ca_file {
            resolve(path);
            self.material.ca = Some(read_certificates("server", "upstream_ca_file", path)?);
        }
        if let Some((cert, key)) = &mut self.client_files {
            resolve(cert);
            resolve(key);
            self.material.client = Some(read_client(
                "server",
                ["upstream_cert_file", "upstream_key_file"],
                cert,
                key,
            )?);
        }
        // Without a CA file the roots are the system's, read at start: an empty store
        // here is enough to judge the client certificate and its key.
        let roots = self.ca_roots()?.unwrap_or_else(RootCertStore::empty);
        self.build(roots).map(|_| ())
    }

    /// The rustls configuration the upstream is reached with, and where its roots came
    /// from: `upstream_ca_file`, else the system's, else (a system without any) Mozilla's.
    pub(crate) fn client_config(&self) -> Result<(ClientConfig, Roots), String> {
        let (roots, from) = match self.ca_roots()? {
            Some(roots) => (roots, Roots::CaFile),
            None => system_roots(),
        };
        Ok((self.build(roots)?, from))
    }

    /// The CAs of `upstream_ca_file`; `None` without one. A CA file set but not read (a
    /// text parsed without its files) is an error rather than a silent fall back to the
    /// system's roots, which would trust other servers than the file says.
    fn ca_roots(&self) -> Result<Option<RootCertStore>, String> {
        let (Some(path), ca) = (&self.ca_file, &self.material.ca) else {
            return Ok(None);
        };
        let not_read = || format!("[server] upstream_ca_file '{}': not read", path.display());
        let pem = ca.as_ref().ok_or_else(not_read)?;
        let mut roots = RootCertStore::empty();
        for certificate in CertificateDer::pem_slice_iter(pem) {
            let certificate = certificate.map_err(|e| format!("{}: {e}", not_read()))?;
            roots.add(certificate).map_err(|e| {
                format!(
                    "[server] upstream_ca_file '{}': a certificate rustls cannot trust: {e}",
                    path.display()
                )
            })?;
        }
        Ok(Some(roots))
    }

    /// TLS 1.2 and 1.3 with ring (the gateway's one crypto provider), `roots` verifying the
    /// server, the client certificate if any, and ALPN `http/1.1`: the upstream is spoken
    /// to in HTTP/1.1, as a plain one is.
    fn build(&self, roots: RootCertStore) -> Result<ClientConfig, String> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("[server] upstream TLS: {e}"))?
            .with_root_certificates(roots);
        let mut config = match (&self.client_files, &self.material.client) {
            (Some((cert, key)), Some((chain_pem, key_pem))) => {
                let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(chain_pem)
                    .collect::<Result<_, _>>()
                    .map_err(|e| format!("[server] upstream_cert_file: {e}"))?;
                let key_der = PrivateKeyDer::from_pem_slice(key_pem)
                    .map_err(|e| format!("[server] upstream_key_file: {e}"))?;
                builder.with_client_auth_cert(chain, key_der).map_err(|e| {
                    format!(
                        "[server] upstream_cert_file '{}' with upstream_key_file '{}': {e}",
                        cert.display(),
                        key.display()
                    )
                })?
            }
            (Some((cert, _)), None) => {
                return Err(format!(
                    "[server] upstream_cert_file '{}': not read",
                    cert.display()
                ))
            }
            (None, _) => builder.with_no_client_auth(),
        };
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(config)
    }
}

/// The system's roots, or Mozilla's where the system has none (a distroless or scratch
/// image), as for the Redis TLS.
fn system_roots() -> (RootCertStore, Roots) {
    let mut roots = RootCertStore::empty();
    let (added, _) =
        roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    if added > 0 {
        return (roots, Roots::System);
    }
    roots.add_parsable_certificates(webpki_root_certs::TLS_SERVER_ROOT_CERTS.iter().cloned());
    (roots, Roots::Mozilla)
}

#[cfg(test)]
#[path = "upstream_target_tests.rs"]
mod tests;
