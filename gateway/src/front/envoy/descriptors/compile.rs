//! A descriptor's `rate_limit` turned into its [`DescriptorLimit`]: the fields checked
//! for what goes together, then the limit compiled by the one limit compiler
//! ([`crate::rules::limit`]), as a TOML rule's is.

use super::names::rule_name;
use super::schema::{DescriptorDoc, RateLimitDoc};
use super::{DescriptorLimit, FailMode, OverrideMode, Unit};
use crate::rules::limit::{check_policy_name, compile, tier};
use crate::rules::{KeySource, Limit, OnFailure, RedisFailure, Rule};
use std::sync::Arc;

/// The settings a descriptor inherits from those above it.
#[derive(Clone)]
pub(super) struct Inherited<'a> {
    pub(super) on_failure: FailMode,
    pub(super) on_module_error: FailMode,
    pub(super) limit_override: OverrideMode,
    pub(super) subject: Option<&'a str>,
    /// `domain.key_value.key...`, the metric name of a node (envoyproxy/ratelimit's).
    pub(super) stat: String,
    /// Where in the file, for errors: `descriptors[0].descriptors[2]`.
    pub(super) at: String,
    /// How many levels are above.
    pub(super) depth: usize,
}

pub(super) fn descriptor_limit(
    doc: &DescriptorDoc,
    rate_limit: &RateLimitDoc,
    here: &Inherited<'_>,
) -> Result<DescriptorLimit, String> {
    let at = format!("{}.rate_limit", here.at);
    let (unit, requests_per_unit) = unit_and_count(rate_limit, &at)?;
    let replaces = replaces(rate_limit, &at)?;
    let blocked =
        !rate_limit.unlimited && requests_per_unit == Some(0) && rate_limit.policy.is_none();
    let limit = if rate_limit.unlimited || blocked {
        Limit::Unlimited
    } else {
        limit(rate_limit, unit.zip(requests_per_unit), &at)?
    };
    let limit = compile(limit).map_err(|e| format!("{at}: {e}"))?;
    let name = rule_name(rate_limit.name.as_deref().unwrap_or(&here.stat));
    let shadow = doc.shadow_mode || doc.quota_mode;
    let on_failure = on_failure(shadow, here);
    Ok(DescriptorLimit {
        rule: Arc::new(rule(name, limit, shadow, on_failure)),
        name: rate_limit.name.clone(),
        replaces,
        shown: requests_per_unit.zip(unit),
        unlimited: rate_limit.unlimited,
        blocked,
        shadow: doc.shadow_mode,
        quota: doc.quota_mode && !doc.shadow_mode,
        detailed_metric: doc.detailed_metric,
        on_failure: here.on_failure,
        on_module_error: here.on_module_error,
        limit_override: here.limit_override,
        subject: here.subject.map(str::to_owned),
        metadata: None,
    })
}

fn rule(name: String, limit: Limit, shadow: bool, on_failure: OnFailure) -> Rule {
    let mut rule = Rule::new(
        name,
        Vec::new(),
        None,
        KeySource::Global,
        false,
        limit,
        crate::rules::Counting::All,
        shadow,
        on_failure,
    );
    // Descriptors of one request may be keyed by different subjects: in a cluster, charged
    // one after the other and given back after the fact.
    rule.stacks_across_subjects = true;
    rule
}

/// `unit` and `requests_per_unit`, read and checked for what goes with them: nothing with
/// `unlimited: true`, both or neither with a policy, both otherwise.
fn unit_and_count(
    rate_limit: &RateLimitDoc,
    at: &str,
) -> Result<(Option<Unit>, Option<u32>), String> {
    let unit = match &rate_limit.unit {
        Some(text) => Some(Unit::parse(text).ok_or_else(|| {
            format!("{at}.unit: '{text}' is not second, minute, hour, day, week, month or year")
        })?),
        None => None,
    };
    let requests_per_unit = match rate_limit.requests_per_unit {
        Some(n) => Some(
            u32::try_from(n)
                .map_err(|_| format!("{at}.requests_per_unit: {n} is more than {}", u32::MAX))?,
        ),
        None => None,
    };
    let extensions = rate_limit.algorithm.is_some()
        || rate_limit.burst.is_some()
        || !rate_limit.tiers.is_empty()
        || rate_limit.policy.is_some()
        || rate_limit.tz.is_some()
        || rate_limit.anchor.is_some();
    if rate_limit.unlimited {
        // envoyproxy/ratelimit refuses a unit beside `unlimited` and ignores a
        // requests_per_unit: so do we.
        if unit.is_some() || extensions {
            return Err(format!(
                "{at}: should not specify rate limit unit when unlimited (unlimited: true \
                 takes no unit, algorithm, burst, tiers, policy, tz or anchor): remove them \
                 or unlimited"
            ));
        }
    } else if rate_limit.policy.is_some() {
        if rate_limit.algorithm.is_some()
            || rate_limit.burst.is_some()
            || !rate_limit.tiers.is_empty()
            || rate_limit.tz.is_some()
            || rate_limit.anchor.is_some()
        {
            return Err(format!(
                "{at}: algorithm, burst, tiers, tz and anchor belong to the policy, not to a limit naming one"
            ));
        }
        if unit.is_some() != requests_per_unit.is_some() {
            return Err(format!(
                "{at}: with a policy, unit and requests_per_unit only say what current_limit shows: give both or neither"
            ));
        }
    } else {
        if unit.is_none() {
            return Err(format!("{at}.unit: missing"));
        }
        if requests_per_unit.is_none() {
            return Err(format!("{at}.requests_per_unit: missing"));
        }
    }
    Ok((unit, requests_per_unit))
}

/// The names in `replaces`, each present and none the limit's own `name` (which would
/// make a limit that never applies), as envoyproxy/ratelimit requires.
fn replaces(rate_limit: &RateLimitDoc, at: &str) -> Result<Vec<String>, String> {
    rate_limit
        .replaces
        .iter()
        .enumerate()
        .map(|(i, r)| match r.name.as_deref() {
            None | Some("") => Err(format!(
                "{at}.replaces[{i}].name: missing or empty (should not have an empty \
                 replaces entry): name the limit this one replaces"
            )),
            Some(name) if rate_limit.name.as_deref() == Some(name) => Err(format!(
                "{at}.replaces[{i}].name: '{name}' is this limit's own name (replaces should \
                 not contain name of same descriptor): name another limit"
            )),
            Some(name) => Ok(name.to_owned()),
        })
        .collect()
}

/// The limit a `rate_limit` says (neither unlimited nor blocked), before it is compiled:
/// a policy, or the tier of `shown` and the `tiers` after it.
fn limit(rate_limit: &RateLimitDoc, shown: Option<(Unit, u32)>, at: &str) -> Result<Limit, String> {
    if let Some(policy) = &rate_limit.policy {
        check_policy_name(policy).map_err(|e| format!("{at}.policy: {e}"))?;
        return Ok(Limit::Policy {
            name: policy.clone(),
            cost: 1,
        });
    }
    let Some((unit, requests_per_unit)) = shown else {
        return Err(format!("{at}: needs unit and requests_per_unit"));
    };
    let mut tiers = vec![unit.tier(requests_per_unit, rate_limit.tz.is_some())];
    for (i, text) in rate_limit.tiers.iter().enumerate() {
        tiers.push(tier(text).map_err(|e| format!("{at}.tiers[{i}]: {e}"))?);
    }
    Ok(Limit::Tiers {
        tiers,
        algorithm: rate_limit.algorithm.clone(),
        burst: rate_limit.burst,
        tz: rate_limit.tz.clone(),
        anchor: rate_limit.anchor,
        cost: 1,
    })
}

/// What a failure means to the decider for this descriptor.
fn on_failure(shadow: bool, here: &Inherited<'_>) -> OnFailure {
    // A shadow or quota descriptor never refuses the request, so it never closes the
    // decision either: its failure is reported in its own status only.
    if shadow {
        OnFailure {
            redis: RedisFailure::Open,
            error_closed: false,
        }
    } else {
        OnFailure {
            redis: match here.on_failure {
                FailMode::Ok => RedisFailure::Open,
                FailMode::Local => RedisFailure::Local,
                FailMode::OverLimit | FailMode::Unavailable => RedisFailure::Closed,
            },
            error_closed: here.on_module_error != FailMode::Ok,
        }
    }
}
