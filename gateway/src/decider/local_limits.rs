//! The limits a gateway enforces in its own memory while Redis cannot decide
//! (`on_redis_failure = "local"`): the rule's own limits divided by the number of live
//! gateways, decided by the same pure core the module runs, so that a fleet cut off from
//! Redis admits about the limit in all, never "unlimited".
//!
//! The share: `[redis] gateways` when set, else the count of live gateways that the
//! heartbeat last read from Redis (every gateway keeps its own entry fresh while it can;
//! the count taken before an outage holds during it), and 1 before any was read.
//!
//! A policy rule's limits live in Redis: they are read (`RL.POLICY GET`) by the heartbeat
//! while Redis answers, and a policy never read is decided as `open` (logged once).
//!
//! The keys are bounded (`capacity`): when full, keys whose state has expired go first,
//! then any, so an attacker's fresh keys cost memory only up to the bound.

use crate::rules::{Limit, Rule};
use crate::verdict::{TierState, Verdict};
use ratelimit_core::args::{parse_limits, parse_policy, Mode, Settings};
use ratelimit_core::limiter::{Action, Limits, MemoryKey};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, RwLock};

/// The wall clock in ms, as the module reads the server's (the core's windows are aligned
/// to it, so a local window ends when Redis's would).
pub(crate) fn now_ms() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
}

/// The most keys decided locally at once.
pub(crate) const DEFAULT_CAPACITY: usize = 100_000;

pub(crate) struct LocalLimits {
    keys: Mutex<HashMap<String, Entry>>,
    /// Whether some key holds units that Redis has not been told of.
    unsynced: AtomicBool,
    capacity: usize,
    /// `[redis] gateways`: a fixed share, which the heartbeat does not change.
    fixed_share: Option<u64>,
    /// The live gateways last counted (at least 1).
    live: AtomicU64,
    /// Each policy's definition as `RL.POLICY GET` last answered it.
    policies: RwLock<HashMap<String, Vec<Vec<u8>>>>,
}

/// One key decided locally.
#[derive(Default)]
struct Entry {
    state: MemoryKey,
    /// The units admitted here that Redis has not counted, and the rule they were
    /// admitted under: written back when Redis answers again.
    unsynced: Option<(Arc<Rule>, u64)>,
}

/// Units admitted while Redis could not decide, to be counted there now that it can.
pub(crate) struct Unsynced {
    pub(crate) rule: Arc<Rule>,
    pub(crate) key: String,
    pub(crate) units: u64,
}

/// What the local limit answered.
pub(crate) enum LocalAnswer {
    /// Counted (or would be: a shadow policy never denies).
    Allowed(Verdict),
    Denied(Verdict),
    /// No local definition (a policy not read yet): the rule fails open.
    Unknown,
}

impl LocalLimits {
    pub(crate) fn new(capacity: usize, fixed_share: Option<u64>) -> Self {
        LocalLimits {
            keys: Mutex::new(HashMap::new()),
            unsynced: AtomicBool::new(false),
            capacity: capacity.max(1),
            fixed_share,
            live: AtomicU64::new(1),
            policies: RwLock::new(HashMap::new()),
        }
    }

    /// The number of gateways the limits are divided by.
    pub(crate) fn share(&self) -> u64 {
        self.fixed_share
            .unwrap_or_else(|| self.live.load(Relaxed))
            .max(1)
    }

    /// The heartbeat's count of live gateways.
    pub(crate) fn set_live(&self, gateways: u64) {
        self.live.store(gateways.max(1), Relaxed);
    }

    /// `RL.POLICY GET name`'s answer (`None`: no such policy).
    pub(crate) fn set_policy(&self, name: &str, definition: Option<Vec<Vec<u8>>>) {
        let mut policies = self.policies.write().unwrap_or_else(|e| e.into_inner());
        match definition {
            Some(words) => policies.insert(name.to_owned(), words),
            None => policies.remove(name),
        };
    }

    /// Counts `cost` units of `rule` on `key` at `now_ms`, against the local share.
    pub(crate) fn hit(
        &self,
        rule: &Arc<Rule>,
        key: &str,
        cost: Option<u64>,
        now_ms: i64,
    ) -> LocalAnswer {
        let Some((limits, rule_cost, shadow)) = self.limits(rule) else {
            return LocalAnswer::Unknown;
        };
        let cost = cost.map_or(rule_cost, |c| i64::try_from(c).unwrap_or(i64::MAX));
        let Some(outcome) = self.run(key, &limits, Action::Hit { cost }, now_ms, |entry| {
            let units = entry.unsynced.as_ref().map_or(0, |(_, n)| *n);
            entry.unsynced = Some((rule.clone(), units.saturating_add(cost as u64)));
        }) else {
            return LocalAnswer::Unknown;
        };
        let verdict = verdict_of(&outcome);
        match outcome.decision.allowed || shadow {
            true => LocalAnswer::Allowed(verdict),
            false => LocalAnswer::Denied(verdict),
        }
    }

    /// Gives back what [`LocalLimits::hit`] counted for a request that is not served, or
    /// whose status does not count.
    pub(crate) fn refund(&self, rule: &Rule, key: &str, cost: Option<u64>, now_ms: i64) {
        let Some((limits, rule_cost, _)) = self.limits(rule) else {
            return;
        };
        let amount = cost.map_or(rule_cost, |c| i64::try_from(c).unwrap_or(i64::MAX));
        self.run(key, &limits, Action::Refund { amount }, now_ms, |entry| {
            if let Some((_, units)) = &mut entry.unsynced {
                *units = units.saturating_sub(amount as u64);
            }
        });
    }

    /// Takes the units admitted here that Redis has not counted, of the keys whose local
    /// window still runs (an ended one counts nothing any more). The keys keep their local
    /// state: an outage that comes back within a window goes on from it, rather than
    /// granting a fresh share at every flap. `None` (cheaply) when there is nothing to tell.
    pub(crate) fn take_unsynced(&self, now_ms: impl FnOnce() -> i64) -> Option<Vec<Unsynced>> {
        // A load first: this runs at every answer, and a swap would write the shared line.
        // The clock is read only past it, for the same reason.
        if !self.unsynced.load(Relaxed) || !self.unsynced.swap(false, Relaxed) {
            return None;
        }
        let now_ms = now_ms();
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        keys.retain(|_, entry| entry.state.expires_at_ms().is_none_or(|at| at > now_ms));
        let taken = keys
            .iter_mut()
            .filter_map(|(key, entry)| {
                let (rule, units) = entry.unsynced.take()?;
                (units > 0).then(|| Unsynced {
                    rule,
                    key: key.clone(),
                    units,
                })
            })
            .collect();
        Some(taken)
    }

    /// How many keys are held (tests look, the service never needs to).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.keys.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// Whether no key is held.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `action` on `key`; `counted` updates the entry when the action allowed.
    fn run(
        &self,
        key: &str,
        limits: &Limits,
        action: Action,
        now_ms: i64,
        counted: impl FnOnce(&mut Entry),
    ) -> Option<ratelimit_core::limiter::Outcome> {
        let mut keys = self.keys.lock().unwrap_or_else(|e| e.into_inner());
        if !keys.contains_key(key) && keys.len() >= self.capacity {
            make_room(&mut keys, now_ms);
        }
        let entry = keys.entry(key.to_owned()).or_default();
        if entry.state.expires_at_ms().is_some_and(|at| at <= now_ms) {
            *entry = Entry::default();
        }
        // A key written under another share (or other rules) starts afresh from its usage:
        // the core's renewal, as in Redis.
        let outcome = entry.state.run(limits, action, now_ms).ok()?;
        if outcome.decision.allowed {
            counted(entry);
            self.unsynced.store(true, Relaxed);
        }
        Some(outcome)
    }

    /// The rule's limits divided by the share, its cost, and whether it is a shadow policy.
    fn limits(&self, rule: &Rule) -> Option<(Limits, i64, bool)> {
        let settings = Settings::default();
        let (mut limits, cost, shadow) = match &rule.limit {
            Limit::Unlimited => return None,
            Limit::Tiers { .. } => {
                let words = rule.call_args.iter().map(|w| w.as_bytes());
                let parsed = parse_limits(words, &settings).ok()?;
                (parsed.limits, parsed.cost, false)
            }
            Limit::Policy { name, cost } => {
                let policies = self.policies.read().unwrap_or_else(|e| e.into_inner());
                let words = policies.get(name)?;
                let parsed = parse_policy(words.iter().map(Vec::as_slice), &settings).ok()?;
                let cost = i64::try_from(*cost).unwrap_or(i64::MAX);
                (parsed.limits, cost, parsed.mode == Mode::Shadow)
            }
        };
        let share = i64::try_from(self.share()).unwrap_or(i64::MAX);
        for tier in &mut limits.tiers {
            // Rounded down, so that the fleet never admits more than the limit in all; at
            // least 1, so that a rule is never closed by the division.
            tier.limit = (tier.limit / share).max(1);
            tier.burst = (tier.burst / share).max(1);
        }
        Some((limits, cost, shadow))
    }
}

/// Drops the expired keys, or, when none has expired, about a tenth of them.
fn make_room(keys: &mut HashMap<String, Entry>, now_ms: i64) {
    let before = keys.len();
    keys.retain(|_, entry| entry.state.expires_at_ms().is_none_or(|at| at > now_ms));
    if keys.len() == before {
        let mut dropping = before / 10 + 1;
        keys.retain(|_, _| {
            dropping = dropping.saturating_sub(1);
            dropping == 0
        });
    }
}

fn verdict_of(outcome: &ratelimit_core::limiter::Outcome) -> Verdict {
    let state = |d: &ratelimit_core::decision::Decision| TierState {
        allowed: d.allowed,
        limit: u64::try_from(d.limit).unwrap_or(0),
        remaining: u64::try_from(d.remaining).unwrap_or(0),
        reset_after_ms: u64::try_from(d.reset_after_ms).unwrap_or(0),
        retry_after_ms: u64::try_from(d.retry_after_ms).unwrap_or(u64::MAX),
    };
    Verdict::with_tiers(
        state(&outcome.decision),
        outcome.tiers.iter().map(state).collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{test_rule, RedisFailure};

    fn rule(limit: u64, window_ms: u64, algorithm: Option<&str>) -> Arc<Rule> {
        let rule = test_rule("r", limit, window_ms, algorithm, 1, RedisFailure::Local);
        Arc::new(rule)
    }

    fn admitted(local: &LocalLimits, rule: &Arc<Rule>, key: &str, tries: u32, now_ms: i64) -> u32 {
        (0..tries)
            .filter(|_| matches!(local.hit(rule, key, None, now_ms), LocalAnswer::Allowed(_)))
            .count() as u32
    }

    const NOW: i64 = 1_796_083_200_000;

    #[test]
    fn the_limit_is_divided_by_the_live_gateways() {
        for algorithm in [
            None,
            Some("fixed"),
            Some("log"),
            Some("sliding"),
            Some("token"),
        ] {
            let local = LocalLimits::new(100, None);
            let rule = rule(100, 60_000, algorithm);
            assert_eq!(admitted(&local, &rule, "a", 500, NOW), 100, "{algorithm:?}");
            local.set_live(4);
            assert_eq!(admitted(&local, &rule, "b", 500, NOW), 25, "{algorithm:?}");
        }
    }

    #[test]
    fn a_fixed_share_wins_over_the_heartbeat_and_never_rounds_to_zero() {
        let local = LocalLimits::new(100, Some(7));
        local.set_live(1);
        assert_eq!(local.share(), 7);
        assert_eq!(admitted(&local, &rule(100, 60_000, None), "a", 50, NOW), 14);
        assert_eq!(admitted(&local, &rule(3, 60_000, None), "b", 50, NOW), 1);
    }

    #[test]
    fn a_denial_says_when_to_retry_and_the_window_ends() {
        let local = LocalLimits::new(100, None);
        let rule = rule(2, 1000, Some("fixed"));
        admitted(&local, &rule, "a", 2, NOW);
        let LocalAnswer::Denied(verdict) = local.hit(&rule, "a", None, NOW) else {
            panic!("the third hit is denied");
        };
        assert!(verdict.binding().retry_after_ms <= 1000);
        assert_eq!(
            admitted(&local, &rule, "a", 5, NOW + 1000),
            2,
            "a new window"
        );
    }

    #[test]
    fn a_refund_gives_back() {
        let local = LocalLimits::new(100, None);
        let rule = rule(1, 60_000, None);
        assert_eq!(admitted(&local, &rule, "a", 3, NOW), 1);
        local.refund(&rule, "a", None, NOW);
        assert_eq!(admitted(&local, &rule, "a", 3, NOW), 1);
    }

    #[test]
    fn what_was_admitted_is_taken_once_for_redis() {
        let local = LocalLimits::new(100, None);
        let rule = rule(10, 60_000, None);
        assert!(local.take_unsynced(|| NOW).is_none(), "nothing yet");
        admitted(&local, &rule, "a", 3, NOW);
        admitted(&local, &rule, "b", 20, NOW);
        local.refund(&rule, "a", None, NOW);
        let mut taken: Vec<(String, u64)> = local
            .take_unsynced(|| NOW)
            .expect("units to tell")
            .into_iter()
            .map(|u| (u.key, u.units))
            .collect();
        taken.sort();
        assert_eq!(taken, [("a".into(), 2), ("b".into(), 10)]);
        assert!(local.take_unsynced(|| NOW).is_none(), "taken once");
        assert_eq!(
            admitted(&local, &rule, "b", 5, NOW),
            0,
            "the local state stays: a second outage in the window grants nothing new"
        );
        admitted(&local, &rule, "c", 1, NOW);
        let ended = local.take_unsynced(|| NOW + 120_000).expect("a flag");
        assert!(ended.is_empty(), "a window over counts nothing");
        assert!(local.is_empty(), "and its keys are dropped");
    }

    #[test]
    fn keys_are_bounded() {
        let local = LocalLimits::new(50, None);
        let rule = rule(1, 60_000, None);
        for i in 0..1000 {
            local.hit(&rule, &format!("k{i}"), None, NOW);
        }
        assert!(local.len() <= 50, "{}", local.len());
    }

    #[test]
    fn a_policy_is_known_once_read() {
        let local = LocalLimits::new(100, None);
        let mut policy = Rule::clone(&rule(1, 1000, None));
        policy.limit = Limit::Policy {
            name: "p".into(),
            cost: 1,
        };
        let policy = Arc::new(policy);
        assert!(matches!(
            local.hit(&policy, "a", None, NOW),
            LocalAnswer::Unknown
        ));
        let words = ["2", "1m", "MODE", "enforce"].map(|w| w.as_bytes().to_vec());
        local.set_policy("p", Some(words.to_vec()));
        assert_eq!(admitted(&local, &policy, "a", 5, NOW), 2);
        let shadow = ["1", "1m", "MODE", "shadow"].map(|w| w.as_bytes().to_vec());
        local.set_policy("p", Some(shadow.to_vec()));
        assert_eq!(
            admitted(&local, &policy, "b", 5, NOW),
            5,
            "a shadow never denies"
        );
    }
}
