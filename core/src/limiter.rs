//! Multi-tier, all-or-nothing checks over any algorithm, and what a key's stored value
//! means for the request at hand.
//!
//! A request names an algorithm and one or more tiers (`limit` per `window`). Every tier is
//! checked; the units are counted in all of them or in none. The reply is the binding tier:
//! the smallest `remaining`, the longest `retry_after_ms`, the latest reset.
//!
//! **Changed parameters.** A key keeps the parameters it was written with. When a request
//! names other ones (another algorithm, window, limit or burst, or another number of
//! tiers), or when a stored state lasts longer than the algorithm's span from now (the
//! clock went back by more than a window), the key starts afresh from its usage: the units
//! the old state still counts (the largest over its tiers, at most each new tier's
//! capacity) are counted again under the new parameters, at `now`. So a change never grants
//! more than the new limit allows on top of what was already used, and never makes a client
//! wait longer than one new window. That renewal is written even when the hit is denied, so
//! the announced `retry_after_ms` holds. A limit change on a single-tier fixed window needs
//! no renewal: the count simply meets the new limit.

use super::algorithm::{Algorithm, OutOfRange, Quota, TierCheck};
use super::decision::{Decision, NEVER};
use super::encoding::{
    classify, decode_tiers, encode_count, encode_short, encode_tiers, StoredForm,
};
use super::fixed_window::{Fixed, WindowState};
use smallvec::SmallVec;

/// The algorithms a request can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlgorithmKind {
    /// Fixed window (`fixed`).
    Fixed,
    /// Sliding window counter (`sliding`).
    Sliding,
    /// Exact sliding log (`log`).
    Log,
    /// Token bucket (`token`).
    Token,
    /// Generic cell rate algorithm (`gcra`).
    Gcra,
}

impl AlgorithmKind {
    /// Every algorithm with its name in commands.
    pub const ALL: [(AlgorithmKind, &'static str); 5] = [
        (AlgorithmKind::Fixed, "fixed"),
        (AlgorithmKind::Sliding, "sliding"),
        (AlgorithmKind::Log, "log"),
        (AlgorithmKind::Token, "token"),
        (AlgorithmKind::Gcra, "gcra"),
    ];

    /// The algorithm named `name` (case-insensitive).
    pub fn from_name(name: &[u8]) -> Option<AlgorithmKind> {
        Self::ALL
            .iter()
            .find(|(_, known)| name.eq_ignore_ascii_case(known.as_bytes()))
            .map(|(kind, _)| *kind)
    }

    /// The algorithm whose [`Algorithm::ID`] is `id`.
    pub fn from_id(id: u8) -> Option<AlgorithmKind> {
        Self::ALL
            .iter()
            .map(|(kind, _)| *kind)
            .find(|kind| kind.id() == id)
    }

    /// The algorithm's name in commands.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(kind, _)| *kind == self)
            .map_or("?", |(_, name)| name)
    }

    /// Whether the algorithm takes a `BURST` (a bucket capacity apart from the limit).
    pub fn has_burst(self) -> bool {
        matches!(self, AlgorithmKind::Token | AlgorithmKind::Gcra)
    }

    fn id(self) -> u8 {
        with_algorithm!(self, id_of())
    }
}

/// Calls the generic function `f::<A>(args)` with `A` the algorithm `kind` (an
/// [`AlgorithmKind`]) names: the one dispatch from a stored or parsed kind to the
/// algorithm's type, shared with the fuzz targets.
#[macro_export]
macro_rules! with_algorithm {
    ($kind:expr, $f:ident ( $($arg:expr),* )) => {
        match $kind {
            $crate::limiter::AlgorithmKind::Fixed => $f::<$crate::fixed_window::Fixed>($($arg),*),
            $crate::limiter::AlgorithmKind::Sliding => {
                $f::<$crate::sliding_window::Sliding>($($arg),*)
            }
            $crate::limiter::AlgorithmKind::Log => $f::<$crate::sliding_log::Log>($($arg),*),
            $crate::limiter::AlgorithmKind::Token => $f::<$crate::token_bucket::Token>($($arg),*),
            $crate::limiter::AlgorithmKind::Gcra => $f::<$crate::gcra::Gcra>($($arg),*),
        }
    };
}
pub use crate::with_algorithm;

fn id_of<A: Algorithm>() -> u8 {
    A::ID
}

/// A request's tiers. Inline up to two, the common cases, so that a call allocates nothing.
pub type Tiers = SmallVec<[Quota; 2]>;

/// One item per tier, inline like [`Tiers`].
type PerTier<T> = SmallVec<[T; 2]>;

pub use super::codec::Bytes as Value;

/// What a request asks for: an algorithm and its tiers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// The algorithm.
    pub algorithm: AlgorithmKind,
    /// One or more tiers, all checked.
    pub tiers: Tiers,
}

/// What to do with the key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Check and, when every tier allows, count `cost` units (RL.HIT).
    Hit {
        /// Units to count, >= 1.
        cost: i64,
    },
    /// Answer what [`Action::Hit`] would, writing nothing (RL.PEEK).
    Peek {
        /// Units to check, >= 1; 0 only for GCRA (CL.THROTTLE's quantity 0).
        cost: i64,
    },
    /// Give back up to `amount` units counted earlier (RL.REFUND).
    Refund {
        /// Units to give back, >= 1.
        amount: i64,
    },
}

/// What the key must become.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Write {
    /// Nothing changes: nothing is written or propagated.
    Nothing,
    /// Store `value`, expiring at the absolute `expires_at_ms`.
    Set {
        /// The encoded state.
        value: Value,
        /// Absolute expiry in ms: when the state is the same as no state.
        expires_at_ms: i64,
    },
    /// Remove the key: its state is now the same as no state.
    Delete,
}

/// The answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// The binding tier's answer (see the module docs).
    pub decision: Decision,
    /// Each tier's own answer, in request order.
    pub tiers: PerTier<Decision>,
    /// The change to store.
    pub write: Write,
}

/// Why a request could not be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimiterError {
    /// The key holds a value this module did not write.
    NotOurs,
    /// The clock or a parameter is beyond what the arithmetic supports.
    OutOfRange,
}

impl From<OutOfRange> for LimiterError {
    fn from(_: OutOfRange) -> Self {
        LimiterError::OutOfRange
    }
}

/// Answers `action` for `limits` on a key holding `stored` (`None`: no key) at `now_ms`.
/// `expiry` gives the key's absolute expiry; it is asked only when a form keeps a time
/// there (a plain count, the short form) or a look needs the old state's end.
pub fn run(
    limits: &Limits,
    action: Action,
    stored: Option<&[u8]>,
    expiry: impl Fn() -> Option<i64>,
    now_ms: i64,
) -> Result<Outcome, LimiterError> {
    with_algorithm!(
        limits.algorithm,
        run_with(&limits.tiers, action, stored, expiry, now_ms)
    )
}

fn run_with<A: Algorithm>(
    tiers: &[Quota],
    action: Action,
    stored: Option<&[u8]>,
    expiry: impl Fn() -> Option<i64>,
    now_ms: i64,
) -> Result<Outcome, LimiterError> {
    let (prior, lost_expiry) = read_prior::<A>(stored, &expiry, now_ms)?;
    let start = starting_states::<A>(prior, tiers, now_ms, lost_expiry)?;
    Ok(match action {
        Action::Hit { cost } => check::<A>(start, tiers, now_ms, cost, true)?,
        Action::Peek { cost } => {
            let renewed = start.renewed;
            let mut outcome = check::<A>(start, tiers, now_ms, cost, false)?;
            // A look cannot write the renewal, so every later call renews again from the
            // old state: the wait that surely works lasts until the old state is gone.
            let decision = &mut outcome.decision;
            if renewed && !decision.allowed && decision.retry_after_ms != NEVER {
                let old_state_left = expiry().map_or(0, |end| end.saturating_sub(now_ms));
                decision.retry_after_ms = decision.retry_after_ms.max(old_state_left);
            }
            outcome
        }
        Action::Refund { amount } => refund::<A>(start, tiers, now_ms, amount)?,
    })
}

/// What a key's value means to algorithm `A`.
enum Prior<S> {
    /// No key.
    Empty,
    /// States of `A`, with the parameters they were written with (unknown for a plain
    /// count).
    Same(PerTier<(Option<Quota>, S)>),
    /// Another algorithm's state, reduced to the units it still counts.
    Usage(i64),
}

/// What a key's value means, and whether the key lost the expiry its state needs (see
/// [`lost_expiry_usage`]).
fn read_prior<A: Algorithm>(
    stored: Option<&[u8]>,
    expiry: impl Fn() -> Option<i64>,
    now_ms: i64,
) -> Result<(Prior<A::State>, bool), LimiterError> {
    let Some(bytes) = stored else {
        return Ok((Prior::Empty, false));
    };
    let form = classify(bytes).ok_or(LimiterError::NotOurs)?;
    if let Some(used) = lost_expiry_usage(&form, &expiry) {
        return Ok((Prior::Usage(used?), true));
    }
    Ok(match form {
        StoredForm::PlainCount(count) => {
            let ends_at_ms = expiry().ok_or(LimiterError::NotOurs)?;
            let prior = match A::from_plain_count(count, ends_at_ms) {
                Some(state) => Prior::Same(smallvec::smallvec![(None, state)]),
                None => {
                    let window = WindowState { count, ends_at_ms };
                    Prior::Usage(Fixed::used(&window, now_ms, &Quota::new(1, 1)))
                }
            };
            (prior, false)
        }
        StoredForm::Short {
            algorithm,
            quota,
            short,
        } => {
            let expires_at_ms = expiry().ok_or(LimiterError::NotOurs)?;
            let prior = if algorithm == A::ID {
                let state = A::from_short(short, expires_at_ms).ok_or(LimiterError::NotOurs)?;
                Prior::Same(smallvec::smallvec![(Some(quota), state)])
            } else {
                let kind = AlgorithmKind::from_id(algorithm).ok_or(LimiterError::NotOurs)?;
                let used = with_algorithm!(kind, short_usage(short, expires_at_ms, &quota, now_ms));
                Prior::Usage(used.ok_or(LimiterError::NotOurs)?)
            };
            (prior, false)
        }
        // The tiers form keeps its absolute times in the value: it reads the same with or
        // without the key's expiry, and one that lost it is written back with it.
        StoredForm::Tiers {
            algorithm,
            count,
            body,
        } if algorithm == A::ID => {
            let tiers = decode_tiers::<A>(body, count).ok_or(LimiterError::NotOurs)?;
            let prior = Prior::Same(tiers.into_iter().map(|(q, s)| (Some(q), s)).collect());
            (prior, expiry().is_none())
        }
        StoredForm::Tiers {
            algorithm,
            count,
            body,
        } => {
            let kind = AlgorithmKind::from_id(algorithm).ok_or(LimiterError::NotOurs)?;
            let used = with_algorithm!(kind, largest_usage(body, count, now_ms));
            (
                Prior::Usage(used.ok_or(LimiterError::NotOurs)?),
                expiry().is_none(),
            )
        }
    })
}

/// The units a plain count or a short form still counts when its key has no expiry
/// (`PERSIST`, `RESTORE key 0 ...`); `None` when the form does not need the expiry or the
/// key has one. Those forms keep their time in the expiry, so the time is lost, and the
/// units are counted again from now, under the request's rule: a plain count's units (a
/// window that ends one window from now), a bucket as full as its stored capacity (its
/// theoretical arrival time is unknown, so it is taken as late as it can be). Never a free
/// burst, and never a wait longer than one window of the request's rule.
fn lost_expiry_usage(
    form: &StoredForm<'_>,
    expiry: impl Fn() -> Option<i64>,
) -> Option<Result<i64, LimiterError>> {
    let used = match *form {
        StoredForm::PlainCount(count) => Ok(count),
        StoredForm::Short {
            algorithm,
            quota,
            short,
        } => match AlgorithmKind::from_id(algorithm) {
            Some(kind) if with_algorithm!(kind, short_decodes(short, 0)) => {
                Ok(with_algorithm!(kind, capacity_of(&quota)))
            }
            _ => Err(LimiterError::NotOurs),
        },
        StoredForm::Tiers { .. } => return None,
    };
    match expiry() {
        Some(_) => None,
        None => Some(used),
    }
}

fn capacity_of<B: Algorithm>(quota: &Quota) -> i64 {
    B::capacity(quota)
}

/// Whether `stored` (with the key's absolute expiry, if it has one) is a whole state this
/// module wrote: a plain count, a short form of a known algorithm, or tiers of a known
/// algorithm that decode completely. With or without an expiry: a key that lost it
/// (`PERSIST`, `RESTORE key 0 ...`) is still a state. RL.RESET deletes only such values.
pub fn is_state(stored: &[u8], expiry: Option<i64>) -> bool {
    match classify(stored) {
        Some(StoredForm::PlainCount(_)) => true,
        Some(StoredForm::Short {
            algorithm, short, ..
        }) => match AlgorithmKind::from_id(algorithm) {
            Some(kind) => with_algorithm!(kind, short_decodes(short, expiry.unwrap_or(0))),
            None => false,
        },
        Some(StoredForm::Tiers {
            algorithm,
            count,
            body,
        }) => AlgorithmKind::from_id(algorithm)
            .is_some_and(|kind| with_algorithm!(kind, decodes(body, count))),
        None => false,
    }
}

fn short_decodes<A: Algorithm>(short: i64, expires_at_ms: i64) -> bool {
    A::from_short(short, expires_at_ms).is_some()
}

fn decodes<A: Algorithm>(body: super::codec::Reader<'_>, count: usize) -> bool {
    decode_tiers::<A>(body, count).is_some()
}

/// The units a short-form tier of algorithm `B` still counts.
fn short_usage<B: Algorithm>(
    short: i64,
    expires_at_ms: i64,
    quota: &Quota,
    now_ms: i64,
) -> Option<i64> {
    B::from_short(short, expires_at_ms).map(|state| B::used(&state, now_ms, quota))
}

/// The largest number of units any stored tier of algorithm `B` still counts.
fn largest_usage<B: Algorithm>(
    body: super::codec::Reader<'_>,
    count: usize,
    now_ms: i64,
) -> Option<i64> {
    let tiers = decode_tiers::<B>(body, count)?;
    Some(
        tiers
            .iter()
            .map(|(q, s)| B::used(s, now_ms, q))
            .max()
            .unwrap_or(0),
    )
}

/// The states the request starts from, one per tier (`None`: empty).
struct Start<S> {
    states: PerTier<Option<S>>,
    /// The key was renewed from its usage (see the module docs): worth writing even when
    /// nothing is counted.
    renewed: bool,
    /// The key has no expiry though its state ends: a hit writes the state back with its
    /// expiry even when it counts nothing, so that the key goes when its state does.
    lost_expiry: bool,
}

fn starting_states<A: Algorithm>(
    prior: Prior<A::State>,
    tiers: &[Quota],
    now_ms: i64,
    lost_expiry: bool,
) -> Result<Start<A::State>, OutOfRange> {
    let empty = || Start {
        states: std::iter::repeat_n(None, tiers.len()).collect(),
        renewed: false,
        lost_expiry,
    };
    let used = match prior {
        Prior::Empty => return Ok(empty()),
        Prior::Same(stored) => {
            let reusable = stored.len() == tiers.len()
                && stored
                    .iter()
                    .zip(tiers)
                    .all(|((written_with, state), quota)| {
                        written_with
                            .map_or_else(|| A::fits_unrecorded(state, quota), |q| q == *quota)
                            && A::expires_at_ms(state, quota).saturating_sub(now_ms)
                                <= A::span_ms(quota)
                    });
            if reusable {
                return Ok(Start {
                    states: stored.into_iter().map(|(_, s)| Some(s)).collect(),
                    renewed: false,
                    lost_expiry,
                });
            }
            stored
                .iter()
                .zip(tiers.iter().cycle())
                .map(|((written_with, state), quota)| {
                    A::used(state, now_ms, written_with.as_ref().unwrap_or(quota))
                })
                .max()
                .unwrap_or(0)
        }
        Prior::Usage(used) => used,
    };
    if used <= 0 {
        return Ok(empty());
    }
    let states = tiers
        .iter()
        .map(|quota| A::seeded(used.min(A::capacity(quota)), now_ms, quota).map(Some))
        .collect::<Result<_, _>>()?;
    Ok(Start {
        states,
        renewed: true,
        lost_expiry,
    })
}

fn check<A: Algorithm>(
    start: Start<A::State>,
    tiers: &[Quota],
    now_ms: i64,
    cost: i64,
    writes: bool,
) -> Result<Outcome, OutOfRange> {
    let checks = tiers
        .iter()
        .zip(&start.states)
        .map(|(quota, state)| A::check(state.as_ref(), now_ms, quota, cost))
        .collect::<Result<PerTier<TierCheck<A::State>>, _>>()?;
    let allowed = checks.iter().all(|c| c.decision.allowed);
    let mut decisions = PerTier::with_capacity(checks.len());
    for ((check, quota), state) in checks.iter().zip(tiers).zip(&start.states) {
        decisions.push(if allowed || !check.decision.allowed {
            check.decision
        } else {
            // This tier would allow, but another denies, so nothing is counted here either.
            let now = A::view(state.as_ref(), now_ms, quota)?;
            Decision {
                remaining: now.remaining,
                reset_after_ms: now.reset_after_ms,
                ..check.decision
            }
        });
    }
    let write = if !writes {
        Write::Nothing
    } else if allowed {
        let charged: Option<PerTier<A::State>> = checks.into_iter().map(|c| c.charged).collect();
        charged.map_or(Write::Nothing, |states| store::<A>(tiers, &states, now_ms))
    } else if start.renewed || start.lost_expiry {
        match renewal::<A>(tiers, start.states, now_ms) {
            // Nothing left to count: a key that lost its expiry goes now.
            Write::Nothing if start.lost_expiry => Write::Delete,
            write => write,
        }
    } else {
        Write::Nothing
    };
    Ok(Outcome {
        decision: combine(&decisions, allowed),
        tiers: decisions,
        write,
    })
}

fn refund<A: Algorithm>(
    start: Start<A::State>,
    tiers: &[Quota],
    now_ms: i64,
    amount: i64,
) -> Result<Outcome, OutOfRange> {
    // Units counted under other parameters were not charged by this request's rules:
    // there is nothing of them to give back.
    let refunded: PerTier<Option<A::State>> = if start.renewed {
        std::iter::repeat_n(None, tiers.len()).collect()
    } else {
        tiers
            .iter()
            .zip(&start.states)
            .map(|(quota, state)| A::refund(state.as_ref(), now_ms, quota, amount))
            .collect()
    };
    let changed = refunded.iter().any(Option::is_some);
    let states: PerTier<Option<A::State>> = refunded
        .into_iter()
        .zip(start.states)
        .map(|(new, old)| new.or(old))
        .collect();
    let mut decisions = PerTier::with_capacity(tiers.len());
    for (quota, state) in tiers.iter().zip(&states) {
        let now = A::view(state.as_ref(), now_ms, quota)?;
        decisions.push(Decision {
            allowed: changed,
            limit: A::capacity(quota),
            remaining: now.remaining,
            reset_after_ms: now.reset_after_ms,
            retry_after_ms: 0,
        });
    }
    let write = if !changed {
        Write::Nothing
    } else {
        let states: Option<PerTier<A::State>> = states.into_iter().collect();
        match states {
            Some(states)
                if states
                    .iter()
                    .zip(tiers)
                    .any(|(state, quota)| A::used(state, now_ms, quota) > 0) =>
            {
                store::<A>(tiers, &states, now_ms)
            }
            _ => Write::Delete,
        }
    };
    let mut decision = combine(&decisions, true);
    decision.allowed = changed;
    Ok(Outcome {
        decision,
        tiers: decisions,
        write,
    })
}

fn renewal<A: Algorithm>(tiers: &[Quota], states: PerTier<Option<A::State>>, now_ms: i64) -> Write {
    let states: Option<PerTier<A::State>> = states.into_iter().collect();
    states.map_or(Write::Nothing, |states| store::<A>(tiers, &states, now_ms))
}

/// The write that stores `states`: a plain count where the algorithm uses one, else the
/// tiers form; the key expires when the last tier's state is the same as no state.
fn store<A: Algorithm>(tiers: &[Quota], states: &[A::State], now_ms: i64) -> Write {
    let expires_at_ms = states
        .iter()
        .zip(tiers)
        .map(|(state, quota)| A::expires_at_ms(state, quota))
        .max()
        .unwrap_or(now_ms);
    if expires_at_ms <= now_ms {
        return Write::Delete;
    }
    let value = match (tiers, states) {
        ([quota], [only]) => match (A::to_plain_count(only), A::to_short(only, expires_at_ms)) {
            (Some(count), _) => Value::from_slice(encode_count(count, &mut [0u8; 20])),
            (None, Some(short)) => {
                encode_short::<A>(quota, short).unwrap_or_else(|| encode_tiers::<A>(tiers, states))
            }
            (None, None) => encode_tiers::<A>(tiers, states),
        },
        _ => encode_tiers::<A>(tiers, states),
    };
    Write::Set {
        value,
        expires_at_ms,
    }
}

/// The binding answer over all tiers: when allowed, the tier with the least remaining;
/// when denied, the denied tier with the longest wait. `remaining` is the smallest and
/// `reset_after_ms` the longest over all tiers.
fn combine(tiers: &[Decision], allowed: bool) -> Decision {
    let wait = |d: &Decision| match d.retry_after_ms {
        NEVER => i64::MAX,
        ms => ms,
    };
    let binding = if allowed {
        tiers.iter().min_by_key(|d| d.remaining)
    } else {
        tiers.iter().filter(|d| !d.allowed).max_by_key(|d| wait(d))
    };
    let Some(binding) = binding.or(tiers.first()) else {
        return Decision {
            allowed,
            limit: 0,
            remaining: 0,
            reset_after_ms: 0,
            retry_after_ms: 0,
        };
    };
    Decision {
        allowed,
        limit: binding.limit,
        remaining: tiers.iter().map(|d| d.remaining).min().unwrap_or(0),
        reset_after_ms: tiers.iter().map(|d| d.reset_after_ms).max().unwrap_or(0),
        retry_after_ms: if allowed { 0 } else { binding.retry_after_ms },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encoding::FORMAT_V1;

    const T0: i64 = 1_796_083_200_000;
    const HOUR: i64 = 3_600_000;

    fn fixed(tiers: &[(i64, i64)]) -> Limits {
        Limits {
            algorithm: AlgorithmKind::Fixed,
            tiers: tiers.iter().map(|&(l, w)| Quota::new(l, w)).collect(),
        }
    }

    /// A key as the store would hold it: value and absolute expiry.
    #[derive(Debug, Default, Clone)]
    struct Key(Option<(Vec<u8>, i64)>);

    impl Key {
        fn run(&mut self, limits: &Limits, action: Action, now: i64) -> Outcome {
            let stored = self.0.clone();
            let outcome = run(
                limits,
                action,
                stored.as_ref().map(|(v, _)| v.as_slice()),
                || stored.as_ref().map(|(_, e)| *e),
                now,
            )
            .expect("answers");
            match &outcome.write {
                Write::Nothing => {}
                Write::Set {
                    value,
                    expires_at_ms,
                } => self.0 = Some((value.to_vec(), *expires_at_ms)),
                Write::Delete => self.0 = None,
            }
            outcome
        }
    }

    #[test]
    fn every_tier_counts_or_none_does() {
        let limits = fixed(&[(2, 1_000), (3, HOUR)]);
        let mut key = Key::default();
        let hit = Action::Hit { cost: 1 };
        assert!(key.run(&limits, hit, T0).decision.allowed);
        assert!(key.run(&limits, hit, T0 + 1).decision.allowed);
        // The one-second tier is full: denied, and the hour tier counts nothing either.
        let denied = key.run(&limits, hit, T0 + 2);
        assert!(!denied.decision.allowed);
        assert_eq!(denied.write, Write::Nothing);
        assert_eq!(denied.decision.retry_after_ms, 998);
        assert_eq!(denied.tiers[1].remaining, 1, "the hour tier still has room");
        assert!(denied.tiers[1].allowed);
        // Next second: the hour tier allows one more, then binds for the rest of the hour.
        let third = key.run(&limits, hit, T0 + 1_000);
        assert!(third.decision.allowed);
        assert_eq!((third.decision.limit, third.decision.remaining), (3, 0));
        assert_eq!(third.decision.reset_after_ms, HOUR - 1_000);
        let fourth = key.run(&limits, hit, T0 + 2_000);
        assert!(!fourth.decision.allowed);
        assert_eq!(fourth.decision.limit, 3, "the binding tier is the hour");
        assert_eq!(fourth.decision.retry_after_ms, HOUR - 2_000);
    }

    #[test]
    fn a_single_fixed_tier_is_stored_as_a_plain_count() {
        let mut key = Key::default();
        key.run(&fixed(&[(5, HOUR)]), Action::Hit { cost: 2 }, T0 + 5);
        assert_eq!(key.0, Some((b"2".to_vec(), T0 + HOUR)));
        key.run(
            &fixed(&[(5, HOUR), (9, 2 * HOUR)]),
            Action::Hit { cost: 1 },
            T0 + 6,
        );
        let (value, expiry) = key.0.clone().expect("stored");
        assert_eq!(value[0], FORMAT_V1);
        assert_eq!(expiry, T0 + 2 * HOUR);
    }

    #[test]
    fn peek_answers_like_hit_and_writes_nothing() {
        let limits = fixed(&[(3, HOUR)]);
        let mut key = Key::default();
        key.run(&limits, Action::Hit { cost: 1 }, T0);
        let peek = key.run(&limits, Action::Peek { cost: 2 }, T0 + 1);
        assert_eq!(peek.write, Write::Nothing);
        let hit = key.run(&limits, Action::Hit { cost: 2 }, T0 + 1);
        assert_eq!(peek.decision, hit.decision);
    }

    #[test]
    fn refund_gives_back_within_the_window_and_deletes_an_emptied_key() {
        let limits = fixed(&[(3, HOUR)]);
        let mut key = Key::default();
        let nothing = key.run(&limits, Action::Refund { amount: 1 }, T0);
        assert!(!nothing.decision.allowed);
        assert_eq!(nothing.write, Write::Nothing);
        key.run(&limits, Action::Hit { cost: 3 }, T0);
        let back = key.run(&limits, Action::Refund { amount: 2 }, T0 + 1);
        assert!(back.decision.allowed);
        assert_eq!(back.decision.remaining, 2);
        assert_eq!(key.0, Some((b"1".to_vec(), T0 + HOUR)));
        let more = key.run(&limits, Action::Refund { amount: 5 }, T0 + 2);
        assert_eq!(more.decision.remaining, 3, "never above the limit");
        assert_eq!(more.write, Write::Delete);
    }

    #[test]
    fn a_shorter_window_carries_the_count_and_never_waits_longer_than_it() {
        let mut key = Key::default();
        key.run(&fixed(&[(5, HOUR)]), Action::Hit { cost: 5 }, T0 + 10);
        // Same key, now 5 per minute: the 5 units still count, for at most a minute.
        let denied = key.run(&fixed(&[(5, 60_000)]), Action::Hit { cost: 1 }, T0 + 20);
        assert!(!denied.decision.allowed);
        assert_eq!(denied.decision.retry_after_ms, 60_000 - 20);
        assert_eq!(
            key.0,
            Some((b"5".to_vec(), T0 + 60_000)),
            "renewal is written"
        );
        let later = key.run(&fixed(&[(5, 60_000)]), Action::Hit { cost: 1 }, T0 + 60_000);
        assert!(later.decision.allowed);
    }

    #[test]
    fn a_longer_window_carries_the_count_into_its_own_window() {
        let mut key = Key::default();
        // 5 used in the minute window ending at T0 + 60 s.
        key.run(&fixed(&[(5, 60_000)]), Action::Hit { cost: 5 }, T0 + 1_000);
        // Now 5 per hour: the 5 still count, until the hour window ends.
        let hour = fixed(&[(5, HOUR)]);
        let denied = key.run(&hour, Action::Hit { cost: 1 }, T0 + 30_000);
        assert!(!denied.decision.allowed);
        assert_eq!(denied.decision.retry_after_ms, HOUR - 30_000);
        let later = key.run(&hour, Action::Hit { cost: 1 }, T0 + HOUR);
        assert!(later.decision.allowed);
    }

    #[test]
    fn a_look_after_a_rule_change_waits_until_the_old_state_is_gone() {
        let mut key = Key::default();
        key.run(&fixed(&[(5, HOUR)]), Action::Hit { cost: 5 }, T0 + 10);
        let second = fixed(&[(5, 1_000)]);
        let look = key.run(&second, Action::Peek { cost: 1 }, T0 + 20);
        assert_eq!(look.write, Write::Nothing);
        assert_eq!(
            look.decision.retry_after_ms,
            HOUR - 20,
            "the old hour must pass"
        );
        // A hit renews and writes, so its own wait is one new window.
        let hit = key.run(&second, Action::Hit { cost: 1 }, T0 + 20);
        assert_eq!(hit.decision.retry_after_ms, 980);
    }

    #[test]
    fn a_clock_back_by_more_than_a_window_costs_at_most_one_window() {
        let limits = fixed(&[(2, 1_000)]);
        let mut key = Key::default();
        key.run(&limits, Action::Hit { cost: 2 }, T0 + 10_500);
        let back = key.run(&limits, Action::Hit { cost: 1 }, T0 + 500);
        assert!(!back.decision.allowed, "no second burst");
        assert_eq!(back.decision.retry_after_ms, 500);
        assert!(
            key.run(&limits, Action::Hit { cost: 1 }, T0 + 1_000)
                .decision
                .allowed
        );
    }

    #[test]
    fn a_single_bucket_tier_is_stored_short_and_read_back_with_the_expiry() {
        let gcra = Limits {
            algorithm: AlgorithmKind::Gcra,
            tiers: smallvec::smallvec![Quota::new(100, HOUR)],
        };
        let mut key = Key::default();
        let mut last = None;
        for at in [0, 10, 36_000, 36_001] {
            let hit = key.run(&gcra, Action::Hit { cost: 1 }, T0 + at);
            let (value, expiry) = key.0.clone().expect("stored");
            // The interval is 36 s, a whole ms: tag, limit and window only.
            assert_eq!(value.len(), 4, "{value:?}");
            assert_eq!(expiry, T0 + at + hit.decision.reset_after_ms);
            last = Some(hit.decision.remaining);
        }
        assert_eq!(last, Some(97));
        // A third of a ms per unit: the ns below the ms are stored too.
        let thirds = Limits {
            algorithm: AlgorithmKind::Token,
            tiers: smallvec::smallvec![Quota::new(3, 1)],
        };
        let mut key = Key::default();
        key.run(&thirds, Action::Hit { cost: 1 }, T0);
        let second = key.run(&thirds, Action::Hit { cost: 1 }, T0);
        assert_eq!(second.decision.remaining, 1);
        let third = key.run(&thirds, Action::Hit { cost: 1 }, T0);
        assert!(third.decision.allowed, "exact: three fit at once");
        assert!(
            !key.run(&thirds, Action::Hit { cost: 1 }, T0)
                .decision
                .allowed
        );
    }

    #[test]
    fn only_whole_states_count_as_states() {
        let mut key = Key::default();
        key.run(
            &fixed(&[(5, HOUR), (9, 2 * HOUR)]),
            Action::Hit { cost: 1 },
            T0,
        );
        let (value, expiry) = key.0.clone().expect("stored");
        assert!(is_state(&value, Some(expiry)));
        assert!(
            !is_state(&value[..value.len() - 1], Some(expiry)),
            "cut short"
        );
        assert!(is_state(b"5", Some(T0)));
        assert!(is_state(b"5", None), "a plain count that lost its expiry");
        assert!(is_state(&value, None), "tiers that lost their expiry");
        assert!(!is_state(b"\x01\x09\x01", Some(T0)), "unknown algorithm");
        assert!(!is_state(b"hello", Some(T0)));
    }

    #[test]
    fn foreign_values_are_refused() {
        let limits = fixed(&[(2, 1_000)]);
        for (value, expiry) in [
            (&b"hello"[..], Some(T0 + 5)),
            (b"hello", None),
            (b"03", None),
            (b"\x01\x09\x01", Some(T0)),
        ] {
            let err = run(&limits, Action::Hit { cost: 1 }, Some(value), || expiry, T0);
            assert_eq!(err, Err(LimiterError::NotOurs), "{value:?}");
        }
    }

    /// A key as `PERSIST` leaves it: same value, no expiry.
    fn persisted(key: &Key) -> Key {
        Key(key.0.clone().map(|(value, _)| (value, NO_EXPIRY)))
    }

    /// Stands for "no expiry" in [`Key`]; `run_persisted` passes `None` for it.
    const NO_EXPIRY: i64 = i64::MIN;

    impl Key {
        /// Like `run`, with [`NO_EXPIRY`] read as a key without an expiry.
        fn run_persisted(&mut self, limits: &Limits, action: Action, now: i64) -> Outcome {
            let stored = self.0.clone();
            let outcome = run(
                limits,
                action,
                stored.as_ref().map(|(v, _)| v.as_slice()),
                || stored.as_ref().map(|(_, e)| *e).filter(|&e| e != NO_EXPIRY),
                now,
            )
            .expect("answers");
            match &outcome.write {
                Write::Nothing => {}
                Write::Set {
                    value,
                    expires_at_ms,
                } => self.0 = Some((value.to_vec(), *expires_at_ms)),
                Write::Delete => self.0 = None,
            }
            outcome
        }
    }

    #[test]
    fn a_plain_count_without_its_expiry_counts_again_from_now() {
        let limits = fixed(&[(5, HOUR)]);
        let mut key = Key::default();
        key.run(&limits, Action::Hit { cost: 3 }, T0 + 10);
        let mut key = persisted(&key);
        let hit = key.run_persisted(&limits, Action::Hit { cost: 1 }, T0 + 20);
        assert!(hit.decision.allowed);
        assert_eq!(hit.decision.remaining, 1, "the 3 units still count");
        let (value, expiry) = key.0.clone().expect("written back");
        assert_eq!(value, b"4".to_vec());
        assert!(expiry > T0 + 20 && expiry <= T0 + 20 + HOUR, "{expiry}");
    }

    #[test]
    fn a_denied_hit_writes_back_a_state_that_lost_its_expiry() {
        // Full, then persisted: denied, but written back with its expiry.
        let limits = fixed(&[(2, HOUR)]);
        let mut key = Key::default();
        key.run(&limits, Action::Hit { cost: 2 }, T0);
        let mut key = persisted(&key);
        let denied = key.run_persisted(&limits, Action::Hit { cost: 1 }, T0 + 5);
        assert!(!denied.decision.allowed);
        assert!(denied.decision.retry_after_ms <= HOUR);
        assert!(matches!(denied.write, Write::Set { expires_at_ms, .. } if expires_at_ms > T0));
        // Tiers whose windows all ended, without an expiry: a denied hit deletes them.
        let tiers = fixed(&[(1, 1_000), (5, HOUR)]);
        let mut key = Key::default();
        key.run(&tiers, Action::Hit { cost: 1 }, T0);
        let mut key = persisted(&key);
        let outcome = key.run_persisted(&tiers, Action::Hit { cost: 9 }, T0 + 2 * HOUR);
        assert!(!outcome.decision.allowed, "cost above every limit");
        assert_eq!(outcome.write, Write::Delete);
    }

    #[test]
    fn a_bucket_without_its_expiry_counts_as_full_for_at_most_one_window() {
        let gcra = Limits {
            algorithm: AlgorithmKind::Gcra,
            tiers: smallvec::smallvec![Quota::new(10, 60_000)],
        };
        let mut key = Key::default();
        key.run(&gcra, Action::Hit { cost: 1 }, T0);
        let mut key = persisted(&key);
        let denied = key.run_persisted(&gcra, Action::Hit { cost: 1 }, T0 + 5);
        assert!(!denied.decision.allowed, "the time is lost: taken as full");
        assert!(
            denied.decision.retry_after_ms <= 6_000,
            "one unit's interval"
        );
        let (_, expiry) = key.0.clone().expect("written back");
        assert!(expiry <= T0 + 5 + 60_000, "{expiry}");
        let later = key.run_persisted(&gcra, Action::Hit { cost: 1 }, T0 + 5 + 6_000);
        assert!(later.decision.allowed);
    }

    #[test]
    fn a_look_reads_a_state_without_its_expiry_and_writes_nothing() {
        for algorithm in AlgorithmKind::ALL.map(|(kind, _)| kind) {
            let limits = Limits {
                algorithm,
                tiers: smallvec::smallvec![Quota::new(5, HOUR)],
            };
            let mut key = Key::default();
            key.run(&limits, Action::Hit { cost: 1 }, T0);
            let mut key = persisted(&key);
            let look = key.run_persisted(&limits, Action::Peek { cost: 1 }, T0 + 1);
            assert_eq!(look.write, Write::Nothing, "{algorithm:?}");
            let hit = key.run_persisted(&limits, Action::Hit { cost: 1 }, T0 + 1);
            assert!(
                matches!(hit.write, Write::Set { expires_at_ms, .. } if expires_at_ms != NO_EXPIRY),
                "{algorithm:?}: {hit:?}"
            );
        }
    }
}
