//! How busy a key is: the units its requests asked for in about the last interval, counted
//! in two intervals and weighted as the sliding window counter weighs them (the previous
//! interval's units as if spread evenly over it). Two integers and a time a key: cheap
//! enough to keep for every key, and what sizes the key's next batch.

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub(crate) struct Arrivals {
    /// When the current interval started.
    started: Instant,
    current: u64,
    previous: u64,
}

impl Arrivals {
    pub(crate) fn new(now: Instant) -> Arrivals {
        Arrivals {
            started: now,
            current: 0,
            previous: 0,
        }
    }

    /// Counts a request of `units` at `now`.
    pub(crate) fn record(&mut self, units: u64, now: Instant, interval: Duration) {
        self.roll(now, interval);
        self.current = self.current.saturating_add(units);
    }

    /// The units asked for in the interval up to `now` (the previous interval's share
    /// weighted by how much of it that interval still covers).
    pub(crate) fn per_interval(&mut self, now: Instant, interval: Duration) -> u64 {
        self.roll(now, interval);
        let elapsed = now.saturating_duration_since(self.started).as_micros();
        let length = interval.as_micros().max(1);
        let left = length.saturating_sub(elapsed);
        let weighted = u128::from(self.previous) * left / length;
        u64::try_from(weighted)
            .unwrap_or(u64::MAX)
            .saturating_add(self.current)
    }

    /// Moves the intervals on to the one `now` falls in.
    fn roll(&mut self, now: Instant, interval: Duration) {
        let elapsed = now.saturating_duration_since(self.started);
        if elapsed < interval {
            return;
        }
        // One interval on, the current becomes the previous; two or more, both are past.
        self.previous = if elapsed < interval * 2 {
            self.current
        } else {
            0
        };
        self.current = 0;
        let intervals = elapsed.as_nanos() / interval.as_nanos().max(1);
        let whole = u32::try_from(intervals).unwrap_or(u32::MAX);
        self.started = self
            .started
            .checked_add(interval.saturating_mul(whole))
            .unwrap_or(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn counts_the_last_interval_and_weighs_the_one_before() {
        let t0 = Instant::now();
        let interval = 20 * MS;
        let mut arrivals = Arrivals::new(t0);
        for i in 0..10 {
            arrivals.record(1, t0 + i * MS, interval);
        }
        assert_eq!(arrivals.per_interval(t0 + 10 * MS, interval), 10);
        // Half-way into the next interval: half of the previous ten still weigh.
        assert_eq!(arrivals.per_interval(t0 + 30 * MS, interval), 5);
        arrivals.record(2, t0 + 30 * MS, interval);
        assert_eq!(arrivals.per_interval(t0 + 30 * MS, interval), 7);
        // Two intervals of silence: nothing is left.
        assert_eq!(arrivals.per_interval(t0 + 80 * MS, interval), 0);
    }

    #[test]
    fn a_key_seen_once_counts_one() {
        let t0 = Instant::now();
        let mut arrivals = Arrivals::new(t0);
        arrivals.record(1, t0, 20 * MS);
        assert_eq!(arrivals.per_interval(t0, 20 * MS), 1);
        assert_eq!(arrivals.per_interval(t0 + 45 * MS, 20 * MS), 0);
    }
}
