//! Listening: the main listener (proxy or check) and the admin listener (`/metrics`,
//! `/healthz`, `/readyz`), each connection served by hyper's HTTP/1.1 with keep-alive,
//! within the limits of `[connections]` (each listener has its own `max_connections`, so
//! that clients filling the main listener cannot keep `/metrics` from answering).
//!
//! A listener serves until its [`Shutdown`] says stop: then it closes (new connections are
//! refused), its idle connections close, and those with a request in flight finish it
//! (hyper's graceful shutdown) for up to the drain time, after which what is left is cut.
//! One watch channel tells every connection both (see [`Told`]), so that a connection
//! looks at one signal, not two, each time it wakes.

use crate::app::Gateway;
use crate::front::http::Body;
use crate::logging::{log, log_throttled, log_warn, Kind};
use crate::net::client_connections::{ClientConnections, Held};
use crate::net::connection_watch::{Tracked, Watch, WatchedIo};
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

/// What a connection over `max_connections` is told before it is closed.
const OVER_CAPACITY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

/// When a listener stops accepting, and how long its connections may then take.
pub struct Shutdown {
    /// Turns `true` when the listener is to stop accepting.
    pub stop: watch::Receiver<bool>,
    /// How long the requests in flight may take to finish after that.
    pub drain: Duration,
    /// The listener's name in the log lines (`main`, `admin`).
    pub name: &'static str,
}

/// Accepts connections until told to stop, serving each with `handle(peer, request)`, at
/// most `max_connections` at once, each under the head and idle timeouts of
/// `[connections]`; then drains them (see the module's comment) and returns.
pub async fn serve<F, Fut>(
    listener: TcpListener,
    gateway: Arc<Gateway>,
    handle: F,
    mut shutdown: Shutdown,
) where
    F: Fn(Arc<Gateway>, SocketAddr, Request<Incoming>) -> Fut + Copy + Send + Sync + 'static,
    Fut: Future<Output = Response<Body>> + Send + 'static,
{
    // Each connection holds a receiver: their count is the connections open, and the
    // channel closes when the last one ends.
    let (told, _) = watch::channel(Told::Serve);
    let admission = Admission::new(&gateway);
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.stop.wait_for(|stop| *stop) => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors, say: wait a little instead of spinning, and say
                // so at most once a second however long it lasts.
                log_throttled!(Kind::Accept, "accept failed: {error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(places) = admission.admit(&stream, peer) else {
            continue;
        };
        let connection = Connection {
            stream,
            peer,
            gateway: gateway.clone(),
            places,
            told: told.subscribe(),
        };
        tokio::spawn(connection.serve(handle));
    }
    // Closed: from now on connections are refused by the system.
    drop(listener);
    drain(told, &shutdown).await;
}

/// What a listener tells its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Told {
    /// Serve requests.
    Serve,
    /// The listener closed: finish the request in flight, take no other.
    Drain,
    /// The drain time is over: drop what is served (its lease is given back).
    Cut,
}

/// Waits for the connections of a stopped listener to end, and cuts those still open after
/// the drain time.
async fn drain(told: watch::Sender<Told>, shutdown: &Shutdown) {
    let name = shutdown.name;
    let open = told.receiver_count();
    log!(
        "{name} listener closed; draining its {open} open connections for up to {} s",
        shutdown.drain.as_secs_f64()
    );
    // `send_replace`: the value changes even when no connection is open to see it.
    told.send_replace(Told::Drain);
    if tokio::time::timeout(shutdown.drain, told.closed())
        .await
        .is_ok()
    {
        log!("{name} listener drained: every request in flight was answered");
        return;
    }
    log_warn!(
        "{name} listener: the drain time is over, cutting the connections still open \
         (their leases are given back)"
    );
    told.send_replace(Told::Cut);
    told.closed().await;
}

/// The caps on connections: in all, and per client.
struct Admission {
    gateway: Arc<Gateway>,
    slots: Arc<Semaphore>,
    per_client: Arc<ClientConnections>,
}

/// What an admitted connection holds until it closes.
type Places = (OwnedSemaphorePermit, Option<Held>);

impl Admission {
    fn new(gateway: &Arc<Gateway>) -> Self {
        let limits = gateway.server().connections;
        Admission {
            gateway: gateway.clone(),
            slots: Arc::new(Semaphore::new(
                limits.max_connections.min(Semaphore::MAX_PERMITS),
            )),
            per_client: ClientConnections::new(limits.max_connections_per_client),
        }
    }

    /// The places of a connection within the caps, or `None` when it was refused.
    fn admit(&self, stream: &TcpStream, peer: SocketAddr) -> Option<Places> {
        let server = self.gateway.server();
        let limits = server.connections;
        // Over the cap: accepted and closed at once rather than left in the kernel's
        // queue, so that a client learns it now and the queue keeps moving.
        let Ok(slot) = self.slots.clone().try_acquire_owned() else {
            self.refuse(stream);
            return None;
        };
        // One client over its own cap: refused the same way, so that it cannot take every
        // slot. A trusted proxy speaks for many clients and is not capped.
        let capped = limits.max_connections_per_client > 0 && !server.is_trusted_proxy(peer.ip());
        let client_place = match capped {
            true => {
                let client = server.client_network(peer.ip());
                match self.per_client.try_hold(client) {
                    Some(place) => Some(place),
                    None => {
                        self.refuse(stream);
                        return None;
                    }
                }
            }
            false => None,
        };
        Some((slot, client_place))
    }

    fn refuse(&self, stream: &TcpStream) {
        self.gateway.metrics().connection_refused();
        let _ = stream.try_write(OVER_CAPACITY);
    }
}

/// One accepted connection, with what it needs to be served.
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    gateway: Arc<Gateway>,
    places: Places,
    told: watch::Receiver<Told>,
}

impl Connection {
    /// Serves its requests until the client closes, a timeout of `[connections]` closes
    /// it, the drain ends it, or the drain time is over.
    async fn serve<F, Fut>(self, handle: F)
    where
        F: Fn(Arc<Gateway>, SocketAddr, Request<Incoming>) -> Fut + Copy + Send + Sync + 'static,
        Fut: Future<Output = Response<Body>> + Send + 'static,
    {
        let Connection {
            stream,
            peer,
            gateway,
            places,
            mut told,
        } = self;
        let _places = places;
        let _ = stream.set_nodelay(true);
        let server = gateway.server();
        let limits = server.connections;
        // A head (request line and headers) larger than this gets 431 from hyper.
        let max_header_bytes = server.requests.max_header_bytes;
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
            .max_header_size(max_header_bytes)
            .serve_connection(TokioIo::new(WatchedIo::new(stream, watch.clone())), service);
        tokio::pin!(connection);
        let expired = watch.expired(limits);
        tokio::pin!(expired);
        // Whether the listener can still tell something: not once its sender is gone.
        let mut listening = true;
        loop {
            tokio::select! {
                // In this order, without drawing a random one each time: nearly every
                // wake is the connection's own.
                biased;
                _ = connection.as_mut() => return,
                // Dropping the connection closes it: idle or stuck in a head, it has no
                // response in progress to cut short.
                () = &mut expired => return,
                changed = told.changed(), if listening => {
                    let now = changed.map(|()| *told.borrow_and_update());
                    match now {
                        Ok(Told::Serve) => {}
                        // The drain time is over: what it serves is dropped, its lease
                        // given back.
                        Ok(Told::Cut) => return,
                        Ok(Told::Drain) => connection.as_mut().graceful_shutdown(),
                        // The listener is gone without a word: drain, as hyper-util's
                        // watcher did.
                        Err(_) => {
                            listening = false;
                            connection.as_mut().graceful_shutdown();
                        }
                    }
                }
            }
        }
    }
}

/// The main listener's handler: the request goes to the configured front end's mode.
pub async fn main_handler(
    gateway: Arc<Gateway>,
    peer: SocketAddr,
    request: Request<Incoming>,
) -> Response<Body> {
    gateway.handle(peer.ip(), request).await
}

/// The admin listener's handler: `/healthz`, `/readyz` and `/metrics`; 404 for the rest.
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
        (&Method::GET, "/readyz") => match gateway.readiness() {
            Ok(()) => (
                StatusCode::OK,
                "text/plain; charset=utf-8",
                "ready\n".to_owned(),
            ),
            Err(why) => (
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                format!("not ready: {why}\n"),
            ),
        },
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
