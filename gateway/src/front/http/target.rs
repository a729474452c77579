//! The request's method and target as the rules see them: the canonical method (with the
//! overrides the `[requests]` policy refuses), and the path and query of a target as a
//! proxy reports it in check mode (`X-Original-URI`).

use super::responses::Refusal;
use crate::rules::canonical::PathRefusal;
use crate::rules::methods::{self, MethodOverrides};
use crate::rules::RuleSet;
use hyper::body::Incoming;
use hyper::header::HeaderMap;
use hyper::{Method, Request};

/// The method the rules decide on: one the rule set accepts, carrying no override header or
/// query parameter that `policy` refuses. A refusal is the answer to the client.
pub(super) fn checked_method(
    raw: &[u8],
    headers: &HeaderMap,
    query: Option<&[u8]>,
    rules: &RuleSet,
    policy: MethodOverrides,
) -> Result<Method, Refusal> {
    methods::accepted(raw, rules)
        .and_then(|method| {
            methods::check_overrides(headers, &method, policy)?;
            methods::check_query_override(query, &method, policy).map(|()| method)
        })
        .map_err(Refusal::from)
}

/// The path of a request target as a proxy reports it (`X-Original-URI`): the query and
/// fragment cut off, and the scheme and authority of an absolute URI too (nginx reports the
/// request line's target as sent).
pub(super) fn path_of_target(target: &[u8]) -> &[u8] {
    let end = target
        .iter()
        .position(|b| matches!(b, b'?' | b'#'))
        .unwrap_or(target.len());
    let target = target.get(..end).unwrap_or(target);
    let after_scheme = [&b"http://"[..], b"https://"]
        .into_iter()
        .find(|scheme| {
            target
                .get(..scheme.len())
                .is_some_and(|start| start.eq_ignore_ascii_case(scheme))
        })
        .map(<[u8]>::len);
    match after_scheme {
        Some(start) => {
            let rest = target.get(start..).unwrap_or_default();
            match rest.iter().position(|&b| b == b'/') {
                Some(slash) => rest.get(slash..).unwrap_or(b"/"),
                None => b"/",
            }
        }
        None => target,
    }
}

/// The query of a request target as a proxy reports it: after the first `?`, up to a `#`.
pub(super) fn query_of_target(target: &[u8]) -> Option<&[u8]> {
    let start = target.iter().position(|&b| b == b'?')? + 1;
    let rest = target.get(start..)?;
    let end = rest.iter().position(|&b| b == b'#').unwrap_or(rest.len());
    rest.get(..end)
}

/// Makes the request's method and target the canonical ones (origin form, the query kept
/// byte for byte), so that the upstream receives what was decided on.
pub(super) fn rewrite_target(
    request: &mut Request<Incoming>,
    method: &Method,
    path: &str,
) -> Result<(), PathRefusal> {
    *request.method_mut() = method.clone();
    // The common case: already canonical, in origin form.
    if request.uri().scheme().is_none() && request.uri().path() == path {
        return Ok(());
    }
    let target = match request.uri().query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    };
    *request.uri_mut() = target.parse().map_err(|_| PathRefusal::NotAPath)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_of_an_origin_form_target_drops_query_and_fragment() {
        assert_eq!(path_of_target(b"/api/x?a=1#f"), b"/api/x");
        assert_eq!(path_of_target(b"/api/x#f?a"), b"/api/x");
        assert_eq!(path_of_target(b"/api/x"), b"/api/x");
        assert_eq!(path_of_target(b""), b"");
    }

    #[test]
    fn path_of_an_absolute_target_drops_scheme_and_authority_in_any_case() {
        assert_eq!(path_of_target(b"http://h:80/a/b?q"), b"/a/b");
        assert_eq!(path_of_target(b"HTTPS://h/a"), b"/a");
        // No path after the authority: the root, as a server reads it.
        assert_eq!(path_of_target(b"http://h"), b"/");
        assert_eq!(path_of_target(b"https://h?x=/y"), b"/");
        // Another scheme is not taken apart: the path refusal names it later.
        assert_eq!(path_of_target(b"ftp://h/a"), b"ftp://h/a");
    }

    #[test]
    fn query_of_target_is_after_the_first_question_mark_up_to_a_fragment() {
        assert_eq!(query_of_target(b"/a?x=1&y=2#f"), Some(&b"x=1&y=2"[..]));
        assert_eq!(query_of_target(b"/a?x=1?y"), Some(&b"x=1?y"[..]));
        assert_eq!(query_of_target(b"/a?"), Some(&b""[..]));
        // A `?` inside a fragment still starts the query: a method override hidden there is
        // checked rather than missed (clients do not send fragments; a proxy may pass them).
        assert_eq!(query_of_target(b"/a#f?x"), Some(&b"x"[..]));
        assert_eq!(query_of_target(b"/a"), None);
    }
}
