//! Target `key`: the Redis key a request charges (`Rule::key`), from arbitrary request
//! facts (method, path, headers, client IP) and each way of keying (client IP, a header, a
//! path segment; per endpoint or not). Checks the bounds the code promises: each part a
//! client controls (the subject, the method, the path) is written out up to its bound, else
//! as `#` and a 32-hex-digit hash; the whole key stays within `MAX_KEY_BYTES` (256) for any
//! prefix and rule name the configuration accepts; and the hash tag is the subject alone,
//! so a client cannot move its keys to another cluster slot.

use arbitrary::{Result, Unstructured};
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use rl_gateway::fuzzing::{
    Counting, KeySource, Limit, OnFailure, RedisFailure, RequestFacts, Rule, MAX_KEY_BYTES,
    MAX_KEY_PREFIX_BYTES, MAX_RULE_NAME_BYTES,
};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The longest subject or path written out (`rules::MAX_KEY_PART`, private there).
const MAX_KEY_PART: usize = 64;

const HEADER: &str = "x-api-key";

fn text(u: &mut Unstructured<'_>, max: usize) -> Result<String> {
    let len = u.int_in_range(0..=max)?;
    let bytes = u.bytes(len.min(u.len()))?;
    Ok(String::from_utf8_lossy(bytes).into_owned())
}

fn fuzz_key(u: &mut Unstructured<'_>) -> Result<()> {
    let prefix = text(u, MAX_KEY_PREFIX_BYTES)?.replace(['{', '}'], "");
    let name = text(u, MAX_RULE_NAME_BYTES)?;
    let source = match u.int_in_range(0..=2u8)? {
        0 => KeySource::ClientIp,
        1 => KeySource::Header(HeaderName::from_static(HEADER)),
        _ => KeySource::Segment(u.int_in_range(1..=6)?),
    };
    let per_endpoint: bool = u.arbitrary()?;
    let client_ip = if u.arbitrary()? {
        IpAddr::V4(Ipv4Addr::from(u.arbitrary::<[u8; 4]>()?))
    } else {
        IpAddr::V6(Ipv6Addr::from(u.arbitrary::<[u8; 16]>()?))
    };
    let method = text(u, 64)?;
    let header_len = u.int_in_range(0..=400)?;
    let header = u.bytes(header_len.min(u.len()))?.to_vec();
    let path = String::from_utf8_lossy(u.bytes(u.len())?).into_owned();
    let mut headers = HeaderMap::new();
    if let Ok(value) = HeaderValue::from_bytes(&header) {
        headers.insert(HEADER, value);
    }
    let rule = Rule::new(
        name.clone(),
        Vec::new(),
        None,
        source,
        per_endpoint,
        Limit::Unlimited,
        Counting::All,
        false,
        OnFailure {
            redis: RedisFailure::Open,
            error_closed: true,
        },
    );
    let facts = RequestFacts {
        method: &method,
        path: &path,
        headers: &headers,
        client_ip,
    };
    let key = rule.key(&prefix, &facts);
    assert_eq!(
        key,
        rule.key(&prefix, &facts),
        "the same request, another key"
    );
    let Some(rest) = key.strip_prefix(&prefix).and_then(|k| k.strip_prefix('{')) else {
        panic!("{key:?} does not start with the prefix and the hash tag");
    };
    // Redis hashes what is between the first `{` and the next `}`.
    let Some((subject, after)) = rest.split_once('}') else {
        panic!("{key:?} has no closing brace");
    };
    assert!(!subject.is_empty() && !subject.contains('{'), "{key:?}");
    assert!(
        subject.len() <= "seg:".len() + MAX_KEY_PART,
        "subject of {key:?}"
    );
    let Some(after) = after
        .strip_prefix(':')
        .and_then(|a| a.strip_prefix(name.as_str()))
    else {
        panic!("{key:?} does not name the rule after the subject");
    };
    if per_endpoint {
        // `:<METHOD> <path>`, the method escaped, so its first space ends it.
        let endpoint = after.strip_prefix(':').and_then(|a| a.split_once(' '));
        let Some((_, path_part)) = endpoint else {
            panic!("{key:?} has no endpoint");
        };
        assert!(path_part.len() <= MAX_KEY_PART, "path of {key:?}");
    } else {
        assert!(after.is_empty(), "{key:?}");
    }
    if prefix.len() <= MAX_KEY_PREFIX_BYTES && name.len() <= MAX_RULE_NAME_BYTES {
        assert!(key.len() <= MAX_KEY_BYTES, "{} bytes: {key:?}", key.len());
    }
    Ok(())
}

pub fn fuzz(data: &[u8]) {
    let _ = fuzz_key(&mut Unstructured::new(data));
}
