//! The plan (pure): a `ShouldRateLimit` request, checked against its bounds and matched
//! against the descriptors, becomes what to ask the decider: per descriptor, the keys to
//! charge, look at or refund, with their rules and units, and what is known already
//! (unlimited, blocked, no match). Nothing here talks to Redis or to the metrics: what is
//! to be counted is listed in [`Plan::events`].

use super::descriptors::{self, DescriptorLimit, Domains, Found, OverrideMode, Unit};
use super::{MAX_DESCRIPTORS, MAX_DOMAIN_BYTES, MAX_ENTRIES};
use super::{MAX_ENTRY_KEY_BYTES, MAX_ENTRY_VALUE_BYTES};
use crate::failure::Failure;
use crate::metrics::{EnvoyResult, HitCounts, Outcome};
use crate::rules::Rule;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use smallvec::SmallVec;
use std::sync::Arc;

/// One thing to count in the metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Event {
    Envoy(EnvoyResult),
    /// A decision on the limit of this metric name.
    Decision(String, Outcome),
    /// A failure that let a request through (or decided it locally).
    FailOpen(Failure),
    /// The hits of one descriptor, split as envoyproxy/ratelimit's statistics split them,
    /// under the limit's metric name.
    Hits(String, HitCounts),
}

/// What is known of a descriptor before anything is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Known {
    /// Nothing yet: asked about, or no limit applies.
    Nothing,
    /// `unlimited: true`.
    Unlimited,
    /// `requests_per_unit: 0`, or an override of 0; with the limit to show.
    Blocked(Option<(u32, Unit)>),
}

/// What one request descriptor asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ask {
    Charge,
    Peek,
    Refund,
}

/// One key that a request descriptor asks about.
#[derive(Debug)]
pub(super) struct Matched<'a> {
    /// Its descriptor's index in the request.
    pub(crate) index: usize,
    pub(crate) limit: &'a Arc<DescriptorLimit>,
    pub(crate) rule: Arc<Rule>,
    /// The Redis key.
    pub(crate) key: String,
    /// The units it counts (`hits_addend`; 1 for a look).
    pub(crate) cost: u64,
    /// The request's own limit, when this charges it (under `replace`, in the node's key;
    /// under `tighten`, in a key of its own beside the node's, which another `Matched` of
    /// the same index charges).
    pub(crate) overriding: Option<(u32, Unit)>,
    pub(crate) ask: Ask,
    pub(crate) metric: String,
}

impl Matched<'_> {
    /// The limit `current_limit` shows.
    pub(crate) fn shown(&self) -> Option<(u32, Unit)> {
        self.overriding.or(self.limit.shown)
    }
}

/// What to ask for one request whose domain is known.
#[derive(Debug)]
pub(super) struct Plan<'a> {
    /// How many descriptors the request has.
    pub(crate) count: usize,
    /// The matched limit of each descriptor that has one (replaced ones too).
    pub(crate) found: SmallVec<[(usize, &'a Arc<DescriptorLimit>); 4]>,
    /// What is known of each descriptor without asking.
    pub(crate) known: SmallVec<[Known; 4]>,
    /// The metric name of each applied descriptor's limit (as `detailed_metric` and
    /// `value_to_metric` make it), by descriptor.
    pub(crate) metric_names: SmallVec<[Option<String>; 4]>,
    /// The keys to ask about, in descriptor order.
    pub(crate) matched: SmallVec<[Matched<'a>; 4]>,
    /// What to count in the metrics.
    pub(crate) events: Vec<Event>,
}

impl<'a> Plan<'a> {
    /// The limit matched by descriptor `index`, if any.
    pub(crate) fn limit_of(&self, index: usize) -> Option<&Arc<DescriptorLimit>> {
        self.found
            .iter()
            .find(|(i, _)| *i == index)
            .map(|(_, limit)| *limit)
    }

    /// The limit that applies to descriptor `index`: its match, unless another matched
    /// limit `replaces` it.
    pub(crate) fn applied(&self, index: usize) -> Option<&'a Arc<DescriptorLimit>> {
        let (_, limit) = self.found.iter().find(|(i, _)| *i == index)?;
        let replaced = limit.name.as_ref().is_some_and(|name| {
            self.found
                .iter()
                .any(|(_, other)| other.replaces.iter().any(|r| r == name))
        });
        (!replaced).then_some(*limit)
    }

    /// Whether an enforced descriptor is blocked (`requests_per_unit` 0), which refuses
    /// the request as a whole: nothing is charged. `quota_mode`: `[envoy] quota_mode`.
    pub(crate) fn blocks(&self, quota_mode: bool) -> bool {
        self.found.iter().any(|(i, limit)| {
            matches!(self.known[*i], Known::Blocked(_)) && enforced(limit, quota_mode)
        })
    }
}

/// A request answered without asking anything.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Early {
    /// Out of bounds: INVALID_ARGUMENT.
    Invalid(RequestError),
    /// A domain no file defines: every descriptor OK.
    UnknownDomain,
}

/// The plan for `request` under `domains`, keys written under `key_prefix`.
pub(super) fn plan<'a>(
    domains: &'a Domains,
    request: &RateLimitRequest,
    key_prefix: &str,
) -> Result<Plan<'a>, Early> {
    check(request).map_err(Early::Invalid)?;
    let domain = domains.get(&request.domain).ok_or(Early::UnknownDomain)?;
    let count = request.descriptors.len();
    let mut plan = Plan {
        count,
        found: SmallVec::new(),
        known: (0..count).map(|_| Known::Nothing).collect(),
        metric_names: (0..count).map(|_| None).collect(),
        matched: SmallVec::new(),
        events: Vec::new(),
    };
    let mut matches = SmallVec::<[Found<'a>; 4]>::new();
    for (i, d) in request.descriptors.iter().enumerate() {
        match domain.find(entries(d)) {
            Some(found) => {
                plan.found.push((i, found.limit()));
                matches.push(found);
            }
            None => plan.events.push(Event::Envoy(EnvoyResult::NoMatch)),
        }
    }
    for (at, found) in matches.iter().enumerate() {
        let (i, _) = plan.found[at];
        // `replaces`: a matched limit that another matched limit replaces is not applied.
        if plan.applied(i).is_some() {
            plan_descriptor(&mut plan, request, key_prefix, i, found);
        }
    }
    Ok(plan)
}

/// Adds what descriptor `i`, matched as `found`, asks for.
fn plan_descriptor<'a>(
    plan: &mut Plan<'a>,
    request: &RateLimitRequest,
    key_prefix: &str,
    i: usize,
    found: &Found<'a>,
) {
    let d = &request.descriptors[i];
    let limit = found.limit();
    let asked = d
        .limit
        .and_then(|o| Unit::from_proto(o.unit).map(|u| (o.requests_per_unit, u)));
    let metric = match asked.is_some() && limit.limit_override != OverrideMode::Ignore {
        true => descriptors::request_metric_name(&request.domain, entries(d)),
        false => descriptors::metric_name(found, &request.domain, entries(d)),
    };
    plan.metric_names[i] = Some(metric.clone());
    if limit.unlimited {
        plan.known[i] = Known::Unlimited;
        return;
    }
    let blocked = match (asked, limit.limit_override) {
        (None, _) | (Some(_), OverrideMode::Ignore) => limit.blocked.then_some(limit.shown),
        (Some((n, u)), OverrideMode::Replace) => (n == 0).then_some(Some((n, u))),
        (Some((n, u)), OverrideMode::Tighten) if n == 0 => Some(Some((n, u))),
        (Some(_), OverrideMode::Tighten) => limit.blocked.then_some(limit.shown),
    };
    if let Some(shown) = blocked {
        plan.known[i] = Known::Blocked(shown);
        plan.events.push(Event::Decision(metric, Outcome::Denied));
        return;
    }
    let hits = hits_of(request, i);
    let ask = if hits == 0 {
        Ask::Peek
    } else if d.is_negative_hits {
        Ask::Refund
    } else {
        Ask::Charge
    };
    let mut charge = |rule: Arc<Rule>, overriding: Option<(u32, Unit)>, own_key: bool| {
        let key = descriptors::key(
            key_prefix,
            &request.domain,
            limit.subject.as_deref(),
            found.key_entries(entries(d)),
            overriding.filter(|_| own_key),
        );
        plan.matched.push(Matched {
            index: i,
            limit,
            rule,
            key,
            cost: if ask == Ask::Peek { 1 } else { hits },
            overriding,
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
            charge(limit.rule.clone(), None, false);
            if asked.is_some() {
                plan.events.push(Event::Envoy(EnvoyResult::OverrideIgnored));
            }
        }
    }
}

/// A descriptor's entries as (key, value) pairs.
fn entries(d: &RateLimitDescriptor) -> impl Iterator<Item = (&str, &str)> + Clone + '_ {
    d.entries.iter().map(|e| (e.key.as_str(), e.value.as_str()))
}

/// A limit that makes the whole answer OVER_LIMIT on its own: neither shadow nor quota
/// (`quota_mode`: `[envoy] quota_mode`, which makes every descriptor a quota one).
pub(super) fn enforced(limit: &DescriptorLimit, quota_mode: bool) -> bool {
    !limit.shadow && !quota(limit, quota_mode)
}

/// A quota descriptor: over its limit, it makes the answer OVER_LIMIT only when every
/// quota descriptor of the request is over too.
pub(super) fn quota(limit: &DescriptorLimit, quota_mode: bool) -> bool {
    !limit.shadow && (limit.quota || quota_mode)
}

/// The units descriptor `index` counts: its own `hits_addend`, else the request's (whose
/// 0 is protobuf's "unset": 1).
pub(super) fn hits_of(request: &RateLimitRequest, index: usize) -> u64 {
    match &request.descriptors[index].hits_addend {
        Some(h) => h.value,
        None if request.hits_addend == 0 => 1,
        None => u64::from(request.hits_addend),
    }
}

/// Why a request is out of bounds (answered INVALID_ARGUMENT with this message).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RequestError {
    EmptyDomain,
    LongDomain,
    NoDescriptors,
    /// This many descriptors.
    TooManyDescriptors(usize),
    /// Descriptor `i` has no entries.
    NoEntries(usize),
    /// Descriptor `i` has this many entries.
    TooManyEntries(usize, usize),
    /// Descriptor `i`, entry `j`: its key is empty or too long.
    EntryKey(usize, usize),
    /// Descriptor `i`, entry `j`: its value is too long.
    EntryValue(usize, usize),
    /// Descriptor `i`'s `hits_addend` is above `u32::MAX`.
    HitsAddend(usize, u64),
    /// Descriptor `i`'s own limit has a unit Envoy does not define.
    OverrideUnit(usize),
}

impl std::fmt::Display for RequestError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RequestError::EmptyDomain => write!(f, "the domain is empty"),
            RequestError::LongDomain => {
                write!(f, "the domain is longer than {MAX_DOMAIN_BYTES} bytes")
            }
            RequestError::NoDescriptors => write!(f, "no descriptors"),
            RequestError::TooManyDescriptors(n) => {
                write!(f, "{n} descriptors: at most {MAX_DESCRIPTORS}")
            }
            RequestError::NoEntries(i) => write!(f, "descriptor {i} has no entries"),
            RequestError::TooManyEntries(i, n) => {
                write!(f, "descriptor {i} has {n} entries: at most {MAX_ENTRIES}")
            }
            RequestError::EntryKey(i, j) => write!(
                f,
                "descriptor {i} entry {j}: the key must be 1 to {MAX_ENTRY_KEY_BYTES} bytes"
            ),
            RequestError::EntryValue(i, j) => write!(
                f,
                "descriptor {i} entry {j}: the value is longer than {MAX_ENTRY_VALUE_BYTES} bytes"
            ),
            RequestError::HitsAddend(i, n) => write!(
                f,
                "descriptor {i}: hits_addend {n} is more than {}",
                u32::MAX
            ),
            RequestError::OverrideUnit(i) => write!(
                f,
                "descriptor {i}: the limit's unit must be SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR"
            ),
        }
    }
}

impl std::error::Error for RequestError {}

/// The bounds of a request, each refusal naming what is wrong.
pub(crate) fn check(request: &RateLimitRequest) -> Result<(), RequestError> {
    if request.domain.is_empty() {
        return Err(RequestError::EmptyDomain);
    }
    if request.domain.len() > MAX_DOMAIN_BYTES {
        return Err(RequestError::LongDomain);
    }
    if request.descriptors.is_empty() {
        return Err(RequestError::NoDescriptors);
    }
    if request.descriptors.len() > MAX_DESCRIPTORS {
        return Err(RequestError::TooManyDescriptors(request.descriptors.len()));
    }
    for (i, d) in request.descriptors.iter().enumerate() {
        check_descriptor(i, d)?;
    }
    Ok(())
}

fn check_descriptor(i: usize, d: &RateLimitDescriptor) -> Result<(), RequestError> {
    if d.entries.is_empty() {
        return Err(RequestError::NoEntries(i));
    }
    if d.entries.len() > MAX_ENTRIES {
        return Err(RequestError::TooManyEntries(i, d.entries.len()));
    }
    for (j, e) in d.entries.iter().enumerate() {
        if e.key.is_empty() || e.key.len() > MAX_ENTRY_KEY_BYTES {
            return Err(RequestError::EntryKey(i, j));
        }
        if e.value.len() > MAX_ENTRY_VALUE_BYTES {
            return Err(RequestError::EntryValue(i, j));
        }
    }
    if let Some(h) = &d.hits_addend {
        if h.value > u64::from(u32::MAX) {
            return Err(RequestError::HitsAddend(i, h.value));
        }
    }
    if let Some(o) = &d.limit {
        if Unit::from_proto(o.unit).is_none() {
            return Err(RequestError::OverrideUnit(i));
        }
    }
    Ok(())
}
