//! `rl-gateway healthcheck`: asks a running gateway's admin listener whether it is alive
//! (`/healthz`) or ready (`/readyz`), so that a container image needs no shell and no HTTP
//! client for its `HEALTHCHECK`. One plain HTTP/1.1 GET over hyper's client, under one
//! timeout for the whole exchange; the answer is 200 or it is a failure, with the reason
//! printed (the status and the start of the body, or why nothing answered).

use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper::header::{CONNECTION, HOST};
use hyper::{Request, StatusCode, Uri};
use hyper_util::rt::TokioIo;
use std::fmt;
use std::time::Duration;
use tokio::net::TcpStream;

/// Where the probe asks when no `--url` is given: the default `admin_listen`'s port.
pub const DEFAULT_URL: &str = "http://127.0.0.1:9090/healthz";

/// The path `--ready` asks instead of `/healthz`.
pub const READY_PATH: &str = "/readyz";

/// How much of an answer's body is read, to say why it was not 200 (a `/readyz` reason is
/// one line; anything longer is not the gateway's admin listener anyway).
const BODY_LIMIT: usize = 4096;

/// How much of that body is printed.
const SHOWN_BODY: usize = 300;

/// A probe's target, checked when the command line is read.
#[derive(Clone, Debug)]
pub struct Target {
    uri: Uri,
    host: String,
    port: u16,
}

impl Target {
    /// Checks `url`: `http://HOST[:PORT]/PATH` (port 80 when omitted). HTTPS is refused:
    /// the admin listener serves plain HTTP only.
    pub fn parse(url: &str) -> Result<Target, String> {
        let uri: Uri = url
            .parse()
            .map_err(|e| format!("{url:?} is not a URL ({e}); write http://HOST:PORT/PATH"))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(format!(
                    "{url:?}: the scheme is {other}, but the admin listener serves plain \
                     http only; write http://HOST:PORT/PATH"
                ))
            }
            None => {
                return Err(format!(
                    "{url:?} has no scheme; write http://HOST:PORT/PATH"
                ))
            }
        }
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| format!("{url:?} has no host; write http://HOST:PORT/PATH"))?;
        // An IPv6 literal is bracketed in a URL but not in an address to connect to.
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        let port = uri.port_u16().unwrap_or(80);
        Ok(Target { uri, host, port })
    }

    /// The same host and port with another path (`--ready`).
    pub fn with_path(&self, path: &str) -> Target {
        let authority = self.uri.authority().map_or("", |a| a.as_str());
        // The scheme and authority were valid, and so is an absolute path after them.
        let uri = format!("http://{authority}{path}")
            .parse()
            .unwrap_or_else(|_| self.uri.clone());
        Target {
            uri,
            host: self.host.clone(),
            port: self.port,
        }
    }

    /// The URL asked, as printed.
    pub fn url(&self) -> String {
        self.uri.to_string()
    }
}

/// Why a probe failed.
#[derive(Debug)]
pub enum Failure {
    /// No connection was made (nothing listens there, the host name does not resolve).
    Connect(std::io::Error),
    /// The connection was made but the exchange failed (not HTTP, closed early).
    Exchange(String),
    /// No answer within the timeout.
    Timeout(Duration),
    /// An answer other than 200: its status and the start of its body.
    Status(StatusCode, String),
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Connect(error) => write!(
                f,
                "cannot connect: {error} (is the gateway running, and is this its \
                 admin_listen address?)"
            ),
            Failure::Exchange(error) => write!(f, "no HTTP answer: {error}"),
            Failure::Timeout(limit) => write!(f, "no answer within {} ms", limit.as_millis()),
            Failure::Status(status, body) if body.is_empty() => write!(f, "answered {status}"),
            Failure::Status(status, body) => write!(f, "answered {status}: {body}"),
        }
    }
}

/// GETs `target` within `timeout`: Ok with the body's first line when it answers 200.
pub async fn probe(target: &Target, timeout: Duration) -> Result<String, Failure> {
    match tokio::time::timeout(timeout, exchange(target)).await {
        Ok(result) => result,
        Err(_) => Err(Failure::Timeout(timeout)),
    }
}

async fn exchange(target: &Target) -> Result<String, Failure> {
    let stream = TcpStream::connect((target.host.as_str(), target.port))
        .await
        .map_err(Failure::Connect)?;
    let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| Failure::Exchange(e.to_string()))?;
    // The connection is driven beside the request; it ends when the answer has been read.
    tokio::spawn(connection);
    let host = target.uri.authority().map_or("localhost", |a| a.as_str());
    let path = target.uri.path_and_query().map_or("/", |p| p.as_str());
    let request = Request::get(path)
        .header(HOST, host)
        .header(CONNECTION, "close")
        .body(Empty::<Bytes>::new())
        .map_err(|e| Failure::Exchange(e.to_string()))?;
    let response = sender
        .send_request(request)
        .await
        .map_err(|e| Failure::Exchange(e.to_string()))?;
    let status = response.status();
    let body = Limited::new(response.into_body(), BODY_LIMIT)
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .unwrap_or_default();
    let text = shown(&body);
    if status == StatusCode::OK {
        Ok(text)
    } else {
        Err(Failure::Status(status, text))
    }
}

/// The body as one printable line: its first line, cut to SHOWN_BODY characters.
fn shown(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let line = text.lines().next().unwrap_or("").trim();
    let mut cut: String = line.chars().take(SHOWN_BODY).collect();
    if cut.len() < line.len() {
        cut.push_str("...");
    }
    cut
}

/// The subcommand: probes once on a runtime of its own, prints the outcome (stdout when
/// healthy, stderr when not) and says whether it was healthy.
pub fn run(target: &Target, timeout: Duration) -> bool {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("rl-gateway healthcheck: cannot start the runtime: {error}");
            return false;
        }
    };
    let url = target.url();
    match runtime.block_on(probe(target, timeout)) {
        Ok(body) => {
            println!("{url}: 200 {body}");
            true
        }
        Err(failure) => {
            eprintln!("{url}: {failure}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked() {
        let target = Target::parse(DEFAULT_URL).expect("the default");
        assert_eq!((target.host.as_str(), target.port), ("127.0.0.1", 9090));
        assert_eq!(
            target.with_path(READY_PATH).url(),
            "http://127.0.0.1:9090/readyz"
        );
        let v6 = Target::parse("http://[::1]:9191/healthz").expect("IPv6");
        assert_eq!((v6.host.as_str(), v6.port), ("::1", 9191));
        let no_port = Target::parse("http://gateway/healthz").expect("no port");
        assert_eq!(no_port.port, 80);
        for (bad, says) in [
            ("https://127.0.0.1:9090/healthz", "plain http only"),
            ("127.0.0.1:9090", "no scheme"),
            ("/healthz", "no scheme"),
            ("http://exa mple/", "not a URL"),
        ] {
            let error = Target::parse(bad).expect_err(bad);
            assert!(error.contains(says), "{bad}: {error}");
            assert!(error.contains("http://HOST:PORT/PATH"), "{bad}: {error}");
        }
    }

    #[test]
    fn shown_body_is_one_cut_line() {
        assert_eq!(
            shown(b"not ready: no module\nmore\n"),
            "not ready: no module"
        );
        let long = "x".repeat(SHOWN_BODY + 10);
        let cut = shown(long.as_bytes());
        assert_eq!(cut.len(), SHOWN_BODY + 3);
        assert!(cut.ends_with("..."));
        assert_eq!(shown(b""), "");
    }

    #[tokio::test]
    async fn nothing_listening_is_a_connect_failure() {
        // A port just bound and released: nothing listens there now.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let target = Target::parse(&format!("http://127.0.0.1:{port}/healthz")).expect("url");
        let failure = probe(&target, Duration::from_secs(5))
            .await
            .expect_err("nothing listens");
        assert!(matches!(failure, Failure::Connect(_)), "{failure:?}");
        assert!(failure.to_string().contains("admin_listen"), "{failure}");
    }

    #[tokio::test]
    async fn a_silent_listener_is_a_timeout() {
        // Accepted by the kernel's backlog, never answered.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        let target = Target::parse(&format!("http://127.0.0.1:{port}/healthz")).expect("url");
        let failure = probe(&target, Duration::from_millis(200))
            .await
            .expect_err("no answer");
        assert!(matches!(failure, Failure::Timeout(_)), "{failure:?}");
        drop(listener);
    }
}
