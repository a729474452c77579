use super::*;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::connect::dns::Name;
use std::future::{ready, Ready};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicUsize;
use std::task::{Context, Poll};
use std::time::Duration;
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
    let destination: hyper::Uri = format!("http://rl-up.test:{port}/").parse().unwrap();
    let client = Pool::<_, Empty<Bytes>>::new(http_connector(resolver.clone()), destination);
    let get = || async {
        match client.send(get_request()).await {
            Ok(response) => {
                let body = response.into_body().collect().await.unwrap().to_bytes();
                Ok(String::from_utf8(body.to_vec()).unwrap())
            }
            Err(error) => Err(crate::logging::with_sources(&*error)),
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

/// A GET of `/` as the gateway sends it: origin form, with a `Host`.
fn get_request() -> Request<Empty<Bytes>> {
    Request::get("/")
        .header(hyper::header::HOST, "rl-up.test")
        .body(Empty::new())
        .unwrap()
}

/// A keep-alive server on loopback answering every request with `body`; it closes a
/// connection after each answer when `close_after` says so (without saying it will). The
/// connections it accepted are counted.
async fn keeping_alive(body: &'static str, close_after: bool) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Relaxed);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                    while let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                        head.drain(..end + 4);
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n{body}",
                            body.len()
                        );
                        if stream.write_all(answer.as_bytes()).await.is_err() || close_after {
                            return;
                        }
                    }
                }
            });
        }
    });
    (port, accepted)
}

fn pool_to(port: u16) -> Pool<HttpConnector, Empty<Bytes>> {
    let resolver = hyper_util::client::legacy::connect::dns::GaiResolver::new();
    let destination = format!("http://127.0.0.1:{port}/").parse().unwrap();
    Pool::new(http_connector(resolver), destination)
}

async fn body_of(client: &Pool<HttpConnector, Empty<Bytes>>) -> String {
    let response = client.send(get_request()).await.unwrap();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    String::from_utf8(body.to_vec()).unwrap()
}

#[tokio::test]
async fn a_connection_read_to_its_end_is_reused() {
    let (port, accepted) = keeping_alive("hello", false).await;
    let client = pool_to(port);
    for _ in 0..5 {
        assert_eq!(body_of(&client).await, "hello");
    }
    assert_eq!(
        accepted.load(Relaxed),
        1,
        "one connection for five requests"
    );
    assert_eq!(client.idle_count(), 1);
}

#[tokio::test]
async fn an_empty_body_frees_its_connection_at_once() {
    let (port, accepted) = keeping_alive("", false).await;
    let client = pool_to(port);
    let first = client.send(get_request()).await.unwrap();
    assert!(first.body().is_end_stream());
    // Still held by the caller, yet already back: the next request does not need another.
    let second = client.send(get_request()).await.unwrap();
    assert_eq!(second.status(), 200);
    drop((first, second));
    assert_eq!(accepted.load(Relaxed), 1);
}

#[tokio::test]
async fn a_body_dropped_before_its_end_takes_its_connection_with_it() {
    let (port, accepted) = keeping_alive("a body nobody reads", false).await;
    let client = pool_to(port);
    let unread = client.send(get_request()).await.unwrap();
    assert!(!unread.body().is_end_stream());
    drop(unread);
    assert_eq!(
        client.idle_count(),
        0,
        "its rest could be read as the next answer"
    );
    assert_eq!(body_of(&client).await, "a body nobody reads");
    assert_eq!(accepted.load(Relaxed), 2);
}

#[tokio::test]
async fn a_connection_the_upstream_closed_while_idle_is_not_used_again() {
    let (port, accepted) = keeping_alive("again", true).await;
    let client = pool_to(port);
    for round in 1..=3 {
        assert_eq!(body_of(&client).await, "again");
        // hyper notices the close when its connection's task next runs.
        let mut waits = 0;
        while client.idle_count() > 0 && waits < 500 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            waits += 1;
        }
        assert_eq!(
            client.idle_count(),
            0,
            "the closed connection left the list"
        );
        assert_eq!(accepted.load(Relaxed), round, "a new connection each time");
    }
}
