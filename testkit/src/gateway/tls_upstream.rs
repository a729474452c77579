//! An HTTPS upstream for the gateway's tests: rustls (blocking, a thread per connection)
//! serving one fixed answer with `pki`'s certificates, and telling what it saw of each
//! request: the SNI the client sent, its `Host` header, its request line. It may require
//! a client certificate signed by `ca.pem`; a client without one is refused in the
//! handshake (an alert), as a server that requires one does.

use super::*;
use crate::tls::Pki;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig as TlsConfig, ServerConnection, StreamOwned};
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// One request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Seen {
    /// The name the client sent in SNI (none for an IP address).
    pub sni: Option<String>,
    /// The `Host` header.
    pub host: Option<String>,
    /// `GET /path HTTP/1.1`.
    pub line: String,
}

/// The server, stopped on drop.
pub struct TlsUpstream {
    pub port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Arc<AtomicBool>,
}

impl TlsUpstream {
    /// Serves TLS on a free loopback port with `pki`'s `cert` (`server`, for `localhost`
    /// and `127.0.0.1`, or `named`, for `redis.test` alone), requiring a client certificate
    /// of `ca.pem` when `client_certs`.
    pub fn start(pki: &Pki, cert: &str, client_certs: bool) -> TlsUpstream {
        let config = Arc::new(server_config(pki, cert, client_certs));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the TLS upstream");
        let port = listener.local_addr().expect("its address").port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (seen_by, stopped) = (seen.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let (config, seen) = (config.clone(), seen_by.clone());
                std::thread::spawn(move || serve(stream, config, seen));
            }
        });
        TlsUpstream { port, seen, stop }
    }

    /// The requests answered so far.
    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for TlsUpstream {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes the accepting thread, which then sees `stop`.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn server_config(pki: &Pki, cert: &str, client_certs: bool) -> TlsConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(pki.path(&format!("{cert}.pem")))
            .expect("the certificate file")
            .collect::<Result<_, _>>()
            .expect("PEM certificates");
    let key = PrivateKeyDer::from_pem_file(pki.path(&format!("{cert}.key"))).expect("the key");
    let builder = TlsConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("TLS versions");
    let builder = match client_certs {
        true => {
            let mut roots = RootCertStore::empty();
            for ca in CertificateDer::pem_file_iter(pki.path("ca.pem")).expect("ca.pem") {
                roots.add(ca.expect("a CA")).expect("a trust anchor");
            }
            let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
                .build()
                .expect("a client verifier");
            builder.with_client_cert_verifier(verifier)
        }
        false => builder.with_no_client_auth(),
    };
    builder
        .with_single_cert(chain, key)
        .expect("the certificate and its key")
}

/// Answers the requests of one connection until it closes or fails (a refused handshake
/// ends it at the first read, the alert sent).
fn serve(stream: TcpStream, config: Arc<TlsConfig>, seen: Arc<Mutex<Vec<Seen>>>) {
    let Ok(connection) = ServerConnection::new(config) else {
        return;
    };
    let mut reader = BufReader::new(StreamOwned::new(connection, stream));
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut host = None;
        loop {
            let mut header = String::new();
            match reader.read_line(&mut header) {
                Ok(0) | Err(_) => return,
                Ok(_) if header.trim().is_empty() => break,
                Ok(_) => {}
            }
            if let Some((name, value)) = header.split_once(':') {
                if name.eq_ignore_ascii_case("host") {
                    host = Some(value.trim().to_owned());
                }
            }
        }
        let stream = reader.get_mut();
        let sni = stream.conn.server_name().map(str::to_owned);
        let body = format!("tls upstream\nsni: {sni:?}\nhost: {host:?}\n");
        seen.lock().unwrap_or_else(|e| e.into_inner()).push(Seen {
            sni,
            host,
            line: line.trim_end().to_owned(),
        });
        let answer = format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        if stream
            .write_all(answer.as_bytes())
            .and_then(|()| stream.flush())
            .is_err()
        {
            return;
        }
    }
}
