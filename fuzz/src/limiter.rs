//! Target `limiter`: the limiter's steps (`limiter::run`, what RL.HIT, RL.PEEK and
//! RL.REFUND compute) over arbitrary sequences of (time step, action, cost, rule) on one
//! key, a rule being an algorithm and its tiers as the parser accepts them. Checks what the
//! property tests check, for every algorithm and with rule changes in between:
//!
//! - every reply is in range: `0 <= remaining <= limit` (the capacity), times >= 0, an
//!   allowed hit has used at least its cost, and a cost above a tier's capacity is denied
//!   for ever (`NEVER`);
//! - RL.PEEK writes nothing and answers as RL.HIT would at the same moment;
//! - a denied hit retried alone after its `retry_after_ms` is allowed;
//! - every value written is a state (`is_state`) that the next step reads back;
//! - a partial grant (`limiter::take`, RL.TAKE) up to a hit's cost grants the largest
//!   cost RL.HIT allows there (all of it exactly when the hit is allowed), and answers
//!   and writes what RL.HIT with that cost does;
//! - on a stretch with one rule, no refund and a clock that never goes back, the allowed
//!   units obey the algorithm's bound in every tier: the sliding log at most `limit` in any
//!   window, the buckets at most `burst + t * limit / window` in any interval of length t,
//!   the fixed window at most `2 * limit` in any window (`3 * limit` for a calendar one,
//!   whose periods may be shorter than its nominal length).
//!
//! Answers must be `Ok` whenever the clock and parameters are in the ranges a server sees
//! (`in_range`); beyond them `OutOfRange` is allowed, a panic never.

use arbitrary::{Result, Unstructured};
use ratelimit_core::algorithm::Quota;
use ratelimit_core::calendar::{Calendar, Period, Zone};
use ratelimit_core::decision::{Decision, NEVER};
use ratelimit_core::duration::MAX_WINDOW_MS;
use ratelimit_core::limiter::{
    is_state, take, Action, AlgorithmKind, Limits, MemoryKey, Outcome, Tiers, Write,
};
use ratelimit_core::sliding_log::MAX_LOG_LIMIT;

/// 2026-11-30T00:00:00Z.
const T0: i64 = 1_796_083_200_000;
/// The clock readings and parameters below which every answer must be `Ok`.
const SANE_CLOCK_MS: std::ops::RangeInclusive<i64> = 1_000_000_000_000..=4_000_000_000_000;
const SANE_AMOUNT: i64 = 1_000_000_000;
const SANE_SPAN_MS: i64 = 30 * 366 * 86_400_000;
/// Steps per input: the bound checks are quadratic in the allowed hits.
const MAX_STEPS: usize = 128;

/// The core's in-memory key, with the checks this target adds to every step.
#[derive(Debug, Clone, Default)]
struct Key(MemoryKey);

impl Key {
    /// The answer to `action`, not stored; `None` for an error, which only a clock or a
    /// parameter out of the sane ranges may give.
    fn run(&self, limits: &Limits, action: Action, now_ms: i64, sane: bool) -> Option<Outcome> {
        match self.0.decide(limits, action, now_ms) {
            Ok(outcome) => Some(outcome),
            Err(err) => {
                assert!(
                    !sane,
                    "{err:?} at {now_ms} for {limits:?} {action:?} on {self:?}"
                );
                None
            }
        }
    }

    /// Stores `write`, which must be a state that expires after `now_ms`.
    fn store(&mut self, write: &Write, now_ms: i64) {
        if let Write::Set {
            value,
            expires_at_ms,
        } = write
        {
            assert!(*expires_at_ms > now_ms, "{write:?} at {now_ms}");
            assert!(is_state(value, Some(*expires_at_ms)), "{write:?}");
        }
        self.0.apply(write);
    }
}

fn capacity(kind: AlgorithmKind, quota: &Quota) -> i64 {
    if kind.has_burst() {
        quota.burst
    } else {
        quota.limit
    }
}

fn amount(u: &mut Unstructured<'_>) -> Result<i64> {
    Ok(match u.int_in_range(0..=7u8)? {
        0..=4 => u.int_in_range(1..=25)?,
        5 | 6 => u.int_in_range(1..=1_000_000)?,
        _ => u.int_in_range(1..=i64::MAX)?,
    })
}

/// A rule as the parser accepts it (see `args`).
fn limits(u: &mut Unstructured<'_>) -> Result<Limits> {
    let (algorithm, _) = *u.choose(&AlgorithmKind::ALL)?;
    let count = if u.ratio(1, 4)? {
        u.int_in_range(2..=8)?
    } else {
        1
    };
    let mut tiers = Tiers::new();
    for _ in 0..count {
        let mut limit = amount(u)?;
        if algorithm == AlgorithmKind::Log {
            limit = limit.min(MAX_LOG_LIMIT);
        }
        let window_ms = match u.int_in_range(0..=3u8)? {
            0 | 1 => u.int_in_range(1..=5_000)?,
            2 => 1_000 * u.int_in_range(1..=3_600)?,
            _ => u.int_in_range(1..=MAX_WINDOW_MS)?,
        };
        tiers.push(if algorithm == AlgorithmKind::Fixed && u.ratio(1, 4)? {
            Quota::calendar(limit, calendar(u)?)
        } else {
            Quota::new(limit, window_ms)
        });
    }
    if algorithm.has_burst() && count == 1 && u.arbitrary()? {
        tiers[0].burst = amount(u)?;
    }
    Ok(Limits { algorithm, tiers })
}

/// A calendar window as `TZ` and `ANCHOR` give it: zones with half-hour and 45-minute
/// offsets, DST on either hemisphere, a day skipped (Apia, 2011).
fn calendar(u: &mut Unstructured<'_>) -> Result<Calendar> {
    const ZONES: [&str; 6] = [
        "UTC",
        "Europe/Paris",
        "America/New_York",
        "Pacific/Chatham",
        "Asia/Kathmandu",
        "Pacific/Apia",
    ];
    let (period, _) = *u.choose(&Period::ALL)?;
    let anchor = if period == Period::Month && u.arbitrary()? {
        u.int_in_range(2..=31)?
    } else {
        0
    };
    let zone = Zone::from_name(u.choose(&ZONES)?.as_bytes()).unwrap_or(Zone::UTC);
    Ok(Calendar {
        period,
        anchor,
        zone,
    })
}

/// Whether a server must answer: a clock of this century, amounts up to a billion, and
/// for the buckets a full bucket (or the cost) refilling within 30 years, so that the
/// theoretical arrival time fits the ns clock. Beyond that the module answers "ERR limit,
/// window, BURST and COST are too large together for the server clock" (`OutOfRange`).
fn in_range(limits: &Limits, cost: i64, now_ms: i64) -> bool {
    let refill_fits = |quota: &Quota| {
        let units = i128::from(quota.burst.max(cost));
        units * i128::from(quota.window_ms) / i128::from(quota.limit) <= i128::from(SANE_SPAN_MS)
    };
    SANE_CLOCK_MS.contains(&now_ms)
        && cost <= SANE_AMOUNT
        && limits.tiers.iter().all(|q| {
            q.limit <= SANE_AMOUNT
                && q.burst <= SANE_AMOUNT
                && (!limits.algorithm.has_burst() || refill_fits(q))
        })
}

fn assert_decision_in_range(d: &Decision) {
    assert!(d.remaining >= 0 && d.remaining <= d.limit, "{d:?}");
    assert!(d.reset_after_ms >= 0, "{d:?}");
    assert!(d.retry_after_ms >= 0 || d.retry_after_ms == NEVER, "{d:?}");
}

fn check_replies(limits: &Limits, action: Action, outcome: &Outcome) {
    assert_eq!(outcome.tiers.len(), limits.tiers.len());
    assert_decision_in_range(&outcome.decision);
    for (d, quota) in outcome.tiers.iter().zip(&limits.tiers) {
        assert_decision_in_range(d);
        assert_eq!(d.limit, capacity(limits.algorithm, quota), "{d:?}");
    }
    let d = &outcome.decision;
    match action {
        Action::Hit { cost } => {
            let too_big = limits
                .tiers
                .iter()
                .any(|q| cost > capacity(limits.algorithm, q));
            if too_big {
                assert!(!d.allowed && d.retry_after_ms == NEVER, "{d:?}");
            }
            if d.allowed {
                assert_eq!(d.retry_after_ms, 0, "{d:?}");
                for t in &outcome.tiers {
                    assert!(t.allowed && t.remaining <= t.limit - cost, "{t:?}");
                }
            } else {
                assert!(d.retry_after_ms > 0 || d.retry_after_ms == NEVER, "{d:?}");
            }
        }
        Action::Peek { .. } => assert_eq!(outcome.write, Write::Nothing),
        Action::Refund { .. } => assert_eq!(d.retry_after_ms, 0, "{d:?}"),
    }
}

/// A partial grant of up to `upto` on `key` at `now_ms` is the largest cost a hit there
/// allows, and answers and writes what that hit does. Checked where every answer must be
/// `Ok`; elsewhere the grant may only fail or answer, never panic.
fn check_grant(key: &Key, limits: &Limits, upto: i64, now_ms: i64, sane: bool) {
    let expiry = || key.0.expires_at_ms();
    let grant = take(limits, upto, key.0.value(), expiry, now_ms);
    let (Ok(grant), true) = (&grant, sane) else {
        assert!(grant.is_ok() || !sane, "{grant:?}");
        return;
    };
    let g = grant.granted;
    assert!((0..=upto).contains(&g), "{grant:?}");
    let hit = |cost: i64| key.run(limits, Action::Hit { cost }, now_ms, true);
    let same = hit(g.max(1)).expect("sane");
    assert_eq!(grant.outcome, same, "granted {g} of {upto}");
    assert_eq!(same.decision.allowed, g > 0, "{grant:?}");
    if g < upto {
        let more = hit(g + 1).expect("sane");
        assert!(!more.decision.allowed, "{g} granted, {} allowed", g + 1);
    }
}

/// The algorithm's bound for one tier on the intervals that end at the newest of the
/// allowed hits `(time, cost)`, which come in time order: checked after every hit, that
/// covers every interval.
fn check_bound(kind: AlgorithmKind, quota: &Quota, hits: &[(i64, i64)]) {
    let Some(&(end, _)) = hits.last() else {
        return;
    };
    let window = i128::from(quota.window_ms);
    let (limit, burst) = (i128::from(quota.limit), i128::from(quota.burst));
    let mut units: i128 = 0;
    for &(start, cost) in hits.iter().rev() {
        units += i128::from(cost);
        let elapsed = i128::from(end - start);
        if elapsed >= window && matches!(kind, AlgorithmKind::Log | AlgorithmKind::Fixed) {
            // Older hits are outside every window-long interval that ends here.
            break;
        }
        let holds = match kind {
            AlgorithmKind::Log => elapsed >= window || units <= limit,
            // A window-long interval meets two fixed windows, or three calendar periods
            // when one is shorter (February in a 31-day interval, a 23-hour day).
            AlgorithmKind::Fixed if quota.calendar.is_some() => {
                elapsed >= window || units <= 3 * limit
            }
            AlgorithmKind::Fixed => elapsed >= window || units <= 2 * limit,
            AlgorithmKind::Token | AlgorithmKind::Gcra => {
                (units - burst) * window <= elapsed * limit
            }
            AlgorithmKind::Sliding => true,
        };
        assert!(
            holds,
            "{units} units in [{start}, {end}] for {kind:?} {quota:?}: {hits:?}"
        );
    }
}

fn fuzz_steps(u: &mut Unstructured<'_>) -> Result<()> {
    let rules: Vec<Limits> = (0..u.int_in_range(1..=3)?)
        .map(|_| limits(u))
        .collect::<Result<_>>()?;
    let mut key = Key::default();
    let mut now = T0 + u.int_in_range(0..=86_400_000)?;
    // The stretch of hits the bound applies to: (rule, allowed hits).
    let mut stretch: Option<(usize, Vec<(i64, i64)>)> = None;
    for _ in 0..MAX_STEPS {
        if u.is_empty() {
            break;
        }
        let step = match u.int_in_range(0..=7u8)? {
            0..=4 => u.int_in_range(-100..=3_000)?,
            5 => u.int_in_range(-10_000_000..=100_000_000)?,
            6 => 0,
            _ => u.arbitrary::<i64>()?,
        };
        let before = now;
        now = now.saturating_add(step).clamp(0, i64::MAX / 2);
        let index = u.choose_index(rules.len())?;
        let limits = &rules[index];
        let cost = amount(u)?;
        let action = match u.int_in_range(0..=5u8)? {
            0..=3 => Action::Hit { cost },
            4 => Action::Peek { cost },
            _ => Action::Refund { amount: cost },
        };
        let sane = in_range(limits, cost, now);
        let same_stretch = now >= before
            && matches!(action, Action::Hit { .. } | Action::Peek { .. })
            && stretch.as_ref().is_none_or(|(rule, _)| *rule == index);
        if !same_stretch {
            stretch = None;
        }
        if let Action::Hit { cost } = action {
            check_grant(&key, limits, cost, now, sane);
            // What a look answers now is what the hit answers.
            if let Some(peek) = key.run(limits, Action::Peek { cost }, now, sane) {
                check_replies(limits, Action::Peek { cost }, &peek);
                if let Some(hit) = key.run(limits, action, now, sane) {
                    assert_eq!(peek.decision.allowed, hit.decision.allowed);
                    assert_eq!(peek.decision.remaining, hit.decision.remaining);
                }
            }
        }
        let Some(outcome) = key.run(limits, action, now, sane) else {
            continue;
        };
        check_replies(limits, action, &outcome);
        key.store(&outcome.write, now);
        if key.0.value().is_some() {
            // Whatever was written reads back under the same rule.
            let again = key.0.decide(limits, Action::Peek { cost: 1 }, now);
            assert!(again.is_ok() || !sane, "{again:?} reading back {key:?}");
        }
        let d = &outcome.decision;
        if let Action::Hit { cost } = action {
            if !d.allowed && d.retry_after_ms != NEVER && sane {
                let later = now.saturating_add(d.retry_after_ms);
                let retry = key.run(limits, action, later, in_range(limits, cost, later));
                if let Some(retry) = retry {
                    assert!(
                        retry.decision.allowed,
                        "waited {} ms: {retry:?}",
                        d.retry_after_ms
                    );
                }
            }
            if d.allowed {
                let (_, hits) = stretch.get_or_insert_with(|| (index, Vec::new()));
                hits.push((now, cost));
                for quota in &limits.tiers {
                    check_bound(limits.algorithm, quota, hits);
                }
            }
        }
    }
    Ok(())
}

pub fn fuzz(data: &[u8]) {
    let _ = fuzz_steps(&mut Unstructured::new(data));
}
