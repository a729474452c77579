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

/// The longest metric name of a match, in bytes; a longer one keeps its start and a hash
/// of the whole.
pub(crate) const MAX_METRIC_NAME_BYTES: usize = 255;

/// A metric label value as envoyproxy/ratelimit writes its stats key (`*`, `/` and every
/// printable character kept), but for `"`, `\` and control characters, which become `_`
/// (so that a label stays one line of plain text, whatever a request brings); at most [`MAX_METRIC_NAME_BYTES`].
pub(crate) fn metric_label(text: &str) -> String {
    let clean: String = text
        .chars()
        .map(|c| match c {
            '"' | '\\' => '_',
            c if c.is_control() => '_',
            c => c,
        })
        .collect();
    if clean.len() <= MAX_METRIC_NAME_BYTES {
        return clean;
    }
    let mut cut = MAX_METRIC_NAME_BYTES - 9;
    while !clean.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut name = clean[..cut].to_owned();
    name.push('~');
    for b in &Sha256::digest(text.as_bytes())[..4] {
        let _ = write!(name, "{b:02x}");
    }
    name
}

/// The metric name of a match: envoyproxy/ratelimit's stats key, made a [`metric_label`].
/// The path of keys and configured values (`domain.key_value.key`; a pattern as written),
/// whatever the limit's `name` (which only `current_limit` shows), unless the request's
/// values are to be shown:
///
/// - `detailed_metric` on the matched node: every entry as `key_value`, with the request's
///   values (a `share_threshold` entry's pattern instead, when there is one);
/// - else `value_to_metric` on a node the request matched as any value or by a pattern
///   (not a `share_threshold` one): that entry's request value in place of the configured
///   one, the other entries as configured.
///
/// Each value shown makes a metric label of its own: as many as the values requests
/// bring, up to the metrics' cap on labels.
pub(crate) fn metric_name<'e>(
    found: &Found<'_>,
    domain: &str,
    entries: impl Iterator<Item = (&'e str, &'e str)> + Clone,
) -> String {
    let detailed = found.limit.detailed_metric;
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
    metric_label(&name)
}

/// The metric name of a request descriptor that brings its own limit (Envoy's
/// override), as envoyproxy/ratelimit names its stats then: every entry of the request,
/// `domain.key_value.key_value` (`key` alone for an empty value), made a [`metric_label`].
pub(crate) fn request_metric_name<'e>(
    domain: &str,
    entries: impl Iterator<Item = (&'e str, &'e str)>,
) -> String {
    let mut name = String::from(domain);
    for (key, value) in entries {
        let _ = write!(name, ".{key}");
        if !value.is_empty() {
            let _ = write!(name, "_{value}");
        }
    }
    metric_label(&name)
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
