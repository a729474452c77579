//! Listening: the main listener (proxy or check) and the admin listener (`/metrics`,
//! `/healthz`), each connection served by hyper's HTTP/1.1 with keep-alive.

use crate::logging::log;
use crate::service::{Body, Gateway};
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

const HEADER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Accepts connections forever, serving each with `handle(peer, request)`.
pub async fn serve<F, Fut>(listener: TcpListener, gateway: Arc<Gateway>, handle: F)
where
    F: Fn(Arc<Gateway>, SocketAddr, Request<Incoming>) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, say: wait a little instead of spinning.
                log!("accept failed: {error}");
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let gateway = gateway.clone();
        // A head (request line and headers) larger than this gets 431 from hyper.
        let max_header_bytes = gateway.server.requests.max_header_bytes;
        tokio::spawn(async move {
            let service = service_fn(move |request| {
                let gateway = gateway.clone();
                async move { Ok::<_, Infallible>(handle(gateway, peer, request).await) }
            });
            // A client that goes away mid-request is not the gateway's error.
            // A client gets HEADER_TIMEOUT to send a request's headers (the first or the
            // next on a kept-alive connection), so idle and slow clients do not pile up.
            let _ = http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .max_header_size(max_header_bytes)
                .serve_connection(TokioIo::new(stream), service)
                .await;
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
            gateway.metrics().render(gateway.decider.breaker_open()),
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
