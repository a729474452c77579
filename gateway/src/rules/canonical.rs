//! The canonical form of a request path: the one spelling that rules match, keys name and
//! the upstream receives. Modelled on Envoy's `normalize_path`, `merge_slashes` and
//! `path_with_escaped_slashes_action`, plus what Java and .NET servers do with `;`
//! parameters and letter case, because every spelling the upstream routes to one endpoint
//! but this gateway counts apart is a fresh budget for an attacker.
//!
//! One pass over the bytes, one allocation (the result): a hostile path costs time linear
//! in its length and never one allocation per segment.

/// What to do with `%2F` and `%5C` (and a raw `\`, which IIS and others read as `/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EscapedSlashes {
    /// 400: the upstream may or may not decode them, so no decision could be right.
    Reject,
    /// Kept as an escape inside the segment (`%2F`, `%5C`): for upstreams that never
    /// decode them.
    Keep,
    /// Decoded to `/`, which then separates segments, for matching, keys and forwarding.
    Unescape,
}

/// What to do with `;` path parameters (`/login;jsessionid=1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathParameters {
    /// Removed, from the `;` to the end of its segment, as Tomcat, Jetty and Spring route.
    Strip,
    /// 400.
    Reject,
    /// Kept as part of the segment: for upstreams that treat `;` as an ordinary character.
    Keep,
}

/// How request paths are canonicalised; `Default` is the safe choice.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PathPolicy {
    /// RFC 3986 normalisation: escapes of unreserved characters decoded, the hex of the
    /// others upper-cased, `.` and `..` segments resolved.
    pub normalize_path: bool,
    /// `//` is `/`.
    pub merge_slashes: bool,
    /// What `%2F`, `%5C` and a raw `\` become.
    pub escaped_slashes: EscapedSlashes,
    /// What `;` parameters in a segment become.
    pub path_parameters: PathParameters,
    /// ASCII letters lower-cased (for upstreams that route regardless of case).
    pub case_insensitive: bool,
    /// The most segments a canonical path may have (414 beyond).
    pub max_segments: usize,
}

impl Default for PathPolicy {
    fn default() -> Self {
        PathPolicy {
            normalize_path: true,
            merge_slashes: true,
            escaped_slashes: EscapedSlashes::Reject,
            path_parameters: PathParameters::Strip,
            case_insensitive: false,
            max_segments: 128,
        }
    }
}

/// Why a path has no canonical form; the request is refused with [`PathRefusal::status`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathRefusal {
    /// Does not start with `/` (`*`, an authority, an empty path).
    NotAPath,
    /// A control byte (0x00-0x1F, 0x7F), raw or escaped (`%00`).
    ControlByte,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// `%2F`, `%5C` or `\` under [`EscapedSlashes::Reject`].
    EscapedSlash,
    /// `;` under [`PathParameters::Reject`].
    PathParameter,
    /// More than [`PathPolicy::max_segments`] segments.
    TooManySegments,
}

impl PathRefusal {
    pub(crate) fn status(self) -> u16 {
        match self {
            PathRefusal::TooManySegments => 414,
            _ => 400,
        }
    }

    /// The body of the refusal, naming the problem.
    pub(crate) fn message(self) -> &'static str {
        match self {
            PathRefusal::NotAPath => "Bad Request: the path must start with '/'\n",
            PathRefusal::ControlByte => "Bad Request: control character in the path\n",
            PathRefusal::BadEscape => "Bad Request: '%' not followed by two hex digits\n",
            PathRefusal::EscapedSlash => "Bad Request: encoded '/' or '\\' in the path\n",
            PathRefusal::PathParameter => "Bad Request: ';' parameters in the path\n",
            PathRefusal::TooManySegments => "URI Too Long: too many path segments\n",
        }
    }
}

/// The canonical form of `raw` (a path, without query) under `policy`. The result is
/// ASCII: bytes that may not appear in a path (space, `"`, `<`, `{`, non-ASCII...) are
/// percent-encoded, so raw UTF-8 and its escaped spelling are one path. A trailing `/` is
/// kept (many upstreams redirect `/a/` and `/a` to each other); matching and keys ignore it.
pub fn canonicalize(raw: &[u8], policy: &PathPolicy) -> Result<String, PathRefusal> {
    let rest = match raw.split_first() {
        Some((b'/', rest)) => rest,
        _ => return Err(PathRefusal::NotAPath),
    };
    let mut writer = Writer {
        policy,
        out: String::with_capacity(raw.len() + 1),
        mark: 0,
        segments: 0,
        trailing_slash: false,
        in_parameters: false,
    };
    writer.begin_segment();
    let mut i = 0;
    while let Some(&byte) = rest.get(i) {
        i += 1;
        match byte {
            b'/' => writer.end_segment(false)?,
            b'%' => {
                // Two hex digits, checked as such (`from_str_radix` alone takes "+F").
                let sent = rest
                    .get(i..i + 2)
                    .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
                    .ok_or(PathRefusal::BadEscape)?;
                let value = sent
                    .iter()
                    .fold(0u8, |value, &digit| (value << 4) | hex_value(digit));
                i += 2;
                writer.escape(value, sent)?;
            }
            b'\\' => writer.slash_escape(b'\\')?,
            b';' => writer.parameter()?,
            0x00..=0x1f | 0x7f => return Err(PathRefusal::ControlByte),
            _ => writer.literal(byte),
        }
    }
    writer.end_segment(true)?;
    Ok(writer.finish())
}

/// The output as it grows, `/` and a segment at a time.
struct Writer<'a> {
    policy: &'a PathPolicy,
    out: String,
    /// Where the current segment's `/` is in `out`.
    mark: usize,
    segments: usize,
    /// Whether the last segment ended the path with a `/` (an empty, `.` or `..` one).
    trailing_slash: bool,
    /// Inside a `;` parameter being stripped.
    in_parameters: bool,
}

impl Writer<'_> {
    fn begin_segment(&mut self) {
        self.mark = self.out.len();
        self.out.push('/');
        self.in_parameters = false;
    }

    /// Ends the segment being written; the `last` one, when empty, is only the path's
    /// trailing `/`, not a segment, whether slashes merge or not.
    fn end_segment(&mut self, last: bool) -> Result<(), PathRefusal> {
        let segment = self.out.get(self.mark + 1..).unwrap_or_default();
        let normalize = self.policy.normalize_path;
        let merged = segment.is_empty() && (self.policy.merge_slashes || last);
        if merged || (normalize && segment == ".") {
            self.out.truncate(self.mark);
            self.trailing_slash = true;
        } else if normalize && segment == ".." {
            self.out.truncate(self.mark);
            // The segment before goes too; above the root there is nothing to remove.
            let previous = self.out.rfind('/').unwrap_or(0);
            self.out.truncate(previous);
            self.segments = self.segments.saturating_sub(1);
            self.trailing_slash = true;
        } else {
            self.segments += 1;
            if self.segments > self.policy.max_segments {
                return Err(PathRefusal::TooManySegments);
            }
            self.trailing_slash = false;
        }
        self.begin_segment();
        Ok(())
    }

    /// The path ends: the `/` of the empty segment begun last goes, and a trailing `/`
    /// stays when the last segment left one.
    fn finish(mut self) -> String {
        self.out.truncate(self.mark);
        if self.out.is_empty() || self.trailing_slash {
            self.out.push('/');
        }
        self.out
    }

    fn literal(&mut self, byte: u8) {
        if self.in_parameters {
            return;
        }
        if is_path_char(byte) {
            let byte = if self.policy.case_insensitive {
                byte.to_ascii_lowercase()
            } else {
                byte
            };
            self.out.push(char::from(byte));
        } else {
            self.push_escape(byte);
        }
    }

    /// `%XX` decoding to `value`; `sent` is the two hex digits as they came.
    fn escape(&mut self, value: u8, sent: &[u8]) -> Result<(), PathRefusal> {
        if value == b'/' || value == b'\\' {
            return self.slash_escape(value);
        }
        // Escaped, a control byte is as refused as it is raw: an upstream that decodes
        // `%00` and stops there routes `/auth/login%00N` to `/auth/login`, which would make
        // every `N` a fresh per-endpoint budget. No path needs one (even in a parameter).
        if value < 0x20 || value == 0x7f {
            return Err(PathRefusal::ControlByte);
        }
        if self.in_parameters {
            return Ok(());
        }
        if !self.policy.normalize_path {
            self.out.push('%');
            sent.iter().for_each(|&b| self.out.push(char::from(b)));
        } else if is_unreserved(value) {
            self.literal(value);
        } else {
            self.push_escape(value);
        }
        Ok(())
    }

    /// `%2F`, `%5C` or `\` (`value` is `/` or `\`).
    fn slash_escape(&mut self, value: u8) -> Result<(), PathRefusal> {
        match self.policy.escaped_slashes {
            // Refused even inside a stripped parameter: the upstream may decode it first.
            EscapedSlashes::Reject => Err(PathRefusal::EscapedSlash),
            _ if self.in_parameters => Ok(()),
            EscapedSlashes::Keep => {
                self.push_escape(value);
                Ok(())
            }
            EscapedSlashes::Unescape => self.end_segment(false),
        }
    }

    fn parameter(&mut self) -> Result<(), PathRefusal> {
        match self.policy.path_parameters {
            PathParameters::Strip => {
                self.in_parameters = true;
                Ok(())
            }
            PathParameters::Reject => Err(PathRefusal::PathParameter),
            PathParameters::Keep => {
                self.literal(b';');
                Ok(())
            }
        }
    }

    fn push_escape(&mut self, byte: u8) {
        const HEX: &[u8; 16] = b"0123456789ABCDEF";
        self.out.push('%');
        self.out.push(char::from(HEX[usize::from(byte >> 4)]));
        self.out.push(char::from(HEX[usize::from(byte & 0xf)]));
    }
}

/// The value of a hex digit (checked to be one).
fn hex_value(digit: u8) -> u8 {
    match digit {
        b'0'..=b'9' => digit - b'0',
        b'a'..=b'f' => digit - b'a' + 10,
        _ => digit
            .to_ascii_uppercase()
            .wrapping_sub(b'A')
            .wrapping_add(10),
    }
}

/// RFC 3986 unreserved: letters, digits, `-._~`.
fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || b"-._~".contains(&byte)
}

/// What a path segment may hold unescaped (RFC 3986 `pchar` less `%`): unreserved,
/// sub-delims, `:` and `@`.
fn is_path_char(byte: u8) -> bool {
    is_unreserved(byte) || b"!$&'()*+,;=:@".contains(&byte)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// [`canonicalize`] under the default policy.
    fn canonical_path(path: &str) -> Result<String, PathRefusal> {
        canonicalize(path.as_bytes(), &PathPolicy::default())
    }

    fn canon(path: &str) -> String {
        canonical_path(path).unwrap_or_else(|e| panic!("{path}: {e:?}"))
    }

    fn with(policy: PathPolicy, path: &str) -> Result<String, PathRefusal> {
        canonicalize(path.as_bytes(), &policy)
    }

    #[test]
    fn rfc_3986_normalisation() {
        assert_eq!(canon("/home"), "/home");
        assert_eq!(canon("/"), "/");
        assert_eq!(canon("/a/b.c/..d"), "/a/b.c/..d");
        assert_eq!(canon("/a/"), "/a/");
        assert_eq!(canon("//home/"), "/home/");
        assert_eq!(canon("/a/./b/../c"), "/a/c");
        assert_eq!(canon("/a/b/.."), "/a/");
        assert_eq!(canon("/a/."), "/a/");
        assert_eq!(canon("/../.."), "/");
        assert_eq!(canon("/%68ome/%7e%3ax"), "/home/~%3Ax");
        assert_eq!(canon("/caf%c3%a9"), "/caf%C3%A9");
        assert_eq!(canon("/a%2e%2e/%2e%2e/b"), "/b");
        assert_eq!(canon("/%25"), "/%25");
    }

    #[test]
    fn raw_bytes_are_escaped_and_controls_refused() {
        assert_eq!(
            canonicalize("/é x".as_bytes(), &PathPolicy::default()).unwrap(),
            "/%C3%A9%20x"
        );
        assert_eq!(
            canonicalize(b"/\xff{}", &PathPolicy::default()).unwrap(),
            "/%FF%7B%7D"
        );
        for bad in [
            &b"/a\x00"[..],
            b"/a\tb",
            b"/\x7f",
            b"/a%00",
            b"/a%0a",
            b"/%0D%0A",
            b"/%1f",
            b"/%7F",
            b"/a;x=%00",
        ] {
            assert_eq!(
                canonicalize(bad, &PathPolicy::default()),
                Err(PathRefusal::ControlByte)
            );
        }
    }

    #[test]
    fn malformed_and_non_paths_are_refused() {
        for bad in ["/%", "/%4", "/%zz", "/a%g1", "/%+F", "/%-1", "/% 1"] {
            assert_eq!(canonical_path(bad), Err(PathRefusal::BadEscape), "{bad}");
        }
        for bad in ["", "*", "a/b", "http://x/"] {
            assert_eq!(canonical_path(bad), Err(PathRefusal::NotAPath), "{bad}");
        }
    }

    #[test]
    fn escaped_slashes() {
        for path in [
            "/auth%2Flogin",
            "/auth%2flogin",
            "/a%5Cb",
            "/a\\b",
            "/a;x%2F/b",
        ] {
            assert_eq!(
                canonical_path(path),
                Err(PathRefusal::EscapedSlash),
                "{path}"
            );
        }
        let keep = PathPolicy {
            escaped_slashes: EscapedSlashes::Keep,
            ..PathPolicy::default()
        };
        assert_eq!(with(keep, "/auth%2flogin").unwrap(), "/auth%2Flogin");
        assert_eq!(with(keep, "/a\\b").unwrap(), "/a%5Cb");
        let unescape = PathPolicy {
            escaped_slashes: EscapedSlashes::Unescape,
            ..PathPolicy::default()
        };
        assert_eq!(with(unescape, "/auth%2Flogin").unwrap(), "/auth/login");
        assert_eq!(with(unescape, "/a%5C..%5Cb").unwrap(), "/b");
        assert_eq!(with(unescape, "/a\\b").unwrap(), "/a/b");
    }

    #[test]
    fn path_parameters() {
        assert_eq!(canon("/auth/login;jsessionid=7"), "/auth/login");
        assert_eq!(canon("/auth;a=1/login;b"), "/auth/login");
        assert_eq!(canon("/auth/..;/admin"), "/admin");
        assert_eq!(canon("/a/;x/b"), "/a/b");
        assert_eq!(canon("/a%3Bb"), "/a%3Bb");
        let reject = PathPolicy {
            path_parameters: PathParameters::Reject,
            ..PathPolicy::default()
        };
        assert_eq!(with(reject, "/a;b"), Err(PathRefusal::PathParameter));
        let keep = PathPolicy {
            path_parameters: PathParameters::Keep,
            ..PathPolicy::default()
        };
        assert_eq!(with(keep, "/a;b=1").unwrap(), "/a;b=1");
    }

    #[test]
    fn switches() {
        let case = PathPolicy {
            case_insensitive: true,
            ..PathPolicy::default()
        };
        assert_eq!(with(case, "/AUTH/Login%4B%c3").unwrap(), "/auth/logink%C3");
        let no_merge = PathPolicy {
            merge_slashes: false,
            ..PathPolicy::default()
        };
        assert_eq!(with(no_merge, "/a//b/").unwrap(), "/a//b/");
        assert_eq!(with(no_merge, "/a//..").unwrap(), "/a/");
        let raw = PathPolicy {
            normalize_path: false,
            ..PathPolicy::default()
        };
        assert_eq!(with(raw, "/a/../%62%3a").unwrap(), "/a/../%62%3a");
    }

    /// Many generated paths under every policy: no panic, and a canonical path is its own
    /// canonical form (what is forwarded is decided on again the same way), ASCII, with
    /// no more segments than the cap.
    #[test]
    fn canonical_paths_are_fixed_points() {
        const PIECES: [&str; 22] = [
            "/", "//", "a", "B", ".", "..", "%2e", "%2E%2e", ";", ";x=1", "%2F", "%5c", "\\",
            "%41", "%3b", "%c3%a9", "é", " ", "{", "%", "%zz", "~",
        ];
        let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut policies = Vec::new();
        for bits in 0..(2 * 2 * 3 * 3 * 2) {
            policies.push(PathPolicy {
                normalize_path: bits % 2 == 0,
                merge_slashes: (bits / 2) % 2 == 0,
                escaped_slashes: [
                    EscapedSlashes::Reject,
                    EscapedSlashes::Keep,
                    EscapedSlashes::Unescape,
                ][(bits / 4) % 3],
                path_parameters: [
                    PathParameters::Strip,
                    PathParameters::Reject,
                    PathParameters::Keep,
                ][(bits / 12) % 3],
                case_insensitive: (bits / 36) % 2 == 0,
                max_segments: 6,
            });
        }
        let mut accepted = 0;
        for _ in 0..20_000 {
            let mut path = String::from("/");
            for _ in 0..next() % 12 {
                path.push_str(PIECES[(next() % PIECES.len() as u64) as usize]);
            }
            let policy = &policies[(next() % policies.len() as u64) as usize];
            let Ok(canonical) = canonicalize(path.as_bytes(), policy) else {
                continue;
            };
            accepted += 1;
            assert!(canonical.is_ascii(), "{path:?} -> {canonical:?}");
            assert_eq!(
                canonicalize(canonical.as_bytes(), policy).as_deref(),
                Ok(canonical.as_str()),
                "{path:?} under {policy:?}"
            );
        }
        assert!(accepted > 5_000, "{accepted}");
    }

    #[test]
    fn segments_are_capped_without_an_allocation_each() {
        let policy = PathPolicy {
            max_segments: 3,
            ..PathPolicy::default()
        };
        assert_eq!(with(policy, "/a/b/c").unwrap(), "/a/b/c");
        assert_eq!(with(policy, "/a/b/c/d"), Err(PathRefusal::TooManySegments));
        assert_eq!(
            with(policy, "/a/b/c/d/.."),
            Err(PathRefusal::TooManySegments)
        );
        assert_eq!(with(policy, &"/".repeat(20_000)).unwrap(), "/");
        let long = "/a".repeat(20_000);
        assert_eq!(canonical_path(&long), Err(PathRefusal::TooManySegments));
    }
}
