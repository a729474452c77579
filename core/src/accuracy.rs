//! How far the sliding window counter's answers are from the exact sliding log's, on a
//! bursty trace. Run with `cargo test --lib accuracy -- --nocapture` to see the table.
//!
//! Both algorithms see the same requests, each with its own state that counts only what
//! it allowed. The log's answers are the truth: "wrongly allowed" is a request the counter
//! allowed and the log denied, "wrongly denied" the other way round. After the two first
//! disagree their states differ, so later answers compare two limiters in the same
//! traffic, which is what a user would see by switching algorithm. To separate that drift
//! from the counter's own error, a third "shadow" counter counts exactly what the log
//! allowed, and the `same_hist` columns give how often its answer differs from the log's
//! on the same history.

use super::algorithm::{Algorithm, Quota};
use super::sliding_log::Log;
use super::sliding_window::Sliding;

/// 2026-11-30T00:00:00Z.
const T0: i64 = 1_796_083_200_000;

/// SplitMix64: a tiny, deterministic generator, enough for traffic shapes.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n >= 1; the modulo bias is irrelevant here).
    fn below(&mut self, n: i64) -> i64 {
        let n = u64::try_from(n.max(1)).expect("positive");
        i64::try_from(self.next() % n).expect("below an i64")
    }
}

/// One request: when, and how many units.
#[derive(Debug, Clone, Copy)]
struct Request {
    at_ms: i64,
    cost: i64,
}

/// Bursts (many requests close together), steady stretches (about the limit's rate, with
/// jitter) and idle gaps (half a window to three windows), in random order. Mostly cost 1,
/// sometimes 2 or 3.
fn bursty_trace(seed: u64, limit: i64, window: i64, requests: usize) -> Vec<Request> {
    let mut rng = SplitMix(seed);
    let mut at_ms = T0 + rng.below(window);
    let mut trace = Vec::with_capacity(requests);
    let push = |rng: &mut SplitMix, at_ms: i64, trace: &mut Vec<Request>| {
        let cost = if rng.below(10) == 0 {
            2 + rng.below(2)
        } else {
            1
        };
        trace.push(Request { at_ms, cost });
    };
    while trace.len() < requests {
        match rng.below(10) {
            0..=3 => {
                let gap = (window / (4 * limit)).max(1);
                for _ in 0..1 + rng.below(3 * limit) {
                    at_ms += rng.below(gap + 1);
                    push(&mut rng, at_ms, &mut trace);
                }
            }
            4..=6 => {
                let gap = (window / limit).max(1);
                for _ in 0..1 + rng.below(2 * limit) {
                    at_ms += rng.below(2 * gap + 1);
                    push(&mut rng, at_ms, &mut trace);
                }
            }
            _ => at_ms += window / 2 + rng.below(3 * window),
        }
    }
    trace.truncate(requests);
    trace
}

/// The most units any `[t, t + window)` holds, over hits in time order.
fn worst_interval(hits: &[Request], window: i64) -> i64 {
    let (mut worst, mut sum, mut end) = (0, 0, 0);
    for start in 0..hits.len() {
        while end < hits.len() && hits[end].at_ms < hits[start].at_ms + window {
            sum += hits[end].cost;
            end += 1;
        }
        worst = worst.max(sum);
        sum -= hits[start].cost;
    }
    worst
}

struct Row {
    limit: i64,
    window: i64,
    requests: usize,
    log_allowed: usize,
    sliding_allowed: usize,
    wrongly_allowed: usize,
    wrongly_denied: usize,
    shadow_wrongly_allowed: usize,
    shadow_wrongly_denied: usize,
    log_worst: i64,
    sliding_worst: i64,
}

fn percent(part: usize, whole: usize) -> f64 {
    100.0 * part as f64 / whole.max(1) as f64
}

fn compare(seed: u64, limit: i64, window: i64, requests: usize) -> Row {
    let quota = Quota::new(limit, window);
    let trace = bursty_trace(seed, limit, window, requests);
    let (mut log, mut sliding, mut shadow) = (None, None, None);
    // The same normalisation and counting with no limit: counts whatever it is given.
    let unlimited = Quota::new(i64::MAX, window);
    let (mut log_hits, mut sliding_hits) = (Vec::new(), Vec::new());
    let mut row = Row {
        limit,
        window,
        requests: 0,
        log_allowed: 0,
        sliding_allowed: 0,
        wrongly_allowed: 0,
        wrongly_denied: 0,
        shadow_wrongly_allowed: 0,
        shadow_wrongly_denied: 0,
        log_worst: 0,
        sliding_worst: 0,
    };
    for request in &trace {
        let truth = Log::check(log.as_ref(), request.at_ms, &quota, request.cost).expect("range");
        let guess =
            Sliding::check(sliding.as_ref(), request.at_ms, &quota, request.cost).expect("range");
        row.requests += 1;
        assert_eq!(truth.charged.is_some(), truth.decision.allowed);
        assert_eq!(guess.charged.is_some(), guess.decision.allowed);
        if let Some(state) = truth.charged {
            log = Some(state);
            log_hits.push(*request);
            row.log_allowed += 1;
        }
        if let Some(state) = guess.charged {
            sliding = Some(state);
            sliding_hits.push(*request);
            row.sliding_allowed += 1;
        }
        match (guess.decision.allowed, truth.decision.allowed) {
            (true, false) => row.wrongly_allowed += 1,
            (false, true) => row.wrongly_denied += 1,
            _ => {}
        }
        let same_history =
            Sliding::check(shadow.as_ref(), request.at_ms, &quota, request.cost).expect("range");
        match (same_history.decision.allowed, truth.decision.allowed) {
            (true, false) => row.shadow_wrongly_allowed += 1,
            (false, true) => row.shadow_wrongly_denied += 1,
            _ => {}
        }
        if truth.decision.allowed {
            let counted = Sliding::check(shadow.as_ref(), request.at_ms, &unlimited, request.cost)
                .expect("range");
            shadow = counted.charged;
        }
    }
    row.log_worst = worst_interval(&log_hits, window);
    row.sliding_worst = worst_interval(&sliding_hits, window);
    row
}

#[test]
fn accuracy_report_sliding_counter_vs_exact_log() {
    const REQUESTS: usize = 20_000;
    let configs: [(i64, i64); 5] = [
        (5, 10_000),
        (10, 1_000),
        (100, 60_000),
        (60, 3_600_000),
        (1_000, 1_000),
    ];
    println!();
    println!("sliding window counter vs exact sliding log, {REQUESTS} bursty requests per row");
    println!(
        "{:>6} {:>10} {:>9} {:>7} {:>8} {:>9} {:>9} {:>9} {:>9} {:>7} {:>9}",
        "limit",
        "window_ms",
        "requests",
        "log_ok",
        "slide_ok",
        "wrong_ok%",
        "wrong_no%",
        "same_ok%",
        "same_no%",
        "log_max",
        "slide_max"
    );
    for (n, (limit, window)) in configs.into_iter().enumerate() {
        let row = compare(0x5eed + n as u64, limit, window, REQUESTS);
        let wrongly_allowed = percent(row.wrongly_allowed, row.requests);
        let wrongly_denied = percent(row.wrongly_denied, row.requests);
        let shadow_allowed = percent(row.shadow_wrongly_allowed, row.requests);
        let shadow_denied = percent(row.shadow_wrongly_denied, row.requests);
        println!(
            "{:>6} {:>10} {:>9} {:>7} {:>8} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>7} {:>9}",
            row.limit,
            row.window,
            row.requests,
            row.log_allowed,
            row.sliding_allowed,
            wrongly_allowed,
            wrongly_denied,
            shadow_allowed,
            shadow_denied,
            row.log_worst,
            row.sliding_worst
        );
        assert_eq!(row.requests, REQUESTS, "both answered every request");
        assert!(row.log_worst <= limit, "the log is exact");
        assert!(
            row.sliding_worst <= 2 * limit,
            "the counter never lets more than a limit into each fixed window"
        );
        for pct in [
            wrongly_allowed,
            wrongly_denied,
            shadow_allowed,
            shadow_denied,
        ] {
            assert!((0.0..=100.0).contains(&pct));
        }
    }
    println!("wrong_ok%: counter allowed, log denied; wrong_no%: counter denied, log allowed");
    println!("  (each with its own state); same_ok% / same_no%: the same, for a counter that");
    println!("  counts exactly what the log allowed; *_max: most units each let into any");
    println!("  window-long interval.");
}
