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
        // Each `**` multiplies the work of a match by the path's length; two are plenty.
        if segments.iter().filter(|s| **s == Segment::Any).count() > 2 {
            return Err(format!("path pattern '{pattern}' has more than two '**'"));
        }
        Ok(PathPattern {
            source: pattern.to_owned(),
            segments,
        })
    }

    /// Whether `path` (without its query string) matches.
    pub fn matches(&self, path: &str) -> bool {
        let path: Vec<&str> = split(path).collect();
        matches_from(&self.segments, &path)
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

fn matches_from(pattern: &[Segment], path: &[&str]) -> bool {
    match pattern.split_first() {
        None => path.is_empty(),
        Some((Segment::Any, rest)) => {
            (0..=path.len()).any(|skip| matches_from(rest, &path[skip..]))
        }
        Some((segment, rest)) => match path.split_first() {
            None => false,
            Some((first, tail)) => {
                let here = match segment {
                    Segment::Literal(literal) => literal == first,
                    _ => true,
                };
                here && matches_from(rest, tail)
            }
        },
    }
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
    fn bad_patterns_are_refused() {
        assert!(PathPattern::parse("auth/*").is_err());
        assert!(PathPattern::parse("/auth/log*").is_err());
        assert!(PathPattern::parse("/a/***").is_err());
        assert!(PathPattern::parse("/**/a/**/b/**").is_err());
    }
}
