//! The gateway's metrics, kept and rendered in the Prometheus text format (version 0.0.4)
//! by prometheus-client: counters, gauges, the Redis latency histogram, and families
//! labelled by rule (bounded) or by a fixed set of values.
//!
//! - `labels`: the values the counters are split by (`outcome`, `event`, `result`...);
//! - `families`: the labelled families, with their hot-path lookup and the bound on rules.

mod families;
mod labels;

#[cfg(test)]
use families::{MAX_RULE_LABELS, OTHER_RULE_LABEL};
pub(crate) use labels::{EnvoyResult, HitCounts, LeaseEvent, Outcome, ReleaseCause};

use crate::failure::Failure;
use families::{ByLabel, PerRule};
use labels::{ReloadResult, RuleOnly};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// Upper bounds of the latency buckets, in seconds: 50 µs to 100 ms (and +Inf, which
/// prometheus-client adds).
const LATENCY_BUCKETS: [f64; 11] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
];

/// Every metric, and the registry that renders them (each metric is registered once, a
/// clone sharing its atomics, in the order the scrape shows them).
pub struct Metrics {
    registry: Registry,
    decisions: PerRule<Outcome>,
    leases: PerRule<LeaseEvent>,
    /// Releases started, by [`ReleaseCause`].
    release_causes: ByLabel<ReleaseCause>,
    /// Leases this gateway holds now: taken and not yet given back (or given up on).
    leases_held: Gauge,
    /// `ShouldRateLimit` calls, by [`EnvoyResult`].
    envoy: ByLabel<EnvoyResult>,
    /// Per Envoy descriptor limit, its hits as envoyproxy/ratelimit's statistics split them.
    envoy_hits: PerRule<labels::HitStat>,
    fail_open: ByLabel<Failure>,
    refunds: PerRule<RuleOnly>,
    latency: Histogram,
    /// Set from the breaker at each scrape.
    breaker_open: Gauge,
    reloads: ByLabel<ReloadResult>,
    upstream_errors: Counter,
    /// Request bodies cut for keeping the gateway waiting past `body_timeout_ms` (408).
    body_timeouts: Counter,
    /// Request bodies that broke off (400): bad chunked framing, or the client gone.
    broken_bodies: Counter,
    /// Connections over `max_connections`, closed at once.
    connections_refused: Counter,
    /// Per rule, the error replies of the module (misconfigurations, not outages).
    module_errors: PerRule<RuleOnly>,
    /// Local quota's counters, shared with its background tasks.
    pub(crate) quota: QuotaCounters,
}

/// What local quota did: requests decided from units held, units taken from Redis and
/// given back. Clones share the counts (the refills and give-backs run in tasks of their
/// own).
#[derive(Clone, Default)]
pub(crate) struct QuotaCounters {
    decisions: Counter,
    taken: Counter,
    given_back: Counter,
}

impl QuotaCounters {
    /// A request decided from units held, without Redis.
    pub(crate) fn spent(&self) {
        self.decisions.inc();
    }

    /// `units` granted by a take.
    pub(crate) fn taken(&self, units: u64) {
        self.taken.inc_by(units);
    }

    /// `units` given back to Redis.
    pub(crate) fn given_back(&self, units: u64) {
        self.given_back.inc_by(units);
    }
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut metrics = Metrics {
            registry: Registry::default(),
            decisions: PerRule::new(),
            leases: PerRule::new(),
            release_causes: ByLabel::new(),
            leases_held: Gauge::default(),
            envoy: ByLabel::new(),
            envoy_hits: PerRule::new(),
            fail_open: ByLabel::new(),
            refunds: PerRule::new(),
            latency: Histogram::new(LATENCY_BUCKETS),
            breaker_open: Gauge::default(),
            reloads: ByLabel::new(),
            upstream_errors: Counter::default(),
            body_timeouts: Counter::default(),
            broken_bodies: Counter::default(),
            connections_refused: Counter::default(),
            module_errors: PerRule::new(),
            quota: QuotaCounters::default(),
        };
        metrics.register();
        metrics
    }
}

impl Metrics {
    /// Registers every metric, in the order of the scrape. prometheus-client appends the
    /// `_total` of a counter and the final full stop of a HELP text itself.
    fn register(&mut self) {
        let r = &mut self.registry;
        r.register(
            "rl_gateway_decisions",
            "Requests a rule applied to, by rule and outcome",
            self.decisions.family(),
        );
        r.register(
            "rl_gateway_leases",
            "Leases of concurrency rules, by rule and event (acquired, denied, released, \
             release_failed, reclaimed, renewed, lost)",
            self.leases.family(),
        );
        r.register(
            "rl_gateway_lease_releases",
            "Lease releases started, by cause (end of the response, upstream error, client gone)",
            self.release_causes.family(),
        );
        r.register(
            "rl_gateway_leases_held",
            "Leases this gateway holds now (taken, not yet given back)",
            self.leases_held.clone(),
        );
        r.register(
            "rl_gateway_envoy",
            "ShouldRateLimit calls by answer, and descriptors no rule limits (unknown_domain, no_match)",
            self.envoy.family(),
        );
        r.register(
            "rl_gateway_envoy_hits",
            "Hits (hits_addend units) of Envoy descriptors, by rule and stat (total_hits, \
             over_limit, near_limit, within_limit, shadow_mode), as envoyproxy/ratelimit \
             counts them",
            self.envoy_hits.family(),
        );
        r.register(
            "rl_gateway_fail_open",
            "Decisions Redis could not make, by reason",
            self.fail_open.family(),
        );
        r.register(
            "rl_gateway_refunds",
            "Hits given back because the response status does not count",
            self.refunds.family(),
        );
        r.register(
            "rl_gateway_redis_latency_seconds",
            "Time of each Redis call that answered",
            self.latency.clone(),
        );
        r.register(
            "rl_gateway_breaker_open",
            "Whether the circuit breaker skips Redis now",
            self.breaker_open.clone(),
        );
        r.register(
            "rl_gateway_rule_reloads",
            "Rule file reloads, by result",
            self.reloads.family(),
        );
        self.register_totals();
    }

    /// The counters without labels, and module errors.
    fn register_totals(&mut self) {
        let totals = [
            (
                "rl_gateway_upstream_errors",
                "Requests the upstream could not answer (502)",
                &self.upstream_errors,
            ),
            (
                "rl_gateway_request_body_timeouts",
                "Request bodies not received within body_timeout_ms, their upstream request \
                 cut (408)",
                &self.body_timeouts,
            ),
            (
                "rl_gateway_request_body_errors",
                "Request bodies that broke off (400): bad chunked framing, or the client gone",
                &self.broken_bodies,
            ),
            (
                "rl_gateway_connections_refused",
                "Connections over max_connections, answered 503 and closed",
                &self.connections_refused,
            ),
        ];
        for (name, help, counter) in totals {
            self.registry.register(name, help, counter.clone());
        }
        self.registry.register(
            "rl_gateway_module_errors",
            "Error replies of the module (a misconfiguration: a missing policy, a refused \
             rule), by rule",
            self.module_errors.family(),
        );
        let quota = [
            (
                "rl_gateway_local_quota_decisions",
                "Requests decided from units of local quota held, without a Redis call",
                &self.quota.decisions,
            ),
            (
                "rl_gateway_local_quota_units_taken",
                "Units of local quota taken from Redis (RL.TAKE)",
                &self.quota.taken,
            ),
            (
                "rl_gateway_local_quota_units_given_back",
                "Units of local quota given back to Redis unspent (RL.REFUND)",
                &self.quota.given_back,
            ),
        ];
        for (name, help, counter) in quota {
            self.registry.register(name, help, counter.clone());
        }
    }

    /// Adds one descriptor's hits to the counts of its limit, named `rule` as in
    /// `rl_gateway_decisions_total`.
    pub(crate) fn envoy_hits(&self, rule: &str, hits: &HitCounts) {
        for (stat, count) in hits.by_stat() {
            self.envoy_hits.add(rule, stat, count);
        }
    }

    pub(crate) fn decision(&self, rule: &str, outcome: Outcome) {
        self.decisions.add(rule, outcome, 1);
    }

    pub(crate) fn fail_open(&self, failure: Failure) {
        self.fail_open.inc(failure);
    }

    pub(crate) fn refund(&self, rule: &str) {
        self.refunds.add(rule, RuleOnly, 1);
    }

    pub(crate) fn redis_latency(&self, took: Duration) {
        self.latency.observe(took.as_secs_f64());
    }

    pub(crate) fn reload(&self, ok: bool) {
        self.reloads.inc(match ok {
            true => ReloadResult::Ok,
            false => ReloadResult::Refused,
        });
    }

    pub(crate) fn module_error(&self, rule: &str) {
        self.module_errors.add(rule, RuleOnly, 1);
    }

    pub(crate) fn lease_acquired(&self, rule: &str) {
        self.leases_held.inc();
        self.leases.add(rule, LeaseEvent::Acquired, 1);
    }

    pub(crate) fn lease_denied(&self, rule: &str) {
        self.leases.add(rule, LeaseEvent::Denied, 1);
    }

    /// A release started, for `cause`.
    pub(crate) fn lease_releasing(&self, cause: ReleaseCause) {
        self.release_causes.inc(cause);
    }

    /// A release done: given back (`released`) or given up on; either way no longer held.
    pub(crate) fn lease_released(&self, rule: &str, released: bool) {
        // Never below zero, even if a count were ever off by one.
        let _ = self
            .leases_held
            .inner()
            .fetch_update(Relaxed, Relaxed, |held| Some((held - 1).max(0)));
        let event = match released {
            true => LeaseEvent::Released,
            false => LeaseEvent::ReleaseFailed,
        };
        self.leases.add(rule, event, 1);
    }

    /// A lease Redis took after the gateway stopped waiting was found and given back; it
    /// was never counted as held.
    pub(crate) fn lease_reclaimed(&self, rule: &str) {
        self.leases.add(rule, LeaseEvent::Reclaimed, 1);
    }

    pub(crate) fn lease_renewed(&self, rule: &str) {
        self.leases.add(rule, LeaseEvent::Renewed, 1);
    }

    pub(crate) fn lease_lost(&self, rule: &str) {
        self.leases.add(rule, LeaseEvent::Lost, 1);
    }

    pub(crate) fn envoy(&self, result: EnvoyResult) {
        self.envoy.inc(result);
    }

    pub(crate) fn connection_refused(&self) {
        self.connections_refused.inc();
    }

    pub(crate) fn upstream_error(&self) {
        self.upstream_errors.inc();
    }

    pub(crate) fn body_timeout(&self) {
        self.body_timeouts.inc();
    }

    pub(crate) fn broken_body(&self) {
        self.broken_bodies.inc();
    }

    /// The Prometheus text exposition (version 0.0.4, the `text/plain` one every
    /// Prometheus scrapes) of every metric.
    pub(crate) fn render(&self, breaker_open: bool) -> String {
        self.breaker_open.set(i64::from(breaker_open));
        let mut out = String::with_capacity(4096);
        // Writing into a String cannot fail, nor can the gateway's label sets.
        let _ = prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests;
