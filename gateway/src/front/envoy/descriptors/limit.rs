//! The limit of one configured descriptor node, and the rule a request's own limit
//! (Envoy's override) makes of it.

use super::{FailMode, OverrideMode, Unit};
use crate::failure::Failure;
use crate::rules::limit::compile;
use crate::rules::{call_args, Limit, Rule};
use ratelimit_core::calendar::Period;
use std::sync::Arc;

/// The limit of one configured descriptor node.
#[derive(Debug)]
pub struct DescriptorLimit {
    /// The rule the decider charges: the node's tiers, algorithm, burst or policy.
    pub(crate) rule: Arc<Rule>,
    /// `rate_limit.name`, which `replaces` of another limit names.
    pub(crate) name: Option<String>,
    pub(crate) replaces: Vec<String>,
    /// The configured limit as Envoy's `current_limit` shows it (`None` for a policy
    /// without `unit` and `requests_per_unit`).
    pub(crate) shown: Option<(u32, Unit)>,
    /// `unlimited: true`: OK without asking Redis.
    pub(crate) unlimited: bool,
    /// `requests_per_unit: 0`: every request is over the limit, without asking Redis.
    pub(crate) blocked: bool,
    /// Reports OK whatever the count says (and counts nothing it would deny).
    pub(crate) shadow: bool,
    /// Reports its own code, OVER_LIMIT included, without making the whole answer
    /// OVER_LIMIT.
    pub(crate) quota: bool,
    /// `detailed_metric`: the metric name shows the request's values (see
    /// [`super::metric_name`]).
    pub(crate) detailed_metric: bool,
    /// What Redis being unreachable, too slow or unable to take the call means.
    pub(crate) on_failure: FailMode,
    /// What an error reply of the module (a policy that does not exist) means: by default
    /// OVER_LIMIT, as an HTTP rule's `on_module_error` is closed by default, so that a
    /// misconfiguration does not silently become "no limit".
    pub(crate) on_module_error: FailMode,
    pub(crate) limit_override: OverrideMode,
    /// The entry key whose `key=value` is the hash tag; `None`: the first entry.
    pub(crate) subject: Option<String>,
    /// The node's `metadata` (envoyproxy/ratelimit's): returned in the response's dynamic
    /// metadata, merged over the descriptors that passed, when `[envoy]
    /// response_dynamic_metadata` is on.
    pub(crate) metadata: Option<envoy_types::pb::google::protobuf::Struct>,
}

impl DescriptorLimit {
    /// The mode that `failure` leaves this descriptor to.
    pub(crate) fn mode_for(&self, failure: Failure) -> FailMode {
        match failure {
            Failure::Error => self.on_module_error,
            Failure::Timeout | Failure::Connection | Failure::Unavailable | Failure::Breaker => {
                self.on_failure
            }
        }
    }

    /// The rule of a request descriptor's own `limit` of `requests_per_unit` per `unit`:
    /// that one tier, with this node's algorithm and burst (none for a calendar unit, which
    /// counts as a fixed window) and zone. `None` when this node ignores overrides, or when
    /// the module would refuse the call (a burst above a tighter limit, say).
    ///
    /// Under `tighten` it is charged in a key of its own, beside the node's key (see
    /// [`key`]); under `replace` it is charged in the node's key instead of the node's rule,
    /// and then a denial says nothing of requests that bring another limit or none: it is
    /// kept out of the deny cache.
    pub fn overridden(&self, requests_per_unit: u32, unit: Unit) -> Option<Arc<Rule>> {
        let (algorithm, burst, tz, anchor) = match &self.rule.limit {
            Limit::Tiers {
                algorithm,
                burst,
                tz,
                anchor,
                ..
            } => (algorithm.clone(), *burst, tz.clone(), *anchor),
            _ => (None, None, None, None),
        };
        let tier = unit.tier(requests_per_unit, tz.is_some());
        let calendar = tier.period.is_some();
        let month = tier.period == Some(Period::Month);
        let limit = Limit::Tiers {
            tiers: vec![tier],
            algorithm: algorithm.filter(|_| !calendar),
            burst: burst.filter(|_| !calendar),
            tz: tz.filter(|_| calendar),
            anchor: anchor.filter(|_| month),
            cost: 1,
        };
        if self.limit_override == OverrideMode::Ignore {
            return None;
        }
        let limit = compile(limit).ok()?;
        let args = call_args(&limit);
        let mut overridden = self.rule.as_ref().clone();
        overridden.limit = limit;
        overridden.call_args = args;
        overridden.deny_cache = self.limit_override != OverrideMode::Replace;
        Some(Arc::new(overridden))
    }
}
