//! The names of a descriptor's limit (for metrics and `current_limit`) and the Redis key
//! of a request descriptor.

use super::{DescriptorLimit, Unit};
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

/// The metric name of a match: the node's rule name, and with `detailed_metric` on a
/// value-less node, the request's value of its last entry too.
pub(crate) fn metric_name(limit: &DescriptorLimit, last_value: &str) -> String {
    if limit.detailed_metric && limit.value_less && limit.name.is_none() {
        rule_name(&format!("{}_{last_value}", limit.rule.name))
    } else {
        limit.rule.name.clone()
    }
}

/// The Redis key of one request descriptor, written by the one key builder
/// ([`crate::rules::key::descriptor_key`], where its format is described); with
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
