//! Several keys in one call, all or nothing: RL.MHIT, RL.MPEEK and RL.MREFUND.
//!
//! Every key is decided first, each with its own algorithm, tiers and cost, from its own
//! stored state; the units are then counted in every key or in none. When one key denies,
//! no key is written (not even the renewal a lone RL.HIT would write after a rule change),
//! and each key answers what RL.PEEK would, except that a key that would allow reports
//! what it has now, since nothing was counted in it: the same rule as for the tiers of
//! one key.
//!
//! **The binding key.** Denied: the key that denies with the longest `retry_after_ms`
//! (`-1`, never, counts as the longest), so waiting that long is the least any retry
//! needs. Allowed (and for refunds): the key with the least `remaining`. Ties go to the
//! key given first.
//!
//! **Shadow policies.** A key whose rule is a shadow policy never denies the call: when
//! it would have denied, its answer says allowed, [`KeyOutcome::shadow_denied`] says what
//! enforcing would have done, and nothing is counted in it (as with RL.HIT).

use super::{run, run_held, Action, LimiterError, Limits, Outcome, Write};
use crate::decision::NEVER;
use smallvec::SmallVec;

/// One key's part in a several-keys call.
#[derive(Debug, Clone, Copy)]
pub struct KeyCall<'a> {
    /// The key's algorithm and tiers.
    pub limits: &'a Limits,
    /// Units to count (RL.MHIT), check (RL.MPEEK) or give back (RL.MREFUND), >= 1.
    pub amount: i64,
    /// The rule is a shadow policy: the key never denies the call.
    pub shadow: bool,
    /// The key's stored value; `None`: no key.
    pub stored: Option<&'a [u8]>,
}

/// What to do with every key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MultiAction {
    /// Check every key and count in all of them when all allow (RL.MHIT).
    Hit,
    /// Answer what [`MultiAction::Hit`] would, writing nothing (RL.MPEEK).
    Peek,
    /// Give back units in every key (RL.MREFUND); never denied.
    Refund,
}

/// One key's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyOutcome {
    /// The key's decision, tiers and write (`Write::Nothing` in a denied call).
    pub outcome: Outcome,
    /// A shadow policy's key that would have denied (its decision then says allowed).
    pub shadow_denied: bool,
}

/// The answer to a several-keys call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiOutcome {
    /// Hit and peek: every key allows, and (for a hit) every key counted. Refund: every
    /// key gave units back.
    pub allowed: bool,
    /// The index of the binding key (see the module docs).
    pub binding: usize,
    /// One answer per key, in call order.
    pub keys: SmallVec<[KeyOutcome; 4]>,
}

/// Decides `action` over every key of `calls` at `now_ms`; `expiry(i)` gives key `i`'s
/// absolute expiry (asked only when needed, as by [`run`]). Only the writes of an allowed
/// call (or of a refund) are anything but `Write::Nothing`: store them all, or none.
///
/// An error names the index of the key it comes from.
///
/// # Example
///
/// Two keys, 3 per minute and 1 per minute: the second call is denied by the second key,
/// and nothing is counted in the first.
///
/// ```
/// use ratelimit_core::algorithm::Quota;
/// use ratelimit_core::limiter::{run_all, AlgorithmKind, KeyCall, Limits, MemoryKey, MultiAction};
///
/// let limits = |limit| Limits {
///     algorithm: AlgorithmKind::Fixed,
///     tiers: [Quota::new(limit, 60_000)].into_iter().collect(),
/// };
/// let (three, one) = (limits(3), limits(1));
/// let mut keys = [MemoryKey::default(), MemoryKey::default()];
/// let now_ms = 1_796_083_200_000;
/// for expect_allowed in [true, false] {
///     let calls = [(&three, &keys[0]), (&one, &keys[1])].map(|(limits, key)| KeyCall {
///         limits,
///         amount: 1,
///         shadow: false,
///         stored: key.value(),
///     });
///     let out = run_all(&calls, MultiAction::Hit, |i| keys[i].expires_at_ms(), now_ms)
///         .map_err(|(_, err)| err)?;
///     assert_eq!(out.allowed, expect_allowed);
///     assert_eq!(out.binding, 1);
///     let writes: Vec<_> = out.keys.into_iter().map(|k| k.outcome.write).collect();
///     for (key, write) in keys.iter_mut().zip(&writes) {
///         key.apply(write);
///     }
/// }
/// assert_eq!(keys[0].value(), Some(&b"1"[..]), "counted once, in the allowed call");
/// # Ok::<(), ratelimit_core::limiter::LimiterError>(())
/// ```
pub fn run_all(
    calls: &[KeyCall<'_>],
    action: MultiAction,
    expiry: impl Fn(usize) -> Option<i64>,
    now_ms: i64,
) -> Result<MultiOutcome, (usize, LimiterError)> {
    let step = |amount| match action {
        MultiAction::Hit => Action::Hit { cost: amount },
        MultiAction::Peek => Action::Peek { cost: amount },
        MultiAction::Refund => Action::Refund { amount },
    };
    let refund = action == MultiAction::Refund;
    let mut keys = SmallVec::<[KeyOutcome; 4]>::with_capacity(calls.len());
    for (i, call) in calls.iter().enumerate() {
        let outcome = run(
            call.limits,
            step(call.amount),
            call.stored,
            || expiry(i),
            now_ms,
        )
        .map_err(|err| (i, err))?;
        keys.push(shadowed(outcome, call.shadow && !refund));
    }
    let allowed = keys.iter().all(|k| k.outcome.decision.allowed);
    if !allowed && !refund {
        // Nothing is counted anywhere: a key that would allow (or write a renewal) answers
        // again as held, and a denied key's look is what RL.PEEK says.
        for (i, (call, key)) in calls.iter().zip(keys.iter_mut()).enumerate() {
            if key.outcome.decision.allowed || key.outcome.write != Write::Nothing {
                let held = run_held(call.limits, call.amount, call.stored, || expiry(i), now_ms)
                    .map_err(|err| (i, err))?;
                *key = shadowed(held, call.shadow);
            }
            key.outcome.write = Write::Nothing;
        }
    }
    let binding = if allowed || refund {
        least_remaining(&keys)
    } else {
        longest_wait(&keys)
    };
    Ok(MultiOutcome {
        allowed,
        binding,
        keys,
    })
}

/// A key's outcome, turned into an allowed one when a shadow policy would have denied it.
fn shadowed(mut outcome: Outcome, shadow: bool) -> KeyOutcome {
    let shadow_denied = shadow && !outcome.decision.allowed;
    if shadow_denied {
        outcome.decision.allowed = true;
    }
    KeyOutcome {
        outcome,
        shadow_denied,
    }
}

/// The first key with the least `remaining`.
fn least_remaining(keys: &[KeyOutcome]) -> usize {
    let mut best = 0;
    for (i, key) in keys.iter().enumerate() {
        if key.outcome.decision.remaining < keys[best].outcome.decision.remaining {
            best = i;
        }
    }
    best
}

/// The first denying key with the longest `retry_after_ms` (never waits longest).
fn longest_wait(keys: &[KeyOutcome]) -> usize {
    let wait = |key: &KeyOutcome| match key.outcome.decision.retry_after_ms {
        NEVER => i64::MAX,
        ms => ms,
    };
    let mut best: Option<usize> = None;
    for (i, key) in keys.iter().enumerate() {
        if key.outcome.decision.allowed {
            continue;
        }
        if best.is_none_or(|b| wait(key) > wait(&keys[b])) {
            best = Some(i);
        }
    }
    best.unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::super::MemoryKey;
    use super::*;
    use crate::algorithm::Quota;
    use crate::limiter::AlgorithmKind;
    use proptest::prelude::*;

    const T0: i64 = 1_796_083_200_000;

    fn limits(algorithm: AlgorithmKind, tiers: &[(i64, i64)]) -> Limits {
        Limits {
            algorithm,
            tiers: tiers.iter().map(|&(l, w)| Quota::new(l, w)).collect(),
        }
    }

    /// One call over `keys`, storing what it says to.
    fn hit_all(
        keys: &mut [MemoryKey],
        rules: &[(&Limits, i64, bool)],
        action: MultiAction,
        now_ms: i64,
    ) -> MultiOutcome {
        let calls: Vec<KeyCall> = rules
            .iter()
            .zip(keys.iter())
            .map(|(&(limits, amount, shadow), key)| KeyCall {
                limits,
                amount,
                shadow,
                stored: key.value(),
            })
            .collect();
        let out = run_all(&calls, action, |i| keys[i].expires_at_ms(), now_ms).expect("decides");
        drop(calls);
        for (key, answer) in keys.iter_mut().zip(&out.keys) {
            key.apply(&answer.outcome.write);
        }
        out
    }

    #[test]
    fn a_denying_key_stops_every_count_and_answers_as_binding() {
        let (ten, two) = (
            limits(AlgorithmKind::Fixed, &[(10, 60_000)]),
            limits(AlgorithmKind::Gcra, &[(2, 60_000)]),
        );
        let mut keys = vec![MemoryKey::default(); 2];
        let rules = [(&ten, 1, false), (&two, 1, false)];
        for _ in 0..2 {
            assert!(hit_all(&mut keys, &rules, MultiAction::Hit, T0).allowed);
        }
        let before = keys.clone();
        let denied = hit_all(&mut keys, &rules, MultiAction::Hit, T0);
        assert!(!denied.allowed);
        assert_eq!(denied.binding, 1);
        assert_eq!(keys, before, "nothing written");
        let first = denied.keys[0].outcome.decision;
        assert!(first.allowed, "the first key alone would allow");
        assert_eq!(first.remaining, 8, "and reports what it has now");
        assert!(denied.keys[1].outcome.decision.retry_after_ms > 0);
    }

    #[test]
    fn the_binding_key_is_the_longest_wait_or_the_least_remaining() {
        let rules_limits = [
            limits(AlgorithmKind::Fixed, &[(1, 1_000)]),
            limits(AlgorithmKind::Fixed, &[(1, 60_000)]),
            limits(AlgorithmKind::Fixed, &[(5, 60_000)]),
        ];
        let mut keys = vec![MemoryKey::default(); 3];
        let rules: Vec<_> = rules_limits.iter().map(|l| (l, 1, false)).collect();
        let allowed = hit_all(&mut keys, &rules, MultiAction::Hit, T0);
        assert!(allowed.allowed);
        assert_eq!(allowed.binding, 0, "first of the keys left with 0");
        let denied = hit_all(&mut keys, &rules, MultiAction::Hit, T0 + 10);
        assert_eq!(
            (denied.allowed, denied.binding),
            (false, 1),
            "the minute waits longest"
        );
        let never = [(&rules_limits[0], 1, false), (&rules_limits[2], 6, false)];
        let out = hit_all(&mut keys[..2], &never, MultiAction::Hit, T0 + 10);
        assert_eq!(
            out.binding, 1,
            "a cost above the limit never fits: -1 binds"
        );
    }

    #[test]
    fn a_peek_answers_what_the_hit_would_and_writes_nothing() {
        let five = limits(AlgorithmKind::Sliding, &[(5, 60_000), (20, 3_600_000)]);
        let one = limits(AlgorithmKind::Token, &[(3, 60_000)]);
        let mut keys = vec![MemoryKey::default(); 2];
        let rules = [(&five, 2, false), (&one, 1, false)];
        for step in 0..5 {
            let now = T0 + step * 100;
            let before = keys.clone();
            let peek = hit_all(&mut keys, &rules, MultiAction::Peek, now);
            assert_eq!(keys, before);
            let hit = hit_all(&mut keys, &rules, MultiAction::Hit, now);
            assert_eq!(peek.allowed, hit.allowed);
            assert_eq!(peek.binding, hit.binding);
            for (p, h) in peek.keys.iter().zip(&hit.keys) {
                assert_eq!(p.outcome.decision, h.outcome.decision, "step {step}");
            }
        }
    }

    #[test]
    fn a_shadow_key_never_denies_the_call() {
        let one = limits(AlgorithmKind::Fixed, &[(1, 60_000)]);
        let ten = limits(AlgorithmKind::Fixed, &[(10, 60_000)]);
        let mut keys = vec![MemoryKey::default(); 2];
        let rules = [(&one, 1, true), (&ten, 1, false)];
        hit_all(&mut keys, &rules, MultiAction::Hit, T0);
        let out = hit_all(&mut keys, &rules, MultiAction::Hit, T0 + 1);
        assert!(out.allowed);
        assert!(out.keys[0].shadow_denied);
        assert!(out.keys[0].outcome.decision.allowed);
        assert_eq!(
            keys[0].value(),
            Some(&b"1"[..]),
            "not counted past its limit"
        );
        assert_eq!(keys[1].value(), Some(&b"2"[..]));
    }

    #[test]
    fn a_refund_gives_back_in_every_key() {
        let three = limits(AlgorithmKind::Fixed, &[(3, 60_000)]);
        let mut keys = vec![MemoryKey::default(); 2];
        let rules = [(&three, 2, false), (&three, 1, false)];
        hit_all(&mut keys, &rules, MultiAction::Hit, T0);
        let back = hit_all(&mut keys, &rules, MultiAction::Refund, T0 + 1);
        assert!(back.allowed);
        assert_eq!(keys, vec![MemoryKey::default(); 2], "emptied keys go");
        let nothing = hit_all(&mut keys, &rules, MultiAction::Refund, T0 + 2);
        assert!(!nothing.allowed, "nothing left to give back");
    }

    #[test]
    fn an_error_names_its_key() {
        let one = limits(AlgorithmKind::Fixed, &[(1, 60_000)]);
        let calls = [
            KeyCall {
                limits: &one,
                amount: 1,
                shadow: false,
                stored: None,
            },
            KeyCall {
                limits: &one,
                amount: 1,
                shadow: false,
                stored: Some(b"not a state"),
            },
        ];
        let err = run_all(&calls, MultiAction::Hit, |_| None, T0);
        assert_eq!(err, Err((1, LimiterError::NotOurs)));
    }

    fn algorithm() -> impl Strategy<Value = AlgorithmKind> {
        prop::sample::select(
            AlgorithmKind::ALL
                .iter()
                .map(|(k, _)| *k)
                .collect::<Vec<_>>(),
        )
    }

    proptest! {
        /// Random keys, rules, costs and times: a call counts in every key exactly what
        /// that key's own RL.HIT would, or in none; a denied call writes nothing; and no
        /// fixed window or log ever holds more than its limit.
        #[test]
        fn all_or_nothing_and_never_above_any_limit(
            rules in prop::collection::vec((algorithm(), 1i64..8, 1i64..4, 1i64..4), 1..5),
            steps in prop::collection::vec((0i64..700, 0u8..16), 1..40),
        ) {
            let rule_limits: Vec<Limits> = rules
                .iter()
                .map(|&(kind, limit, seconds, _)| limits(kind, &[(limit, seconds * 1_000)]))
                .collect();
            let mut keys = vec![MemoryKey::default(); rules.len()];
            // Each key's admitted (time, cost), to count against its limit.
            let mut admitted: Vec<Vec<(i64, i64)>> = vec![Vec::new(); rules.len()];
            let mut now = T0;
            for (advance, mask) in steps {
                now += advance;
                let chosen: Vec<usize> =
                    (0..rules.len()).filter(|i| mask & (1 << i) != 0).collect();
                let chosen = if chosen.is_empty() { vec![0] } else { chosen };
                let call_rules: Vec<_> = chosen
                    .iter()
                    .map(|&i| (&rule_limits[i], rules[i].3, false))
                    .collect();
                let mut call_keys: Vec<MemoryKey> =
                    chosen.iter().map(|&i| keys[i].clone()).collect();
                let alone: Vec<Outcome> = chosen
                    .iter()
                    .zip(&call_rules)
                    .map(|(&i, &(l, cost, _))| {
                        keys[i].decide(l, Action::Hit { cost }, now).expect("decides")
                    })
                    .collect();
                let out = hit_all(&mut call_keys, &call_rules, MultiAction::Hit, now);
                let every_allows = alone.iter().all(|o| o.decision.allowed);
                prop_assert_eq!(out.allowed, every_allows);
                for (j, &i) in chosen.iter().enumerate() {
                    if out.allowed {
                        prop_assert_eq!(&out.keys[j].outcome, &alone[j]);
                        admitted[i].push((now, rules[i].3));
                    } else {
                        prop_assert_eq!(&call_keys[j], &keys[i], "a denial writes nothing");
                    }
                    keys[i] = call_keys[j].clone();
                }
                for (i, &(kind, limit, seconds, _)) in rules.iter().enumerate() {
                    let window = seconds * 1_000;
                    let used: i64 = match kind {
                        AlgorithmKind::Fixed => admitted[i]
                            .iter()
                            .filter(|(t, _)| t.div_euclid(window) == now.div_euclid(window))
                            .map(|(_, c)| c)
                            .sum(),
                        AlgorithmKind::Log => admitted[i]
                            .iter()
                            .filter(|(t, _)| now - t < window)
                            .map(|(_, c)| c)
                            .sum(),
                        _ => 0,
                    };
                    prop_assert!(used <= limit, "key {i} ({kind:?}) holds {used} > {limit}");
                }
            }
        }
    }
}
