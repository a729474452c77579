//! Holding a lease of a `concurrency` rule while its request is served. The [`LeaseGuard`]
//! is made *before* `RL.ACQUIRE` is sent, under an id the gateway chooses, and moves into
//! the response body ([`Leased`]), so that the lease is given back exactly once, whichever
//! comes first: the body sent to its end, the body breaking off, or the response dropped
//! (the client went away, or the request was cut short before the upstream answered).
//!
//! Made before the call, it also covers the call itself: a request dropped while
//! `RL.ACQUIRE` is in flight, or a call whose deadline passed, may leave a lease that
//! Redis takes after the gateway stopped listening (Redis stopped for a moment runs the
//! calls it had queued when it resumes). Nobody would hold that slot, yet it would stay
//! taken for `lease_ttl`, and a client could lock others out with requests it drops. Since
//! the id is the gateway's, such a lease is given back (`RL.RELEASE` after the
//! `RL.ACQUIRE` on the same connection, so it runs after it); `RL.RELEASE` of an id
//! never taken changes nothing.
//!
//! Releases are spawned, never awaited in `Drop`; if one cannot reach Redis, `lease_ttl`
//! ends the lease.

use super::redis::Backend;
use super::{Decider, LeaseAnswer, Released, Transport};
use crate::metrics::ReleaseCause;
use crate::rules::Rule;
use bytes::Buf;
use hyper::body::{Body, Frame, SizeHint};
use std::future::Future;
use std::hash::BuildHasher;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use tokio::sync::oneshot;

/// A fresh lease id: 64 bits drawn once per process, then a counter, as 32 lowercase hex
/// digits (which the module stores as the 16 bytes they spell, as its own ids). Unique on
/// a key across gateways and restarts as long as two processes never draw the same 64
/// bits; an id is no secret, since only the gateway speaks to Redis.
pub(crate) fn new_lease_id() -> String {
    static PROCESS: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    // std's RandomState is keyed from the operating system's random source.
    let process = *PROCESS.get_or_init(|| {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        std::collections::hash_map::RandomState::new().hash_one((std::process::id(), now))
    });
    format!("{process:016x}{:016x}", NEXT.fetch_add(1, Relaxed))
}

/// A lease asked for, then held, for one request; `T` is how the decider reaches Redis.
pub(crate) struct LeaseGuard<T: Transport = Backend> {
    decider: Arc<Decider<T>>,
    rule: Arc<Rule>,
    key: String,
    /// `None` once the release is started, or when Redis answered that it took none.
    id: Option<String>,
    /// Whether Redis answered that it took the lease (counted as held); until then a
    /// release only makes sure no lease of this id is left behind.
    taken: bool,
    /// Stops the task that renews the lease while it is held (dropped: stopped).
    renewing: Option<oneshot::Sender<()>>,
}

/// A lease shorter than this is not renewed: renewing it every half of its length would
/// be a Redis call every few ms for one request (such a short lease_ttl is a deliberate cut
/// off).
const MIN_RENEWED_TTL_MS: u64 = 500;

/// Renews lease `id` of `rule` on `key` every half of its `ttl_ms`, for as long as it is
/// held: a response in flight longer than lease_ttl (a stream, a long download) keeps its
/// slot, and lease_ttl only bounds how long the slot of a gateway that died stays taken.
/// Ends when `stop` is told (or dropped: the lease is being given back), or when a renewal
/// finds the lease gone (it ended while Redis could not be reached in time).
async fn keep_renewed<T: Transport>(
    decider: Arc<Decider<T>>,
    rule: Arc<Rule>,
    key: String,
    id: String,
    ttl_ms: u64,
    mut stop: oneshot::Receiver<()>,
) {
    let every = std::time::Duration::from_millis(ttl_ms / 2);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            () = tokio::time::sleep(every) => {}
        }
        match decider.renew(&rule, &key, &id, ttl_ms).await {
            Some(true) => decider.metrics().lease_renewed(&rule.name),
            Some(false) => {
                decider.metrics().lease_lost(&rule.name);
                return;
            }
            // No answer in time: the next try comes before the lease can have ended.
            None => {}
        }
    }
}

impl<T: Transport> LeaseGuard<T> {
    /// A guard for the lease about to be asked for under [`LeaseGuard::id`].
    pub(crate) fn asking(decider: Arc<Decider<T>>, rule: Arc<Rule>, key: String) -> Self {
        LeaseGuard {
            decider,
            rule,
            key,
            id: Some(new_lease_id()),
            taken: false,
            renewing: None,
        }
    }

    /// The id `RL.ACQUIRE` is to take the lease under.
    pub(crate) fn id(&self) -> &str {
        self.id.as_deref().unwrap_or_default()
    }

    /// What the call answered: the guard if the lease is held. An unanswered call's lease
    /// is given back at once, in case Redis took (or will take) it.
    pub(crate) fn answered(mut self, answer: LeaseAnswer) -> Option<Self> {
        match answer {
            LeaseAnswer::Taken => {
                self.taken = true;
                self.start_renewing();
                Some(self)
            }
            LeaseAnswer::NotTaken => {
                self.id = None;
                None
            }
            // Dropped here: released as never confirmed.
            LeaseAnswer::Unknown => None,
        }
    }

    /// Spawns [`keep_renewed`] for the lease just taken, if its lease_ttl is long enough.
    fn start_renewing(&mut self) {
        let Some(ttl_ms) = self.rule.concurrency.as_ref().map(|c| c.lease_ttl_ms) else {
            return;
        };
        let (Some(id), Ok(runtime)) = (&self.id, tokio::runtime::Handle::try_current()) else {
            return;
        };
        if ttl_ms < MIN_RENEWED_TTL_MS {
            return;
        }
        let (stop, stopped) = oneshot::channel();
        runtime.spawn(keep_renewed(
            self.decider.clone(),
            self.rule.clone(),
            self.key.clone(),
            id.clone(),
            ttl_ms,
            stopped,
        ));
        self.renewing = Some(stop);
    }

    /// Starts giving the lease back, for `cause`; later calls (and the drop) do nothing.
    /// What it returns is told when Redis has answered (or the release was given up on).
    pub(crate) fn release(&mut self, cause: ReleaseCause) -> Option<oneshot::Receiver<()>> {
        // No renewal after this: one already sent runs before the release (same
        // connection), and one that comes after it finds the lease gone and changes nothing.
        drop(self.renewing.take());
        let id = self.id.take()?;
        let taken = self.taken;
        if taken {
            self.decider.metrics().lease_releasing(cause);
        }
        // No runtime (the process is shutting down): the lease ends by its lease_ttl.
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            if taken {
                self.decider
                    .metrics()
                    .lease_released(&self.rule.name, false);
            }
            return None;
        };
        let (done, settled) = oneshot::channel();
        let decider = self.decider.clone();
        let rule = self.rule.clone();
        let key = std::mem::take(&mut self.key);
        runtime.spawn(async move {
            let released = decider.release(&rule, &key, &id).await;
            let metrics = decider.metrics();
            match (taken, released) {
                (true, released) => {
                    metrics.lease_released(&rule.name, released != Released::Failed)
                }
                (false, Released::Freed) => metrics.lease_reclaimed(&rule.name),
                (false, Released::NotHeld | Released::Failed) => {}
            }
            let _ = done.send(());
        });
        Some(settled)
    }
}

impl<T: Transport> Drop for LeaseGuard<T> {
    fn drop(&mut self) {
        let _ = self.release(ReleaseCause::Dropped);
    }
}
/// A response body that gives back its request's lease (if it has one) at its end.
///
/// The end (the last frame, or the end of a chunked body) is held back until Redis has
/// answered the release, for `deadline_ms` at most: a client that sends its next request
/// once it has read this response would otherwise often meet its own lease, still held
/// while the spawned release is on its way (a 429 at `concurrency = 1` for a client that
/// never has two requests in flight). The wait is bounded by the decision deadline, so a
/// slow Redis delays no response's end by more than a decision could; the release goes on
/// in the background after that.
pub struct Leased<B: Body, T: Transport = Backend> {
    body: B,
    lease: Option<LeaseGuard<T>>,
    /// The release being waited for, once the body has come to its end.
    settling: Option<Pin<Box<dyn Future<Output = ()> + Send>>>,
    /// The last frame, handed over once `settling` is done (none: the end itself).
    held_back: Option<Frame<B::Data>>,
    wait: std::time::Duration,
}

impl<B: Body, T: Transport> Leased<B, T> {
    pub(crate) fn new(body: B, lease: Option<LeaseGuard<T>>) -> Self {
        let wait = lease
            .as_ref()
            .map_or(std::time::Duration::ZERO, |l| l.decider.deadline());
        let mut leased = Leased {
            body,
            lease,
            settling: None,
            held_back: None,
            wait,
        };
        // A body already at its end (HEAD, 204, 304, `Content-Length: 0`) is never polled:
        // the upstream is done with the request, so the slot is free now (not waited for:
        // hyper writes such a response without asking the body).
        if leased.body.is_end_stream() {
            if let Some(mut lease) = leased.lease.take() {
                let _ = lease.release(ReleaseCause::End);
            }
        }
        leased
    }

    /// Starts the release; when `wait`, the end is held back until it is answered.
    fn release(&mut self, cause: ReleaseCause, wait: bool) {
        let Some(mut lease) = self.lease.take() else {
            return;
        };
        let Some(settled) = lease.release(cause) else {
            return;
        };
        if wait {
            let bound = self.wait;
            self.settling = Some(Box::pin(async move {
                let _ = tokio::time::timeout(bound, settled).await;
            }));
        }
    }
}

impl<B: Body + Unpin, T: Transport> Body for Leased<B, T>
where
    B::Data: Unpin,
{
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = &mut *self;
        if let Some(settling) = &mut this.settling {
            if settling.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            this.settling = None;
            return Poll::Ready(this.held_back.take().map(Ok));
        }
        let polled = Pin::new(&mut this.body).poll_frame(cx);
        // The slot is free as soon as the last byte is handed over, not when hyper gets
        // round to dropping the body: with a known length, hyper asks `is_end_stream`
        // instead of polling for the end.
        let end = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Err(_))) => {
                // Broken off: the connection is cut, no next request to race.
                this.release(ReleaseCause::Error, false);
                false
            }
            Poll::Ready(Some(Ok(_))) => this.body.is_end_stream(),
            Poll::Pending => false,
        };
        if !end || this.lease.is_none() {
            return polled;
        }
        this.release(ReleaseCause::End, true);
        if this.settling.is_none() {
            return polled;
        }
        this.held_back = match polled {
            Poll::Ready(Some(Ok(frame))) => Some(frame),
            _ => None,
        };
        // Polled once now, so that its answer wakes this body.
        self.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.settling.is_none() && self.held_back.is_none() && self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        match &self.held_back {
            // The last frame, still to come.
            Some(frame) => frame.data_ref().map_or_else(SizeHint::default, |data| {
                SizeHint::with_exact(data.remaining() as u64)
            }),
            None => self.body.size_hint(),
        }
    }
}
