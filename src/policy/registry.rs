//! Named policies (`RL.POLICY`): rules stored in the module's memory on each server, so
//! that callers in any language name a rule instead of repeating its numbers.
//!
//! They live in memory rather than in keys because every primary of a Cluster needs them
//! (a key lives on one shard). They reach replicas and the AOF as the `RL.POLICY` commands
//! that changed them (deterministic: no clock), and are saved with the RDB (see `policy::rdb`).

use ratelimit_core::args::PolicyArgs;
use std::collections::BTreeMap;
use std::sync::Mutex;

/// Counts of the hits made through one policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PolicyStats {
    /// Hits that decided (RL.HIT).
    pub hits: u64,
    /// Hits allowed (in shadow mode: including those it would have denied).
    pub allowed: u64,
    /// Hits denied (enforce mode).
    pub denied: u64,
    /// Hits a shadow policy would have denied.
    pub shadow_denied: u64,
}

struct Entry {
    definition: PolicyArgs,
    stats: PolicyStats,
}

/// Every policy by name. Only the main thread (commands, RDB load) and a fork child
/// saving the RDB touch it, so the lock is never contended.
static REGISTRY: Mutex<BTreeMap<Vec<u8>, Entry>> = Mutex::new(BTreeMap::new());

fn with_registry<T>(f: impl FnOnce(&mut BTreeMap<Vec<u8>, Entry>) -> T) -> T {
    let mut guard = REGISTRY
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    f(&mut guard)
}

/// The policy named `name`.
pub fn get(name: &[u8]) -> Option<PolicyArgs> {
    with_registry(|r| r.get(name).map(|e| e.definition.clone()))
}

/// Defines or redefines `name`; a redefinition keeps its counts.
pub fn set(name: &[u8], definition: PolicyArgs) {
    with_registry(|r| match r.get_mut(name) {
        Some(entry) => entry.definition = definition,
        None => {
            r.insert(
                name.to_vec(),
                Entry {
                    definition,
                    stats: PolicyStats::default(),
                },
            );
        }
    })
}

/// Deletes `name`; whether it existed.
pub fn delete(name: &[u8]) -> bool {
    with_registry(|r| r.remove(name).is_some())
}

/// Every policy, by name.
pub fn all() -> Vec<(Vec<u8>, PolicyArgs)> {
    with_registry(|r| {
        r.iter()
            .map(|(name, e)| (name.clone(), e.definition.clone()))
            .collect()
    })
}

/// Replaces every policy (loading an RDB); counts start again.
pub fn replace_all(policies: Vec<(Vec<u8>, PolicyArgs)>) {
    with_registry(|r| {
        *r = policies
            .into_iter()
            .map(|(name, definition)| {
                let stats = PolicyStats::default();
                (name, Entry { definition, stats })
            })
            .collect();
    })
}

/// How many policies there are.
pub fn count() -> usize {
    with_registry(|r| r.len())
}

/// Counts one hit made through `name` (called by `metrics::record_hit`, which counts it
/// everywhere).
pub(crate) fn record_hit(name: &[u8], allowed: bool, shadow_denied: bool) {
    with_registry(|r| {
        if let Some(entry) = r.get_mut(name) {
            let stats = &mut entry.stats;
            stats.hits += 1;
            if allowed {
                stats.allowed += 1;
            } else {
                stats.denied += 1;
            }
            if shadow_denied {
                stats.shadow_denied += 1;
            }
        }
    })
}

/// The counts of `name`.
pub fn stats(name: &[u8]) -> Option<PolicyStats> {
    with_registry(|r| r.get(name).map(|e| e.stats))
}

/// Sets the counts of `name` (or of every policy) back to zero; whether any was found.
pub fn reset_stats(name: Option<&[u8]>) -> bool {
    with_registry(|r| match name {
        Some(name) => r
            .get_mut(name)
            .map(|e| e.stats = PolicyStats::default())
            .is_some(),
        None => {
            r.values_mut()
                .for_each(|e| e.stats = PolicyStats::default());
            true
        }
    })
}
