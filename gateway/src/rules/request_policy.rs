//! The `[requests]` section: how request paths are canonicalised (see `canonical.rs`) and
//! how large a request head may be. Option names and values follow Envoy's
//! `HttpConnectionManager` where it has one (`normalize_path`, `merge_slashes`,
//! `path_with_escaped_slashes_action`).

use crate::rules::canonical::{EscapedSlashes, PathParameters, PathPolicy};
use crate::rules::header_names::UnderscoreHeaders;
use crate::rules::methods::MethodOverrides;
use crate::rules::one_of::{one_of, SettingError};
use serde::Deserialize;

/// The checked `[requests]` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RequestPolicy {
    pub(crate) paths: PathPolicy,
    /// The largest request head (request line and headers); larger ones get 431.
    pub(crate) max_header_bytes: usize,
    /// `X-HTTP-Method-Override` and its kin, and a `_method` query parameter, naming
    /// another method.
    pub(crate) method_overrides: MethodOverrides,
    /// Request header names with `_` (see `header_names.rs`).
    pub(crate) underscore_headers: UnderscoreHeaders,
}

impl Default for RequestPolicy {
    fn default() -> Self {
        RequestPolicy {
            paths: PathPolicy::default(),
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            method_overrides: MethodOverrides::Reject,
            underscore_headers: UnderscoreHeaders::Reject,
        }
    }
}

const DEFAULT_MAX_HEADER_BYTES: usize = 16 * 1024;
/// Bounds on `max_header_bytes`: below 1 KiB ordinary browsers fail; above 1 MiB one
/// connection could hold that much before the gateway says no.
const HEADER_BYTES_RANGE: std::ops::RangeInclusive<usize> = 1024..=1024 * 1024;
/// Bounds on `max_path_segments`.
const SEGMENTS_RANGE: std::ops::RangeInclusive<usize> = 1..=4096;

/// The `[requests]` section of the file.
#[derive(Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
#[schemars(extend("x-reload" = "restart"))]
pub(crate) struct RequestsSection {
    /// RFC 3986: `%61` is `a`, `.` and `..` resolved.
    normalize_path: bool,
    /// `//` is `/`.
    merge_slashes: bool,
    /// `%2F`, `%5C`, a raw `\`: 400 (`"reject_request"`), `"keep_unchanged"`, or
    /// `"unescape_and_forward"`.
    path_with_escaped_slashes_action: String,
    /// `;jsessionid=...` removed to the end of its segment (`"strip"`), 400 (`"reject"`),
    /// or `"keep"`.
    path_parameters: String,
    /// `true`: letters lower-cased (ASP.NET, IIS).
    case_insensitive_paths: bool,
    /// 1 to 4096; a longer path gets 414.
    max_path_segments: usize,
    /// `X-HTTP-Method-Override` and its kin, or a `_method` query parameter, naming
    /// another method: 400 (`"reject"`) or `"keep"`.
    method_override_headers: String,
    /// A header name with `_`: 400 (`"reject_request"`), `"drop_header"` (proxy mode
    /// only) or `"allow"`.
    headers_with_underscores_action: String,
    /// 1024 to 1048576: the largest request head (request line and headers); a larger one
    /// gets 431.
    max_header_bytes: usize,
}

impl Default for RequestsSection {
    fn default() -> Self {
        let paths = PathPolicy::default();
        RequestsSection {
            normalize_path: paths.normalize_path,
            merge_slashes: paths.merge_slashes,
            path_with_escaped_slashes_action: "reject_request".into(),
            path_parameters: "strip".into(),
            case_insensitive_paths: paths.case_insensitive,
            max_path_segments: paths.max_segments,
            max_header_bytes: DEFAULT_MAX_HEADER_BYTES,
            method_override_headers: "reject".into(),
            headers_with_underscores_action: "reject_request".into(),
        }
    }
}

/// Checks the section.
pub(crate) fn request_policy(section: RequestsSection) -> Result<RequestPolicy, SettingError> {
    let escaped_slashes = one_of(
        "[requests] path_with_escaped_slashes_action",
        &section.path_with_escaped_slashes_action,
        &[
            ("reject_request", EscapedSlashes::Reject),
            ("keep_unchanged", EscapedSlashes::Keep),
            ("unescape_and_forward", EscapedSlashes::Unescape),
        ],
    )?;
    let path_parameters = one_of(
        "[requests] path_parameters",
        &section.path_parameters,
        &[
            ("strip", PathParameters::Strip),
            ("reject", PathParameters::Reject),
            ("keep", PathParameters::Keep),
        ],
    )?;
    let method_overrides = one_of(
        "[requests] method_override_headers",
        &section.method_override_headers,
        &[
            ("reject", MethodOverrides::Reject),
            ("keep", MethodOverrides::Keep),
        ],
    )?;
    let underscore_headers = one_of(
        "[requests] headers_with_underscores_action",
        &section.headers_with_underscores_action,
        &[
            ("reject_request", UnderscoreHeaders::Reject),
            ("drop_header", UnderscoreHeaders::Drop),
            ("allow", UnderscoreHeaders::Allow),
        ],
    )?;
    if !SEGMENTS_RANGE.contains(&section.max_path_segments) {
        return Err(SettingError::new(
            "[requests] max_path_segments",
            format!("be {} to {}", SEGMENTS_RANGE.start(), SEGMENTS_RANGE.end()),
        ));
    }
    if !HEADER_BYTES_RANGE.contains(&section.max_header_bytes) {
        return Err(SettingError::new(
            "[requests] max_header_bytes",
            format!(
                "be {} to {}",
                HEADER_BYTES_RANGE.start(),
                HEADER_BYTES_RANGE.end()
            ),
        ));
    }
    Ok(RequestPolicy {
        paths: PathPolicy {
            normalize_path: section.normalize_path,
            merge_slashes: section.merge_slashes,
            escaped_slashes,
            path_parameters,
            case_insensitive: section.case_insensitive_paths,
            max_segments: section.max_path_segments,
        },
        max_header_bytes: section.max_header_bytes,
        method_overrides,
        underscore_headers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RequestPolicy, String> {
        Ok(request_policy(
            toml::from_str(text).map_err(|e| e.to_string())?,
        )?)
    }

    #[test]
    fn defaults_are_the_safe_ones() {
        assert_eq!(parse("").unwrap(), RequestPolicy::default());
        assert_eq!(RequestPolicy::default().max_header_bytes, 16_384);
    }

    #[test]
    fn every_option_is_read_and_checked() {
        let policy = parse(
            "normalize_path = false\nmerge_slashes = false\n\
             path_with_escaped_slashes_action = \"unescape_and_forward\"\n\
             path_parameters = \"keep\"\ncase_insensitive_paths = true\n\
             max_path_segments = 9\nmax_header_bytes = 4096\n\
             method_override_headers = \"keep\"\n\
             headers_with_underscores_action = \"drop_header\"\n",
        )
        .unwrap();
        assert_eq!(
            policy,
            RequestPolicy {
                paths: PathPolicy {
                    normalize_path: false,
                    merge_slashes: false,
                    escaped_slashes: EscapedSlashes::Unescape,
                    path_parameters: PathParameters::Keep,
                    case_insensitive: true,
                    max_segments: 9,
                },
                max_header_bytes: 4096,
                method_overrides: MethodOverrides::Keep,
                underscore_headers: UnderscoreHeaders::Drop,
            }
        );
        let allow = parse("headers_with_underscores_action = \"allow\"").unwrap();
        assert_eq!(allow.underscore_headers, UnderscoreHeaders::Allow);
        for (text, expected) in [
            ("path_with_escaped_slashes_action = \"x\"", "reject_request"),
            ("path_parameters = \"drop\"", "strip"),
            ("method_override_headers = \"honour\"", "reject"),
            (
                "headers_with_underscores_action = \"ignore\"",
                "headers_with_underscores_action 'ignore' must be \"reject_request\", \
                 \"drop_header\" or \"allow\"",
            ),
            ("max_path_segments = 0", "max_path_segments"),
            ("max_header_bytes = 100", "max_header_bytes"),
            ("max_header_bytes = 10000000", "max_header_bytes"),
            ("speed = 1", "speed"),
        ] {
            let error = parse(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
