//! Envoy's rate limit service: `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`
//! over gRPC (tonic, with the messages envoy-types ships). A request's descriptors are
//! matched against the YAML descriptors ([`crate::front::envoy::descriptors`]), each match becomes an
//! [`Applied`] (its rule, its key, the request's `hits_addend`), and the decider decides
//! them as it decides stacked HTTP rules: atomically in one `RL.MHIT` for keys of one slot,
//! charged in order and given back across slots. This module only translates.
//!
//! - `hits_addend` 0 on a descriptor: `RL.PEEK` / `RL.MPEEK` (what one more hit would do;
//!   nothing counted). The request-level `hits_addend` is a plain `uint32` whose 0 means
//!   "not set": 1.
//! - `is_negative_hits`: `RL.REFUND` / `RL.MREFUND` of that many units into the current
//!   window, never above the limit; the status says what is left after it.
//! - Looks and refunds go first; when a look says an enforced descriptor is over, nothing
//!   is charged (all or nothing), else the charged descriptors are decided together.
//! - A descriptor's `limit` (Envoy's override) is as its node's `limit_override` says
//!   ([`OverrideMode`]): by default a key of its own charged beside the node's (two answers
//!   for one descriptor, of which the weightier stands); the node's key is
//!   charged for every request, so no override value opens a fresh budget.
//! - Shadow descriptors answer OK whatever the count says; quota-mode descriptors answer
//!   their own code, OVER_LIMIT included, without making `overall_code` OVER_LIMIT.
//! - When Redis cannot decide within the deadline, each descriptor answers as its
//!   `on_failure` says: OK (fail-open, the default), OVER_LIMIT, or the whole call gRPC
//!   UNAVAILABLE (which Envoy's `failure_mode_deny` then turns into a denial or not); an
//!   error reply of the module, as its `on_module_error` says (OVER_LIMIT by default). A
//!   shadow descriptor never denies, on a failure either; a quota one reports it in its own
//!   status only.

pub mod descriptors;
pub mod grpc_listener;

use crate::app::Gateway;
use crate::decider::{Applied, End, Look, RuleOutcome};
use crate::failure::Failure;
use crate::headers;
use crate::metrics::{EnvoyResult, Outcome};
use crate::rules::Rule;
use crate::verdict::Verdict;
use descriptors::{DescriptorLimit, Domains, FailMode, OverrideMode, Unit};
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use hyper::header::HeaderMap;
use smallvec::SmallVec;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};
use tonic::{Request, Response, Status};

/// The largest request message taken (tonic refuses a larger one before decoding it).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// The most descriptors in one request: the most keys one `RL.MHIT` takes.
pub const MAX_DESCRIPTORS: usize = crate::rules::MAX_APPLYING;
/// The most entries in one descriptor.
pub const MAX_ENTRIES: usize = 16;
/// The longest domain, entry key and entry value, in bytes.
pub const MAX_DOMAIN_BYTES: usize = 255;
pub const MAX_ENTRY_KEY_BYTES: usize = 255;
pub const MAX_ENTRY_VALUE_BYTES: usize = 1024;

/// The service, sharing the HTTP front end's decider.
pub struct EnvoyService {
    gateway: Arc<Gateway>,
    domains: RwLock<Arc<Domains>>,
    key_prefix: String,
    response_headers: bool,
}

/// What one request descriptor asks for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Ask {
    Charge,
    Peek,
    Refund,
}

/// One request descriptor that a limit applies to.
struct Matched<'a> {
    /// Its index in the request.
    index: usize,
    limit: &'a Arc<DescriptorLimit>,
    rule: Arc<Rule>,
    /// The request's own limit, when this charges it (under `replace`, in the node's key;
    /// under `tighten`, in a key of its own beside the node's, which another `Matched` of
    /// the same index charges).
    overriding: Option<(u32, Unit)>,
    /// This charges the override's own key (`tighten`).
    own_key: bool,
    ask: Ask,
    metric: String,
}

impl Matched<'_> {
    /// The limit `current_limit` shows.
    fn shown(&self) -> Option<(u32, Unit)> {
        self.overriding.or(self.limit.shown)
    }
}

/// What became of one descriptor.
enum Said {
    /// No limit applies (no match, replaced, a node without a limit).
    Free,
    Unlimited,
    /// `requests_per_unit: 0`, or an override of 0; with the limit to show.
    Blocked(Option<(u32, Unit)>),
    Verdict(Verdict),
    /// Denied without a verdict to show (a shadow or quota descriptor over its limit).
    Over,
    /// Not decided: another descriptor was over first.
    NotAsked,
    Failed(Failure),
}

impl Said {
    /// Which of two answers for one descriptor (its node's key and its own limit's key)
    /// stands: a denial over a failure (whose mode may be `ok`) over an allowance, and of
    /// two allowances the one with less left.
    fn weight(&self) -> (u8, u64) {
        match self {
            Said::Free => (0, 0),
            Said::Unlimited => (1, 0),
            Said::NotAsked => (2, 0),
            Said::Verdict(v) if v.allowed() => (3, u64::MAX - v.binding_tier().remaining),
            Said::Failed(_) => (4, 0),
            Said::Over => (5, 0),
            Said::Verdict(_) => (6, 0),
            Said::Blocked(_) => (7, 0),
        }
    }
}

/// Puts what `matched[at]` said for its descriptor, unless what another key of the same
/// descriptor said weighs more ([`Said::weight`]); `source` keeps which one stands.
fn settle(said: &mut [Said], source: &mut [Option<usize>], index: usize, at: usize, new: Said) {
    if source[index].is_none() || new.weight() > said[index].weight() {
        said[index] = new;
        source[index] = Some(at);
    }
}

impl EnvoyService {
    pub fn new(gateway: Arc<Gateway>, domains: Domains, key_prefix: String, headers: bool) -> Self {
        EnvoyService {
            gateway,
            domains: RwLock::new(Arc::new(domains)),
            key_prefix,
            response_headers: headers,
        }
    }

    /// The tonic service, bounded to [`MAX_MESSAGE_BYTES`] per request.
    pub fn server(self: &Arc<Self>) -> RateLimitServiceServer<EnvoyService> {
        RateLimitServiceServer::from_arc(self.clone()).max_decoding_message_size(MAX_MESSAGE_BYTES)
    }

    fn domains(&self) -> Arc<Domains> {
        self.domains
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Swaps in newly loaded descriptors; denials made under the old ones are forgotten.
    pub fn replace_domains(&self, domains: Domains) {
        *self.domains.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(domains);
        self.gateway.decider().forget_denials();
    }

    /// Reloads the descriptors at `path` whenever a file's name, size or modification
    /// time changes (looked at every `interval`). A set that does not load is refused,
    /// logged and counted (`rl_gateway_reloads_total{result="refused"}`); the old one
    /// stays.
    pub fn spawn_reloader(self: &Arc<Self>, path: PathBuf, interval: Duration) {
        let service = self.clone();
        tokio::spawn(async move {
            let mut seen = stamp(&path);
            loop {
                tokio::time::sleep(interval).await;
                let now = stamp(&path);
                if now == seen {
                    continue;
                }
                seen = now;
                let metrics = service.gateway.metrics();
                match descriptors::load(&path) {
                    Ok(domains) => {
                        crate::logging::log!(
                            "Envoy descriptors reloaded from {}: {} domains",
                            path.display(),
                            domains.len()
                        );
                        service.replace_domains(domains);
                        metrics.reload(true);
                    }
                    Err(error) => {
                        crate::logging::log!("Envoy descriptors not reloaded: {error}");
                        metrics.reload(false);
                    }
                }
            }
        });
    }

    /// Decides one request: the answer, or the gRPC status to fail it with.
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        let metrics = self.gateway.metrics();
        if let Err(problem) = check(request) {
            metrics.envoy(EnvoyResult::Invalid);
            return Err(Status::invalid_argument(problem));
        }
        let count = request.descriptors.len();
        let domains = self.domains();
        let Some(domain) = domains.get(&request.domain) else {
            metrics.envoy(EnvoyResult::UnknownDomain);
            metrics.envoy(EnvoyResult::Ok);
            return Ok(ok_response(count));
        };
        fn entries(d: &RateLimitDescriptor) -> impl Iterator<Item = (&str, &str)> + Clone + '_ {
            d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()))
        }
        let mut said: SmallVec<[Said; 4]> = (0..count).map(|_| Said::Free).collect();
        // Which of `matched` said what `said` holds.
        let mut source: SmallVec<[Option<usize>; 4]> = (0..count).map(|_| None).collect();
        let mut found: SmallVec<[(usize, &Arc<DescriptorLimit>); 4]> = SmallVec::new();
        for (i, d) in request.descriptors.iter().enumerate() {
            match domain.find(entries(d)) {
                Some(limit) => found.push((i, limit)),
                None => metrics.envoy(EnvoyResult::NoMatch),
            }
        }
        // `replaces`: a matched limit that another matched limit replaces is not applied.
        let replaced = |limit: &DescriptorLimit| {
            limit.name.as_ref().is_some_and(|name| {
                found
                    .iter()
                    .any(|(_, other)| other.replaces.iter().any(|r| r == name))
            })
        };
        let mut matched: SmallVec<[Matched<'_>; 4]> = SmallVec::new();
        for &(i, limit) in &found {
            if replaced(limit) {
                continue;
            }
            let d = &request.descriptors[i];
            let last_value = d.entries.last().map_or("", |e| e.value.as_str());
            let metric = descriptors::metric_name(limit, last_value);
            if limit.unlimited {
                said[i] = Said::Unlimited;
                continue;
            }
            let asked = d
                .limit
                .and_then(|o| Unit::from_proto(o.unit).map(|u| (o.requests_per_unit, u)));
            let blocked = match (asked, limit.limit_override) {
                (None, _) | (Some(_), OverrideMode::Ignore) => limit.blocked.then_some(limit.shown),
                (Some((n, u)), OverrideMode::Replace) => (n == 0).then_some(Some((n, u))),
                (Some((n, u)), OverrideMode::Tighten) if n == 0 => Some(Some((n, u))),
                (Some(_), OverrideMode::Tighten) => limit.blocked.then_some(limit.shown),
            };
            if let Some(shown) = blocked {
                said[i] = Said::Blocked(shown);
                metrics.decision(&metric, Outcome::Denied);
                continue;
            }
            let ask = if hits_of(request, i) == 0 {
                Ask::Peek
            } else if d.is_negative_hits {
                Ask::Refund
            } else {
                Ask::Charge
            };
            let mut charge = |rule: Arc<Rule>, overriding, own_key| {
                matched.push(Matched {
                    index: i,
                    limit,
                    rule,
                    overriding,
                    own_key,
                    ask,
                    metric: metric.clone(),
                })
            };
            // The node's key is charged whatever the override says, except under `replace`,
            // where the override is its rule.
            let own = asked.and_then(|(n, unit)| Some(((n, unit), limit.overridden(n, unit)?)));
            match (own, limit.limit_override) {
                (Some((asked, rule)), OverrideMode::Replace) => charge(rule, Some(asked), false),
                (Some((asked, rule)), _) => {
                    charge(limit.rule.clone(), None, false);
                    charge(rule, Some(asked), true);
                }
                (None, _) => {
                    if asked.is_some() {
                        metrics.envoy(EnvoyResult::OverrideIgnored);
                    }
                    charge(limit.rule.clone(), None, false);
                }
            }
        }
        let applied = |m: &Matched<'_>| Applied {
            rule: m.rule.clone(),
            key: descriptors::key(
                &self.key_prefix,
                &request.domain,
                m.limit.subject.as_deref(),
                entries(&request.descriptors[m.index]),
                m.overriding.filter(|_| m.own_key),
            ),
            cost: Some(match m.ask {
                Ask::Peek => 1,
                _ => hits_of(request, m.index),
            }),
        };
        let decider = self.gateway.decider();
        // Looks and refunds first.
        let mut over_by_look = false;
        for look in [Look::Peek, Look::Refund] {
            let ask = if look == Look::Peek {
                Ask::Peek
            } else {
                Ask::Refund
            };
            let these: SmallVec<[(usize, &Matched<'_>); 4]> = matched
                .iter()
                .enumerate()
                .filter(|(_, m)| m.ask == ask)
                .collect();
            if these.is_empty() {
                continue;
            }
            let applying: SmallVec<[Applied; 4]> = these.iter().map(|(_, m)| applied(m)).collect();
            let answers = decider.look(&applying, look).await;
            for (&(at, m), answer) in these.iter().zip(answers) {
                let new = match answer {
                    Ok(Some(verdict)) => {
                        if look == Look::Peek && !verdict.allowed() && enforced(m.limit) {
                            over_by_look = true;
                        }
                        // A look answers what one more hit would leave; shown is what is
                        // left now.
                        if look == Look::Peek && verdict.allowed() {
                            Said::Verdict(verdict.before_look(1))
                        } else {
                            Said::Verdict(verdict)
                        }
                    }
                    Ok(None) => Said::Unlimited,
                    Err(failure) => {
                        // A look that fails closed refuses the request: nothing charged.
                        if enforced(m.limit) && m.limit.mode_for(failure).refuses() {
                            over_by_look = true;
                        }
                        Said::Failed(failure)
                    }
                };
                settle(&mut said, &mut source, m.index, at, new);
            }
        }
        // A blocked descriptor (requests_per_unit 0) refuses the request as a whole.
        over_by_look |= found
            .iter()
            .any(|(i, limit)| matches!(said[*i], Said::Blocked(_)) && enforced(limit));
        // Then the charges, all of them in one decision.
        let charging: SmallVec<[(usize, &Matched<'_>); 4]> = matched
            .iter()
            .enumerate()
            .filter(|(_, m)| m.ask == Ask::Charge)
            .collect();
        let mut closed = None;
        // Per descriptor, whether a key denied it, and from the deny cache.
        let mut denied: SmallVec<[Option<bool>; 4]> = (0..count).map(|_| None).collect();
        // Per descriptor, whether its local limit decided (counted already).
        let mut locally: SmallVec<[bool; 4]> = (0..count).map(|_| false).collect();
        if !charging.is_empty() {
            if over_by_look {
                for &(at, m) in &charging {
                    settle(&mut said, &mut source, m.index, at, Said::NotAsked);
                }
            } else {
                let applying: SmallVec<[Applied; 4]> =
                    charging.iter().map(|(_, m)| applied(m)).collect();
                let stacked = decider.decide(&applying, None).await;
                if let End::Closed { rule, .. } = stacked.end {
                    closed = Some(charging[rule].1.index);
                }
                for (&(at, m), outcome) in charging.iter().zip(stacked.outcomes) {
                    let new = match outcome {
                        RuleOutcome::Unlimited => Said::Unlimited,
                        RuleOutcome::NotAsked => Said::NotAsked,
                        RuleOutcome::Allowed(v) | RuleOutcome::Uncounted(v) => Said::Verdict(v),
                        RuleOutcome::Denied { verdict, cached } => {
                            let was = denied[m.index].unwrap_or(true);
                            denied[m.index] = Some(was && cached);
                            Said::Verdict(verdict)
                        }
                        RuleOutcome::ShadowDenied => Said::Over,
                        RuleOutcome::Local { verdict, failure } => {
                            metrics.fail_open(failure);
                            let outcome = match verdict.allowed() {
                                true => Outcome::LocalAllowed,
                                false => Outcome::LocalDenied,
                            };
                            metrics.decision(&m.metric, outcome);
                            locally[m.index] = true;
                            Said::Verdict(verdict)
                        }
                        RuleOutcome::Failed(f) => Said::Failed(f),
                    };
                    settle(&mut said, &mut source, m.index, at, new);
                }
            }
        }
        // One denial counted per descriptor, however many of its keys denied.
        for (i, cached) in denied.iter().enumerate() {
            let (Some(cached), Some(at)) = (cached, source[i]) else {
                continue;
            };
            let outcome = if *cached {
                Outcome::DeniedCached
            } else {
                Outcome::Denied
            };
            metrics.decision(&matched[at].metric, outcome);
        }
        // The answer, descriptor by descriptor.
        let mut overall_over = false;
        let mut unavailable = false;
        let mut statuses = Vec::with_capacity(count);
        let mut shown: SmallVec<[(&Rule, &Verdict); 4]> = SmallVec::new();
        let mut binding = None;
        for (i, s) in said.iter().enumerate() {
            let m = source[i].map(|at| &matched[at]);
            let limit = found.iter().find(|(j, _)| *j == i).map(|(_, l)| *l);
            let mut status = DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            };
            let over = |status: &mut DescriptorStatus, limit: &DescriptorLimit| {
                if !limit.shadow {
                    status.code = Code::OverLimit as i32;
                }
                !limit.shadow && !limit.quota
            };
            match (s, m) {
                (Said::Free, _) => {}
                (Said::Unlimited, _) => {
                    status.limit_remaining = u32::MAX;
                    if let Some(limit) = limit {
                        self.gateway
                            .metrics()
                            .decision(&limit.rule.name, Outcome::Allowed);
                    }
                }
                (Said::Blocked(shown), _) => {
                    if let Some(limit) = limit {
                        let (n, unit) = shown.unwrap_or((0, Unit::Second));
                        status.current_limit = Some(current(&limit.rule.name, n, Some(unit)));
                        status.duration_until_reset = Some(duration(unit.window_ms()));
                        overall_over |= over(&mut status, limit);
                    }
                }
                (Said::Verdict(verdict), Some(m)) => {
                    let tier = verdict.binding_tier();
                    status.current_limit = Some(match m.shown() {
                        Some((n, unit)) => current(&m.rule.name, n, Some(unit)),
                        None => current(&m.rule.name, clamp(tier.limit), None),
                    });
                    status.limit_remaining = clamp(tier.remaining);
                    status.duration_until_reset = Some(duration(tier.reset_after_ms));
                    let denied = m.ask != Ask::Refund && !verdict.allowed();
                    if denied {
                        overall_over |= over(&mut status, m.limit);
                    }
                    if m.ask == Ask::Charge && verdict.allowed() && !locally[i] {
                        metrics.decision(&m.metric, Outcome::Allowed);
                    }
                    if enforced(m.limit) {
                        if denied && binding.is_none() {
                            binding = Some(shown.len());
                        }
                        shown.push((&m.rule, verdict));
                    }
                }
                (Said::Over, Some(m)) => {
                    status.current_limit =
                        m.shown().map(|(n, u)| current(&m.rule.name, n, Some(u)));
                    over(&mut status, m.limit);
                    metrics.decision(&m.metric, Outcome::ShadowDenied);
                }
                (Said::NotAsked, Some(m)) => {
                    status.current_limit =
                        m.shown().map(|(n, u)| current(&m.rule.name, n, Some(u)));
                }
                (Said::Failed(failure), Some(m)) => {
                    status.current_limit =
                        m.shown().map(|(n, u)| current(&m.rule.name, n, Some(u)));
                    let mode = m.limit.mode_for(*failure);
                    let failed_closed = enforced(m.limit) && (mode.refuses() || closed == Some(i));
                    if failed_closed {
                        metrics.decision(&m.metric, Outcome::FailClosed);
                    } else {
                        metrics.fail_open(*failure);
                        metrics.decision(&m.metric, Outcome::FailOpen);
                    }
                    // A shadow descriptor never denies; a quota one reports its failure in
                    // its own code only; an enforced one answers as its mode says.
                    if m.limit.quota && mode.refuses() {
                        status.code = Code::OverLimit as i32;
                    } else if enforced(m.limit) {
                        match mode {
                            FailMode::Ok | FailMode::Local => {}
                            FailMode::OverLimit => {
                                status.code = Code::OverLimit as i32;
                                overall_over = true;
                            }
                            FailMode::Unavailable => unavailable = true,
                        }
                    }
                }
                (_, None) => {}
            }
            statuses.push(status);
        }
        if unavailable {
            metrics.envoy(EnvoyResult::Unavailable);
            return Err(Status::unavailable(
                "Redis could not decide within the deadline",
            ));
        }
        metrics.envoy(if overall_over {
            EnvoyResult::OverLimit
        } else {
            EnvoyResult::Ok
        });
        let mut response = RateLimitResponse {
            overall_code: if overall_over {
                Code::OverLimit
            } else {
                Code::Ok
            } as i32,
            statuses,
            ..Default::default()
        };
        if self.response_headers && !shown.is_empty() {
            let at = binding.unwrap_or_else(|| least_remaining(&shown));
            let mut fields = HeaderMap::new();
            headers::add_all(
                &mut fields,
                &shown,
                at,
                false,
                overall_over && binding.is_some(),
            );
            response.response_headers_to_add = fields
                .iter()
                .filter_map(|(name, value)| {
                    Some(HeaderValue {
                        key: name.as_str().to_owned(),
                        value: value.to_str().ok()?.to_owned(),
                        ..Default::default()
                    })
                })
                .collect();
        }
        Ok(response)
    }
}

/// What tells a change of the descriptors: each file's name, size and modification time.
fn stamp(path: &Path) -> Vec<(PathBuf, u64, Option<SystemTime>)> {
    let of = |p: PathBuf| {
        let meta = std::fs::metadata(&p).ok();
        let len = meta.as_ref().map_or(0, std::fs::Metadata::len);
        let modified = meta.and_then(|m| m.modified().ok());
        (p, len, modified)
    };
    match std::fs::read_dir(path) {
        Ok(entries) => {
            let mut all: Vec<_> = entries
                .filter_map(Result::ok)
                .map(|e| of(e.path()))
                .collect();
            all.sort();
            all
        }
        Err(_) => vec![of(path.to_path_buf())],
    }
}

/// A limit that can make the whole answer OVER_LIMIT.
fn enforced(limit: &DescriptorLimit) -> bool {
    !limit.shadow && !limit.quota
}

/// The units descriptor `index` counts: its own `hits_addend`, else the request's (whose
/// 0 is protobuf's "unset": 1).
fn hits_of(request: &RateLimitRequest, index: usize) -> u64 {
    match &request.descriptors[index].hits_addend {
        Some(h) => h.value,
        None if request.hits_addend == 0 => 1,
        None => u64::from(request.hits_addend),
    }
}

/// The position in `shown` of the one with the least remaining in its binding tier.
fn least_remaining(shown: &[(&Rule, &Verdict)]) -> usize {
    shown
        .iter()
        .enumerate()
        .min_by_key(|(i, (_, v))| (v.binding_tier().remaining, *i))
        .map_or(0, |(i, _)| i)
}

fn clamp(n: u64) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn duration(ms: u64) -> ProtoDuration {
    ProtoDuration {
        seconds: i64::try_from(ms / 1000).unwrap_or(i64::MAX),
        nanos: i32::try_from((ms % 1000) * 1_000_000).unwrap_or(0),
    }
}

fn current(name: &str, requests_per_unit: u32, unit: Option<Unit>) -> RateLimit {
    RateLimit {
        name: name.to_owned(),
        requests_per_unit,
        unit: unit.map_or(0, Unit::proto),
    }
}

fn ok_response(count: usize) -> RateLimitResponse {
    RateLimitResponse {
        overall_code: Code::Ok as i32,
        statuses: (0..count)
            .map(|_| DescriptorStatus {
                code: Code::Ok as i32,
                ..Default::default()
            })
            .collect(),
        ..Default::default()
    }
}

/// The bounds of a request, each refusal naming what is wrong.
pub fn check(request: &RateLimitRequest) -> Result<(), String> {
    if request.domain.is_empty() {
        return Err("the domain is empty".into());
    }
    if request.domain.len() > MAX_DOMAIN_BYTES {
        return Err(format!(
            "the domain is longer than {MAX_DOMAIN_BYTES} bytes"
        ));
    }
    if request.descriptors.is_empty() {
        return Err("no descriptors".into());
    }
    if request.descriptors.len() > MAX_DESCRIPTORS {
        return Err(format!(
            "{} descriptors: at most {MAX_DESCRIPTORS}",
            request.descriptors.len()
        ));
    }
    for (i, d) in request.descriptors.iter().enumerate() {
        if d.entries.is_empty() {
            return Err(format!("descriptor {i} has no entries"));
        }
        if d.entries.len() > MAX_ENTRIES {
            return Err(format!(
                "descriptor {i} has {} entries: at most {MAX_ENTRIES}",
                d.entries.len()
            ));
        }
        for (j, e) in d.entries.iter().enumerate() {
            if e.key.is_empty() || e.key.len() > MAX_ENTRY_KEY_BYTES {
                return Err(format!(
                    "descriptor {i} entry {j}: the key must be 1 to {MAX_ENTRY_KEY_BYTES} bytes"
                ));
            }
            if e.value.len() > MAX_ENTRY_VALUE_BYTES {
                return Err(format!(
                    "descriptor {i} entry {j}: the value is longer than {MAX_ENTRY_VALUE_BYTES} bytes"
                ));
            }
        }
        if let Some(h) = &d.hits_addend {
            if h.value > u64::from(u32::MAX) {
                return Err(format!(
                    "descriptor {i}: hits_addend {} is more than {}",
                    h.value,
                    u32::MAX
                ));
            }
        }
        if let Some(o) = &d.limit {
            if Unit::from_proto(o.unit).is_none() {
                return Err(format!(
                    "descriptor {i}: the limit's unit must be SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR"
                ));
            }
        }
    }
    Ok(())
}

#[tonic::async_trait]
impl RateLimitService for EnvoyService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.decide(request.get_ref()).await.map(Response::new)
    }
}
