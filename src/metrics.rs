//! Counters for `INFO ratelimit`: decisions per algorithm and errors.
//!
//! Relaxed atomics: commands run on the server's main thread, so the counters only need
//! to be readable from the INFO callback (which runs there too) and cost next to nothing
//! on the hot path.

use ratelimit_core::limiter::AlgorithmKind;
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
static SHADOW_DENIED: AtomicU64 = AtomicU64::new(0);
/// Effects the server refused to propagate (the command was answered with an error and
/// wrote nothing); not reset by `RL.STATS RESET`, since it signals a misconfiguration.
static PROPAGATION_FAILURES: AtomicU64 = AtomicU64::new(0);
/// Writes made while nothing could receive them, so not propagated (see `listeners`).
static UNPROPAGATED_WRITES: AtomicU64 = AtomicU64::new(0);

/// The server-wide counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Hits that decided (RL.HIT, CL.THROTTLE).
    pub hits: i64,
    /// Hits allowed (including those a shadow policy would have denied).
    pub allowed: i64,
    /// Hits denied.
    pub denied: i64,
    /// Hits a shadow policy would have denied.
    pub shadow_denied: i64,
    /// Calls answered with an error.
    pub errors: i64,
}

fn index(kind: AlgorithmKind) -> usize {
    AlgorithmKind::ALL
        .iter()
        .position(|(k, _)| *k == kind)
        .unwrap_or(0)
}

/// Counts one decision of a hit (RL.HIT, CL.THROTTLE) everywhere it is counted: in the
/// algorithm's counters and, for a call through the policy `policy`, in that policy's. A
/// hit is allowed or denied; `shadow_denied` says a shadow policy allowed what it would
/// have denied.
pub fn record_hit(kind: AlgorithmKind, allowed: bool, shadow_denied: bool, policy: Option<&[u8]>) {
    count_decision(kind, allowed, shadow_denied);
    if let Some(name) = policy {
        crate::policy::registry::record_hit(name, allowed, shadow_denied);
    }
}

/// The algorithm's share of [`record_hit`].
fn count_decision(kind: AlgorithmKind, allowed: bool, shadow_denied: bool) {
    let decisions = &DECISIONS[index(kind)];
    let counter = if allowed {
        &decisions.allowed
    } else {
        &decisions.denied
    };
    counter.fetch_add(1, Ordering::Relaxed);
    if shadow_denied {
        SHADOW_DENIED.fetch_add(1, Ordering::Relaxed);
    }
}

/// The server-wide counts.
pub fn totals() -> Totals {
    let load = |c: &AtomicU64| i64::try_from(c.load(Ordering::Relaxed)).unwrap_or(i64::MAX);
    let allowed: i64 = DECISIONS.iter().map(|d| load(&d.allowed)).sum();
    let denied: i64 = DECISIONS.iter().map(|d| load(&d.denied)).sum();
    Totals {
        hits: allowed.saturating_add(denied),
        allowed,
        denied,
        shadow_denied: load(&SHADOW_DENIED),
        errors: load(&ERRORS),
    }
}

/// Sets every count back to zero (`RL.STATS RESET`).
pub fn reset() {
    for decisions in &DECISIONS {
        decisions.allowed.store(0, Ordering::Relaxed);
        decisions.denied.store(0, Ordering::Relaxed);
    }
    SHADOW_DENIED.store(0, Ordering::Relaxed);
    ERRORS.store(0, Ordering::Relaxed);
}

/// Counts one command that answered an error.
pub fn record_error() {
    ERRORS.fetch_add(1, Ordering::Relaxed);
}

/// Counts one effect that the server refused to propagate.
pub fn record_propagation_failure() {
    PROPAGATION_FAILURES.fetch_add(1, Ordering::Relaxed);
}

/// Counts one write that nothing could receive, so not propagated.
#[inline]
pub fn record_unpropagated_write() {
    UNPROPAGATED_WRITES.fetch_add(1, Ordering::Relaxed);
}

/// `INFO ratelimit`: section `ratelimit_stats` with `hits`, `allowed`, `denied`,
/// `shadow_denied`, `errors`, `propagation_failures`, `unpropagated_writes`,
/// `propagating_always` and `policies`, then per algorithm `<name>_allowed` and
/// `<name>_denied`.
pub fn info(ctx: &InfoContext, _for_crash_report: bool) {
    // An INFO section that fails to build is left out; INFO itself still answers.
    let _ = build_info(ctx);
}

fn build_info(ctx: &InfoContext) -> RedisResult<()> {
    let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let totals = totals();
    let mut section = ctx
        .builder()
        .add_section("stats")
        .field("hits", totals.hits)?
        .field("allowed", totals.allowed)?
        .field("denied", totals.denied)?
        .field("shadow_denied", totals.shadow_denied)?
        .field("errors", totals.errors)?
        .field("propagation_failures", load(&PROPAGATION_FAILURES))?
        .field("unpropagated_writes", load(&UNPROPAGATED_WRITES))?
        .field(
            "propagating_always",
            i64::from(crate::listeners::propagating_always()),
        )?
        .field("policies", crate::policy::registry::count() as i64)?;
    for ((_, name), decisions) in AlgorithmKind::ALL.iter().zip(&DECISIONS) {
        section = section
            .field(&format!("{name}_allowed"), load(&decisions.allowed))?
            .field(&format!("{name}_denied"), load(&decisions.denied))?;
    }
    section.build_section()?.build_info()?;
    Ok(())
}
