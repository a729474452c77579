//! The timeouts of one connection, kept by watching it: the bytes it reads and the
//! requests it serves. A connection is, in turn,
//! - idle: no request in progress, nothing read since the connection began or the last
//!   response ended; closed after `idle_timeout`;
//! - reading a head: bytes arrived but no request started yet; closed after `head_timeout`;
//! - busy: a request is being served, its response not yet fully written; not closed by
//!   the two timeouts above (the upstream has its own).
//!
//! In every phase, a write to the client that has waited `send_timeout` without a byte
//! going out closes the connection: a client that stops reading its response cannot hold
//! the connection (and its upstream connection) for good.
//!
//! hyper's own header timeout is not used: it runs from the moment hyper waits for a head
//! (which includes the idle time), so it cannot keep the two apart, and it arms a timer of
//! its own for every request (an allocation and two changes to the timer wheel, about 4%
//! of a proxied request's instructions). While a response is in progress hyper reads no
//! next head, so a head's bytes are only read, and timed, in the two phases above.

use crate::net::connection_limits::ConnectionLimits;
use hyper::body::{Body, Frame, SizeHint};
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Idle(Instant),
    Head(Instant),
    /// How many requests are in progress (a pipelined one may start before the last
    /// response's body is gone).
    Busy(usize),
}

/// What one connection is doing, shared by its socket, its requests and its watchdog.
#[derive(Debug)]
pub(crate) struct Watch {
    phase: Mutex<Phase>,
    /// Since when a write to the client has been waiting for room, if one is.
    stalled_since: Mutex<Option<Instant>>,
}

impl Watch {
    pub(crate) fn new() -> Arc<Watch> {
        Arc::new(Watch {
            phase: Mutex::new(Phase::Idle(Instant::now())),
            stalled_since: Mutex::new(None),
        })
    }

    fn update(&self, change: impl FnOnce(Phase) -> Phase) {
        let mut phase = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        *phase = change(*phase);
    }

    fn bytes_arrived(&self) {
        self.update(|phase| match phase {
            Phase::Idle(_) => Phase::Head(Instant::now()),
            other => other,
        });
    }

    /// Marks a request as started; it is in progress until the guard (moved into the
    /// response body) is dropped, which hyper does once the body is written.
    pub(crate) fn request_started(self: &Arc<Self>) -> InProgress {
        self.update(|phase| match phase {
            Phase::Busy(n) => Phase::Busy(n.saturating_add(1)),
            Phase::Idle(_) | Phase::Head(_) => Phase::Busy(1),
        });
        InProgress(self.clone())
    }

    /// A write found no room (`true`) or wrote (`false`).
    fn write_stalled(&self, stalled: bool) {
        let mut since = self.stalled_since.lock().unwrap_or_else(|e| e.into_inner());
        *since = match (stalled, *since) {
            (true, Some(start)) => Some(start),
            (true, None) => Some(Instant::now()),
            (false, _) => None,
        };
    }

    /// When the connection is to be closed if nothing happens first; `None` while busy
    /// and writing freely.
    fn deadline(&self, limits: &ConnectionLimits) -> Option<Instant> {
        let phase = match *self.phase.lock().unwrap_or_else(|e| e.into_inner()) {
            Phase::Idle(since) => Some(since + limits.idle_timeout),
            Phase::Head(since) => Some(since + limits.head_timeout),
            Phase::Busy(_) => None,
        };
        let stalled = self
            .stalled_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .map(|since| since + limits.send_timeout);
        match (phase, stalled) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Resolves when the connection has been idle, or reading one head, for too long.
    pub(crate) async fn expired(&self, limits: ConnectionLimits) {
        loop {
            match self.deadline(&limits) {
                Some(deadline) if deadline <= Instant::now() => return,
                Some(deadline) => tokio::time::sleep_until(deadline).await,
                // Busy: look again later; a response may take long.
                None => {
                    let every = limits
                        .idle_timeout
                        .min(limits.head_timeout)
                        .min(limits.send_timeout);
                    tokio::time::sleep(every).await
                }
            }
        }
    }
}

/// A request in progress; dropping it ends it.
#[derive(Debug)]
pub(crate) struct InProgress(Arc<Watch>);

impl Drop for InProgress {
    fn drop(&mut self) {
        self.0.update(|phase| match phase {
            Phase::Busy(n) if n > 1 => Phase::Busy(n - 1),
            _ => Phase::Idle(Instant::now()),
        });
    }
}

/// A response body that ends its request's [`InProgress`] when hyper drops it.
pub(crate) struct Tracked<B> {
    body: B,
    _request: InProgress,
}

impl<B> Tracked<B> {
    pub(crate) fn new(body: B, request: InProgress) -> Self {
        Tracked {
            body,
            _request: request,
        }
    }
}

impl<B: Body + Unpin> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A socket that tells its [`Watch`] when bytes arrive and when writes stall.
pub(crate) struct WatchedIo<T> {
    io: T,
    watch: Arc<Watch>,
    /// What the watch was last told about writes, so that it is told only of changes.
    stalled: bool,
}

impl<T> WatchedIo<T> {
    pub(crate) fn new(io: T, watch: Arc<Watch>) -> Self {
        WatchedIo {
            io,
            watch,
            stalled: false,
        }
    }

    /// Tells the watch whether the write just polled is waiting for room.
    fn note_write<R>(&mut self, polled: &Poll<R>) {
        let stalled = polled.is_pending();
        if stalled != self.stalled {
            self.stalled = stalled;
            self.watch.write_stalled(stalled);
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WatchedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.watch.bytes_arrived();
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WatchedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, buf);
        self.note_write(&polled);
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        self.note_write(&polled);
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn limits() -> ConnectionLimits {
        ConnectionLimits {
            max_connections: 1,
            max_connections_per_client: 0,
            head_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(2),
            send_timeout: Duration::from_secs(5),
            body_timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn phases_choose_the_timeout() {
        let watch = Watch::new();
        let start = watch.deadline(&limits()).unwrap();
        assert!(
            start <= Instant::now() + limits().idle_timeout,
            "idle at first"
        );
        watch.bytes_arrived();
        let head = watch.deadline(&limits()).unwrap();
        assert!(
            head > start + Duration::from_secs(7),
            "a head gets the head timeout"
        );
        let first = watch.request_started();
        let second = watch.request_started();
        assert_eq!(watch.deadline(&limits()), None, "busy");
        drop(first);
        watch.bytes_arrived();
        assert_eq!(watch.deadline(&limits()), None, "still busy");
        drop(second);
        let idle = watch.deadline(&limits()).unwrap();
        assert!(idle <= Instant::now() + limits().idle_timeout, "idle again");
    }

    #[test]
    fn a_stalled_write_has_a_deadline_even_while_busy() {
        let watch = Watch::new();
        let _busy = watch.request_started();
        assert_eq!(watch.deadline(&limits()), None);
        watch.write_stalled(true);
        let first = watch.deadline(&limits()).unwrap();
        assert!(first <= Instant::now() + limits().send_timeout);
        watch.write_stalled(true);
        assert_eq!(
            watch.deadline(&limits()),
            Some(first),
            "from the first stall"
        );
        watch.write_stalled(false);
        assert_eq!(watch.deadline(&limits()), None, "a write went out");
    }
}
