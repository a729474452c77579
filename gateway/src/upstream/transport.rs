//! How the upstream is reached: HTTP/1.1 over TCP, or over rustls (hyper-rustls's
//! connector) for an `https://` upstream, on connections kept open between requests
//! (`pool`).
//!
//! A host name in the URL is resolved by hyper-util's `GaiResolver` (getaddrinfo, on a
//! blocking thread) for each new connection, never cached by the gateway: a DNS change is
//! followed as soon as a new connection is made, while the pooled connections to the old
//! address are reused until they close (idle for 90 s, or closed by the upstream). A name
//! that does not resolve fails only the requests that need a new connection (502), for as
//! long as it does not.
//!
//! A TLS failure (a certificate not trusted or not naming the server, a client
//! certificate refused, a server that does not speak TLS) is logged once per cause, not
//! once per request nor once a second: it lasts until someone fixes a certificate, and
//! every request meets it. When the upstream answers over TLS again, that is logged too.

use super::pool::{Pool, PoolError, ResponseBody};
use hyper::body::Body;
use hyper::{Request, Response, Uri};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector};
use hyper_util::client::legacy::connect::HttpConnector;
use std::error::Error as StdError;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};

use crate::config::{Roots, UpstreamTarget, UpstreamTls};
use crate::logging::{log, log_error, log_warn};

/// The client the requests are sent with.
pub(super) enum Transport<B> {
    /// `http://`.
    Plain(Pool<HttpConnector, B>),
    /// `https://`.
    Tls {
        client: Pool<HttpsConnector<HttpConnector>, B>,
        failures: TlsFailures,
    },
    /// `https://` whose TLS configuration could not be made (only for settings parsed
    /// without their files, since [`crate::config::load`] refuses a file that cannot make
    /// one): every request fails, with this reason.
    Broken(String),
}

/// Why a request got no response from the upstream.
pub(super) enum SendError {
    /// Connecting (DNS, TCP, TLS), writing or reading failed: the connector's or hyper's
    /// error.
    Http(PoolError),
    /// The TLS handshake or a TLS record failed, which has been logged; the cause.
    Tls,
    /// [`Transport::Broken`]'s reason.
    Broken(String),
}

/// A connector that makes TCP connections with `resolver`'s addresses for each new
/// connection, without Nagle's delay, to `http://` or (wrapped in TLS) `https://` URLs.
pub(super) fn http_connector<R>(resolver: R) -> HttpConnector<R> {
    let mut connector = HttpConnector::new_with_resolver(resolver);
    connector.set_nodelay(true);
    // The https:// URL goes through it to the TLS wrapper, which checks the scheme.
    connector.enforce_http(false);
    connector
}

impl<B> Transport<B>
where
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn StdError + Send + Sync>>,
{
    /// The transport `target` needs.
    pub(super) fn new(target: &UpstreamTarget) -> Self {
        let tcp = http_connector(hyper_util::client::legacy::connect::dns::GaiResolver::new());
        let destination = destination(&target.base);
        let Some(tls) = &target.tls else {
            return Transport::Plain(Pool::new(tcp, destination));
        };
        let (config, roots) = match tls.client_config() {
            Ok(made) => made,
            Err(why) => {
                log_error!("upstream {}: {why}; every request answers 502", target.base);
                return Transport::Broken(why);
            }
        };
        log!(
            "upstream {}: TLS, its certificate verified as {} against {}",
            target.base,
            tls.server_name.to_str(),
            roots_said(roots, tls)
        );
        let name = FixedServerNameResolver::new(tls.server_name.clone());
        // `true`: https only, the scheme was checked at load.
        let connector = HttpsConnector::new(tcp, config, true, Arc::new(name));
        Transport::Tls {
            client: Pool::new(connector, destination),
            failures: TlsFailures::new(tls),
        }
    }

    /// Sends `request` (its target in origin form, with a `Host` header) and waits for the
    /// head of the response.
    pub(super) async fn send(
        &self,
        request: Request<B>,
    ) -> Result<Response<ResponseBody<B>>, SendError> {
        match self {
            Transport::Plain(client) => client.send(request).await.map_err(SendError::Http),
            Transport::Tls { client, failures } => match client.send(request).await {
                Ok(response) => {
                    failures.succeeded();
                    Ok(response)
                }
                Err(error) => match tls_cause(&*error) {
                    Some(cause) => {
                        failures.failed(&cause);
                        Err(SendError::Tls)
                    }
                    None => Err(SendError::Http(error)),
                },
            },
            Transport::Broken(why) => Err(SendError::Broken(why.clone())),
        }
    }
}

/// The upstream's scheme and authority, what a new connection is made to; the base URL's
/// path is the requests' business.
fn destination(base: &Uri) -> Uri {
    let mut parts = hyper::http::uri::Parts::default();
    parts.scheme = base.scheme().cloned();
    parts.authority = base.authority().cloned();
    parts.path_and_query = Some(hyper::http::uri::PathAndQuery::from_static("/"));
    Uri::from_parts(parts).unwrap_or_else(|_| base.clone())
}

fn roots_said(roots: Roots, tls: &UpstreamTls) -> String {
    match (roots, &tls.ca_file) {
        (Roots::CaFile, Some(path)) => format!("the CAs of {}", path.display()),
        (Roots::CaFile, None) => "the CA file".into(),
        (Roots::System, _) => "the system's roots".into(),
        (Roots::Mozilla, _) => "Mozilla's roots (the system has none)".into(),
    }
}

/// The TLS error among `error`'s causes, as rustls says it. rustls's error is inside an
/// `io::Error` (one or two deep), whose `source()` skips it: each one is opened.
pub(super) fn tls_cause(error: &(dyn StdError + 'static)) -> Option<String> {
    let mut next = Some(error);
    while let Some(current) = next {
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Some(tls.to_string());
        }
        next = match current.downcast_ref::<std::io::Error>() {
            Some(io) => match io.get_ref() {
                Some(inner) => Some(inner as &(dyn StdError + 'static)),
                None => io.source(),
            },
            None => current.source(),
        };
    }
    None
}

/// The last TLS failure logged, so that each cause is logged once.
pub(super) struct TlsFailures {
    /// The server name the certificate is checked against, for the log lines.
    server: String,
    /// The cause logged last; `None` once a request succeeds again.
    last: Mutex<Option<String>>,
    /// Whether `last` is set: a successful request reads this alone.
    failing: AtomicBool,
}

impl TlsFailures {
    fn new(tls: &UpstreamTls) -> Self {
        TlsFailures {
            server: tls.server_name.to_str().into_owned(),
            last: Mutex::new(None),
            failing: AtomicBool::new(false),
        }
    }

    /// Logs `cause` unless it is the one logged last.
    fn failed(&self, cause: &str) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_deref() == Some(cause) {
            return;
        }
        log_warn!(
            "upstream TLS with {}: {cause}; its requests answer 502 (this line is written \
             once for each cause, and again after a success)",
            self.server
        );
        *last = Some(cause.to_owned());
        self.failing.store(true, Relaxed);
    }

    /// A response came over TLS: a failure logged before is over.
    fn succeeded(&self) {
        if !self.failing.load(Relaxed) {
            return;
        }
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(cause) = last.take() {
            log!(
                "upstream TLS with {} works again (after: {cause})",
                self.server
            );
        }
        self.failing.store(false, Relaxed);
    }

    #[cfg(test)]
    fn last(&self) -> Option<String> {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[cfg(test)]
#[path = "transport_tests.rs"]
mod tests;
