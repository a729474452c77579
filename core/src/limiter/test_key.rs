//! The in-memory key the limiter's tests run requests against, and their shared helpers.

use super::{run, Action, AlgorithmKind, Limits, Outcome, Write};
use crate::algorithm::Quota;

/// 2026-11-30T00:00:00Z.
pub const T0: i64 = 1_796_083_200_000;
pub const HOUR: i64 = 3_600_000;

/// Fixed-window limits with `(limit, window_ms)` tiers.
pub fn fixed(tiers: &[(i64, i64)]) -> Limits {
    Limits {
        algorithm: AlgorithmKind::Fixed,
        tiers: tiers.iter().map(|&(l, w)| Quota::new(l, w)).collect(),
    }
}

/// A key as the store would hold it: its value and its absolute expiry, which is `None`
/// for a key without one (as `PERSIST` or `RESTORE key 0 ...` leave it). `None` as a
/// whole: no key.
#[derive(Debug, Default, Clone)]
pub struct Key(pub Option<(Vec<u8>, Option<i64>)>);

impl Key {
    /// Answers `action` on this key at `now` and stores what the limiter says to.
    pub fn run(&mut self, limits: &Limits, action: Action, now: i64) -> Outcome {
        let stored = self.0.clone();
        let outcome = run(
            limits,
            action,
            stored.as_ref().map(|(v, _)| v.as_slice()),
            || stored.as_ref().and_then(|(_, e)| *e),
            now,
        )
        .expect("answers");
        match &outcome.write {
            Write::Nothing => {}
            Write::Set {
                value,
                expires_at_ms,
            } => self.0 = Some((value.to_vec(), Some(*expires_at_ms))),
            Write::Delete => self.0 = None,
        }
        outcome
    }

    /// The key as `PERSIST` leaves it: same value, no expiry.
    pub fn persisted(&self) -> Key {
        Key(self.0.clone().map(|(value, _)| (value, None)))
    }

    /// The stored value and its expiry; the key must exist and have an expiry.
    pub fn value_and_expiry(&self) -> (Vec<u8>, i64) {
        match self.0.clone() {
            Some((value, Some(expiry))) => (value, expiry),
            other => panic!("a value with an expiry, not {other:?}"),
        }
    }
}
