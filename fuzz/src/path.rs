//! Target `path`: the gateway's path canonicalisation and rule patterns. The first byte
//! chooses the `[requests]` policy (normalisation, slashes, escaped slashes, `;`
//! parameters, letter case); the rest is a pattern, a newline, then a request path (raw
//! bytes). Checks that nothing panics; that a canonical path is ASCII, starts with `/`,
//! and (under `normalize_path` and `merge_slashes`) holds no empty, `.` or `..` segment
//! but a trailing `/`; that canonicalising is idempotent (canonicalising the result again
//! changes nothing: the path forwarded upstream is the path the decision was made on, and a
//! proxy in front that canonicalised first changes no decision); and that `/**` matches
//! every canonical path, and a canonical path without empty segments taken as a literal
//! pattern matches itself.

use rl_gateway::fuzzing::{canonicalize, EscapedSlashes, PathParameters, PathPattern, PathPolicy};

fn policy(choice: u8) -> PathPolicy {
    PathPolicy {
        normalize_path: choice & 1 != 0,
        merge_slashes: choice & 2 != 0,
        escaped_slashes: match (choice >> 2) % 3 {
            0 => EscapedSlashes::Reject,
            1 => EscapedSlashes::Keep,
            _ => EscapedSlashes::Unescape,
        },
        path_parameters: match (choice >> 4) % 3 {
            0 => PathParameters::Strip,
            1 => PathParameters::Reject,
            _ => PathParameters::Keep,
        },
        case_insensitive: choice & 0x40 != 0,
        max_segments: if choice & 0x80 != 0 { 4 } else { 128 },
    }
}

fn assert_canonical(raw: &[u8], path: &str, policy: &PathPolicy) {
    assert!(path.is_ascii(), "{raw:?} -> {path:?}");
    assert!(path.starts_with('/'), "{raw:?} -> {path:?}");
    if policy.normalize_path && policy.merge_slashes && path != "/" {
        let inner = path.strip_suffix('/').unwrap_or(path);
        for segment in inner[1..].split('/') {
            assert!(!matches!(segment, "" | "." | ".."), "{raw:?} -> {path:?}");
        }
    }
    assert_eq!(
        canonicalize(path.as_bytes(), policy).as_deref(),
        Ok(path),
        "not idempotent under {policy:?}: {raw:?}"
    );
}

pub fn fuzz(data: &[u8]) {
    let Some((&choice, rest)) = data.split_first() else {
        return;
    };
    let policy = policy(choice);
    let (pattern, raw) = match rest.iter().position(|&b| b == b'\n') {
        Some(at) => (&rest[..at], &rest[at + 1..]),
        None => (&b"/**"[..], rest),
    };
    let Ok(path) = canonicalize(raw, &policy) else {
        return;
    };
    assert_canonical(raw, &path, &policy);
    if let Ok(pattern) = PathPattern::parse(&String::from_utf8_lossy(pattern)) {
        pattern.matches(&path);
        pattern.matches_ignoring_case(&path);
        let _ = pattern.check_canonical(&policy);
    }
    let everything = PathPattern::parse("/**").expect("a valid pattern");
    assert!(everything.matches(&path), "{path:?}");
    // A literal pattern has no empty segment (`/a//b` is the pattern `/a/b`), while a path
    // keeps its empty segments when `merge_slashes` is off (`/a//b` is not `/a/b` for the
    // upstream either), so only a path without one is its own pattern.
    let inner = path.strip_suffix('/').unwrap_or(&path);
    let empty_segment = inner.len() > 1 && inner[1..].split('/').any(str::is_empty);
    if !path.contains('*') && !empty_segment {
        if let Ok(literal) = PathPattern::parse(&path) {
            assert!(literal.matches(&path), "{path:?}");
        }
    }
}
