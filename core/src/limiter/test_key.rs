//! The in-memory key the limiter's tests run requests against, and their shared helpers.

use super::{Action, AlgorithmKind, Limits, MemoryKey, Outcome};
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

/// The core's [`MemoryKey`], with the shorthands the tests use: every request must be
/// answered, and the contents compare as a whole.
#[derive(Debug, Default, Clone)]
pub struct Key(pub MemoryKey);

impl Key {
    /// Answers `action` on this key at `now` and stores what the limiter says to.
    pub fn run(&mut self, limits: &Limits, action: Action, now: i64) -> Outcome {
        self.0.run(limits, action, now).expect("answers")
    }

    /// The key as `PERSIST` leaves it: same value, no expiry.
    pub fn persisted(&self) -> Key {
        Key(self.0.persisted())
    }

    /// The value and its expiry (`None`: none), or `None` for no key.
    pub fn contents(&self) -> Option<(Vec<u8>, Option<i64>)> {
        self.0
            .value()
            .map(|value| (value.to_vec(), self.0.expires_at_ms()))
    }

    /// The stored value and its expiry; the key must exist and have an expiry.
    pub fn value_and_expiry(&self) -> (Vec<u8>, i64) {
        match self.contents() {
            Some((value, Some(expiry))) => (value, expiry),
            other => panic!("a value with an expiry, not {other:?}"),
        }
    }
}
