use super::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::dns::Name;
use std::future::{ready, Ready};
use std::net::{IpAddr, SocketAddr};
use std::task::{Context, Poll};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[test]
fn the_tls_cause_is_found_inside_the_io_errors_and_nothing_else_is_one() {
    let certificate = rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer);
    let said = certificate.to_string();
    // As hyper-rustls hands it on: tokio-rustls's io::Error inside another.
    let nested = std::io::Error::other(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        certificate,
    ));
    assert_eq!(tls_cause(&nested), Some(said));
    let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
    assert_eq!(tls_cause(&std::io::Error::other(refused)), None);
    assert_eq!(tls_cause(&std::io::Error::other("dns error")), None);
}

#[test]
fn a_tls_failure_is_kept_until_a_success_and_each_cause_replaces_the_last() {
    let text = "[server]\nlisten = \"127.0.0.1:1\"\nupstream = \"https://api.test\"\n[redis]\n";
    let config = crate::config::parse(text).unwrap();
    let tls = config.server.upstream.unwrap().tls.unwrap();
    let failures = TlsFailures::new(&tls);
    assert_eq!(failures.server, "api.test");
    failures.failed("unknown issuer");
    failures.failed("unknown issuer");
    assert_eq!(failures.last().as_deref(), Some("unknown issuer"));
    failures.failed("certificate required");
    assert_eq!(failures.last().as_deref(), Some("certificate required"));
    failures.succeeded();
    assert_eq!(failures.last(), None);
    assert!(!failures.failing.load(Relaxed));
}

/// A resolver the test points where it likes: every lookup answers the address it holds
/// then, or fails while it holds none; each lookup is counted.
#[derive(Clone, Default)]
struct Pointed {
    to: Arc<Mutex<Option<IpAddr>>>,
    lookups: Arc<Mutex<usize>>,
}

impl Pointed {
    fn point(&self, to: Option<IpAddr>) {
        *self.to.lock().unwrap() = to;
    }

    fn lookups(&self) -> usize {
        *self.lookups.lock().unwrap()
    }
}

impl tower_service::Service<Name> for Pointed {
    type Response = std::vec::IntoIter<SocketAddr>;
    type Error = std::io::Error;
    type Future = Ready<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, name: Name) -> Self::Future {
        *self.lookups.lock().unwrap() += 1;
        ready(match *self.to.lock().unwrap() {
            // The port is the URL's: the connector sets it.
            Some(ip) => Ok(vec![SocketAddr::new(ip, 0)].into_iter()),
            None => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("{} does not resolve", name.as_str()),
            )),
        })
    }
}

/// A server on `ip:port` that answers every request with `body` and closes the
/// connection (so that each request needs a new one).
async fn answering(ip: &str, port: u16, body: &'static str) -> u16 {
    let listener = TcpListener::bind((ip, port)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut stream, _)) = listener.accept().await else {
                return;
            };
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            let answer = format!(
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(answer.as_bytes()).await;
        }
    });
    port
}

#[tokio::test]
async fn the_name_is_looked_up_for_each_new_connection_so_a_dns_change_is_followed() {
    // Two servers on one port, at two loopback addresses: which one answers says where
    // the name pointed when the connection was made.
    let port = answering("127.0.0.1", 0, "first").await;
    answering("127.0.0.2", port, "second").await;
    let resolver = Pointed::default();
    let client = pooled::<_, Empty<Bytes>>(http_connector(resolver.clone()));
    let uri: hyper::Uri = format!("http://rl-up.test:{port}/").parse().unwrap();
    let get = || async {
        let request = Request::get(uri.clone()).body(Empty::new()).unwrap();
        match client.request(request).await {
            Ok(response) => {
                let body = response.into_body().collect().await.unwrap().to_bytes();
                Ok(String::from_utf8(body.to_vec()).unwrap())
            }
            Err(error) => Err(crate::logging::with_sources(&error)),
        }
    };

    // Not resolving yet: the request fails, nothing is remembered of it.
    let error = get().await.unwrap_err();
    assert!(error.contains("rl-up.test does not resolve"), "{error}");
    resolver.point(Some("127.0.0.1".parse().unwrap()));
    assert_eq!(get().await.unwrap(), "first");
    assert_eq!(get().await.unwrap(), "first");
    resolver.point(Some("127.0.0.2".parse().unwrap()));
    assert_eq!(get().await.unwrap(), "second", "the change is followed");
    assert_eq!(resolver.lookups(), 4, "one lookup for each new connection");
}
