//! Holding a lease of a `concurrency` rule while its request is served: the
//! [`LeaseGuard`] is made as soon as the lease is taken and moves into the response body
//! ([`Leased`]), so that the lease is given back exactly once, whichever comes first: the
//! body sent to its end, the body breaking off, or the response dropped (the client went
//! away, or the request was cut short before the upstream answered). The release is
//! spawned, never awaited in `Drop`; if it cannot reach Redis, `lease_ttl` ends the lease.

use crate::decider::Decider;
use crate::metrics::ReleaseCause;
use crate::rules::Rule;
use hyper::body::{Body, Frame, SizeHint};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// A lease held for one request.
pub struct LeaseGuard {
    decider: Arc<Decider>,
    rule: Arc<Rule>,
    key: String,
    /// `None` once the release is started.
    id: Option<String>,
}

impl LeaseGuard {
    pub fn new(decider: Arc<Decider>, rule: Arc<Rule>, key: String, id: String) -> Self {
        LeaseGuard {
            decider,
            rule,
            key,
            id: Some(id),
        }
    }

    /// Starts giving the lease back, for `cause`; later calls (and the drop) do nothing.
    pub fn release(&mut self, cause: ReleaseCause) {
        let Some(id) = self.id.take() else {
            return;
        };
        self.decider.metrics().lease_releasing(cause);
        // No runtime (the process is shutting down): the lease ends by its lease_ttl.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.decider
                .metrics()
                .lease_released(&self.rule.name, false);
            return;
        };
        let decider = self.decider.clone();
        let rule = self.rule.clone();
        let key = std::mem::take(&mut self.key);
        runtime.spawn(async move {
            let released = decider.release(&rule, &key, &id).await;
            decider.metrics().lease_released(&rule.name, released);
        });
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        self.release(ReleaseCause::Dropped);
    }
}

/// A response body that gives back its request's lease (if it has one) at its end.
pub struct Leased<B> {
    body: B,
    lease: Option<LeaseGuard>,
}

impl<B> Leased<B> {
    pub fn new(body: B, lease: Option<LeaseGuard>) -> Self
    where
        B: Body,
    {
        let mut leased = Leased { body, lease };
        // A body already at its end (HEAD, 204, 304, `Content-Length: 0`) is never polled:
        // the upstream is done with the request, so the slot is free now.
        if leased.body.is_end_stream() {
            leased.release(ReleaseCause::End);
        }
        leased
    }

    fn release(&mut self, cause: ReleaseCause) {
        if let Some(mut lease) = self.lease.take() {
            lease.release(cause);
        }
    }
}

impl<B: Body + Unpin> Body for Leased<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        // The slot is free as soon as the last byte is handed over, not when hyper gets
        // round to dropping the body: with a known length, hyper asks `is_end_stream`
        // instead of polling for the end.
        match &polled {
            Poll::Ready(None) => self.release(ReleaseCause::End),
            Poll::Ready(Some(Err(_))) => self.release(ReleaseCause::Error),
            Poll::Ready(Some(Ok(_))) if self.body.is_end_stream() => {
                self.release(ReleaseCause::End)
            }
            Poll::Ready(Some(Ok(_))) | Poll::Pending => {}
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
