//! In which of the module's aligned windows timed requests were decided. A window of
//! `window_ms` starts at a multiple of `window_ms` since the Unix epoch, as the module's
//! fixed and sliding windows do. A request was decided at some time between its sending
//! and its answer: when both fall in one window, the decision surely counted in that
//! window (it is *certain* there); when they fall in different windows, it counted in one
//! of them, which one the test cannot know (it is *ambiguous* in each window it overlaps).
//!
//! So the certain requests of a window are a lower bound of what the window admitted (an
//! upper bound that they exceed is a real over-admission), and certain plus ambiguous an
//! upper bound (a shortfall below it is a real one).

use super::paced::Timed;

/// The requests of one window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WindowTally {
    /// The window's start, ms since the Unix epoch.
    pub start_ms: i64,
    /// Allowed requests sent and answered within the window.
    pub certain: u64,
    /// Allowed requests sent in an earlier window or answered in a later one.
    pub ambiguous: u64,
    /// Denied requests (429) that overlap the window at all.
    pub denied: u64,
}

impl WindowTally {
    /// The most the window can have admitted of these requests.
    pub fn admitted_at_most(&self) -> u64 {
        self.certain + self.ambiguous
    }
}

/// The windows of `window_ms` (>= 1) from the one the first request was sent in to the
/// one the last answer came in, in order, each with its requests. A failed-open 200 or a
/// 503 counts in none: no budget paid for it.
pub fn tally(requests: &[Timed], window_ms: i64) -> Vec<WindowTally> {
    assert!(window_ms >= 1, "a window lasts at least 1 ms");
    let window_us = window_ms * 1000;
    let index = |us: i64| us.div_euclid(window_us);
    let (Some(first), Some(last)) = (
        requests.iter().map(|r| index(r.sent_us)).min(),
        requests.iter().map(|r| index(r.answered_us)).max(),
    ) else {
        return Vec::new();
    };
    let mut windows: Vec<WindowTally> = (first..=last)
        .map(|i| WindowTally {
            start_ms: i * window_ms,
            ..WindowTally::default()
        })
        .collect();
    for request in requests {
        let (from, to) = (index(request.sent_us), index(request.answered_us));
        assert!(from <= to, "answered before it was sent: {request:?}");
        let overlapped = &mut windows[(from - first) as usize..=(to - first) as usize];
        for window in overlapped {
            if request.allowed() && from == to {
                window.certain += 1;
            } else if request.allowed() {
                window.ambiguous += 1;
            } else if request.status == 429 {
                window.denied += 1;
            }
        }
    }
    windows
}
