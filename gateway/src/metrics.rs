//! Counters and the Redis latency histogram, rendered in the Prometheus text format.

use crate::failure::Failure;
use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Mutex;
use std::time::Duration;

/// What happened to one request that a rule applied to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Outcome {
    Allowed,
    Denied,
    /// Answered from the local cache of denied keys, without Redis.
    DeniedCached,
    /// A shadow rule would have denied it; it went through.
    ShadowDenied,
    FailOpen,
    FailClosed,
    /// Redis could not decide; the rule's local limit allowed it.
    LocalAllowed,
    /// Redis could not decide; the rule's local limit denied it.
    LocalDenied,
}

impl Outcome {
    const ALL: [Outcome; 8] = [
        Outcome::Allowed,
        Outcome::Denied,
        Outcome::DeniedCached,
        Outcome::ShadowDenied,
        Outcome::FailOpen,
        Outcome::FailClosed,
        Outcome::LocalAllowed,
        Outcome::LocalDenied,
    ];

    fn label(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Denied => "denied",
            Outcome::DeniedCached => "denied_cached",
            Outcome::ShadowDenied => "shadow_denied",
            Outcome::FailOpen => "fail_open",
            Outcome::FailClosed => "fail_closed",
            Outcome::LocalAllowed => "local_allowed",
            Outcome::LocalDenied => "local_denied",
        }
    }
}

/// What became of one lease (`concurrency` rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeaseEvent {
    Acquired,
    /// No free slot, or a tier of the rule denied: 429.
    Denied,
    /// Given back (`RL.RELEASE` answered).
    Released,
    /// The release found no Redis: the lease ends by its `lease_ttl`.
    ReleaseFailed,
    /// Taken by Redis after the gateway stopped waiting for `RL.ACQUIRE` (the deadline
    /// passed, the connection broke, or the client went away mid-call), and given back at
    /// once: a slot that would otherwise have been held for `lease_ttl` by no request.
    Reclaimed,
    /// Renewed while its response was still in flight (every half of lease_ttl).
    Renewed,
    /// Found gone by a renewal while its response was still in flight: it ended because
    /// Redis could not be reached in time to renew it.
    Lost,
}

impl LeaseEvent {
    const ALL: [LeaseEvent; 7] = [
        LeaseEvent::Acquired,
        LeaseEvent::Denied,
        LeaseEvent::Released,
        LeaseEvent::ReleaseFailed,
        LeaseEvent::Reclaimed,
        LeaseEvent::Renewed,
        LeaseEvent::Lost,
    ];

    fn label(self) -> &'static str {
        match self {
            LeaseEvent::Acquired => "acquired",
            LeaseEvent::Denied => "denied",
            LeaseEvent::Released => "released",
            LeaseEvent::ReleaseFailed => "release_failed",
            LeaseEvent::Reclaimed => "reclaimed",
            LeaseEvent::Renewed => "renewed",
            LeaseEvent::Lost => "lost",
        }
    }
}

/// Why a lease was given back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReleaseCause {
    /// The response body was sent to its end.
    End,
    /// The upstream failed (502, 504) or its body broke off.
    Error,
    /// The response was dropped before its end: the client went away.
    Dropped,
}

impl ReleaseCause {
    const ALL: [ReleaseCause; 3] = [
        ReleaseCause::End,
        ReleaseCause::Error,
        ReleaseCause::Dropped,
    ];

    fn label(self) -> &'static str {
        match self {
            ReleaseCause::End => "end",
            ReleaseCause::Error => "error",
            ReleaseCause::Dropped => "dropped",
        }
    }
}

/// Upper bounds of the latency buckets, in seconds: 50 µs to 100 ms.
const LATENCY_BUCKETS: [f64; 12] = [
    0.00005,
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    f64::INFINITY,
];

#[derive(Default)]
pub struct Metrics {
    /// Per rule, a count per [`Outcome`] (indexed by its discriminant).
    decisions: Mutex<BTreeMap<String, [u64; Outcome::ALL.len()]>>,
    refunds: Mutex<BTreeMap<String, u64>>,
    fail_open: [AtomicU64; Failure::ALL.len()],
    latency_buckets: [AtomicU64; LATENCY_BUCKETS.len()],
    latency_sum_ns: AtomicU64,
    latency_count: AtomicU64,
    reloads_ok: AtomicU64,
    reloads_refused: AtomicU64,
    upstream_errors: AtomicU64,
    /// Request bodies cut for keeping the gateway waiting past `body_timeout_ms` (408).
    body_timeouts: AtomicU64,
    /// Request bodies that broke off (400): bad chunked framing, or the client gone.
    broken_bodies: AtomicU64,
    /// Connections over `max_connections`, closed at once.
    connections_refused: AtomicU64,
    /// Per rule, the error replies of the module (misconfigurations, not outages).
    module_errors: Mutex<BTreeMap<String, u64>>,
    /// `ShouldRateLimit` calls, by [`EnvoyResult`].
    envoy: [AtomicU64; EnvoyResult::ALL.len()],
    /// Per Envoy descriptor limit, its hits as envoyproxy/ratelimit's statistics split them,
    /// in the order of [`HitCounts::LABELS`].
    envoy_hits: Mutex<BTreeMap<String, [u64; HitCounts::LABELS.len()]>>,
    /// Per rule, a count per [`LeaseEvent`].
    leases: Mutex<BTreeMap<String, [u64; LeaseEvent::ALL.len()]>>,
    /// Releases started, by [`ReleaseCause`].
    release_causes: [AtomicU64; ReleaseCause::ALL.len()],
    /// Leases this gateway holds now: taken and not yet given back (or given up on).
    leases_held: AtomicU64,
}

/// What became of one `ShouldRateLimit` call, or of one of its descriptors that no
/// rule limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EnvoyResult {
    Ok,
    OverLimit,
    /// Answered gRPC UNAVAILABLE: Redis could not decide and the descriptor says so.
    Unavailable,
    /// Refused with INVALID_ARGUMENT.
    Invalid,
    /// A domain no file defines: OK, not limited.
    UnknownDomain,
    /// A descriptor no node matches (or one without a limit): OK, not limited.
    NoMatch,
    /// A descriptor's own `limit` that its node's `limit_override` ignores.
    OverrideIgnored,
    /// Would have been OVER_LIMIT (or UNAVAILABLE), answered OK by `[envoy] shadow_mode`.
    ShadowMode,
}

impl EnvoyResult {
    const ALL: [EnvoyResult; 8] = [
        EnvoyResult::Ok,
        EnvoyResult::OverLimit,
        EnvoyResult::Unavailable,
        EnvoyResult::Invalid,
        EnvoyResult::UnknownDomain,
        EnvoyResult::NoMatch,
        EnvoyResult::OverrideIgnored,
        EnvoyResult::ShadowMode,
    ];

    fn label(self) -> &'static str {
        match self {
            EnvoyResult::Ok => "ok",
            EnvoyResult::OverLimit => "over_limit",
            EnvoyResult::Unavailable => "unavailable",
            EnvoyResult::Invalid => "invalid_argument",
            EnvoyResult::UnknownDomain => "unknown_domain",
            EnvoyResult::NoMatch => "no_match",
            EnvoyResult::OverrideIgnored => "override_ignored",
            EnvoyResult::ShadowMode => "shadow_mode",
        }
    }
}

/// One Envoy descriptor's hits (`hits_addend` units), split as envoyproxy/ratelimit's
/// per-limit statistics split them: all of them, those over the limit, those between the
/// near-limit threshold and the limit, those within it (near ones included), and those a
/// shadow limit let through over it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct HitCounts {
    pub(crate) total: u64,
    pub(crate) over_limit: u64,
    pub(crate) near_limit: u64,
    pub(crate) within_limit: u64,
    pub(crate) shadow_mode: u64,
}

impl HitCounts {
    /// The `stat` label of each count, in the order [`HitCounts::counts`] gives them.
    const LABELS: [&'static str; 5] = [
        "total_hits",
        "over_limit",
        "near_limit",
        "within_limit",
        "shadow_mode",
    ];

    fn counts(&self) -> [u64; 5] {
        [
            self.total,
            self.over_limit,
            self.near_limit,
            self.within_limit,
            self.shadow_mode,
        ]
    }
}

impl Metrics {
    /// Adds one descriptor's hits to the counts of its limit, named `rule` as in
    /// `rl_gateway_decisions_total`.
    pub(crate) fn envoy_hits(&self, rule: &str, hits: &HitCounts) {
        bump(&self.envoy_hits, rule, |counts| {
            for (count, add) in counts.iter_mut().zip(hits.counts()) {
                *count += add;
            }
        });
    }

    pub(crate) fn decision(&self, rule: &str, outcome: Outcome) {
        bump(&self.decisions, rule, |counts| {
            counts[outcome as usize] += 1
        });
    }

    pub(crate) fn fail_open(&self, failure: Failure) {
        self.fail_open[failure as usize].fetch_add(1, Relaxed);
    }

    pub(crate) fn refund(&self, rule: &str) {
        bump(&self.refunds, rule, |count| *count += 1);
    }

    pub(crate) fn redis_latency(&self, took: Duration) {
        let seconds = took.as_secs_f64();
        let bucket = LATENCY_BUCKETS
            .iter()
            .position(|bound| seconds <= *bound)
            .unwrap_or(LATENCY_BUCKETS.len() - 1);
        self.latency_buckets[bucket].fetch_add(1, Relaxed);
        self.latency_sum_ns
            .fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Relaxed);
        self.latency_count.fetch_add(1, Relaxed);
    }

    pub(crate) fn reload(&self, ok: bool) {
        let counter = if ok {
            &self.reloads_ok
        } else {
            &self.reloads_refused
        };
        counter.fetch_add(1, Relaxed);
    }

    pub(crate) fn module_error(&self, rule: &str) {
        bump(&self.module_errors, rule, |count| *count += 1);
    }

    pub(crate) fn lease_acquired(&self, rule: &str) {
        self.leases_held.fetch_add(1, Relaxed);
        self.lease_event(rule, LeaseEvent::Acquired);
    }

    pub(crate) fn lease_denied(&self, rule: &str) {
        self.lease_event(rule, LeaseEvent::Denied);
    }

    /// A release started, for `cause`.
    pub(crate) fn lease_releasing(&self, cause: ReleaseCause) {
        self.release_causes[cause as usize].fetch_add(1, Relaxed);
    }

    /// A release done: given back (`released`) or given up on; either way no longer held.
    pub(crate) fn lease_released(&self, rule: &str, released: bool) {
        // Never below zero, even if a count were ever off by one.
        let _ = self
            .leases_held
            .fetch_update(Relaxed, Relaxed, |held| Some(held.saturating_sub(1)));
        let event = match released {
            true => LeaseEvent::Released,
            false => LeaseEvent::ReleaseFailed,
        };
        self.lease_event(rule, event);
    }

    /// A lease Redis took after the gateway stopped waiting was found and given back; it
    /// was never counted as held.
    pub(crate) fn lease_reclaimed(&self, rule: &str) {
        self.lease_event(rule, LeaseEvent::Reclaimed);
    }

    pub(crate) fn lease_renewed(&self, rule: &str) {
        self.lease_event(rule, LeaseEvent::Renewed);
    }

    pub(crate) fn lease_lost(&self, rule: &str) {
        self.lease_event(rule, LeaseEvent::Lost);
    }

    fn lease_event(&self, rule: &str, event: LeaseEvent) {
        bump(&self.leases, rule, |counts| counts[event as usize] += 1);
    }

    pub(crate) fn envoy(&self, result: EnvoyResult) {
        self.envoy[result as usize].fetch_add(1, Relaxed);
    }

    pub(crate) fn connection_refused(&self) {
        self.connections_refused.fetch_add(1, Relaxed);
    }

    pub(crate) fn upstream_error(&self) {
        self.upstream_errors.fetch_add(1, Relaxed);
    }

    pub(crate) fn body_timeout(&self) {
        self.body_timeouts.fetch_add(1, Relaxed);
    }

    pub(crate) fn broken_body(&self) {
        self.broken_bodies.fetch_add(1, Relaxed);
    }

    /// The Prometheus text exposition of every metric.
    pub(crate) fn render(&self, breaker_open: bool) -> String {
        let mut out = String::with_capacity(4096);
        self.render_decisions(&mut out);
        self.render_leases(&mut out);
        self.render_outcomes(&mut out);
        self.render_latency(&mut out);
        describe(
            &mut out,
            "rl_gateway_breaker_open",
            "gauge",
            "Whether the circuit breaker skips Redis now.",
        );
        let _ = writeln!(out, "rl_gateway_breaker_open {}", u8::from(breaker_open));
        self.render_totals(&mut out);
        out
    }

    fn render_decisions(&self, out: &mut String) {
        describe(
            out,
            "rl_gateway_decisions_total",
            "counter",
            "Requests a rule applied to, by rule and outcome.",
        );
        let decisions = self.decisions.lock().unwrap_or_else(|e| e.into_inner());
        for (rule, counts) in decisions.iter() {
            for (outcome, count) in Outcome::ALL.iter().zip(counts) {
                let _ = writeln!(
                    out,
                    "rl_gateway_decisions_total{{rule=\"{}\",outcome=\"{}\"}} {count}",
                    escape(rule),
                    outcome.label()
                );
            }
        }
    }

    fn render_leases(&self, out: &mut String) {
        describe(
            out,
            "rl_gateway_leases_total",
            "counter",
            "Leases of concurrency rules, by rule and event (acquired, denied, released, \
             release_failed, reclaimed, renewed, lost).",
        );
        for (rule, counts) in self.leases.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            for (event, count) in LeaseEvent::ALL.iter().zip(counts) {
                let _ = writeln!(
                    out,
                    "rl_gateway_leases_total{{rule=\"{}\",event=\"{}\"}} {count}",
                    escape(rule),
                    event.label()
                );
            }
        }
        describe(
            out,
            "rl_gateway_lease_releases_total",
            "counter",
            "Lease releases started, by cause (end of the response, upstream error, client gone).",
        );
        let causes = ReleaseCause::ALL.map(|c| (c.label(), &self.release_causes[c as usize]));
        by_label(out, "rl_gateway_lease_releases_total", "cause", causes);
        describe(
            out,
            "rl_gateway_leases_held",
            "gauge",
            "Leases this gateway holds now (taken, not yet given back).",
        );
        let held = self.leases_held.load(Relaxed);
        let _ = writeln!(out, "rl_gateway_leases_held {held}");
    }

    /// Envoy's answers, the decisions Redis could not make, refunds and module errors.
    fn render_outcomes(&self, out: &mut String) {
        describe(
            out,
            "rl_gateway_envoy_total",
            "counter",
            "ShouldRateLimit calls by answer, and descriptors no rule limits (unknown_domain, no_match).",
        );
        let envoy = EnvoyResult::ALL.map(|r| (r.label(), &self.envoy[r as usize]));
        by_label(out, "rl_gateway_envoy_total", "result", envoy);
        describe(
            out,
            "rl_gateway_envoy_hits_total",
            "counter",
            "Hits (hits_addend units) of Envoy descriptors, by rule and stat (total_hits, \
             over_limit, near_limit, within_limit, shadow_mode), as envoyproxy/ratelimit \
             counts them.",
        );
        let hits = self.envoy_hits.lock().unwrap_or_else(|e| e.into_inner());
        for (rule, counts) in hits.iter() {
            for (stat, count) in HitCounts::LABELS.iter().zip(counts) {
                let _ = writeln!(
                    out,
                    "rl_gateway_envoy_hits_total{{rule=\"{}\",stat=\"{stat}\"}} {count}",
                    escape(rule)
                );
            }
        }
        drop(hits);
        describe(
            out,
            "rl_gateway_fail_open_total",
            "counter",
            "Decisions Redis could not make, by reason.",
        );
        let failures = Failure::ALL.map(|f| (f.label(), &self.fail_open[f as usize]));
        by_label(out, "rl_gateway_fail_open_total", "reason", failures);
        describe(
            out,
            "rl_gateway_refunds_total",
            "counter",
            "Hits given back because the response status does not count.",
        );
        per_rule(out, "rl_gateway_refunds_total", &self.refunds);
    }

    fn render_latency(&self, out: &mut String) {
        describe(
            out,
            "rl_gateway_redis_latency_seconds",
            "histogram",
            "Time of each Redis call that answered.",
        );
        let mut cumulative = 0;
        for (bound, count) in LATENCY_BUCKETS.iter().zip(&self.latency_buckets) {
            cumulative += count.load(Relaxed);
            let le = if bound.is_infinite() {
                "+Inf".to_owned()
            } else {
                bound.to_string()
            };
            let _ = writeln!(
                out,
                "rl_gateway_redis_latency_seconds_bucket{{le=\"{le}\"}} {cumulative}"
            );
        }
        let sum = self.latency_sum_ns.load(Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "rl_gateway_redis_latency_seconds_sum {sum}");
        let count = self.latency_count.load(Relaxed);
        let _ = writeln!(out, "rl_gateway_redis_latency_seconds_count {count}");
    }

    /// Reloads, the counters without labels, and module errors.
    fn render_totals(&self, out: &mut String) {
        describe(
            out,
            "rl_gateway_rule_reloads_total",
            "counter",
            "Rule file reloads, by result.",
        );
        let reloads = [("ok", &self.reloads_ok), ("refused", &self.reloads_refused)];
        by_label(out, "rl_gateway_rule_reloads_total", "result", reloads);
        let totals = [
            (
                "rl_gateway_upstream_errors_total",
                "Requests the upstream could not answer (502).",
                &self.upstream_errors,
            ),
            (
                "rl_gateway_request_body_timeouts_total",
                "Request bodies not received within body_timeout_ms, their upstream request \
                 cut (408).",
                &self.body_timeouts,
            ),
            (
                "rl_gateway_request_body_errors_total",
                "Request bodies that broke off (400): bad chunked framing, or the client gone.",
                &self.broken_bodies,
            ),
            (
                "rl_gateway_connections_refused_total",
                "Connections over max_connections, answered 503 and closed.",
                &self.connections_refused,
            ),
        ];
        for (name, help, counter) in totals {
            describe(out, name, "counter", help);
            let _ = writeln!(out, "{name} {}", counter.load(Relaxed));
        }
        describe(
            out,
            "rl_gateway_module_errors_total",
            "counter",
            "Error replies of the module (a misconfiguration: a missing policy, a refused \
             rule), by rule.",
        );
        per_rule(out, "rl_gateway_module_errors_total", &self.module_errors);
    }
}

/// One sample of the counter `name` per value of its one label, in the order given.
fn by_label<'a>(
    out: &mut String,
    name: &str,
    label: &str,
    samples: impl IntoIterator<Item = (&'static str, &'a AtomicU64)>,
) {
    for (value, counter) in samples {
        let count = counter.load(Relaxed);
        let _ = writeln!(out, "{name}{{{label}=\"{value}\"}} {count}");
    }
}

/// The `# HELP` and `# TYPE` lines that introduce the metric `name`.
fn describe(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// One sample of the counter `name` per rule, labelled with the rule.
fn per_rule(out: &mut String, name: &str, counts: &Mutex<BTreeMap<String, u64>>) {
    for (rule, count) in counts.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        let _ = writeln!(out, "{name}{{rule=\"{}\"}} {count}", escape(rule));
    }
}

/// The most rule labels one family keeps. A configured rule's name is bounded by the
/// configuration, but an Envoy descriptor's `detailed_metric` or `value_to_metric` puts
/// request values into the label: without a bound, a client that sends fresh values would
/// grow the gateway's memory and every scrape without end.
pub(crate) const MAX_RULE_LABELS: usize = 10_000;
/// The label a new name is counted under once [`MAX_RULE_LABELS`] are held.
pub(crate) const OTHER_RULE_LABEL: &str = "~other";

/// Updates the entry of `rule`, made on its first use (once [`MAX_RULE_LABELS`] are held,
/// a new name is counted as [`OTHER_RULE_LABEL`]); a lookup by `&str` so that the name is
/// only copied once per rule, not per request.
fn bump<V: Default>(map: &Mutex<BTreeMap<String, V>>, rule: &str, update: impl FnOnce(&mut V)) {
    let mut map = map.lock().unwrap_or_else(|e| e.into_inner());
    let full = map.len() >= MAX_RULE_LABELS;
    match map.get_mut(rule) {
        Some(value) => update(value),
        None if full => update(map.entry(OTHER_RULE_LABEL.to_owned()).or_default()),
        None => update(map.entry(rule.to_owned()).or_default()),
    }
}

/// A label value with `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every family once, introduced by its HELP and TYPE, in a fixed order (dashboards and
    /// diffs of two scrapes rely on it), and the labelled counters of each kind rendered.
    #[test]
    fn renders_each_family_once_in_a_fixed_order() {
        let metrics = Metrics::default();
        metrics.lease_releasing(ReleaseCause::Error);
        metrics.reload(false);
        metrics.envoy(EnvoyResult::OverLimit);
        let text = metrics.render(false);
        let families: Vec<&str> = text
            .lines()
            .filter_map(|line| line.strip_prefix("# TYPE "))
            .map(|rest| rest.split(' ').next().unwrap_or_default())
            .collect();
        assert_eq!(
            families,
            [
                "rl_gateway_decisions_total",
                "rl_gateway_leases_total",
                "rl_gateway_lease_releases_total",
                "rl_gateway_leases_held",
                "rl_gateway_envoy_total",
                "rl_gateway_envoy_hits_total",
                "rl_gateway_fail_open_total",
                "rl_gateway_refunds_total",
                "rl_gateway_redis_latency_seconds",
                "rl_gateway_breaker_open",
                "rl_gateway_rule_reloads_total",
                "rl_gateway_upstream_errors_total",
                "rl_gateway_request_body_timeouts_total",
                "rl_gateway_request_body_errors_total",
                "rl_gateway_connections_refused_total",
                "rl_gateway_module_errors_total",
            ]
        );
        assert_eq!(text.matches("# HELP ").count(), families.len());
        assert!(text.contains("rl_gateway_lease_releases_total{cause=\"error\"} 1\n"));
        assert!(text.contains("rl_gateway_rule_reloads_total{result=\"refused\"} 1\n"));
        assert!(text.contains("rl_gateway_rule_reloads_total{result=\"ok\"} 0\n"));
        assert!(text.contains("rl_gateway_envoy_total{result=\"over_limit\"} 1\n"));
        assert!(text.contains("rl_gateway_breaker_open 0\n"));
    }

    #[test]
    fn renders_counts_and_cumulative_buckets() {
        let metrics = Metrics::default();
        metrics.decision("login", Outcome::Allowed);
        metrics.decision("login", Outcome::Allowed);
        metrics.decision("login", Outcome::Denied);
        metrics.fail_open(Failure::Timeout);
        metrics.refund("login");
        metrics.module_error("login");
        metrics.module_error("login");
        metrics.redis_latency(Duration::from_micros(80));
        metrics.redis_latency(Duration::from_secs(1));
        let text = metrics.render(true);
        assert!(text.contains("rl_gateway_decisions_total{rule=\"login\",outcome=\"allowed\"} 2\n"));
        assert!(text.contains("rl_gateway_decisions_total{rule=\"login\",outcome=\"denied\"} 1\n"));
        assert!(
            text.contains("rl_gateway_decisions_total{rule=\"login\",outcome=\"fail_open\"} 0\n")
        );
        assert!(text.contains("rl_gateway_fail_open_total{reason=\"timeout\"} 1\n"));
        assert!(text.contains("rl_gateway_refunds_total{rule=\"login\"} 1\n"));
        assert!(text.contains("rl_gateway_redis_latency_seconds_bucket{le=\"0.00005\"} 0\n"));
        assert!(text.contains("rl_gateway_redis_latency_seconds_bucket{le=\"0.0001\"} 1\n"));
        assert!(text.contains("rl_gateway_redis_latency_seconds_bucket{le=\"+Inf\"} 2\n"));
        assert!(text.contains("rl_gateway_redis_latency_seconds_count 2\n"));
        assert!(text.contains("rl_gateway_breaker_open 1\n"));
        assert!(text.contains("rl_gateway_module_errors_total{rule=\"login\"} 2\n"));
    }

    #[test]
    fn envoy_hits_add_up_per_rule_and_stat() {
        let metrics = Metrics::default();
        let hits = HitCounts {
            total: 5,
            over_limit: 2,
            near_limit: 1,
            within_limit: 3,
            shadow_mode: 0,
        };
        metrics.envoy_hits("api.user", &hits);
        metrics.envoy_hits("api.user", &hits);
        let text = metrics.render(false);
        let line = |stat: &str, n: u64| {
            format!("rl_gateway_envoy_hits_total{{rule=\"api.user\",stat=\"{stat}\"}} {n}\n")
        };
        for (stat, n) in [
            ("total_hits", 10),
            ("over_limit", 4),
            ("near_limit", 2),
            ("within_limit", 6),
            ("shadow_mode", 0),
        ] {
            assert!(text.contains(&line(stat, n)), "{stat}: {text}");
        }
    }

    #[test]
    fn leases_are_counted_and_the_held_gauge_follows_them() {
        let metrics = Metrics::default();
        metrics.lease_acquired("llm");
        metrics.lease_acquired("llm");
        metrics.lease_denied("llm");
        metrics.lease_releasing(ReleaseCause::Dropped);
        metrics.lease_released("llm", true);
        let text = metrics.render(false);
        assert!(text.contains("rl_gateway_leases_total{rule=\"llm\",event=\"acquired\"} 2\n"));
        assert!(text.contains("rl_gateway_leases_total{rule=\"llm\",event=\"denied\"} 1\n"));
        assert!(text.contains("rl_gateway_leases_total{rule=\"llm\",event=\"released\"} 1\n"));
        assert!(text.contains("rl_gateway_lease_releases_total{cause=\"dropped\"} 1\n"));
        assert!(text.contains("rl_gateway_leases_held 1\n"));
        metrics.lease_released("llm", false);
        metrics.lease_released("llm", false);
        assert!(metrics.render(false).contains("rl_gateway_leases_held 0\n"));
    }

    /// Names made of request values (`detailed_metric`, `value_to_metric`) are bounded: past
    /// the cap, new names are counted under one label, and the names held keep counting.
    #[test]
    fn rule_labels_are_bounded() {
        let metrics = Metrics::default();
        for i in 0..MAX_RULE_LABELS + 5 {
            metrics.decision(&format!("api.user_{i}"), Outcome::Allowed);
        }
        metrics.decision("api.user_0", Outcome::Allowed);
        let text = metrics.render(false);
        let series = text
            .lines()
            .filter(|l| {
                l.starts_with("rl_gateway_decisions_total{") && l.contains("outcome=\"allowed\"")
            })
            .count();
        assert_eq!(series, MAX_RULE_LABELS + 1);
        assert!(
            text.contains(&format!(
                "rl_gateway_decisions_total{{rule=\"{OTHER_RULE_LABEL}\",outcome=\"allowed\"}} 5\n"
            )),
            "the overflow"
        );
        assert!(text
            .contains("rl_gateway_decisions_total{rule=\"api.user_0\",outcome=\"allowed\"} 2\n"));
    }
}
