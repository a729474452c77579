//! The log as it was decided before the header: every entry decoded, counted and written
//! again on every call. Kept as the reference the header's shortcuts must agree with, on
//! every answer and every state.

use super::{Entry, Log, LogState};
use crate::algorithm::{Algorithm, OutOfRange, Quota, View};
use crate::checked::to_i64;
use crate::codec::{Bytes, Reader};
use crate::decision::{Decision, NEVER};
use proptest::prelude::*;

const T0: i64 = 1_796_083_200_000;

/// The entries in the window at `now`: the time it counts as, the entries, their units.
fn live(entries: &[Entry], now: i64, window: i64) -> (i64, &[Entry], i128) {
    let at = entries.last().map_or(now, |e| e.at_ms.max(now));
    let horizon = i128::from(at) - i128::from(window);
    let first = entries.partition_point(|e| i128::from(e.at_ms) <= horizon);
    let live = &entries[first..];
    (at, live, live.iter().map(|e| i128::from(e.units)).sum())
}

fn view(entries: &[Entry], now: i64, quota: &Quota) -> Result<View, OutOfRange> {
    let (_, live, used) = live(entries, now, quota.window_ms);
    let left = (i128::from(quota.limit) - used).clamp(0, i128::from(quota.limit));
    let reset = match live.iter().rev().find(|e| e.units > 0) {
        Some(e) => to_i64(i128::from(e.at_ms) + i128::from(quota.window_ms) - i128::from(now))?,
        None => 0,
    };
    Ok(View {
        remaining: to_i64(left)?,
        reset_after_ms: reset,
    })
}

fn check(
    entries: &[Entry],
    now: i64,
    quota: &Quota,
    cost: i64,
) -> Result<(Decision, Option<Vec<Entry>>), OutOfRange> {
    let (at, live_entries, used) = live(entries, now, quota.window_ms);
    let total = used + i128::from(cost);
    if total > i128::from(quota.limit) {
        let now_view = view(entries, now, quota)?;
        let retry = if cost > quota.limit {
            NEVER
        } else {
            let excess = total - i128::from(quota.limit);
            let mut freed = 0;
            let mut leaves = i128::from(at) + i128::from(quota.window_ms);
            for e in live_entries {
                freed += i128::from(e.units);
                if freed >= excess {
                    leaves = i128::from(e.at_ms) + i128::from(quota.window_ms);
                    break;
                }
            }
            to_i64(leaves - i128::from(now))?
        };
        let decision = Decision {
            allowed: false,
            limit: quota.limit,
            remaining: now_view.remaining,
            reset_after_ms: now_view.reset_after_ms,
            retry_after_ms: retry,
        };
        return Ok((decision, None));
    }
    let mut next: Vec<Entry> = live_entries
        .iter()
        .copied()
        .filter(|e| e.units > 0 || e.at_ms == at)
        .collect();
    match next.last_mut() {
        Some(newest) if newest.at_ms == at => newest.units += cost,
        _ => next.push(Entry {
            at_ms: at,
            units: cost,
        }),
    }
    let decision = Decision {
        allowed: true,
        limit: quota.limit,
        remaining: to_i64(i128::from(quota.limit) - total)?,
        reset_after_ms: at + quota.window_ms - now,
        retry_after_ms: 0,
    };
    Ok((decision, Some(next)))
}

fn refund(entries: &[Entry], now: i64, quota: &Quota, amount: i64) -> Option<Vec<Entry>> {
    let (_, live_entries, used) = live(entries, now, quota.window_ms);
    if used == 0 {
        return None;
    }
    let newest = *live_entries.last()?;
    let mut next = entries.to_vec();
    let first_live = next.len() - live_entries.len();
    let mut left = amount;
    for e in next[first_live..].iter_mut().rev() {
        let take = e.units.min(left);
        e.units -= take;
        left -= take;
    }
    next.retain(|e| e.units > 0 || e.at_ms == newest.at_ms);
    Some(next)
}

/// A step of a sequence: a time step (some backwards), then a hit, a look or a refund.
#[derive(Debug, Clone, Copy)]
enum Step {
    Hit(i64),
    Look(i64),
    Refund(i64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => (1i64..4).prop_map(Step::Hit),
        1 => (1i64..80).prop_map(Step::Hit),
        2 => (1i64..6).prop_map(Step::Look),
        1 => (1i64..8).prop_map(Step::Refund),
    ]
}

/// The state as a key would hold it: written and read back (so that it borrows its
/// stored pairs, as in the module). The bytes are leaked: they must outlive the state, as
/// a key's value outlives the command, and a test's few kilobytes may stay.
fn stored(state: &LogState<'_>) -> LogState<'static> {
    let mut bytes = Bytes::new();
    Log::encode(state, &mut bytes);
    let bytes: &'static [u8] = Box::leak(bytes.to_vec().into_boxed_slice());
    let back = Log::decode(&mut Reader::new(bytes));
    assert_eq!(back.as_ref(), Some(state));
    back.expect("a state written decodes")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// Every answer (decision, look, refund, usage, expiry) and every state the header's
    /// shortcuts give equals what deciding on all decoded entries gives, over sequences
    /// long enough for logs of hundreds of entries, with expiry from the front, clocks
    /// that go back and markers left by refunds.
    #[test]
    fn the_shortcuts_answer_what_a_full_decode_answers(
        limit in prop_oneof![1i64..8, 20i64..400],
        window in prop_oneof![1i64..50, 50i64..3_000],
        steps in proptest::collection::vec((-40i64..60, step()), 1..400),
    ) {
        let quota = Quota::new(limit, window);
        let mut now = T0;
        let mut state: Option<LogState> = None;
        let mut entries: Vec<Entry> = Vec::new();
        for (dt, step) in steps {
            now += dt;
            match step {
                Step::Hit(cost) => {
                    let ours = Log::check(state.as_ref(), now, &quota, cost).expect("in range");
                    let (decision, next) = check(&entries, now, &quota, cost).expect("in range");
                    prop_assert_eq!(ours.decision, decision);
                    prop_assert_eq!(ours.charged.as_ref().map(LogState::entries), next.clone());
                    if let (Some(charged), Some(next)) = (ours.charged, next) {
                        state = Some(stored(&charged));
                        entries = next;
                    }
                }
                Step::Look(cost) => {
                    let ours = Log::view(state.as_ref(), now, &quota).expect("in range");
                    prop_assert_eq!(ours, view(&entries, now, &quota).expect("in range"));
                    let look = Log::check(state.as_ref(), now, &quota, cost).expect("in range");
                    let (decision, _) = check(&entries, now, &quota, cost).expect("in range");
                    prop_assert_eq!(look.decision, decision);
                }
                Step::Refund(amount) => {
                    let ours = Log::refund(state.as_ref(), now, &quota, amount);
                    let next = refund(&entries, now, &quota, amount);
                    prop_assert_eq!(ours.as_ref().map(LogState::entries), next.clone());
                    if let (Some(back), Some(next)) = (ours, next) {
                        state = Some(stored(&back));
                        entries = next;
                    }
                }
            }
            if let Some(state) = &state {
                let (_, _, used) = live(&entries, now, window);
                prop_assert_eq!(i128::from(Log::used(state, now, &quota)), used);
                let newest = entries.last().map(|e| e.at_ms + window);
                prop_assert_eq!(Some(Log::expires_at_ms(state, &quota)), newest);
            }
        }
    }
}
