//! Keys that Redis denied, kept until their retry time, so that a client hammering a limit
//! it already exceeded is answered 429 without a Redis call. Bounded; least recently used
//! entries go first.

use crate::verdict::Verdict;
use lru::LruCache;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::Instant;

pub(crate) struct DenyCache {
    entries: Option<Mutex<LruCache<String, Entry>>>,
}

struct Entry {
    denied_at: Instant,
    until: Instant,
    verdict: Verdict,
}

impl DenyCache {
    /// A cache of at most `capacity` keys; 0 turns it off.
    pub(crate) fn new(capacity: usize) -> Self {
        DenyCache {
            entries: NonZeroUsize::new(capacity).map(|c| Mutex::new(LruCache::new(c))),
        }
    }

    pub(crate) fn remember(&self, key: &str, verdict: &Verdict, now: Instant) {
        let Some(entries) = &self.entries else { return };
        let wait = verdict.binding().retry_after_ms;
        if wait == 0 {
            return;
        }
        // A wait too long to add to the clock (a request that can never pass) is not
        // cached: Redis keeps answering it.
        let Some(until) = now.checked_add(std::time::Duration::from_millis(wait)) else {
            return;
        };
        let entry = Entry {
            denied_at: now,
            until,
            verdict: verdict.clone(),
        };
        entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .put(key.to_owned(), entry);
    }

    /// Forgets the denial of `key`: units were given back to it.
    pub(crate) fn forget(&self, key: &str) {
        if let Some(entries) = &self.entries {
            entries.lock().unwrap_or_else(|e| e.into_inner()).pop(key);
        }
    }

    /// Forgets every denial: they were made under rules that may have just changed.
    pub(crate) fn clear(&self) {
        if let Some(entries) = &self.entries {
            entries.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }

    /// The denial of `key` as it stands at `now` (its waits shortened by the time passed),
    /// if it is still in force.
    pub(crate) fn check(&self, key: &str, now: Instant) -> Option<Verdict> {
        let entries = self.entries.as_ref()?;
        let mut entries = entries.lock().unwrap_or_else(|e| e.into_inner());
        let entry = entries.get(key)?;
        if now >= entry.until {
            entries.pop(key);
            return None;
        }
        let passed = now.duration_since(entry.denied_at).as_millis();
        Some(
            entry
                .verdict
                .aged(u64::try_from(passed).unwrap_or(u64::MAX)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verdict::TierState;
    use std::time::Duration;

    fn denied(retry_after_ms: u64) -> Verdict {
        Verdict::single(TierState {
            allowed: false,
            limit: 5,
            remaining: 0,
            reset_after_ms: 60_000,
            retry_after_ms,
        })
    }

    #[test]
    fn answers_until_the_retry_time() {
        let cache = DenyCache::new(2);
        let t0 = Instant::now();
        cache.remember("a", &denied(1_500), t0);
        let aged = cache.check("a", t0 + Duration::from_millis(500)).unwrap();
        assert_eq!(aged.binding().retry_after_ms, 1_000);
        assert_eq!(aged.binding().reset_after_ms, 59_500);
        assert!(cache
            .check("a", t0 + Duration::from_millis(1_500))
            .is_none());
        assert!(cache.check("b", t0).is_none());
    }

    #[test]
    fn bounded_and_off_at_zero() {
        let cache = DenyCache::new(2);
        let t0 = Instant::now();
        for key in ["a", "b", "c"] {
            cache.remember(key, &denied(1_000), t0);
        }
        assert!(cache.check("a", t0).is_none(), "the oldest went");
        assert!(cache.check("c", t0).is_some());
        let off = DenyCache::new(0);
        off.remember("a", &denied(1_000), t0);
        assert!(off.check("a", t0).is_none());
        cache.clear();
        assert!(cache.check("c", t0).is_none(), "cleared");
        cache.remember("z", &denied(0), t0);
        assert!(
            cache.check("z", t0).is_none(),
            "nothing to wait for, nothing cached"
        );
    }
}
