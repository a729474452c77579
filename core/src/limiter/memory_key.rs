//! A key held in memory the way a server holds it, for callers that decide without one: the
//! crate's own tests, the fuzz targets, the benchmarks, and anyone embedding the core.

use super::{run, take, Action, Grant, LimiterError, Limits, Outcome, Write};

/// A key's value and its absolute expiry, or no key at all.
///
/// [`run`](MemoryKey::run) answers a request on it and stores what the limiter says to,
/// exactly as the Redis module does with a real key (minus replication).
///
/// ```
/// use ratelimit_core::args::{parse_limits, Settings};
/// use ratelimit_core::limiter::{Action, MemoryKey};
///
/// let words: [&[u8]; 4] = [b"2", b"1s", b"ALGO", b"log"];
/// let limits = parse_limits(words.into_iter(), &Settings::default()).expect("a rule").limits;
/// let mut key = MemoryKey::default();
/// let now_ms = 1_796_083_200_000;
/// let hit = Action::Hit { cost: 1 };
/// assert!(key.run(&limits, hit, now_ms)?.decision.allowed);
/// assert!(key.run(&limits, hit, now_ms + 400)?.decision.allowed);
/// let third = key.run(&limits, hit, now_ms + 900)?;
/// assert!(!third.decision.allowed);
/// assert_eq!(third.decision.retry_after_ms, 100); // when the first hit is 1 s old
/// assert_eq!(key.expires_at_ms(), Some(now_ms + 400 + 1_000));
/// # Ok::<(), ratelimit_core::limiter::LimiterError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemoryKey {
    /// The value and its expiry (`None`: the key has none, as `PERSIST` leaves it);
    /// `None` as a whole: no key.
    stored: Option<(Vec<u8>, Option<i64>)>,
}

impl MemoryKey {
    /// A key holding `value`, expiring at `expires_at_ms` (`None`: never).
    pub fn holding(value: Vec<u8>, expires_at_ms: Option<i64>) -> Self {
        MemoryKey {
            stored: Some((value, expires_at_ms)),
        }
    }

    /// The stored value; `None` when there is no key.
    pub fn value(&self) -> Option<&[u8]> {
        self.stored.as_ref().map(|(value, _)| value.as_slice())
    }

    /// The key's absolute expiry; `None` when it has none or there is no key.
    pub fn expires_at_ms(&self) -> Option<i64> {
        self.stored.as_ref().and_then(|&(_, expiry)| expiry)
    }

    /// The answer to `action` at `now_ms`, without storing it.
    pub fn decide(
        &self,
        limits: &Limits,
        action: Action,
        now_ms: i64,
    ) -> Result<Outcome, LimiterError> {
        run(
            limits,
            action,
            self.value(),
            || self.expires_at_ms(),
            now_ms,
        )
    }

    /// Makes the change the limiter decided.
    pub fn apply(&mut self, write: &Write) {
        match write {
            Write::Nothing => {}
            Write::Set {
                value,
                expires_at_ms,
            } => self.stored = Some((value.to_vec(), Some(*expires_at_ms))),
            Write::Delete => self.stored = None,
        }
    }

    /// Answers `action` at `now_ms` and stores what the limiter says to.
    pub fn run(
        &mut self,
        limits: &Limits,
        action: Action,
        now_ms: i64,
    ) -> Result<Outcome, LimiterError> {
        let outcome = self.decide(limits, action, now_ms)?;
        self.apply(&outcome.write);
        Ok(outcome)
    }

    /// Counts up to `upto` units at `now_ms` (a partial grant, see [`take`]) and stores
    /// what the limiter says to.
    pub fn take(&mut self, limits: &Limits, upto: i64, now_ms: i64) -> Result<Grant, LimiterError> {
        let grant = take(limits, upto, self.value(), || self.expires_at_ms(), now_ms)?;
        self.apply(&grant.outcome.write);
        Ok(grant)
    }

    /// The key as `PERSIST` leaves it: the same value, no expiry.
    pub fn persisted(&self) -> MemoryKey {
        MemoryKey {
            stored: self.stored.clone().map(|(value, _)| (value, None)),
        }
    }
}
