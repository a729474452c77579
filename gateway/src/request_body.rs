//! A request body on its way to the upstream, under `[connections] body_timeout_ms`.
//!
//! The body is streamed: the upstream connection is taken when the head has been decided
//! on, and held until the body's last byte has gone. A client sending its body a byte at a
//! time would hold that connection (and, behind a thread-per-request upstream such as
//! gunicorn's sync workers or PHP-FPM, a whole worker) for as long as `upstream_timeout_ms`,
//! and a few hundred such clients fill the upstream.
//!
//! The timeout counts the time spent waiting for the client's bytes, summed over the whole
//! body, not the longest wait between two reads as nginx's `client_body_timeout` does: a
//! byte every few seconds resets a between-reads timer for ever, so that timer bounds
//! nothing an attacker cares about. Time spent waiting for the upstream to take the bytes
//! (its own backpressure) is not counted, so a slow upstream is not blamed on the client.
//! When the time is up the body ends in an error, which makes hyper close the upstream
//! connection (the upstream sees its request cut short) and fail the request, and the
//! gateway answers 408 if it has not answered yet. A body that itself breaks off (broken
//! chunked framing, the client gone) is told apart too: it is the client's fault, not the
//! upstream's.

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Why a request body ended early.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fault {
    /// The client took longer than the timeout to send it.
    TimedOut,
    /// It broke off: bad framing, or the client went away.
    Broken,
}

const NO_FAULT: u8 = 0;
const TIMED_OUT: u8 = 1;
const BROKEN: u8 = 2;

/// What became of a body, readable after hyper's client has taken it away.
#[derive(Debug, Clone, Default)]
pub(crate) struct Outcome(Arc<AtomicU8>);

impl Outcome {
    pub(crate) fn fault(&self) -> Option<Fault> {
        match self.0.load(Ordering::Acquire) {
            TIMED_OUT => Some(Fault::TimedOut),
            BROKEN => Some(Fault::Broken),
            _ => None,
        }
    }

    fn set(&self, fault: u8) {
        let _ = self
            .0
            .compare_exchange(NO_FAULT, fault, Ordering::AcqRel, Ordering::Acquire);
    }
}

/// The error a [`TimedBody`] ends in.
#[derive(Debug)]
pub enum BodyError {
    TimedOut(Duration),
    Broken(Box<dyn std::error::Error + Send + Sync>),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::TimedOut(limit) => write!(
                f,
                "the request body did not arrive within body_timeout_ms = {}",
                limit.as_millis()
            ),
            BodyError::Broken(error) => write!(f, "the request body broke off: {error}"),
        }
    }
}

impl std::error::Error for BodyError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            BodyError::TimedOut(_) => None,
            BodyError::Broken(error) => Some(&**error),
        }
    }
}

/// A request body that ends in an error once the gateway has waited `limit` for it.
pub struct TimedBody<B> {
    body: B,
    limit: Duration,
    /// What is left of `limit`, as of the end of the last wait.
    left: Duration,
    /// Since when the body has been waited for, if it is now.
    waiting_since: Option<Instant>,
    /// Made at the first wait: a body that never waits (a small one, all in the first
    /// read) costs no timer.
    timer: Option<Pin<Box<Sleep>>>,
    outcome: Outcome,
}

impl<B> TimedBody<B> {
    pub(crate) fn new(body: B, limit: Duration) -> (Self, Outcome) {
        let outcome = Outcome::default();
        let timed = TimedBody {
            body,
            limit,
            left: limit,
            waiting_since: None,
            timer: None,
            outcome: outcome.clone(),
        };
        (timed, outcome)
    }
}

impl<B> Body for TimedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => {
                if let Some(since) = this.waiting_since.take() {
                    this.left = this.left.saturating_sub(since.elapsed());
                }
                Poll::Ready(frame.map(|result| {
                    result.map_err(|error| {
                        this.outcome.set(BROKEN);
                        BodyError::Broken(error.into())
                    })
                }))
            }
            Poll::Pending => {
                let since = *this.waiting_since.get_or_insert_with(Instant::now);
                let deadline = since + this.left;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                if timer.deadline() != deadline {
                    timer.as_mut().reset(deadline);
                }
                if timer.as_mut().poll(cx).is_ready() {
                    this.outcome.set(TIMED_OUT);
                    return Poll::Ready(Some(Err(BodyError::TimedOut(this.limit))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A body that yields `ready` frames, then waits for ever (or breaks, if `broken`).
    struct Client {
        ready: usize,
        broken: bool,
    }

    impl Body for Client {
        type Data = Bytes;
        type Error = std::io::Error;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            if self.ready > 0 {
                self.ready -= 1;
                return Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"x")))));
            }
            if self.broken {
                return Poll::Ready(Some(Err(std::io::Error::other("bad chunk size"))));
            }
            Poll::Pending
        }
    }

    #[tokio::test]
    async fn a_body_that_stops_coming_times_out() {
        let client = Client {
            ready: 3,
            broken: false,
        };
        let (mut body, outcome) = TimedBody::new(client, Duration::from_millis(50));
        for _ in 0..3 {
            let frame = body.frame().await.unwrap().unwrap();
            assert_eq!(frame.into_data().unwrap(), "x");
        }
        assert_eq!(outcome.fault(), None, "frames at once never wait");
        let error = body.frame().await.unwrap().unwrap_err();
        assert!(matches!(error, BodyError::TimedOut(_)), "{error}");
        assert!(error.to_string().contains("body_timeout_ms = 50"));
        assert_eq!(outcome.fault(), Some(Fault::TimedOut));
    }

    #[tokio::test]
    async fn a_broken_body_is_the_clients_fault() {
        let client = Client {
            ready: 1,
            broken: true,
        };
        let (mut body, outcome) = TimedBody::new(client, Duration::from_secs(60));
        assert!(body.frame().await.unwrap().is_ok());
        let error = body.frame().await.unwrap().unwrap_err();
        assert!(error.to_string().contains("bad chunk size"), "{error}");
        assert_eq!(outcome.fault(), Some(Fault::Broken));
    }

    #[test]
    fn the_first_fault_stays() {
        let outcome = Outcome::default();
        outcome.set(TIMED_OUT);
        outcome.set(BROKEN);
        assert_eq!(outcome.fault(), Some(Fault::TimedOut));
    }
}
