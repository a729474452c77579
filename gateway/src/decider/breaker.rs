//! A circuit breaker in front of Redis. While it is open, decisions fail at once without a
//! call, so a dead or frozen Redis costs nothing per request; when `open_for` has passed,
//! one call is let through as a probe: its success closes the breaker, its failure opens it
//! again.
//!
//! It opens only when Redis itself has stopped answering, never because of what clients
//! send or of one short stall:
//! - **Outages, not calls, are counted.** Calls in flight together miss one stall together:
//!   a failure of a call that started before the last counted failure is part of that
//!   same outage and is not counted again. So N requests caught by one stall are one failure.
//! - **A miss while Redis answered others is the gateway's.** A call whose deadline passed
//!   although Redis answered some call after it was sent timed out in the gateway's own
//!   queues (or one slow command), not because Redis is down: not counted.
//! - **Silence.** It opens after `failures_to_open` counted failures in a row *and* when
//!   Redis has answered nothing for `silence` (a stall shorter than that never opens it).

use std::sync::Mutex;
use std::time::{Duration, Instant};

pub(crate) struct Breaker {
    failures_to_open: u32,
    open_for: Duration,
    silence: Duration,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Outages counted in a row, since the last answer.
    failures_in_a_row: u32,
    /// When the last counted failure was counted: calls started before it were in flight
    /// during that outage.
    last_counted: Option<Instant>,
    /// When Redis last answered anything (a decision or an error reply).
    last_answer: Option<Instant>,
    open_until: Option<Instant>,
    /// When the probe in flight was let through. A probe whose request was dropped (its
    /// client went away) never reports; after another `open_for` the next caller probes.
    probe_since: Option<Instant>,
}

/// What a report changed, for the caller to log once per change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Transition {
    None,
    /// It was closed and is open now.
    Opened,
    /// It was open (or probing) and is closed now.
    Closed,
}

impl Breaker {
    pub(crate) fn new(failures_to_open: u32, open_for: Duration, silence: Duration) -> Self {
        Breaker {
            failures_to_open: failures_to_open.max(1),
            open_for,
            silence,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a call may go to Redis now. When the open period is over, the first caller
    /// is the probe; the others keep failing fast until the probe reports.
    pub(crate) fn allows(&self, now: Instant) -> bool {
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

    /// Redis answered at `now`.
    pub(crate) fn succeeded(&self, now: Instant) -> Transition {
        let mut state = self.state();
        state.last_answer = Some(now);
        state.failures_in_a_row = 0;
        state.last_counted = None;
        if state.open_until.take().is_some() {
            state.probe_since = None;
            return Transition::Closed;
        }
        Transition::None
    }

    /// A call sent at `started` got no answer (by `now`): a timeout, a connection error,
    /// or a reply saying the server cannot take it now.
    pub(crate) fn failed(&self, started: Instant, now: Instant) -> Transition {
        let mut state = self.state();
        if state.probe_since.is_some() {
            // The probe failed, or a call of before the opening: open for another period.
            state.open_until = Some(now + self.open_for);
            state.probe_since = None;
            return Transition::None;
        }
        if state.open_until.is_some() {
            return Transition::None;
        }
        let answered_meanwhile = state.last_answer.is_some_and(|at| at >= started);
        let same_outage = state.last_counted.is_some_and(|at| started < at);
        if answered_meanwhile || same_outage {
            return Transition::None;
        }
        state.failures_in_a_row = state.failures_in_a_row.saturating_add(1);
        state.last_counted = Some(now);
        let silent_long_enough = state
            .last_answer
            .is_none_or(|at| now.saturating_duration_since(at) >= self.silence);
        if state.failures_in_a_row >= self.failures_to_open && silent_long_enough {
            state.open_until = Some(now + self.open_for);
            return Transition::Opened;
        }
        Transition::None
    }

    /// Whether Redis answered any call since `started`: then a call sent at `started` and
    /// still unanswered waits in the gateway's own queues, or is one slow command.
    pub(crate) fn answered_since(&self, started: Instant) -> bool {
        self.state().last_answer.is_some_and(|at| at >= started)
    }

    /// Open or half-open (waiting for a probe's answer): not closed.
    pub(crate) fn is_open(&self) -> bool {
        self.state().open_until.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    /// Fails one call after another, each started when the previous one failed and failing
    /// `took` later; returns when the last one failed.
    fn fail_in_turn(breaker: &Breaker, from: Instant, calls: u32, took: Duration) -> Instant {
        let mut at = from;
        for _ in 0..calls {
            breaker.failed(at, at + took);
            at += took;
        }
        at
    }

    #[test]
    fn a_probe_that_never_reports_is_replaced() {
        let breaker = Breaker::new(1, 100 * MS, Duration::ZERO);
        let t0 = Instant::now();
        assert_eq!(breaker.failed(t0, t0), Transition::Opened);
        let t1 = t0 + 100 * MS;
        assert!(breaker.allows(t1), "the probe");
        // Its request is dropped: no succeeded() or failed() ever comes.
        assert!(!breaker.allows(t1 + 99 * MS));
        assert!(breaker.is_open(), "half-open counts as open");
        assert!(breaker.allows(t1 + 100 * MS), "a new probe");
        assert_eq!(breaker.succeeded(t1 + 100 * MS), Transition::Closed);
        assert!(!breaker.is_open());
    }

    #[test]
    fn opens_after_failures_in_a_row_then_probes_once() {
        let breaker = Breaker::new(3, 100 * MS, Duration::ZERO);
        let t0 = Instant::now();
        let t = fail_in_turn(&breaker, t0, 2, MS);
        breaker.succeeded(t);
        let t = fail_in_turn(&breaker, t + MS, 2, MS);
        assert!(breaker.allows(t), "a success resets the count");
        assert_eq!(breaker.failed(t, t + MS), Transition::Opened);
        let t = t + MS;
        assert!(!breaker.allows(t));
        assert!(breaker.is_open());
        let later = t + 150 * MS;
        assert!(breaker.allows(later), "the probe");
        assert!(!breaker.allows(later), "only one probe at a time");
        assert_eq!(breaker.failed(later, later), Transition::None, "still open");
        assert!(!breaker.allows(later + 50 * MS), "a failed probe reopens");
        let after = later + 200 * MS;
        assert!(breaker.allows(after));
        assert_eq!(breaker.succeeded(after), Transition::Closed);
        assert!(
            breaker.allows(after) && breaker.allows(after),
            "closed again"
        );
        assert!(!breaker.is_open());
    }

    #[test]
    fn calls_caught_by_one_stall_count_once() {
        let breaker = Breaker::new(2, 100 * MS, Duration::ZERO);
        let t0 = Instant::now();
        // 1000 calls sent within 5 ms, all timing out at their 5 ms deadline.
        for i in 0..1000u32 {
            let started = t0 + Duration::from_micros(u64::from(i) * 5);
            breaker.failed(started, started + 5 * MS);
        }
        assert!(!breaker.is_open(), "one outage, however many calls");
        // A call sent after the stall was counted: a second outage.
        let t = t0 + 11 * MS;
        assert_eq!(breaker.failed(t, t + 5 * MS), Transition::Opened);
    }

    #[test]
    fn misses_while_redis_answers_others_are_not_counted() {
        let breaker = Breaker::new(1, 100 * MS, Duration::ZERO);
        let t0 = Instant::now();
        // The gateway is busy: its calls miss their deadline, yet answers keep coming.
        for i in 0..100u32 {
            let sent = t0 + i * 10 * MS;
            breaker.succeeded(sent + MS);
            assert_eq!(breaker.failed(sent, sent + 6 * MS), Transition::None);
        }
        assert!(!breaker.is_open());
    }

    #[test]
    fn an_answer_after_a_call_was_sent_says_redis_is_alive() {
        let breaker = Breaker::new(1, 100 * MS, Duration::ZERO);
        let t0 = Instant::now();
        assert!(!breaker.answered_since(t0), "never answered");
        breaker.succeeded(t0 + MS);
        assert!(breaker.answered_since(t0));
        assert!(!breaker.answered_since(t0 + 2 * MS));
    }

    #[test]
    fn a_stall_shorter_than_the_silence_never_opens_it() {
        let breaker = Breaker::new(3, 1000 * MS, 100 * MS);
        let t0 = Instant::now();
        breaker.succeeded(t0);
        // A 20 ms stall: calls one after another, each timing out at 5 ms.
        let t = fail_in_turn(&breaker, t0, 4, 5 * MS);
        assert!(!breaker.is_open(), "20 ms of silence is under 100 ms");
        breaker.succeeded(t);
        // A real outage: silence past 100 ms opens it.
        let t = fail_in_turn(&breaker, t, 20, 5 * MS);
        assert!(
            breaker.is_open(),
            "100 ms of silence with failures in a row"
        );
        assert!(!breaker.allows(t));
    }

    #[test]
    fn never_answered_is_silent_long_enough() {
        let breaker = Breaker::new(2, 100 * MS, Duration::from_secs(3600));
        let t0 = Instant::now();
        fail_in_turn(&breaker, t0, 2, MS);
        assert!(breaker.is_open(), "Redis never answered since the start");
    }
}
