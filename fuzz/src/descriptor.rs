//! Target `descriptor`: an Envoy request's descriptors to their limits and Redis keys
//! (`descriptors::Domain::find`, `descriptors::key`), from arbitrary entries (any bytes, up
//! to the service's bounds), domains, subjects and overrides, against a fixed set of
//! descriptor files (nested, value-less, prefixed, blocked, each `limit_override` mode, a
//! policy, a calendar month in a zone). Checks what the service promises: no panic (the
//! override's rule is built for every request that brings one); no key over `MAX_KEY_BYTES` (256) for any prefix the configuration
//! accepts; exactly one hash tag, which is the chosen entry's `key=value` escaped or its
//! hash, so that no value can move a key to another slot; and equal inputs, equal keys.

use arbitrary::{Result, Unstructured};
use rl_gateway::fuzzing::{
    descriptors, Unit, MAX_ENTRIES, MAX_ENTRY_KEY_BYTES, MAX_ENTRY_VALUE_BYTES, MAX_KEY_BYTES,
    MAX_KEY_PREFIX_BYTES,
};
use std::sync::OnceLock;

const FILE: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10}
    descriptors:
      - key: path
        value: "/a*"
        rate_limit: {unit: minute, requests_per_unit: 2, algorithm: gcra}
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: ip
    value: 10.0.0.1
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: k
    subject: path
    descriptors:
      - key: path
        rate_limit: {unit: day, requests_per_unit: 5}
  - key: wide
    limit_override: replace
    rate_limit: {unit: month, requests_per_unit: 5, tz: Europe/Paris, anchor: 31}
  - key: fixed
    limit_override: ignore
    rate_limit: {unit: year, requests_per_unit: 5}
  - key: named
    rate_limit: {policy: p}
  - key: wide_named
    limit_override: replace
    rate_limit: {policy: p}
"#;

fn domains() -> &'static descriptors::Domains {
    static DOMAINS: OnceLock<descriptors::Domains> = OnceLock::new();
    DOMAINS.get_or_init(|| descriptors::from_texts(&[FILE]).expect("the fixed file loads"))
}

fn text(u: &mut Unstructured<'_>, max: usize) -> Result<String> {
    let len = u.int_in_range(0..=max)?;
    let bytes = u.bytes(len.min(u.len()))?;
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

fn word(u: &mut Unstructured<'_>, max: usize) -> Result<String> {
    // Often a key the file knows, so that matching goes deep.
    Ok(match u.int_in_range(0..=6u8)? {
        0 => "user".into(),
        1 => "path".into(),
        2 => "ip".into(),
        3 => "k".into(),
        4 => ["wide", "fixed", "named", "wide_named"][u.int_in_range(0..=3usize)?].into(),
        _ => text(u, max)?,
    })
}

fn fuzz_descriptor(u: &mut Unstructured<'_>) -> Result<()> {
    let prefix = text(u, MAX_KEY_PREFIX_BYTES)?.replace(['{', '}'], "");
    let prefix: String = prefix.chars().take(MAX_KEY_PREFIX_BYTES / 4).collect();
    let domain = if u.arbitrary()? {
        "api".to_owned()
    } else {
        text(u, 255)?
    };
    let count = u.int_in_range(1..=MAX_ENTRIES)?;
    let mut entries = Vec::with_capacity(count);
    for _ in 0..count {
        let key = word(u, MAX_ENTRY_KEY_BYTES)?;
        let value = if u.arbitrary()? {
            text(u, MAX_ENTRY_VALUE_BYTES)?
        } else {
            text(u, 16)?
        };
        entries.push((key, value));
    }
    let subject = if u.arbitrary()? {
        Some(word(u, 32)?)
    } else {
        None
    };
    let limit_override = if u.arbitrary()? {
        Some((
            u.arbitrary::<u32>()?,
            Unit::from_proto(u.int_in_range(0..=8)?).unwrap_or(Unit::Day),
        ))
    } else {
        None
    };
    let pairs = || entries.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    if let Some(found) = domains().get(&domain) {
        // The override's rule is built per request: it may be refused, never panic.
        if let (Some(limit), Some((n, unit))) = (found.find(pairs()), limit_override) {
            let _ = limit.limit().overridden(n, unit);
        }
    }
    let key = descriptors::key(
        &prefix,
        &domain,
        subject.as_deref(),
        pairs(),
        limit_override,
    );
    assert!(key.len() <= MAX_KEY_BYTES, "{} bytes: {key}", key.len());
    let rest = key.strip_prefix(prefix.as_str()).expect("the prefix first");
    assert!(rest.starts_with('{'), "{key}");
    let close = rest.find('}').expect("a closing brace");
    assert_eq!(rest.matches('{').count(), 1, "one hash tag: {key}");
    assert_eq!(rest.matches('}').count(), 1, "one hash tag: {key}");
    let tag = &rest[1..close];
    assert!(!tag.contains(['{', '}', ':']), "{key}");
    assert_eq!(
        key,
        descriptors::key(
            &prefix,
            &domain,
            subject.as_deref(),
            pairs(),
            limit_override
        ),
        "deterministic"
    );
    Ok(())
}

pub fn fuzz(data: &[u8]) {
    let _ = fuzz_descriptor(&mut Unstructured::new(data));
}
