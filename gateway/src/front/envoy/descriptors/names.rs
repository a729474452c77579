//! The names of a descriptor's limit (for metrics and `current_limit`) and the Redis key
//! of a request descriptor.

use super::matching::{Found, Via};
use super::Unit;
use crate::rules::MAX_RULE_NAME_BYTES;
use sha2::{Digest, Sha256};
use std::fmt::Write;

/// A name for metrics and the RateLimit fields: letters, digits, `_`, `.` and `-` (other
/// bytes become `_`), at most [`MAX_RULE_NAME_BYTES`] (a longer one keeps its start and a
/// hash of the whole).
pub(crate) fn rule_name(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if clean.len() <= MAX_RULE_NAME_BYTES {
        return clean;
    }
    let mut name: String = clean.chars().take(MAX_RULE_NAME_BYTES - 9).collect();
    name.push('~');
    for b in &Sha256::digest(text.as_bytes())[..4] {
        let _ = write!(name, "{b:02x}");
    }
    name
}

/// The metric name of a match, envoyproxy/ratelimit's stats key made a [`rule_name`]:
/// the node's rule name (its `rate_limit.name`, else the path of keys and configured
/// values, `domain.key_value.key`), unless the request's values are to be shown:
///
/// - `detailed_metric` on the matched node: every entry as `key_value`, with the request's
///   values (a `share_threshold` entry's pattern instead, when there is one);
/// - else `value_to_metric` on a node the request matched as any value or by a pattern
///   (not a `share_threshold` one): that entry's request value in place of the configured
///   one, the other entries as configured.
///
/// A limit with a `name` is always named by it. Each value shown makes a metric label of
/// its own: as many as the values requests bring.
pub(crate) fn metric_name<'e>(
    found: &Found<'_>,
    domain: &str,
    entries: impl Iterator<Item = (&'e str, &'e str)> + Clone,
) -> String {
    let limit = found.limit;
    let detailed = limit.detailed_metric;
    let shows_request = |(via, (_, value)): (&Via<'_>, (&str, &str))| match via {
        Via::Pattern {
            share_threshold: false,
            value_to_metric: true,
            ..
        } => true,
        Via::Any {
            value_to_metric: true,
        } => !value.is_empty(),
        _ => false,
    };
    if limit.name.is_some()
        || !(detailed || found.via.iter().zip(entries.clone()).any(shows_request))
    {
        return limit.rule.name.clone();
    }
    let shares = found.shares();
    let mut name = String::from(domain);
    for ((key, value), via) in entries.zip(found.via.iter()) {
        let shown = match *via {
            _ if detailed && !shares => Some(value),
            _ if detailed => via.shared().or(Some(value)).filter(|v| !v.is_empty()),
            Via::Exact => Some(value),
            Via::Pattern {
                pattern,
                share_threshold,
                value_to_metric,
            } => Some(if value_to_metric && !share_threshold {
                value
            } else {
                pattern
            }),
            Via::Any { value_to_metric } => value_to_metric.then_some(value),
        };
        let _ = write!(name, ".{key}");
        // envoyproxy/ratelimit writes `key_` for an empty value only in the plain
        // detailed name.
        if let Some(shown) = shown.filter(|v| !v.is_empty() || (detailed && !shares)) {
            let _ = write!(name, "_{shown}");
        }
    }
    rule_name(&name)
}

/// The Redis key of one request descriptor, written by the one key builder
/// ([`crate::rules::key::descriptor_key`], where its format is described) from `entries`
/// (a [`Found::key_entries`], so that a `share_threshold` pattern stands for the values it
/// matched, hash tag included); with
/// `limit_override`, the key of the descriptor's own limit under `tighten` (the node's key
/// is charged beside it).
pub fn key<'e>(
    prefix: &str,
    domain: &str,
    subject: Option<&str>,
    entries: impl Iterator<Item = (&'e str, &'e str)> + Clone,
    limit_override: Option<(u32, Unit)>,
) -> String {
    let own_limit = limit_override.map(|(n, unit)| (n, unit.name()));
    crate::rules::key::descriptor_key(prefix, domain, subject, entries, own_limit)
}
