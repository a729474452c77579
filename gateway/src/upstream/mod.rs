//! Forwarding an allowed request to the upstream and its response back, as a reverse proxy
//! does: hop-by-hop headers dropped both ways, the client's address appended to
//! `X-Forwarded-For`, bodies streamed, connections to the upstream pooled (over TLS for an
//! `https://` upstream: `transport`).
//!
//! The `Host` header is the client's, forwarded as it came (an upstream routing by virtual
//! host sees the name the client asked for); hyper sets the upstream's `host:port` only
//! when the client sent none (an HTTP/1.0 request). With TLS, SNI and the certificate's
//! check use the upstream's name (`upstream_server_name`, else the URL's host), never the
//! client's `Host`.

mod pool;
mod transport;

use crate::logging::{log, log_warn};
use crate::request_body::{BodyError, Fault, TimedBody};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, HOST};
use hyper::http::uri::{Parts, PathAndQuery};
use hyper::{Request, Response, Uri};
use std::net::IpAddr;
use std::time::Duration;
use transport::{SendError, Transport};

/// A response body from the upstream, streamed to the client; its connection is reused
/// once it has been read to its end.
pub type UpstreamBody = pool::ResponseBody<TimedBody<Incoming>>;

pub(crate) struct Upstream {
    transport: Transport<TimedBody<Incoming>>,
    /// The `Host` a request without one (HTTP/1.0) is sent with: the upstream's
    /// `host[:port]`.
    host: Option<HeaderValue>,
    /// How long the upstream may take to start its answer.
    timeout: Duration,
    /// How long the client's body may keep the upstream connection waiting.
    body_timeout: Duration,
}

pub(crate) enum UpstreamError {
    /// No answer within the timeout (504).
    Timeout,
    /// Refused, reset, or not HTTP (502).
    Failed(String),
    /// TLS failed (502): a certificate refused on either side, or no TLS spoken. Logged
    /// here, once per cause.
    Tls,
    /// The client's body did not arrive within `body_timeout_ms` (408); the upstream
    /// connection it held is closed.
    BodyTimeout,
    /// The client's body broke off (400): bad chunked framing, or the client gone.
    BrokenBody(String),
}

static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");

/// Headers that concern one connection or this proxy, not the message (RFC 9110,
/// section 7.6.1).
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

impl Upstream {
    pub(crate) fn new(
        target: crate::config::UpstreamTarget,
        timeout: Duration,
        body_timeout: Duration,
    ) -> Self {
        announce_resolution(&target.base);
        Upstream {
            transport: Transport::new(&target),
            host: host_header(&target.base),
            timeout,
            body_timeout,
        }
    }

    /// Sends `request`, received from `peer`, to the upstream, with the fail-open header
    /// `mark_name` set to `mark` when the decision failed open, and removed otherwise.
    pub(crate) async fn forward(
        &self,
        mut request: Request<Incoming>,
        peer: IpAddr,
        mark_name: &HeaderName,
        mark: Option<HeaderValue>,
    ) -> Result<Response<UpstreamBody>, UpstreamError> {
        // Origin form (`/path?query`): the connection is the upstream's already. The front
        // end has made nearly every target so (`rewrite_target`); only another is rebuilt.
        let uri = request.uri();
        if uri.scheme().is_some() || uri.authority().is_some() {
            let mut parts = Parts::default();
            parts.path_and_query = Some(match uri.path_and_query() {
                Some(path_and_query) => path_and_query.clone(),
                None => PathAndQuery::from_static("/"),
            });
            *request.uri_mut() =
                Uri::from_parts(parts).map_err(|e| UpstreamError::Failed(e.to_string()))?;
        }
        let headers = request.headers_mut();
        if let (false, Some(host)) = (headers.contains_key(HOST), &self.host) {
            headers.insert(HOST, host.clone());
        }
        append_forwarded_for(headers, peer);
        // The mark is the gateway's to set: one the client sent is dropped, under every
        // spelling a CGI-style upstream reads as it (`X_RateLimit_Fail_Open`), so that an
        // upstream that trusts it cannot be fooled.
        crate::rules::header_names::remove_all(headers, mark_name);
        if let Some(value) = mark {
            headers.insert(mark_name.clone(), value);
        }
        let (request, body) = {
            let (parts, body) = request.into_parts();
            let (body, outcome) = TimedBody::new(body, self.body_timeout);
            (Request::from_parts(parts, body), outcome)
        };
        let mut response =
            match tokio::time::timeout(self.timeout, self.transport.send(request)).await {
                Ok(Ok(response)) => response,
                // A body that ended in an error fails the request: whose fault it was is
                // known from the body, not from hyper's error.
                Ok(Err(error)) => {
                    return Err(match (body.fault(), error) {
                        (Some(Fault::TimedOut), _) => UpstreamError::BodyTimeout,
                        (Some(Fault::Broken), SendError::Http(error)) => {
                            UpstreamError::BrokenBody(body_error(&*error))
                        }
                        (_, SendError::Tls) => UpstreamError::Tls,
                        (_, SendError::Http(error)) => {
                            UpstreamError::Failed(crate::logging::with_sources(&*error))
                        }
                        (_, SendError::Broken(why)) => UpstreamError::Failed(why),
                    });
                }
                Err(_elapsed) => return Err(UpstreamError::Timeout),
            };
        strip_hop_by_hop(response.headers_mut());
        Ok(response)
    }
}

/// The port `base`'s scheme implies.
fn scheme_port(base: &Uri) -> u16 {
    match base.scheme_str() {
        Some("https") => 443,
        _ => 80,
    }
}

/// The `Host` of a request that came without one: the upstream's host, with its port
/// unless it is the scheme's own (`http://api:80` is `api`).
fn host_header(base: &Uri) -> Option<HeaderValue> {
    let host = base.host()?;
    let value = match base.port_u16().filter(|&port| port != scheme_port(base)) {
        Some(port) => HeaderValue::from_str(&format!("{host}:{port}")),
        None => HeaderValue::from_str(host),
    };
    value.ok()
}

/// Looks the upstream's host name up once at start, to say in the log whether it resolves:
/// a name that does not is no reason to refuse the start (the upstream may come later),
/// but its requests answer 502 until it does. Nothing is kept: each new connection looks
/// the name up again. Without a runtime (a test building settings alone) nothing is said.
fn announce_resolution(base: &Uri) {
    let Some(host) = base.host() else { return };
    if host.starts_with('[') || host.parse::<IpAddr>().is_ok() {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let host = host.to_owned();
    let port = base.port_u16().unwrap_or(scheme_port(base));
    runtime.spawn(async move {
        match tokio::net::lookup_host((host.as_str(), port)).await {
            Ok(found) => {
                let found: Vec<String> = found.map(|a| a.ip().to_string()).collect();
                log!(
                    "upstream host {host} resolves to {}; it is looked up again for each new \
                     connection",
                    found.join(", ")
                );
            }
            Err(error) => log_warn!(
                "upstream host {host} does not resolve ({error}); requests to it answer 502 \
                 until it does"
            ),
        }
    });
}

/// What the body said when it broke off, found among the sources of hyper's error ("client
/// error (SendRequest): error from user's Body stream: ..." says nothing about the client).
fn body_error(error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = Some(error);
    while let Some(current) = cause {
        if let Some(body) = current.downcast_ref::<BodyError>() {
            return crate::logging::with_sources(body);
        }
        cause = current.source();
    }
    crate::logging::with_sources(error)
}

/// Whether the request asks to switch protocols (`Connection: upgrade`).
pub(crate) fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"))
}

pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // The common case, a message without any: one look at each name instead of a lookup
    // (a hash) for each of the nine.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    // Connection may name more headers that belong to this hop only.
    let named: Vec<HeaderName> = headers
        .get_all(hyper::header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
}

/// Whether `name` is one of [`HOP_BY_HOP`]; names in a map are lower case.
fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(&name.as_str())
}

/// Appends the peer this request came from, as one line after those already there.
fn append_forwarded_for(headers: &mut HeaderMap, peer: IpAddr) {
    if !headers.contains_key(&X_FORWARDED_FOR) {
        // The common case, the first proxy: the peer alone, without building a chain.
        let mut text = String::with_capacity(15);
        crate::rules::client_ip::push_ip(&mut text, peer);
        if let Ok(value) = HeaderValue::from_str(&text) {
            headers.insert(X_FORWARDED_FOR.clone(), value);
        }
        return;
    }
    let mut chain: Vec<String> = headers
        .get_all(&X_FORWARDED_FOR)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .map(str::to_owned)
        .collect();
    chain.push(peer.to_string());
    let chain = chain.join(", ");
    if let Ok(value) = HeaderValue::from_str(&chain) {
        headers.insert(X_FORWARDED_FOR.clone(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_a_request_without_one_has_the_port_only_when_not_the_schemes() {
        let host = |url: &str| host_header(&url.parse().unwrap()).unwrap();
        assert_eq!(host("http://api.test"), "api.test");
        assert_eq!(host("http://api.test:80"), "api.test");
        assert_eq!(host("https://api.test:443"), "api.test");
        assert_eq!(host("http://api.test:443"), "api.test:443");
        assert_eq!(host("https://127.0.0.1:8443"), "127.0.0.1:8443");
        assert_eq!(host("http://[::1]:9000"), "[::1]:9000");
    }
}
