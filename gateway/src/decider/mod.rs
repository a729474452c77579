//! The decision: whether a request may go through, asked of Redis (`RL.HIT`, or `RL.MHIT`
//! for several rules in one slot) under a deadline, through a [`Transport`] ([`Backend`]
//! in the service, a scripted Redis in the unit tests), with the deny cache and the
//! circuit breaker in front of it.
//! Whatever goes wrong with Redis becomes a [`Failure`](crate::failure::Failure), never an error for the client: a
//! rule then decides by its local limit, lets the request through, or (fail-closed) has
//! it answered 503, as its `on_redis_failure` says.
//!
//! One job a file:
//! - `types`: what goes in ([`Applied`]) and comes out ([`Stacked`], [`RuleOutcome`], [`End`]);
//! - `stacked`: [`Decider::decide`], the rules of one request charged together;
//! - `groups`: which rules one call charges, and the split when a multi-key call errs;
//! - `look`: [`Decider::look`], peeks and refunds that decide nothing;
//! - `refund`: giving back what a request was charged;
//! - `leases`: taking, renewing and releasing a `concurrency` rule's lease;
//!   [`lease_guard`] holds one while its request is served;
//! - `calls`: one call under the deadline, through the breaker, its failure classified;
//! - `write_back`: what local limits admitted, counted in Redis once it answers;
//! - [`quota`]: local quota, units taken in batches and spent in memory;
//! - `commands`: the module's commands as sent;
//! - [`redis`]: the connection, the only code that talks to Redis.

pub(crate) mod breaker;
mod calls;
mod commands;
pub(crate) mod deny_cache;
mod groups;
pub(crate) mod lease_guard;
mod leases;
pub(crate) mod local_limits;
mod look;
pub(crate) mod module_errors;
pub(crate) mod quota;
pub mod redis;
mod refund;
mod stacked;
mod transport;
mod types;
mod write_back;

use self::breaker::Breaker;
use self::deny_cache::DenyCache;
use self::local_limits::LocalLimits;
use self::module_errors::ModuleErrorLog;
use self::quota::{QuotaSettings, Quotas};
use self::redis::Backend;
use crate::config::RedisSettings;
use crate::metrics::Metrics;
use std::sync::Arc;
use std::time::Duration;
pub(crate) use transport::Transport;
pub(crate) use types::{Applied, End, LeaseAnswer, Look, Released, RuleOutcome, Stacked};

/// The least time a call off the request path may take (a release, a renewal, a late
/// hit given back, a write-back): given up on, each leaves a count or a slot behind.
const MIN_RELEASE_DEADLINE: Duration = Duration::from_secs(1);

/// The decision path; `T` is how it reaches Redis ([`Backend`] in the service).
pub struct Decider<T: Transport = Backend> {
    backend: T,
    breaker: Breaker,
    /// For the breaker's log lines.
    breaker_silence: Duration,
    breaker_open_for: Duration,
    local: LocalLimits,
    deny_cache: DenyCache,
    deadline: Duration,
    metrics: Metrics,
    module_errors: ModuleErrorLog,
    /// The units of local quota held (`local_quota = true`), shared with the tasks that
    /// refill them and give them back.
    quotas: Arc<Quotas>,
}

impl<T: Transport> Decider<T> {
    /// A decider over `backend`, with its deadline and breaker from `redis` and a deny
    /// cache of `deny_cache_capacity` keys.
    pub fn new(backend: T, redis: &RedisSettings, deny_cache_capacity: usize) -> Self {
        Decider {
            backend,
            breaker: Breaker::new(
                redis.breaker_failures,
                redis.breaker_open,
                redis.breaker_silence,
            ),
            breaker_silence: redis.breaker_silence,
            breaker_open_for: redis.breaker_open,
            local: LocalLimits::new(local_limits::DEFAULT_CAPACITY, redis.gateways),
            deny_cache: DenyCache::new(deny_cache_capacity),
            deadline: redis.deadline,
            metrics: Metrics::default(),
            module_errors: ModuleErrorLog::default(),
            quotas: Arc::new(Quotas::new(QuotaSettings::default())),
        }
    }

    /// The same decider with `[local_quota]`'s settings.
    pub fn with_quota_settings(mut self, settings: QuotaSettings) -> Self {
        self.quotas = Arc::new(Quotas::new(settings));
        self
    }

    /// Called when the rules change: a denial under the old rules may not hold any more,
    /// and units of local quota held under them go back.
    pub(crate) fn forget_denials(&self) {
        self.deny_cache.clear();
        self.release_held();
    }

    /// The counters: the gateway's, which the decider keeps as it counts its own work.
    pub(crate) fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// How long one decision may wait for Redis (`deadline_ms`).
    pub(crate) fn deadline(&self) -> Duration {
        self.deadline
    }

    pub(crate) fn breaker_open(&self) -> bool {
        self.breaker.is_open()
    }

    /// The limits decided in memory while Redis cannot (`on_redis_failure = "local"`).
    pub(crate) fn local(&self) -> &LocalLimits {
        &self.local
    }
}

#[cfg(test)]
mod tests;
