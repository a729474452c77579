//! Listening: the main listener (proxy or check) and the admin listener (`/metrics`,
//! `/healthz`), each connection served by hyper's HTTP/1.1 with keep-alive, within the
//! limits of `[connections]` (each listener has its own `max_connections`, so that clients
//! filling the main listener cannot keep `/metrics` from answering).

use crate::app::Gateway;
use crate::front::http::Body;
use crate::logging::{log_throttled, Kind};
use crate::net::client_connections::ClientConnections;
use crate::net::connection_watch::{Tracked, Watch, WatchedIo};
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// What a connection over `max_connections` is told before it is closed.
const OVER_CAPACITY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// Accepts connections forever, serving each with `handle(peer, request)`, at most
/// `max_connections` at once, each under the head and idle timeouts of `[connections]`.
pub async fn serve<F, Fut>(listener: TcpListener, gateway: Arc<Gateway>, handle: F)
where
    F: Fn(Arc<Gateway>, SocketAddr, Request<Incoming>) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    let server = gateway.server();
    let limits = server.connections;
    let slots = Arc::new(Semaphore::new(
        limits.max_connections.min(Semaphore::MAX_PERMITS),
    ));
    let per_client = ClientConnections::new(limits.max_connections_per_client);
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, say: wait a little instead of spinning, and say
                // so at most once a second however long it lasts.
                log_throttled!(Kind::Accept, "accept failed: {error}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        // Over the cap: accepted and closed at once rather than left in the kernel's
        // queue, so that a client learns it now and the queue keeps moving.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            gateway.metrics().connection_refused();
            let _ = stream.try_write(OVER_CAPACITY);
            continue;
        };
        // One client over its own cap: refused the same way, so that it cannot take every
        // slot. A trusted proxy speaks for many clients and is not capped.
        let capped = limits.max_connections_per_client > 0 && !server.is_trusted_proxy(peer.ip());
        let client_place = match capped {
            true => {
                let client = server.client_network(peer.ip());
                match per_client.try_hold(client) {
                    Some(place) => Some(place),
                    None => {
                        gateway.metrics().connection_refused();
                        let _ = stream.try_write(OVER_CAPACITY);
                        continue;
                    }
                }
            }
            false => None,
        };
        let _ = stream.set_nodelay(true);
        let gateway = gateway.clone();
        // A head (request line and headers) larger than this gets 431 from hyper.
        let max_header_bytes = server.requests.max_header_bytes;
        tokio::spawn(async move {
            let _slot = slot;
            let _client_place = client_place;
            let watch = Watch::new();
            let requests = watch.clone();
            let service = service_fn(move |request| {
                let gateway = gateway.clone();
                let in_progress = requests.request_started();
                async move {
                    let response = handle(gateway, peer, request).await;
                    Ok::<_, Infallible>(response.map(|body| Tracked::new(body, in_progress)))
                }
            });
            // A client that goes away mid-request is not the gateway's error.
            let connection = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(limits.head_timeout + limits.idle_timeout)
                .max_header_size(max_header_bytes)
                .serve_connection(TokioIo::new(WatchedIo::new(stream, watch.clone())), service);
            tokio::select! {
                _ = connection => {}
                // Dropping the connection closes it: idle or stuck in a head, it has no
                // response in progress to cut short.
                () = watch.expired(limits) => {}
            }
        });
    }
}

pub async fn main_handler(
    gateway: Arc<Gateway>,
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    gateway.handle(peer.ip(), request).await
}

pub async fn admin_handler(
    gateway: Arc<Gateway>,
    _peer: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    let (status, content_type, body) = match (request.method(), request.uri().path()) {
        (&Method::GET, "/healthz") => (
            StatusCode::OK,
            "text/plain; charset=utf-8",
            "ok\n".to_owned(),
        ),
        (&Method::GET, "/metrics") => (
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            gateway.metrics().render(gateway.breaker_open()),
        ),
        _ => (
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "not found\n".to_owned(),
        ),
    };
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(body))));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    response
}
