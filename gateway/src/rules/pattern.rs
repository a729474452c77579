//! Path patterns of rules: literal segments, `*` for exactly one segment and `**` for any
//! number of segments (none included). `/auth/*` matches `/auth/login` but neither `/auth`
//! nor `/auth/a/b`; `/api/**` matches `/api`, `/api/x` and `/api/x/y`. Paths are matched
//! in their canonical form (`canonical.rs`, re-exported here): a trailing `/` is ignored,
//! and an empty segment (kept only when `merge_slashes` is off) is matched by nothing but
//! `**`.

use std::fmt;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    Literal(String),
    One,
    Any,
}

/// Why a path pattern is refused; the message names the pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatternError {
    /// The pattern does not start with `/`.
    NoLeadingSlash(String),
    /// A `*` inside a segment (`/log*`): only `*` and `**` whole segments are wildcards.
    PartialWildcard(String),
    /// A literal segment a request can never spell, with the canonicaliser's refusal.
    NoCanonicalForm {
        pattern: String,
        segment: String,
        refusal: String,
    },
    /// A literal segment in another spelling than requests are matched in, with how to
    /// write it.
    NotCanonical {
        pattern: String,
        segment: String,
        advice: String,
    },
}

impl std::fmt::Display for PatternError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PatternError::NoLeadingSlash(pattern) => {
                write!(f, "path pattern '{pattern}' must start with '/'")
            }
            PatternError::PartialWildcard(pattern) => write!(
                f,
                "path pattern '{pattern}': '*' must be a whole segment ('*' or '**')"
            ),
            PatternError::NoCanonicalForm {
                pattern,
                segment,
                refusal,
            } => write!(
                f,
                "path pattern '{pattern}': segment '{segment}' has no canonical form \
                 (a request spelling it is refused: {refusal}), so the rule would match \
                 nothing"
            ),
            PatternError::NotCanonical {
                pattern,
                segment,
                advice,
            } => write!(
                f,
                "path pattern '{pattern}': segment '{segment}' is not in the canonical form \
                 requests are matched in ('.' and '..' resolved, ';' parameters as \
                 [requests] says, escapes decoded or upper-cased), so the rule would \
                 match nothing; {advice}"
            ),
        }
    }
}

impl std::error::Error for PatternError {}

/// A compiled path pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathPattern {
    source: String,
    segments: Vec<Segment>,
}

impl PathPattern {
    /// Compiles `pattern`, which must start with `/`.
    pub fn parse(pattern: &str) -> Result<Self, PatternError> {
        if !pattern.starts_with('/') {
            return Err(PatternError::NoLeadingSlash(pattern.to_owned()));
        }
        let segments = split(pattern)
            .map(|segment| match segment {
                "*" => Ok(Segment::One),
                "**" => Ok(Segment::Any),
                s if s.contains('*') => Err(PatternError::PartialWildcard(pattern.to_owned())),
                s => Ok(Segment::Literal(s.to_owned())),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(PathPattern {
            source: pattern.to_owned(),
            segments,
        })
    }

    /// Checks that each literal segment is spelled as requests' canonical paths spell it
    /// under `policy`: paths are matched in their canonical form only, so a segment in
    /// another spelling (`caf%c3%a9`, raw UTF-8, `%7Euser`, `.`, `..`, `login;x`) would
    /// match no request, and the endpoint it was written for would have no limit.
    pub fn check_canonical(&self, policy: &PathPolicy) -> Result<(), PatternError> {
        for segment in &self.segments {
            let Segment::Literal(literal) = segment else {
                continue;
            };
            let alone = format!("/{literal}");
            let canonical = match canonicalize(alone.as_bytes(), policy) {
                Ok(canonical) => canonical,
                Err(refusal) => {
                    return Err(PatternError::NoCanonicalForm {
                        pattern: self.source.clone(),
                        segment: literal.clone(),
                        refusal: refusal.message().trim_end().to_owned(),
                    })
                }
            };
            let same = match policy.case_insensitive {
                true => canonical.eq_ignore_ascii_case(&alone),
                false => canonical == alone,
            };
            if !same {
                let written = canonical.trim_matches('/');
                let advice = match written.is_empty() {
                    true => "leave it out".to_owned(),
                    false => format!("write it '{written}'"),
                };
                return Err(PatternError::NotCanonical {
                    pattern: self.source.clone(),
                    segment: literal.clone(),
                    advice,
                });
            }
        }
        Ok(())
    }

    /// Whether `path` (canonical, see [`canonicalize`]) matches, segment by segment as
    /// written.
    pub fn matches(&self, path: &str) -> bool {
        self.matches_with(path, false)
    }

    /// Whether `path` matches with ASCII letters compared regardless of case (for
    /// `case_insensitive_paths`, where the canonical path is lower-cased but a pattern may
    /// be written in any case).
    pub fn matches_ignoring_case(&self, path: &str) -> bool {
        self.matches_with(path, true)
    }

    fn matches_with(&self, path: &str, ignore_case: bool) -> bool {
        let path: Vec<&str> = path_segments(path).collect();
        matches_segments(&self.segments, &path, ignore_case)
    }
}

impl fmt::Display for PathPattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

/// The non-empty segments of a pattern: `//a/` and `/a` are the same pattern.
fn split(path: &str) -> impl Iterator<Item = &str> {
    path.split('/').filter(|s| !s.is_empty())
}

/// The segments of a request path: what lies between its slashes, a trailing `/` not
/// making one more. An empty segment inside (`/a//b`) stays one: it is there only when
/// `merge_slashes` is off, and then `/a//b` is not `/a/b` for the upstream either.
fn path_segments(path: &str) -> impl Iterator<Item = &str> {
    let path = path.strip_prefix('/').unwrap_or(path);
    let path = path.strip_suffix('/').unwrap_or(path);
    path.split('/').filter(move |_| !path.is_empty())
}

/// Dynamic programming over (pattern position, path position): linear in the path for
/// each pattern segment, however many `**` there are and however long the path.
fn matches_segments(pattern: &[Segment], path: &[&str], ignore_case: bool) -> bool {
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
                        Segment::Literal(literal) if ignore_case => {
                            literal.eq_ignore_ascii_case(path[j])
                        }
                        Segment::Literal(literal) => literal == path[j],
                        // `*` stands for a segment, and an empty one is none.
                        _ => !path[j].is_empty(),
                    };
                    next[j + 1] = reachable[j] && fits;
                }
            }
        }
        reachable = next;
    }
    reachable[path.len()]
}

pub(crate) use crate::rules::canonical::{canonicalize, PathPolicy};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::canonical::PathParameters;

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
    fn empty_segments_and_case() {
        assert!(!check("/auth/*", "/auth//login"));
        assert!(!check("/auth/*", "/auth//"));
        assert!(check("/auth/*", "/auth/login/"));
        assert!(!check("/auth/*", "/AUTH/login"));
        let pattern = PathPattern::parse("/Auth/*").unwrap();
        assert!(pattern.matches_ignoring_case("/auth/login"));
        assert!(!pattern.matches("/auth/login"));
        assert!(check("/**", ""));
    }

    #[test]
    fn patterns_must_be_canonical() {
        let default = PathPolicy::default();
        let canonical = |pattern: &str, policy: &PathPolicy| {
            PathPattern::parse(pattern).unwrap().check_canonical(policy)
        };
        for good in ["/", "/**", "/auth/*", "/caf%C3%A9", "/~u/%3A", "/a.b/..c"] {
            assert_eq!(canonical(good, &default), Ok(()), "{good}");
        }
        for (bad, advice) in [
            ("/caf%c3%a9", "write it 'caf%C3%A9'"),
            ("/caf\u{e9}/*", "write it 'caf%C3%A9'"),
            ("/%41", "write it 'A'"),
            ("/a/./b", "leave it out"),
            ("/a/../b", "leave it out"),
            ("/;x", "leave it out"),
            ("/login;x", "write it 'login'"),
            ("/a%2Fb", "refused"),
            ("/a%00", "refused"),
            ("/a%zz", "refused"),
        ] {
            let error = canonical(bad, &default).unwrap_err().to_string();
            assert!(error.contains(advice), "{bad}: {error}");
        }
        let case = PathPolicy {
            case_insensitive: true,
            ..default
        };
        assert_eq!(canonical("/Auth/Caf%c3%A9", &case), Ok(()));
        let raw = PathPolicy {
            normalize_path: false,
            path_parameters: PathParameters::Keep,
            ..default
        };
        assert_eq!(canonical("/%41/./x;y", &raw), Ok(()));
    }

    #[test]
    fn bad_patterns_are_refused() {
        assert!(PathPattern::parse("auth/*").is_err());
        assert!(PathPattern::parse("/auth/log*").is_err());
        assert!(PathPattern::parse("/a/***").is_err());
    }
}
