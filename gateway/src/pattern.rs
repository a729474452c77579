//! Path patterns of rules: literal segments, `*` for exactly one segment and `**` for any
//! number of segments (none included). `/auth/*` matches `/auth/login` but neither `/auth`
//! nor `/auth/a/b`; `/api/**` matches `/api`, `/api/x` and `/api/x/y`.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    One,
    Any,
}

/// A compiled path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    source: String,
    segments: Vec<Segment>,
}

impl PathPattern {
    /// Compiles `pattern`, which must start with `/`.
    pub fn parse(pattern: &str) -> Result<Self, String> {
        if !pattern.starts_with('/') {
            return Err(format!("path pattern '{pattern}' must start with '/'"));
        }
        let segments = split(pattern)
            .map(|segment| match segment {
                "*" => Ok(Segment::One),
                "**" => Ok(Segment::Any),
                s if s.contains('*') => Err(format!(
                    "path pattern '{pattern}': '*' must be a whole segment ('*' or '**')"
                )),
                s => Ok(Segment::Literal(s.to_owned())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PathPattern {
            source: pattern.to_owned(),
            segments,
        })
    }

    /// Whether `path` (canonical, see [`canonical_path`]) matches.
    pub fn matches(&self, path: &str) -> bool {
        let path: Vec<&str> = split(path).collect();
        matches_segments(&self.segments, &path)
    }
}

impl fmt::Display for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// The non-empty segments of a path: `//a/` and `/a` are the same path.
fn split(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty())
}

/// Dynamic programming over (pattern position, path position): linear in the path for
/// each pattern segment, however many `**` there are and however long the path.
fn matches_segments(pattern: &[Segment], path: &[&str]) -> bool {
    // reachable[j]: the pattern read so far can have consumed exactly path[..j].
    let mut reachable = vec![false; path.len() + 1];
    reachable[0] = true;
    for segment in pattern {
        let mut next = vec![false; path.len() + 1];
        match segment {
            Segment::Any => {
                let mut seen = false;
                for j in 0..=path.len() {
                    seen |= reachable[j];
                    next[j] = seen;
                }
            }
            Segment::One | Segment::Literal(_) => {
                for j in 0..path.len() {
                    let fits = match segment {
                        Segment::Literal(literal) => literal == path[j],
                        _ => true,
                    };
                    next[j + 1] = reachable[j] && fits;
                }
            }
        }
        reachable = next;
    }
    reachable[path.len()]
}

/// The path a rule sees and a key names: one `/` between segments, no empty, `.` or `..`
/// segments (`..` removes the one before it), no trailing `/`, and percent-encoded
/// unreserved characters (letters, digits, `-._~`) decoded, so that `//a/./b/`, `/a/b` and
/// `/%61/b` are one endpoint, as the upstream would most likely serve them. Other escapes
/// stay as they are.
pub fn canonical_path(path: &str) -> String {
    if is_canonical(path) {
        return path.to_owned();
    }
    let mut segments: Vec<String> = Vec::new();
    for raw in split(path) {
        let segment = decode_unreserved(raw);
        match segment.as_str() {
            "." => {}
            ".." => {
                segments.pop();
            }
            _ => segments.push(segment),
        }
    }
    let mut canonical = String::with_capacity(path.len());
    for segment in &segments {
        canonical.push('/');
        canonical.push_str(segment);
    }
    if canonical.is_empty() {
        canonical.push('/');
    }
    canonical
}

/// The common case, checked without allocating: `/` then non-empty segments that are
/// neither `.` nor `..`, no `%`, no trailing `/`.
fn is_canonical(path: &str) -> bool {
    path == "/"
        || (path.starts_with('/')
            && !path.ends_with('/')
            && !path.contains('%')
            && path[1..]
                .split('/')
                .all(|s| !s.is_empty() && s != "." && s != ".."))
}

fn decode_unreserved(segment: &str) -> String {
    if !segment.contains('%') {
        return segment.to_owned();
    }
    let bytes = segment.as_bytes();
    let mut out = String::with_capacity(segment.len());
    let mut i = 0;
    while i < bytes.len() {
        let decoded = (bytes[i] == b'%')
            .then(|| segment.get(i + 1..i + 3))
            .flatten()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            .filter(|b| b.is_ascii_alphanumeric() || b"-._~".contains(b));
        match decoded {
            Some(b) => {
                out.push(char::from(b));
                i += 3;
            }
            None => {
                // Copy one whole character (the path is UTF-8, as `&str`).
                let width = segment[i..].chars().next().map_or(1, char::len_utf8);
                out.push_str(&segment[i..i + width]);
                i += width;
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(pattern: &str, path: &str) -> bool {
        PathPattern::parse(pattern).unwrap().matches(path)
    }

    #[test]
    fn one_segment_wildcard() {
        assert!(check("/auth/*", "/auth/login"));
        assert!(!check("/auth/*", "/auth"));
        assert!(!check("/auth/*", "/auth/a/b"));
        assert!(!check("/auth/*", "/authx/login"));
    }

    #[test]
    fn any_segments_wildcard() {
        assert!(check("/api/**", "/api"));
        assert!(check("/api/**", "/api/x"));
        assert!(check("/api/**", "/api/x/y/z"));
        assert!(!check("/api/**", "/apix"));
        assert!(check("/**/edit", "/a/b/edit"));
        assert!(check("/**/edit", "/edit"));
        assert!(!check("/**/edit", "/a/b/view"));
        assert!(check("/**", "/"));
    }

    #[test]
    fn literal_paths() {
        assert!(check("/status", "/status"));
        assert!(check("/status", "/status/"));
        assert!(!check("/status", "/status/x"));
        assert!(check("/", "/"));
        assert!(!check("/", "/x"));
    }

    #[test]
    fn many_wildcards_on_a_long_path_stay_linear() {
        let pattern = PathPattern::parse("/**/a/**/b/**/c/**").unwrap();
        let long = "/a".repeat(30_000);
        assert!(!pattern.matches(&long));
        assert!(pattern.matches(&format!("{long}/b/x/c")));
    }

    #[test]
    fn canonical_paths() {
        assert_eq!(canonical_path("/home"), "/home");
        assert_eq!(canonical_path("/"), "/");
        assert_eq!(canonical_path("/a/b.c/..d"), "/a/b.c/..d");
        assert_eq!(canonical_path("/a/"), "/a");
        assert_eq!(canonical_path("a/b"), "/a/b");
        assert_eq!(canonical_path("//home/"), "/home");
        assert_eq!(canonical_path("/a/./b/../c"), "/a/c");
        assert_eq!(canonical_path("/../.."), "/");
        assert_eq!(canonical_path(""), "/");
        assert_eq!(canonical_path("/%68ome/%7e%2Fx"), "/home/~%2Fx");
        assert_eq!(canonical_path("/caf%C3%A9/%"), "/caf%C3%A9/%");
        assert_eq!(canonical_path("/a%2e%2e/%2e%2e/b"), "/b");
        assert_eq!(canonical_path("/é/%4"), "/é/%4");
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert!(PathPattern::parse("auth/*").is_err());
        assert!(PathPattern::parse("/auth/log*").is_err());
        assert!(PathPattern::parse("/a/***").is_err());
    }
}
