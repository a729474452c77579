//! The connections to the one upstream: HTTP/1.1 over what a connector makes (TCP, or TLS
//! over TCP), kept open between requests and reused, the warmest first.
//!
//! hyper's low-level client (`hyper::client::conn::http1`) does the protocol; this file only
//! keeps the idle connections. A general-purpose pool (hyper-util's) keys its connections by
//! scheme and host, hashes that key on every checkout and return, and copies the client's
//! parts into every request's future; the gateway has a single upstream, so a list under a
//! lock is all it needs, and that work is saved on every request.
//!
//! A connection goes back to the list when its response body has been read to its end (a
//! body dropped before its end leaves the connection unusable, and hyper closes it). One
//! that has been idle for [`IDLE_TIMEOUT`] is closed the next time the list is used, and at
//! most [`MAX_IDLE`] are kept. A request that could not be written on a reused connection
//! (the upstream closed it while it was idle) is sent again on another one, as the request
//! never left.

use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::rt::{Read, Write};
use hyper::{Request, Response, Uri};
use std::collections::VecDeque;
use std::error::Error as StdError;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};
use tower_service::Service;

/// Idle connections kept for the next requests.
pub(super) const MAX_IDLE: usize = 256;
/// An idle connection older than this is closed rather than reused (the upstream may have
/// forgotten it); hyper-util's default, which the gateway used before.
pub(super) const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// Why a request got no response: connecting failed, or hyper's error on the connection.
pub(super) type PoolError = Box<dyn StdError + Send + Sync>;

/// The idle connections, shared with the response bodies that give theirs back.
struct Idle<B> {
    connections: Mutex<VecDeque<(SendRequest<B>, Instant)>>,
}

impl<B> Idle<B> {
    /// The most recently used connection still open, closing those idle for too long.
    fn take(&self) -> Option<SendRequest<B>> {
        let mut list = self.lock();
        let now = Instant::now();
        while let Some((sender, since)) = list.pop_back() {
            if !sender.is_closed() && now.duration_since(since) < IDLE_TIMEOUT {
                return Some(sender);
            }
        }
        None
    }

    fn put(&self, sender: SendRequest<B>) {
        if sender.is_closed() {
            return;
        }
        let mut list = self.lock();
        let now = Instant::now();
        // The oldest are at the front: drop those that have waited too long.
        while list
            .front()
            .is_some_and(|(_, since)| now.duration_since(*since) >= IDLE_TIMEOUT)
        {
            list.pop_front();
        }
        if list.len() < MAX_IDLE {
            list.push_back((sender, now));
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(SendRequest<B>, Instant)>> {
        self.connections.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The idle connections still open.
    #[cfg(test)]
    fn open(&self) -> usize {
        self.lock().iter().filter(|(s, _)| !s.is_closed()).count()
    }
}

/// HTTP/1.1 connections to `destination`, made by `connector` when none is idle.
pub(super) struct Pool<C, B> {
    connector: C,
    /// The upstream's scheme and authority: what the connector is asked to connect to.
    destination: Uri,
    idle: Arc<Idle<B>>,
}

impl<C, B> Pool<C, B>
where
    C: Service<Uri> + Clone + Send + 'static,
    C::Response: Read + Write + Unpin + Send + 'static,
    C::Error: Into<PoolError>,
    C::Future: Send,
    B: Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<PoolError>,
{
    pub(super) fn new(connector: C, destination: Uri) -> Self {
        Pool {
            connector,
            destination,
            idle: Arc::new(Idle {
                connections: Mutex::new(VecDeque::new()),
            }),
        }
    }

    /// Sends `request` (its target in origin form, with a `Host` header) on an idle
    /// connection, or a new one, and waits for the head of the response. Dropping the
    /// future before the head arrives closes the connection it used.
    pub(super) async fn send(
        &self,
        mut request: Request<B>,
    ) -> Result<Response<ResponseBody<B>>, PoolError> {
        loop {
            let (mut sender, reused) = match self.idle.take() {
                Some(sender) => (sender, true),
                None => (self.connect().await?, false),
            };
            if let Err(error) = sender.ready().await {
                // Closed while idle: another one will do.
                match reused {
                    true => continue,
                    false => return Err(error.into()),
                }
            }
            match sender.try_send_request(request).await {
                Ok(response) => {
                    let idle = self.idle.clone();
                    return Ok(response.map(|body| ResponseBody::new(body, sender, idle)));
                }
                Err(mut error) => match error.take_message() {
                    // Not written: the upstream closed the connection first.
                    Some(unsent) if reused => request = unsent,
                    _ => return Err(error.into_error().into()),
                },
            }
        }
    }

    /// A new connection, its protocol run by a task of its own until it closes.
    async fn connect(&self) -> Result<SendRequest<B>, PoolError> {
        let mut connector = self.connector.clone();
        poll_fn(|cx| connector.poll_ready(cx))
            .await
            .map_err(Into::into)?;
        let io = connector
            .call(self.destination.clone())
            .await
            .map_err(Into::into)?;
        let (sender, connection) = http1::Builder::new().handshake(io).await?;
        // Its end (the upstream closed it, or it was dropped from the list) is no error
        // of a request's: a request on it has been answered with the error already.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    #[cfg(test)]
    pub(super) fn idle_count(&self) -> usize {
        self.idle.open()
    }
}

/// A response body from the upstream that gives its connection back to the pool once it
/// has been read to its end.
pub struct ResponseBody<B> {
    body: Incoming,
    /// The connection and where it goes back; `None` once given back.
    back: Option<(SendRequest<B>, Arc<Idle<B>>)>,
}

impl<B> ResponseBody<B> {
    fn new(body: Incoming, sender: SendRequest<B>, idle: Arc<Idle<B>>) -> Self {
        let mut body = ResponseBody {
            body,
            back: Some((sender, idle)),
        };
        // A body known to be empty (a HEAD's, a 204) frees its connection at once.
        body.give_back_if_ended();
        body
    }

    /// hyper stops polling a body that says it has ended, so this is asked after every
    /// frame rather than only when the body answers `None`.
    fn give_back_if_ended(&mut self) {
        if self.body.is_end_stream() {
            if let Some((sender, idle)) = self.back.take() {
                idle.put(sender);
            }
        }
    }
}

impl<B> Drop for ResponseBody<B> {
    fn drop(&mut self) {
        // Read to its end: reusable. Otherwise the sender is dropped with the body, and
        // hyper closes the connection, whose rest of the body nobody will read.
        self.give_back_if_ended();
    }
}

impl<B> Body for ResponseBody<B> {
    type Data = <Incoming as Body>::Data;
    type Error = <Incoming as Body>::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_)) | None) = polled {
            self.give_back_if_ended();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
