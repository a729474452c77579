//! Local quota (`local_quota = true`): a key's budget taken from Redis in batches
//! (`RL.TAKE ... UPTO n`, which never grants more than the limit allows) and spent in the
//! gateway's memory, so that a busy key costs a Redis call per batch rather than per
//! request, and a fleet of gateways never admits more than Redis granted.
//!
//! The store here is pure bookkeeping (the time passed in, no I/O): which units each key
//! holds and until when (`allowance`), how busy it is (`rate`), how big its next batch is.
//! The decider (`decide`) sends the takes, the refills and the give-backs.
//!
//! - A batch is the units the key's requests asked for in the last `interval`, at most
//!   `max_batch_percent` of the rule's smallest limit; under [`MIN_BATCH`] a request takes
//!   only its own units, so a key seen once costs what it costs without local quota.
//! - When half of the last grant is spent a refill is taken in the background: a busy key's
//!   requests do not wait for Redis.
//! - A request that several rules with local quota apply to is decided here when each
//!   holds enough; else each busy one short of units takes its own batch, the others are
//!   charged by a hit, and a quiet one sends the whole request to Redis ([`PlanAll`]).
//! - What is not spent goes back (`RL.REFUND ... COST u`) before its window ends, once
//!   `hold` has passed since its take, when the key's rule changes and on a reload.
//!
//! The most units one gateway holds for a key is about one and a half batches (half of one
//! and the refill): that bounds the budget another gateway can be denied while this one
//! holds it.

mod allowance;
mod decide;
mod rate;

use self::allowance::{Allowance, Lot, Spend};
pub(crate) use self::decide::{PlannedTakes, Taken, Takes};
use crate::rules::{Limit, Rule};
use crate::verdict::Verdict;
use lru::LruCache;
use smallvec::SmallVec;
use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The fewest units a batch is worth taking for: below it a request takes its own.
pub(crate) const MIN_BATCH: u64 = 4;

/// The most keys whose rate and units are kept; the least recently used go first, their
/// units given back.
const CAPACITY: usize = 100_000;

/// `[local_quota]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaSettings {
    /// A batch lasts about this long at the key's rate.
    pub interval: Duration,
    /// Units are spent within this long of their take, else given back.
    pub hold: Duration,
    /// A batch is at most this share of the rule's smallest limit, in percent.
    pub max_batch_percent: u64,
}

impl Default for QuotaSettings {
    fn default() -> Self {
        QuotaSettings {
            interval: Duration::from_millis(20),
            hold: Duration::from_millis(100),
            max_batch_percent: 1,
        }
    }
}

/// What a request's rule with local quota is to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// Decided here, with the verdict for its headers; and a refill of this many units to
    /// take in the background, when one is due.
    Spent(Verdict, Option<u64>),
    /// Not enough units held: take this many (the request's own among them) and wait.
    Take(u64),
    /// Not enough units held and no batch worth taking: charged in Redis as without local
    /// quota.
    Hit,
}

/// What the rules of a request that several apply to, all with local quota, are to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PlanAll {
    /// Each held enough: all spent here, each verdict in order with the refill to take
    /// for its key.
    Spent(Vec<(Verdict, Option<u64>)>),
    /// Some held too few, and each of those is busy: the units each rule takes, in order
    /// (0: charged by a hit, with the others that take none). Each that takes is a call
    /// of its own; the next requests find them all holding units.
    Take(SmallVec<[u64; 2]>),
    /// Charged in Redis as without local quota.
    Hit,
}

/// Units to give back to Redis.
pub(crate) struct GiveBack {
    pub(crate) rule: Arc<Rule>,
    pub(crate) key: String,
    pub(crate) units: u64,
}

pub(crate) struct Quotas {
    settings: QuotaSettings,
    store: Mutex<Store>,
    /// Whether the give-back task runs (started with the first units held).
    pub(super) sweeping: AtomicBool,
}

struct Store {
    keys: LruCache<String, Allowance>,
    /// The keys holding units or taking: what the give-back task looks at.
    holding: HashSet<String>,
    /// Units of allowances forgotten (evicted, their rule changed), still to go back.
    orphans: Vec<GiveBack>,
    /// Everything held goes back at the next look (a reload).
    release_all: bool,
}

impl Quotas {
    pub(crate) fn new(settings: QuotaSettings) -> Quotas {
        let capacity = NonZeroUsize::new(CAPACITY).unwrap_or(NonZeroUsize::MIN);
        Quotas {
            settings,
            store: Mutex::new(Store {
                keys: LruCache::new(capacity),
                holding: HashSet::new(),
                orphans: Vec::new(),
                release_all: false,
            }),
            sweeping: AtomicBool::new(false),
        }
    }

    fn store(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request of `cost` units (at least 1) on `key` under `rule` (which has local
    /// quota) at `now`: spent from what is held, or the take to make.
    pub(crate) fn plan(&self, rule: &Arc<Rule>, key: &str, cost: u64, now: Instant) -> Plan {
        let mut store = self.store();
        let allowance = store.allowance(rule, key, now);
        allowance.arrivals.record(cost, now, self.settings.interval);
        let batch = self.batch(allowance, rule, cost, now);
        match allowance.spend(cost, now) {
            Spend::Spent(verdict) => {
                let refill = allowance.wants_refill(batch, now).then(|| {
                    allowance.taking = true;
                    batch
                });
                Plan::Spent(verdict, refill)
            }
            Spend::Short if batch > cost && !allowance.taking => {
                allowance.taking = true;
                Plan::Take(batch)
            }
            Spend::Short => Plan::Hit,
        }
    }

    /// Every rule of a request that several apply to, all with local quota: spent here
    /// only if each holds enough units (then all are spent), else nothing is spent and
    /// each rule short of units that is busy takes a batch (see [`PlanAll`]).
    pub(crate) fn plan_all(&self, requests: &[(&Arc<Rule>, &str, u64)], now: Instant) -> PlanAll {
        // A key named twice by one request (Envoy descriptors) would be checked once for
        // two spends, perhaps under two rules: such a request goes to Redis, its keys'
        // allowances untouched.
        let keys: HashSet<&str> = requests.iter().map(|(_, key, _)| *key).collect();
        if keys.len() != requests.len() {
            return PlanAll::Hit;
        }
        let mut store = self.store();
        let mut short: SmallVec<[bool; 2]> = SmallVec::new();
        for &(rule, key, cost) in requests {
            let allowance = store.allowance(rule, key, now);
            allowance.arrivals.record(cost, now, self.settings.interval);
            short.push(allowance.held(now) < cost);
        }
        if short.contains(&true) {
            return self.takes(&mut store, requests, &short, now);
        }
        let mut spent = Vec::with_capacity(requests.len());
        for &(rule, key, cost) in requests {
            let allowance = store.allowance(rule, key, now);
            let batch = self.batch(allowance, rule, cost, now);
            let Spend::Spent(verdict) = allowance.spend(cost, now) else {
                return PlanAll::Hit;
            };
            let refill = allowance.wants_refill(batch, now).then(|| {
                allowance.taking = true;
                batch
            });
            spent.push((verdict, refill));
        }
        PlanAll::Spent(spent)
    }

    /// The takes of a request whose rules `short` of units cannot all be spent here: a
    /// batch for each short one that is busy and takes none yet. A short key that is not
    /// busy (a batch would be no more than the request's own units) sends the whole
    /// request to Redis as without local quota: no rule's batch is taken, as the next
    /// requests could not be decided from held units anyway.
    fn takes(
        &self,
        store: &mut Store,
        requests: &[(&Arc<Rule>, &str, u64)],
        short: &[bool],
        now: Instant,
    ) -> PlanAll {
        let mut takes: SmallVec<[u64; 2]> = SmallVec::new();
        for (&(rule, key, cost), &short) in requests.iter().zip(short) {
            let allowance = store.allowance(rule, key, now);
            let batch = self.batch(allowance, rule, cost, now);
            takes.push(match (short, allowance.taking) {
                // Holds enough, or its units are on their way: charged by a hit.
                (false, _) | (true, true) => 0,
                (true, false) if batch > cost => batch,
                (true, false) => return PlanAll::Hit,
            });
        }
        if takes.iter().all(|&units| units == 0) {
            return PlanAll::Hit;
        }
        for (&(rule, key, _), &units) in requests.iter().zip(&takes) {
            if units > 0 {
                store.allowance(rule, key, now).taking = true;
            }
        }
        PlanAll::Take(takes)
    }

    /// Units spent for a request that was then denied (or refused) by another rule, put
    /// back into the lot of `key`'s take sent at `taken_at` while that lot may still be
    /// spent: `false` when it may not (it went back, or its time is over), and the units
    /// are then to be given back to Redis.
    pub(crate) fn put_back(
        &self,
        rule: &Arc<Rule>,
        key: &str,
        taken_at: Instant,
        units: u64,
        now: Instant,
    ) -> bool {
        let mut store = self.store();
        let Some(allowance) = store.keys.peek_mut(key) else {
            return false;
        };
        if !Arc::ptr_eq(&allowance.rule, rule) || !allowance.put_back(taken_at, units, now) {
            return false;
        }
        store.holding.insert(key.to_owned());
        true
    }

    /// A take for `key` answered: `granted` units, of which `leftover` are left after the
    /// request it was for (all of them for a refill), from a take sent at `asked_at`.
    pub(crate) fn granted(
        &self,
        rule: &Arc<Rule>,
        key: &str,
        granted: u64,
        leftover: u64,
        verdict: Verdict,
        asked_at: Instant,
    ) {
        let windows = windows(rule);
        let mut store = self.store();
        if !windows.is_empty() && verdict.tiers().len() != windows.len() {
            // The reply names only the binding tier (the Functions library's RESP2): when
            // the other tiers' windows end is unknown, so nothing is held, and the key takes
            // its own units from now on. What this one take granted beyond its request is
            // left to end with its windows: a give-back could land after one of them ended
            // and be taken off the next.
            let allowance = store.allowance(rule, key, asked_at);
            allowance.taking = false;
            allowance.unbatched = true;
            return;
        }
        let allowance = store.allowance(rule, key, asked_at);
        // A hit answered while the take was out may have been counted after it: the
        // lower remaining of the two is what is left.
        let verdict = match allowance.hit_while_taking.take() {
            Some(hit) => verdict.lowest(&hit),
            None => verdict,
        };
        let lot = Lot::new(leftover, asked_at, verdict, &windows, &self.settings);
        allowance.taking = false;
        allowance.add(lot, granted);
        store.holding.insert(key.to_owned());
    }

    /// Whether units of `rule` that a take answered with `verdict` just now may be given
    /// back at once: for a window's units, only while at least half an interval of it is
    /// left (see `allowance::Lot`); otherwise they end with their window.
    pub(crate) fn may_give_back(&self, rule: &Rule, verdict: &Verdict) -> bool {
        let windows = windows(rule);
        let margin = self.settings.interval / 2;
        windows.is_empty()
            || allowance::window_left(verdict, &windows).is_some_and(|left| left > margin)
    }

    /// A take for `key` came to nothing (no answer, an error, a denial): another may go.
    pub(crate) fn take_ended(&self, key: &str) {
        if let Some(allowance) = self.store().keys.peek_mut(key) {
            allowance.taking = false;
            allowance.hit_while_taking = None;
        }
    }

    /// A request of `key` was charged by `RL.HIT` and allowed: what is left in Redis
    /// is then no more than it says.
    pub(crate) fn hit_answered(&self, key: &str, verdict: &Verdict) {
        if let Some(allowance) = self.store().keys.peek_mut(key) {
            if verdict.allowed() {
                allowance.saw(verdict);
            }
        }
    }

    /// The units whose time to go back has come, taken out of the store.
    pub(crate) fn due(&self, now: Instant) -> Vec<GiveBack> {
        let mut store = self.store();
        let all = std::mem::take(&mut store.release_all);
        let mut due = std::mem::take(&mut store.orphans);
        let holding: Vec<String> = store.holding.iter().cloned().collect();
        for key in holding {
            let Some(allowance) = store.keys.peek_mut(&key) else {
                store.holding.remove(&key);
                continue;
            };
            let units = allowance.due(now, all);
            if units > 0 {
                let rule = allowance.rule.clone();
                due.push(GiveBack {
                    rule,
                    key: key.clone(),
                    units,
                });
            }
            if allowance.is_idle() {
                store.holding.remove(&key);
            }
        }
        due
    }

    /// Everything held goes back at the next look: the rules changed.
    pub(crate) fn release_all(&self) {
        self.store().release_all = true;
    }

    /// The units a batch of `rule` on a key this busy is: the units asked for in the last
    /// interval, at most `max_batch_percent` of the smallest limit; only the request's own
    /// below [`MIN_BATCH`] and in the last interval of the window the key's units count in.
    fn batch(&self, allowance: &mut Allowance, rule: &Rule, cost: u64, now: Instant) -> u64 {
        let wanted = allowance.arrivals.per_interval(now, self.settings.interval);
        let cap = smallest_limit(rule)
            .saturating_mul(self.settings.max_batch_percent)
            .checked_div(100)
            .unwrap_or(0)
            .max(1);
        let tail = allowance.in_window_tail(now);
        if wanted < MIN_BATCH || cap < MIN_BATCH || allowance.unbatched || tail {
            return cost;
        }
        wanted.min(cap).max(cost)
    }
}

impl Store {
    /// `key`'s allowance under `rule`, made afresh when there is none or it was taken under
    /// another rule (whose units then go back).
    fn allowance(&mut self, rule: &Arc<Rule>, key: &str, now: Instant) -> &mut Allowance {
        let stale = self
            .keys
            .peek(key)
            .is_some_and(|a| !Arc::ptr_eq(&a.rule, rule));
        if stale {
            if let Some(mut old) = self.keys.pop(key) {
                self.orphan(key.to_owned(), &mut old, now);
            }
        }
        if !self.keys.contains(key) {
            if let Some((evicted_key, mut evicted)) = self
                .keys
                .push(key.to_owned(), Allowance::new(rule.clone(), now))
            {
                if evicted_key != key {
                    self.orphan(evicted_key, &mut evicted, now);
                }
            }
        }
        // There now: the closure runs only if it is not (it is), and the key is not copied.
        self.keys
            .get_or_insert_mut_ref(key, || Allowance::new(rule.clone(), now))
    }

    /// Keeps what a forgotten allowance held, to go back.
    fn orphan(&mut self, key: String, allowance: &mut Allowance, now: Instant) {
        let units = allowance.due(now, true);
        self.holding.remove(&key);
        if units > 0 {
            let rule = allowance.rule.clone();
            self.orphans.push(GiveBack { rule, key, units });
        }
    }
}

/// The smallest limit of the rule's tiers (a rule with local quota has tiers).
fn smallest_limit(rule: &Rule) -> u64 {
    match &rule.limit {
        Limit::Tiers { tiers, .. } => tiers.iter().map(|t| t.limit).min().unwrap_or(1),
        _ => 1,
    }
}

/// The windows that bound a lot of `rule`'s, in tier order: none for the algorithms whose
/// units are bounded by the hold alone (the buckets and the log).
fn windows(rule: &Rule) -> Vec<u64> {
    match &rule.limit {
        Limit::Tiers {
            tiers, algorithm, ..
        } => match algorithm.as_deref() {
            Some("token" | "gcra" | "log") => Vec::new(),
            _ => tiers.iter().map(|t| t.window_ms).collect(),
        },
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests;
