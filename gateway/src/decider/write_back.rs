//! What local limits admitted while Redis could not decide, counted in Redis once it
//! answers, so that its budgets do not start afresh on top of them (no burst when Redis is
//! back).

use super::commands::hit_cmd;
use super::local_limits::Unsynced;
use super::{Applied, Decider, Transport, MIN_RELEASE_DEADLINE};
use crate::verdict::Verdict;

impl<T: Transport> Decider<T> {
    /// Counts in Redis, in the background, what local limits admitted since the last time
    /// (see `write_back`); nothing to do costs one atomic read. Called when a decision is
    /// answered, and by the heartbeat, so that every gateway of a fleet writes back within
    /// one beat of Redis's return, whatever its breaker says.
    pub(crate) fn write_back_local(&self) {
        if let Some(unsynced) = self.local.take_unsynced(super::local_limits::now_ms) {
            tokio::spawn(write_back(self.backend.clone(), unsynced));
        }
    }
}

/// Counts in Redis what local limits admitted while it could not decide. `RL.HIT` counts
/// all of a cost or nothing: a cost denied is tried again at half, and what is left after
/// an allowed part is tried again, so what the budget still holds (up to the units) is
/// counted, in about log2(units) calls.
async fn write_back<T: Transport>(backend: T, unsynced: Vec<Unsynced>) {
    for item in unsynced {
        let mut left = item.units;
        let mut trying = left;
        while left > 0 && trying > 0 {
            let applied = Applied {
                rule: item.rule.clone(),
                key: item.key.clone(),
                cost: Some(trying),
            };
            let cmd = hit_cmd("RL.HIT", &applied);
            let call = backend.call(&cmd, Some(&item.key));
            match tokio::time::timeout(MIN_RELEASE_DEADLINE, call).await {
                Ok(Ok(reply)) => match Verdict::from_reply(&reply) {
                    Some(verdict) if verdict.allowed() => {
                        left -= trying;
                        trying = trying.min(left);
                    }
                    Some(_) => trying /= 2,
                    None => break,
                },
                _ => break,
            }
        }
    }
}
