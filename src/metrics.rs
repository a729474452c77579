//! Counters for `INFO ratelimit`: decisions per algorithm and errors.
//!
//! Relaxed atomics: commands run on the server's main thread, so the counters only need
//! to be readable from the INFO callback (which runs there too) and cost next to nothing
//! on the hot path.

use crate::core::limiter::AlgorithmKind;
use redis_module::{InfoContext, RedisResult};
use std::sync::atomic::{AtomicU64, Ordering};

/// Decisions of one algorithm.
struct Decisions {
    allowed: AtomicU64,
    denied: AtomicU64,
}

impl Decisions {
    const fn new() -> Self {
        Decisions {
            allowed: AtomicU64::new(0),
            denied: AtomicU64::new(0),
        }
    }
}

/// One entry per algorithm, in the order of `AlgorithmKind::ALL`.
static DECISIONS: [Decisions; AlgorithmKind::ALL.len()] = [
    Decisions::new(),
    Decisions::new(),
    Decisions::new(),
    Decisions::new(),
    Decisions::new(),
];
static ERRORS: AtomicU64 = AtomicU64::new(0);

fn index(kind: AlgorithmKind) -> usize {
    AlgorithmKind::ALL
        .iter()
        .position(|(k, _)| *k == kind)
        .unwrap_or(0)
}

/// Counts one decision of a hit (RL.HIT, CL.THROTTLE): allowed or denied.
pub fn record_hit(kind: AlgorithmKind, allowed: bool) {
    let decisions = &DECISIONS[index(kind)];
    let counter = if allowed {
        &decisions.allowed
    } else {
        &decisions.denied
    };
    counter.fetch_add(1, Ordering::Relaxed);
}

/// Counts one command that answered an error.
pub fn record_error() {
    ERRORS.fetch_add(1, Ordering::Relaxed);
}

/// `INFO ratelimit`: section `ratelimit_stats` with `hits`, `allowed`, `denied` and
/// `errors`, then per algorithm `<name>_allowed` and `<name>_denied`.
pub fn info(ctx: &InfoContext, _for_crash_report: bool) {
    // An INFO section that fails to build is left out; INFO itself still answers.
    let _ = build_info(ctx);
}

fn build_info(ctx: &InfoContext) -> RedisResult<()> {
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let allowed: u64 = DECISIONS.iter().map(|d| load(&d.allowed)).sum();
    let denied: u64 = DECISIONS.iter().map(|d| load(&d.denied)).sum();
    let mut section = ctx
        .builder()
        .add_section("stats")
        .field("hits", allowed + denied)?
        .field("allowed", allowed)?
        .field("denied", denied)?
        .field("errors", load(&ERRORS))?;
    for ((_, name), decisions) in AlgorithmKind::ALL.iter().zip(&DECISIONS) {
        section = section
            .field(&format!("{name}_allowed"), load(&decisions.allowed))?
            .field(&format!("{name}_denied"), load(&decisions.denied))?;
    }
    section.build_section()?.build_info()?;
    Ok(())
}
