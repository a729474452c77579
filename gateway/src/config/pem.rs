//! The PEM files a TLS setting names (`[redis] tls_*_file`, `[server] upstream_*_file`),
//! read when the file is loaded so that `--check-config` says whether they can be used.
//! Errors name the section, the setting and the path.

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use std::path::Path;

/// The bytes of `path`.
pub(super) fn read_pem(section: &str, setting: &str, path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| {
        format!(
            "[{section}] {setting} '{}': cannot read it: {e}",
            path.display()
        )
    })
}

/// The file's bytes when it holds at least one PEM certificate and nothing malformed.
pub(super) fn read_certificates(
    section: &str,
    setting: &str,
    path: &Path,
) -> Result<Vec<u8>, String> {
    let bytes = read_pem(section, setting, path)?;
    let mut count = 0;
    for certificate in CertificateDer::pem_slice_iter(&bytes) {
        certificate.map_err(|e| {
            format!(
                "[{section}] {setting} '{}': not PEM certificates ({e})",
                path.display()
            )
        })?;
        count += 1;
    }
    if count == 0 {
        return Err(format!(
            "[{section}] {setting} '{}': no PEM certificate in it",
            path.display()
        ));
    }
    Ok(bytes)
}

/// A client certificate chain and its key, each checked to hold what it should:
/// `settings` names them (`tls_cert_file`, `tls_key_file`).
pub(super) fn read_client(
    section: &str,
    settings: [&str; 2],
    cert: &Path,
    key: &Path,
) -> Result<(Vec<u8>, Vec<u8>), String> {
    let chain = read_certificates(section, settings[0], cert)?;
    let key_pem = read_pem(section, settings[1], key)?;
    if PrivateKeyDer::from_pem_slice(&key_pem).is_err() {
        return Err(format!(
            "[{section}] {} '{}': no PEM private key in it",
            settings[1],
            key.display()
        ));
    }
    Ok((chain, key_pem))
}
