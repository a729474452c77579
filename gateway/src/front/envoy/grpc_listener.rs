//! The Envoy gRPC listener's connections and the bounds tonic's server is built with.
//!
//! tonic accepts every connection and waits for its HTTP/2 preface for as long as the
//! client likes, so without these bounds a client that opens sockets and sends nothing
//! would hold the gateway's file descriptors for good. Here:
//!
//! - at most `max_connections` are served at once; one more is closed as soon as it is
//!   accepted (it neither waits in the kernel's queue nor holds a slot);
//! - each must send the HTTP/2 connection preface and the header of its first SETTINGS
//!   frame within `handshake_timeout`, or it is closed;
//! - after that, HTTP/2 keep-alive pings find a peer that went away, a request (its body
//!   read, decided, answered) has `request_timeout`, a connection carries at most
//!   [`MAX_CONCURRENT_STREAMS`] calls at once, and a request's headers are at most
//!   [`MAX_HEADER_LIST_BYTES`].

use crate::rules::one_of::SettingError;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::transport::server::{Connected, TcpConnectInfo};

/// The most calls in flight on one connection (Envoy multiplexes its calls on a few).
pub(crate) const MAX_CONCURRENT_STREAMS: u32 = 256;
/// The largest header list of a request: a `ShouldRateLimit` call's are a few hundred
/// bytes; the descriptors travel in the body.
pub(crate) const MAX_HEADER_LIST_BYTES: u32 = 16 * 1024;
/// HTTP/2 pings on a connection quiet for this long, and how long the answer may take.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// The client's connection preface (24 bytes) and its first frame header (9 bytes).
const HANDSHAKE_BYTES: usize = 24 + 9;

/// `[envoy]`'s bounds of the listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GrpcLimits {
    pub(crate) max_connections: usize,
    pub(crate) handshake_timeout: Duration,
    pub(crate) request_timeout: Duration,
}

impl Default for GrpcLimits {
    fn default() -> Self {
        GrpcLimits {
            max_connections: 1024,
            handshake_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// The fields of `[envoy]` that set [`GrpcLimits`], each optional.
#[derive(Debug, Default)]
pub(crate) struct GrpcLimitFields {
    pub(crate) max_connections: Option<usize>,
    pub(crate) handshake_timeout_ms: Option<u64>,
    pub(crate) request_timeout_ms: Option<u64>,
}

impl GrpcLimitFields {
    pub(crate) fn limits(&self) -> Result<GrpcLimits, SettingError> {
        let default = GrpcLimits::default();
        let ms = |name: &str, value: Option<u64>, default: Duration| match value {
            None => Ok(default),
            Some(0) => Err(SettingError::new(
                format!("[envoy] {name}"),
                "be at least 1",
            )),
            Some(ms) if ms > 3_600_000 => Err(SettingError::new(
                format!("[envoy] {name}"),
                "be at most 3600000 (an hour)",
            )),
            Some(ms) => Ok(Duration::from_millis(ms)),
        };
        let max_connections = match self.max_connections {
            None => default.max_connections,
            Some(n) if (1..=Semaphore::MAX_PERMITS).contains(&n) => n,
            Some(n) => {
                return Err(SettingError::new(
                    format!("[envoy] max_connections {n}"),
                    "be at least 1",
                ))
            }
        };
        Ok(GrpcLimits {
            max_connections,
            handshake_timeout: ms(
                "handshake_timeout_ms",
                self.handshake_timeout_ms,
                default.handshake_timeout,
            )?,
            request_timeout: ms(
                "request_timeout_ms",
                self.request_timeout_ms,
                default.request_timeout,
            )?,
        })
    }
}

/// tonic's server with the bounds above.
pub fn server_builder(limits: GrpcLimits) -> tonic::transport::Server {
    tonic::transport::Server::builder()
        .timeout(limits.request_timeout)
        .max_concurrent_streams(MAX_CONCURRENT_STREAMS)
        .concurrency_limit_per_connection(MAX_CONCURRENT_STREAMS as usize)
        .http2_max_header_list_size(MAX_HEADER_LIST_BYTES)
        .http2_keepalive_interval(Some(KEEPALIVE_INTERVAL))
        .http2_keepalive_timeout(Some(KEEPALIVE_TIMEOUT))
        .tcp_nodelay(true)
}

/// The connections `listener` accepts, at most `limits.max_connections` held at once,
/// each under the handshake timeout.
pub fn incoming(
    listener: TcpListener,
    limits: GrpcLimits,
) -> tokio_stream::wrappers::ReceiverStream<io::Result<GuardedStream>> {
    let (sender, receiver) = tokio::sync::mpsc::channel(64);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(error) => {
                    // EMFILE and the like: wait a little rather than spin, and say so at
                    // most once a second however long it lasts.
                    crate::logging::log_throttled!(
                        crate::logging::Kind::Accept,
                        "the Envoy gRPC listener cannot accept: {error}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            };
            let Ok(slot) = slots.clone().try_acquire_owned() else {
                // Full: closed at once (dropping the stream closes it).
                continue;
            };
            let _ = stream.set_nodelay(true);
            let guarded = GuardedStream {
                inner: stream,
                _slot: slot,
                handshake: Some(Box::pin(tokio::time::sleep(limits.handshake_timeout))),
                read: 0,
            };
            if sender.send(Ok(guarded)).await.is_err() {
                break;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(receiver)
}

/// An accepted connection: it holds its slot until it is dropped, and fails its reads
/// once the handshake timeout passes before the preface and a frame header have come.
pub struct GuardedStream {
    inner: TcpStream,
    _slot: OwnedSemaphorePermit,
    handshake: Option<Pin<Box<tokio::time::Sleep>>>,
    read: usize,
}

impl AsyncRead for GuardedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if this.handshake.is_some() {
                    this.read += buf.filled().len() - before;
                    if this.read >= HANDSHAKE_BYTES {
                        this.handshake = None;
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                let late = this
                    .handshake
                    .as_mut()
                    .is_some_and(|deadline| deadline.as_mut().poll(cx).is_ready());
                if late {
                    Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "no HTTP/2 preface within the handshake timeout",
                    )))
                } else {
                    Poll::Pending
                }
            }
            failed => failed,
        }
    }
}

impl AsyncWrite for GuardedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

impl Connected for GuardedStream {
    type ConnectInfo = TcpConnectInfo;

    fn connect_info(&self) -> TcpConnectInfo {
        self.inner.connect_info()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fields_are_checked() {
        let fields = |m, h, r| GrpcLimitFields {
            max_connections: m,
            handshake_timeout_ms: h,
            request_timeout_ms: r,
        };
        assert_eq!(
            fields(None, None, None).limits().unwrap(),
            GrpcLimits::default()
        );
        let set = fields(Some(3), Some(250), Some(900)).limits().unwrap();
        assert_eq!(set.max_connections, 3);
        assert_eq!(set.handshake_timeout, Duration::from_millis(250));
        assert_eq!(set.request_timeout, Duration::from_millis(900));
        for (bad, expected) in [
            (fields(Some(0), None, None), "max_connections"),
            (fields(None, Some(0), None), "handshake_timeout_ms"),
            (fields(None, None, Some(3_600_001)), "request_timeout_ms"),
        ] {
            let error = bad.limits().unwrap_err().to_string();
            assert!(error.contains(expected), "{error}");
        }
    }
}
