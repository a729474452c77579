//! The answer (pure): what the decider replied for each key of a [`Plan`] becomes the
//! `ShouldRateLimit` response: per descriptor a status (its code, the limit it shows,
//! what is left and when it resets), the overall code, and the RateLimit header fields;
//! or gRPC UNAVAILABLE when a descriptor says so; with `[envoy]`'s settings, the global
//! shadow and quota modes, envoyproxy/ratelimit's headers and dynamic metadata. Nothing
//! here talks to Redis or to the metrics: what is to be counted is returned in
//! [`Answer::events`].
//!
//! A status that was not decided (another descriptor was over first, or Redis could not
//! answer) shows no `current_limit`: its `limit_remaining` would say 0 of a limit nobody
//! counted, and Envoy builds `X-RateLimit-Remaining` from the least one shown.

use super::descriptors::{DescriptorLimit, FailMode, Unit};
use super::plan::{enforced, hits_of, quota, Ask, Event, Known, Plan};
use super::settings::AnswerSettings;
use super::{hits, metadata};

mod finish;
use crate::decider::RuleOutcome;
use crate::failure::Failure;
use crate::metrics::{EnvoyResult, Outcome};
use crate::verdict::Verdict;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as ProtoDuration;
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
pub(super) fn unknown_domain(request: &RateLimitRequest, settings: &AnswerSettings) -> Answer {
    let count = request.descriptors.len();
    let dynamic_metadata = settings
        .response_dynamic_metadata
        .then(|| metadata::dynamic_metadata(request, std::iter::empty()));
    Answer {
        result: Ok(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: (0..count).map(|_| ok_status()).collect(),
            dynamic_metadata,
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
/// failed closed; or every quota descriptor over already (blocked, or over by a look).
pub(super) fn refused_before_charging(
    plan: &Plan<'_>,
    replies: &[Reply],
    settings: &AnswerSettings,
) -> bool {
    let quota_mode = settings.quota_mode;
    plan.blocks(quota_mode)
        || plan
            .matched
            .iter()
            .zip(replies)
            .any(|(m, reply)| match reply {
                Reply::Looked(Ok(Some(verdict))) => {
                    m.ask == Ask::Peek && !verdict.allowed() && enforced(m.limit, quota_mode)
                }
                Reply::Looked(Err(failure)) => {
                    enforced(m.limit, quota_mode) && m.limit.mode_for(*failure).refuses()
                }
                _ => false,
            })
        || quota_all_over(plan, replies, settings)
}

/// Whether the request has quota descriptors and every one of them is over its limit (as
/// its status will say: blocked, over by a look or a charge, or failed with a mode that
/// refuses), which makes the answer OVER_LIMIT.
pub(super) fn quota_all_over(
    plan: &Plan<'_>,
    replies: &[Reply],
    settings: &AnswerSettings,
) -> bool {
    let settled = settle_all(plan, replies, &mut Vec::new());
    let mut quotas = 0;
    for i in 0..plan.count {
        let Some(limit) = plan.applied(i) else {
            continue;
        };
        if !quota(limit, settings.quota_mode) || plan.known[i] == Known::Unlimited {
            continue;
        }
        quotas += 1;
        let ask = settled.source[i].map(|at| plan.matched[at].ask);
        if !quota_over(&settled.said[i], ask, limit) {
            return false;
        }
    }
    quotas > 0
}

/// Whether a quota descriptor that said `said` (to a key asked as `ask`) is over: the code
/// its status shows.
fn quota_over(said: &Said, ask: Option<Ask>, limit: &DescriptorLimit) -> bool {
    match said {
        Said::Blocked(_) | Said::Over => true,
        // A look over its limit: no more fits (what one more hit would do is a denial).
        Said::Verdict(v) => ask != Some(Ask::Refund) && !v.allowed(),
        Said::Failed(failure) => limit.mode_for(*failure).refuses(),
        Said::Free | Said::Unlimited | Said::NotAsked => false,
    }
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

/// The response to `request`, planned as `plan`, given `replies`, written as `settings`
/// say.
pub(super) fn answer(
    request: &RateLimitRequest,
    plan: &Plan<'_>,
    replies: &Replies,
    settings: &AnswerSettings,
) -> Answer {
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
        settings,
        closed: replies.closed,
        overall_over: false,
        unavailable: false,
        shown: SmallVec::new(),
        binding: None,
        events,
    };
    let statuses = (0..plan.count).map(|i| answering.status(i)).collect();
    answering.count_hits(request, &replies.replies);
    answering.finish(request, statuses)
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
    settings: &'p AnswerSettings,
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
    /// Whether `limit` can make the answer OVER_LIMIT on its own.
    fn enforced(&self, limit: &DescriptorLimit) -> bool {
        enforced(limit, self.settings.quota_mode)
    }

    /// Descriptor `i`'s status.
    fn status(&mut self, i: usize) -> DescriptorStatus {
        let mut status = ok_status();
        let m = self.settled.source[i].map(|at| &self.plan.matched[at]);
        match (&self.settled.said[i], m) {
            (Said::Free, _) => {}
            (Said::Unlimited, _) => {
                status.limit_remaining = u32::MAX;
                if let Some(name) = self.plan.metric_names[i].clone() {
                    self.events.push(Event::Decision(name, Outcome::Allowed));
                }
            }
            (Said::Blocked(shown), _) => {
                if let Some(limit) = self.plan.limit_of(i) {
                    let (n, unit) = shown.unwrap_or((0, Unit::Second));
                    status.current_limit = Some(current(limit.name.as_deref(), n, Some(unit)));
                    status.duration_until_reset = Some(duration(unit.window_ms()));
                    self.over(&mut status, limit);
                }
            }
            (Said::Verdict(verdict), Some(m)) => self.verdict(&mut status, i, m, verdict),
            (Said::Over, Some(m)) => {
                // Over its limit by a count, without a verdict: none is left.
                status.current_limit = m.shown().map(|(n, u)| current(shown_name(m), n, Some(u)));
                self.over(&mut status, m.limit);
                self.events
                    .push(Event::Decision(m.metric.clone(), Outcome::ShadowDenied));
            }
            // Not decided: nothing is known of its count, so no limit is shown (its
            // remaining would read 0).
            (Said::NotAsked, _) => {}
            (Said::Failed(failure), Some(m)) => {
                self.failed(&mut status, i, m.limit, &m.metric, *failure);
            }
            (_, None) => {}
        }
        status
    }

    /// The status of descriptor `i` decided by `verdict` (of its key `m`).
    fn verdict(
        &mut self,
        status: &mut DescriptorStatus,
        i: usize,
        m: &super::plan::Matched<'_>,
        verdict: &Verdict,
    ) {
        let tier = verdict.binding_tier();
        status.current_limit = Some(match m.shown() {
            Some((n, unit)) => current(shown_name(m), n, Some(unit)),
            None => current(shown_name(m), clamp(tier.limit), None),
        });
        status.limit_remaining = clamp(tier.remaining);
        status.duration_until_reset = Some(duration(tier.reset_after_ms));
        let denied = m.ask != Ask::Refund && !verdict.allowed();
        if denied {
            self.over(status, m.limit);
        }
        if m.ask == Ask::Charge && verdict.allowed() && !self.settled.locally[i] {
            self.events
                .push(Event::Decision(m.metric.clone(), Outcome::Allowed));
        }
        if self.enforced(m.limit) {
            if denied && self.binding.is_none() {
                self.binding = Some(self.shown.len());
            }
            self.shown.push(i);
        }
    }

    /// Marks `status` over its limit unless `limit` is shadow; an enforced one makes the
    /// whole answer OVER_LIMIT (a quota one only with every other quota one).
    fn over(&mut self, status: &mut DescriptorStatus, limit: &DescriptorLimit) {
        if !limit.shadow {
            status.code = Code::OverLimit as i32;
        }
        self.overall_over |= self.enforced(limit);
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
        let enforced = self.enforced(limit);
        let failed_closed = enforced && (mode.refuses() || self.closed == Some(i));
        if failed_closed {
            self.events
                .push(Event::Decision(metric.to_owned(), Outcome::FailClosed));
        } else {
            self.events.push(Event::FailOpen(failure));
            self.events
                .push(Event::Decision(metric.to_owned(), Outcome::FailOpen));
        }
        // A shadow descriptor never denies; a quota one reports its failure in its own
        // code; an enforced one answers as its mode says.
        if quota(limit, self.settings.quota_mode) && mode.refuses() {
            status.code = Code::OverLimit as i32;
        } else if enforced {
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

    /// Counts each limited descriptor's hits, split as envoyproxy/ratelimit's statistics
    /// split them. Looks count no hits; refunds are not hits.
    fn count_hits(&mut self, request: &RateLimitRequest, replies: &[Reply]) {
        let ratio = self.settings.near_limit_ratio;
        for (i, d) in request.descriptors.iter().enumerate() {
            let Some(limit) = self.plan.applied(i) else {
                continue;
            };
            let cost = hits_of(request, i);
            if limit.unlimited || d.is_negative_hits || cost == 0 {
                continue;
            }
            let counts = match self.plan.known[i] {
                Known::Blocked(_) => hits::split(0, 0, cost, ratio, limit.shadow),
                _ => {
                    let outcome = self.settled.source[i].and_then(|at| match &replies[at] {
                        Reply::Charged(outcome) => Some(outcome),
                        _ => None,
                    });
                    hits::of_outcome(outcome, limit, cost, ratio)
                }
            };
            if let Some(metric) = &self.plan.metric_names[i] {
                self.events.push(Event::Hits(metric.clone(), counts));
            }
        }
    }
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

/// The name `current_limit` shows for key `m`, as envoyproxy/ratelimit shows it: the
/// limit's `name`, none for a limit without one or for the request's own limit.
fn shown_name<'m>(m: &'m super::plan::Matched<'_>) -> Option<&'m str> {
    match m.overriding {
        Some(_) => None,
        None => m.limit.name.as_deref(),
    }
}

fn current(name: Option<&str>, requests_per_unit: u32, unit: Option<Unit>) -> RateLimit {
    RateLimit {
        name: name.unwrap_or_default().to_owned(),
        requests_per_unit,
        unit: unit.map_or(0, Unit::proto),
    }
}
