//! A circuit breaker in front of Redis: after `failures_to_open` failed calls in a row it
//! opens, and decisions fail at once without a call, so a dead or frozen Redis costs
//! nothing per request. When `open_for` has passed, one call is let through as a probe: its
//! success closes the breaker, its failure opens it again.

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct Breaker {
    failures_to_open: u32,
    open_for: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    failures_in_a_row: u32,
    open_until: Option<Instant>,
    /// When the probe in flight was let through. A probe whose request was dropped (its
    /// client went away) never reports; after another `open_for` the next caller probes.
    probe_since: Option<Instant>,
}

impl Breaker {
    pub fn new(failures_to_open: u32, open_for: Duration) -> Self {
        Breaker {
            failures_to_open,
            open_for,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a call may go to Redis now. When the open period is over, the first caller
    /// is the probe; the others keep failing fast until the probe reports.
    pub fn allows(&self, now: Instant) -> bool {
        let mut state = self.state();
        let Some(until) = state.open_until else {
            return true;
        };
        let probing = state
            .probe_since
            .is_some_and(|since| now < since + self.open_for);
        if now < until || probing {
            return false;
        }
        state.probe_since = Some(now);
        true
    }

    pub fn succeeded(&self) {
        let mut state = self.state();
        if state.failures_in_a_row != 0 || state.open_until.is_some() {
            *state = State::default();
        }
    }

    pub fn failed(&self, now: Instant) {
        let mut state = self.state();
        state.failures_in_a_row = state.failures_in_a_row.saturating_add(1);
        if state.probe_since.is_some() || state.failures_in_a_row >= self.failures_to_open {
            state.open_until = Some(now + self.open_for);
            state.probe_since = None;
        }
    }

    /// Open or half-open (waiting for a probe's answer): not closed.
    pub fn is_open(&self) -> bool {
        self.state().open_until.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_that_never_reports_is_replaced() {
        let breaker = Breaker::new(1, Duration::from_millis(100));
        let t0 = Instant::now();
        breaker.failed(t0);
        let t1 = t0 + Duration::from_millis(100);
        assert!(breaker.allows(t1), "the probe");
        // Its request is dropped: no succeeded() or failed() ever comes.
        assert!(!breaker.allows(t1 + Duration::from_millis(99)));
        assert!(breaker.is_open(), "half-open counts as open");
        assert!(
            breaker.allows(t1 + Duration::from_millis(100)),
            "a new probe"
        );
        breaker.succeeded();
        assert!(!breaker.is_open());
    }

    #[test]
    fn opens_after_failures_in_a_row_then_probes_once() {
        let breaker = Breaker::new(3, Duration::from_millis(100));
        let t0 = Instant::now();
        breaker.failed(t0);
        breaker.failed(t0);
        breaker.succeeded();
        breaker.failed(t0);
        breaker.failed(t0);
        assert!(breaker.allows(t0), "a success resets the count");
        breaker.failed(t0);
        assert!(!breaker.allows(t0));
        assert!(breaker.is_open());
        let later = t0 + Duration::from_millis(150);
        assert!(breaker.allows(later), "the probe");
        assert!(!breaker.allows(later), "only one probe at a time");
        breaker.failed(later);
        assert!(
            !breaker.allows(later + Duration::from_millis(50)),
            "a failed probe reopens"
        );
        let after = later + Duration::from_millis(200);
        assert!(breaker.allows(after));
        breaker.succeeded();
        assert!(
            breaker.allows(after) && breaker.allows(after),
            "closed again"
        );
        assert!(!breaker.is_open());
    }
}
