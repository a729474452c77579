//! The answer (pure): what the decider replied for each key of a [`Plan`] becomes the
//! `ShouldRateLimit` response: per descriptor a status (its code, the limit it shows,
//! what is left and when it resets), the overall code, and the RateLimit header fields;
//! or gRPC UNAVAILABLE when a descriptor says so. Nothing here talks to Redis or to the
//! metrics: what is to be counted is returned in [`Answer::events`].

use super::descriptors::{DescriptorLimit, FailMode, Unit};
use super::plan::{enforced, Ask, Event, Known, Plan};
use crate::decider::RuleOutcome;
use crate::failure::Failure;
use crate::headers;
use crate::metrics::{EnvoyResult, Outcome};
use crate::rules::Rule;
use crate::verdict::Verdict;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
use hyper::header::HeaderMap;
use smallvec::SmallVec;
use tonic::Status;

/// What became of one descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Said {
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

/// What the decider replied for one key of the plan.
#[derive(Debug, Clone)]
pub(super) enum Reply {
    /// A look (`RL.PEEK` or `RL.REFUND`): the verdict, `None` for a rule without limits.
    Looked(Result<Option<Verdict>, Failure>),
    Charged(RuleOutcome),
    /// Not charged: the looks or a blocked descriptor refused the request first.
    NotAsked,
}

/// Every reply of one request, in the order of [`Plan::matched`].
#[derive(Debug, Clone)]
pub(super) struct Replies {
    pub(crate) replies: SmallVec<[Reply; 4]>,
    /// The descriptor whose failure closed the charges (`End::Closed`).
    pub(crate) closed: Option<usize>,
}

/// The response (or the gRPC status to fail the call with) and what to count.
#[derive(Debug)]
pub(super) struct Answer {
    pub(crate) result: Result<RateLimitResponse, Status>,
    pub(crate) events: Vec<Event>,
}

/// The answer to a request out of bounds.
pub(super) fn invalid(problem: &super::RequestError) -> Answer {
    Answer {
        result: Err(Status::invalid_argument(problem.to_string())),
        events: vec![Event::Envoy(EnvoyResult::Invalid)],
    }
}

/// The answer to a request of a domain no file defines: every descriptor OK.
pub(super) fn unknown_domain(count: usize) -> Answer {
    Answer {
        result: Ok(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: (0..count).map(|_| ok_status()).collect(),
            ..Default::default()
        }),
        events: vec![
            Event::Envoy(EnvoyResult::UnknownDomain),
            Event::Envoy(EnvoyResult::Ok),
        ],
    }
}

/// Whether what the looks said refuses the request before anything is charged (all or
/// nothing): an enforced descriptor blocked, over its limit by a look, or whose look
/// failed closed.
pub(super) fn refused_before_charging(plan: &Plan<'_>, replies: &[Reply]) -> bool {
    plan.blocks()
        || plan
            .matched
            .iter()
            .zip(replies)
            .any(|(m, reply)| match reply {
                Reply::Looked(Ok(Some(verdict))) => {
                    m.ask == Ask::Peek && !verdict.allowed() && enforced(m.limit)
                }
                Reply::Looked(Err(failure)) => {
                    enforced(m.limit) && m.limit.mode_for(*failure).refuses()
                }
                _ => false,
            })
}

/// What each descriptor came to once every reply is in.
struct Settled {
    said: SmallVec<[Said; 4]>,
    /// Which of the plan's keys said what `said` holds.
    source: SmallVec<[Option<usize>; 4]>,
    /// Whether a key denied the descriptor, and only from the deny cache.
    denied: SmallVec<[Option<bool>; 4]>,
    /// Whether its local limit decided (counted already).
    locally: SmallVec<[bool; 4]>,
}

impl Settled {
    /// Puts what key `at` said for descriptor `index`, unless what another key of the same
    /// descriptor said weighs more ([`Said::weight`]).
    fn settle(&mut self, index: usize, at: usize, new: Said) {
        if self.source[index].is_none() || new.weight() > self.said[index].weight() {
            self.said[index] = new;
            self.source[index] = Some(at);
        }
    }
}

/// The response to `plan` given `replies`, with the RateLimit header fields when
/// `response_headers`.
pub(super) fn answer(plan: &Plan<'_>, replies: &Replies, response_headers: bool) -> Answer {
    let mut events = Vec::new();
    let settled = settle_all(plan, &replies.replies, &mut events);
    // One denial counted per descriptor, however many of its keys denied.
    for (i, cached) in settled.denied.iter().enumerate() {
        let (Some(cached), Some(at)) = (cached, settled.source[i]) else {
            continue;
        };
        let outcome = match cached {
            true => Outcome::DeniedCached,
            false => Outcome::Denied,
        };
        events.push(Event::Decision(plan.matched[at].metric.clone(), outcome));
    }
    let mut answering = Answering {
        plan,
        settled: &settled,
        closed: replies.closed,
        overall_over: false,
        unavailable: false,
        shown: SmallVec::new(),
        binding: None,
        events,
    };
    let statuses = (0..plan.count).map(|i| answering.status(i)).collect();
    answering.finish(statuses, response_headers)
}

/// Every reply settled into what its descriptor said, looks first (peeks, then refunds),
/// then charges, as they were asked.
fn settle_all(plan: &Plan<'_>, replies: &[Reply], events: &mut Vec<Event>) -> Settled {
    let count = plan.count;
    let mut settled = Settled {
        said: plan
            .known
            .iter()
            .map(|known| match *known {
                Known::Nothing => Said::Free,
                Known::Unlimited => Said::Unlimited,
                Known::Blocked(shown) => Said::Blocked(shown),
            })
            .collect(),
        source: (0..count).map(|_| None).collect(),
        denied: (0..count).map(|_| None).collect(),
        locally: (0..count).map(|_| false).collect(),
    };
    for ask in [Ask::Peek, Ask::Refund, Ask::Charge] {
        for (at, (m, reply)) in plan.matched.iter().zip(replies).enumerate() {
            if m.ask != ask {
                continue;
            }
            let new = match reply {
                // A look answers what one more hit would leave; shown is what is left now.
                Reply::Looked(Ok(Some(verdict))) if ask == Ask::Peek && verdict.allowed() => {
                    Said::Verdict(verdict.before_look(1))
                }
                Reply::Looked(Ok(Some(verdict))) => Said::Verdict(verdict.clone()),
                Reply::Looked(Ok(None)) => Said::Unlimited,
                Reply::Looked(Err(failure)) => Said::Failed(*failure),
                Reply::NotAsked => Said::NotAsked,
                Reply::Charged(outcome) => {
                    charged(&mut settled, m.index, &m.metric, outcome, events)
                }
            };
            settled.settle(m.index, at, new);
        }
    }
    settled
}

/// What one charged key said for descriptor `index`.
fn charged(
    settled: &mut Settled,
    index: usize,
    metric: &str,
    outcome: &RuleOutcome,
    events: &mut Vec<Event>,
) -> Said {
    match outcome {
        RuleOutcome::Unlimited => Said::Unlimited,
        RuleOutcome::NotAsked => Said::NotAsked,
        RuleOutcome::Allowed(v) | RuleOutcome::Uncounted(v) => Said::Verdict(v.clone()),
        RuleOutcome::Denied { verdict, cached } => {
            let was = settled.denied[index].unwrap_or(true);
            settled.denied[index] = Some(was && *cached);
            Said::Verdict(verdict.clone())
        }
        RuleOutcome::ShadowDenied => Said::Over,
        RuleOutcome::Local { verdict, failure } => {
            events.push(Event::FailOpen(*failure));
            let outcome = match verdict.allowed() {
                true => Outcome::LocalAllowed,
                false => Outcome::LocalDenied,
            };
            events.push(Event::Decision(metric.to_owned(), outcome));
            settled.locally[index] = true;
            Said::Verdict(verdict.clone())
        }
        RuleOutcome::Failed(f) => Said::Failed(*f),
    }
}

/// The answer being written, descriptor by descriptor.
struct Answering<'p, 'a> {
    plan: &'p Plan<'a>,
    settled: &'p Settled,
    closed: Option<usize>,
    overall_over: bool,
    unavailable: bool,
    /// The descriptors whose verdicts the header fields show (enforced ones).
    shown: SmallVec<[usize; 4]>,
    /// The position in `shown` of the first denial.
    binding: Option<usize>,
    events: Vec<Event>,
}

impl Answering<'_, '_> {
    /// Descriptor `i`'s status.
    fn status(&mut self, i: usize) -> DescriptorStatus {
        let mut status = ok_status();
        let m = self.settled.source[i].map(|at| &self.plan.matched[at]);
        match (&self.settled.said[i], m) {
            (Said::Free, _) => {}
            (Said::Unlimited, _) => {
                status.limit_remaining = u32::MAX;
                if let Some(limit) = self.plan.limit_of(i) {
                    let name = limit.rule.name.clone();
                    self.events.push(Event::Decision(name, Outcome::Allowed));
                }
            }
            (Said::Blocked(shown), _) => {
                if let Some(limit) = self.plan.limit_of(i) {
                    let (n, unit) = shown.unwrap_or((0, Unit::Second));
                    status.current_limit = Some(current(&limit.rule.name, n, Some(unit)));
                    status.duration_until_reset = Some(duration(unit.window_ms()));
                    self.overall_over |= over(&mut status, limit);
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
                    self.overall_over |= over(&mut status, m.limit);
                }
                if m.ask == Ask::Charge && verdict.allowed() && !self.settled.locally[i] {
                    self.events
                        .push(Event::Decision(m.metric.clone(), Outcome::Allowed));
                }
                if enforced(m.limit) {
                    if denied && self.binding.is_none() {
                        self.binding = Some(self.shown.len());
                    }
                    self.shown.push(i);
                }
            }
            (Said::Over, Some(m)) => {
                status.current_limit = m.shown().map(|(n, u)| current(&m.rule.name, n, Some(u)));
                over(&mut status, m.limit);
                self.events
                    .push(Event::Decision(m.metric.clone(), Outcome::ShadowDenied));
            }
            (Said::NotAsked, Some(m)) => {
                status.current_limit = m.shown().map(|(n, u)| current(&m.rule.name, n, Some(u)));
            }
            (Said::Failed(failure), Some(m)) => {
                status.current_limit = m.shown().map(|(n, u)| current(&m.rule.name, n, Some(u)));
                self.failed(&mut status, i, m.limit, &m.metric, *failure);
            }
            (_, None) => {}
        }
        status
    }

    /// The status of descriptor `i` whose key failed: as its mode says.
    fn failed(
        &mut self,
        status: &mut DescriptorStatus,
        i: usize,
        limit: &DescriptorLimit,
        metric: &str,
        failure: Failure,
    ) {
        let mode = limit.mode_for(failure);
        let failed_closed = enforced(limit) && (mode.refuses() || self.closed == Some(i));
        if failed_closed {
            self.events
                .push(Event::Decision(metric.to_owned(), Outcome::FailClosed));
        } else {
            self.events.push(Event::FailOpen(failure));
            self.events
                .push(Event::Decision(metric.to_owned(), Outcome::FailOpen));
        }
        // A shadow descriptor never denies; a quota one reports its failure in its own
        // code only; an enforced one answers as its mode says.
        if limit.quota && mode.refuses() {
            status.code = Code::OverLimit as i32;
        } else if enforced(limit) {
            match mode {
                FailMode::Ok | FailMode::Local => {}
                FailMode::OverLimit => {
                    status.code = Code::OverLimit as i32;
                    self.overall_over = true;
                }
                FailMode::Unavailable => self.unavailable = true,
            }
        }
    }

    /// The response of `statuses`, or UNAVAILABLE.
    fn finish(mut self, statuses: Vec<DescriptorStatus>, response_headers: bool) -> Answer {
        if self.unavailable {
            self.events.push(Event::Envoy(EnvoyResult::Unavailable));
            return Answer {
                result: Err(Status::unavailable(
                    "Redis could not decide within the deadline",
                )),
                events: self.events,
            };
        }
        let (result, code) = match self.overall_over {
            true => (EnvoyResult::OverLimit, Code::OverLimit),
            false => (EnvoyResult::Ok, Code::Ok),
        };
        self.events.push(Event::Envoy(result));
        let mut response = RateLimitResponse {
            overall_code: code as i32,
            statuses,
            ..Default::default()
        };
        if response_headers && !self.shown.is_empty() {
            response.response_headers_to_add = self.header_fields();
        }
        Answer {
            result: Ok(response),
            events: self.events,
        }
    }

    /// The RateLimit header fields of the enforced verdicts: the first denial's, else the
    /// one with the least left.
    fn header_fields(&self) -> Vec<HeaderValue> {
        let shown: SmallVec<[(&Rule, &Verdict); 4]> = self
            .shown
            .iter()
            .filter_map(|&i| {
                let m = &self.plan.matched[self.settled.source[i]?];
                match &self.settled.said[i] {
                    Said::Verdict(verdict) => Some((m.rule.as_ref(), verdict)),
                    _ => None,
                }
            })
            .collect();
        let at = self.binding.unwrap_or_else(|| least_remaining(&shown));
        let mut fields = HeaderMap::new();
        let denied = self.overall_over && self.binding.is_some();
        headers::add_all(&mut fields, &shown, at, false, denied);
        fields
            .iter()
            .filter_map(|(name, value)| {
                Some(HeaderValue {
                    key: name.as_str().to_owned(),
                    value: value.to_str().ok()?.to_owned(),
                    ..Default::default()
                })
            })
            .collect()
    }
}

/// Marks `status` over its limit unless `limit` is shadow; whether that makes the whole
/// answer OVER_LIMIT (not for shadow or quota descriptors).
fn over(status: &mut DescriptorStatus, limit: &DescriptorLimit) -> bool {
    if !limit.shadow {
        status.code = Code::OverLimit as i32;
    }
    enforced(limit)
}

/// The position in `shown` of the one with the least remaining in its binding tier.
fn least_remaining(shown: &[(&Rule, &Verdict)]) -> usize {
    shown
        .iter()
        .enumerate()
        .min_by_key(|(i, (_, v))| (v.binding_tier().remaining, *i))
        .map_or(0, |(i, _)| i)
}

fn ok_status() -> DescriptorStatus {
    DescriptorStatus {
        code: Code::Ok as i32,
        ..Default::default()
    }
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
