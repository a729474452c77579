//! Header names with `_` (`[requests] headers_with_underscores_action`, named after
//! Envoy's option). CGI and the stacks built on its variables (Python's WSGI, older
//! gunicorn, FastCGI and PHP, Rack) turn `X-Api-Key` and `X_Api_Key` alike into
//! `HTTP_X_API_KEY`, so behind them a header the gateway compares by its exact name has a
//! second spelling: `X_HTTP_Method_Override`, `X_Api_Key` or `X_RateLimit_Fail_Open` would
//! do at the upstream what the hyphenated name does, unseen by the gateway.
//!
//! By default such a request is refused. With `drop_header` those headers are removed
//! before anything reads them, so the upstream never sees them. With `allow` they pass,
//! and every name the gateway itself compares against a request (a rule's key header, the
//! method-override headers, the fail-open mark) is compared with `_` read as `-`, so that
//! the underscore spelling is one more spelling of the same header and bypasses nothing.
//! The check-mode headers the trusted proxy writes (`X-Original-URI`...) and
//! `X-Forwarded-For` stay exact: those are read from the proxy, and folding would let a
//! client's `X_Original_URI` stand beside the proxy's.

use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use smallvec::SmallVec;

/// What to do with a request header whose name has `_`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum UnderscoreHeaders {
    /// 400, naming the header and the setting (`"reject_request"`, the default).
    Reject,
    /// Removed before the decision and before forwarding (`"drop_header"`, proxy mode).
    Drop,
    /// Kept and forwarded; the gateway's own names are compared with `_` as `-`
    /// (`"allow"`).
    Allow,
}

/// Applies `action` to `headers`: under [`UnderscoreHeaders::Reject`] the first name
/// with `_` is the error; under [`UnderscoreHeaders::Drop`] every such header is removed.
pub(crate) fn screen(headers: &mut HeaderMap, action: UnderscoreHeaders) -> Result<(), HeaderName> {
    if action == UnderscoreHeaders::Allow {
        return Ok(());
    }
    // The common case, no such name: one look at each name and nothing allocated.
    let Some(first) = headers.keys().find(|name| has_underscore(name)) else {
        return Ok(());
    };
    if action == UnderscoreHeaders::Reject {
        return Err(first.clone());
    }
    let underscored: Vec<HeaderName> = headers
        .keys()
        .filter(|name| has_underscore(name))
        .cloned()
        .collect();
    for name in underscored {
        headers.remove(name);
    }
    Ok(())
}

fn has_underscore(name: &HeaderName) -> bool {
    name.as_str().as_bytes().contains(&b'_')
}

/// Whether two names are one with `_` read as `-` (names in a map are lower case, and so
/// is every `HeaderName`).
fn same_folded(a: &str, b: &str) -> bool {
    let fold = |byte: u8| if byte == b'_' { b'-' } else { byte };
    a.len() == b.len() && a.bytes().zip(b.bytes()).all(|(x, y)| fold(x) == fold(y))
}

/// Whether a name has another spelling under the fold at all.
fn foldable(name: &HeaderName) -> bool {
    name.as_str().bytes().any(|b| b == b'-' || b == b'_')
}

/// Every value of `name` under each of its spellings, the exact one first. Under
/// `reject_request` and `drop_header` no name with `_` is left by the time this is asked,
/// so the only spelling found is the exact one, after one look at each name.
pub(crate) fn get_all<'a>(
    headers: &'a HeaderMap,
    name: &HeaderName,
) -> SmallVec<[&'a HeaderValue; 2]> {
    let mut values: SmallVec<[&HeaderValue; 2]> = headers.get_all(name).iter().collect();
    if foldable(name) {
        for other in headers.keys().filter(|other| *other != name) {
            if same_folded(other.as_str(), name.as_str()) {
                values.extend(headers.get_all(other));
            }
        }
    }
    values
}

/// Whether any value of any of `names`, under any of their spellings (see [`get_all`]),
/// satisfies `test`. One look at each header, where asking [`get_all`] for each name would
/// hash every name and look at each header once per name: this is asked of every request.
pub(crate) fn any_value_of(
    headers: &HeaderMap,
    names: &[HeaderName],
    mut test: impl FnMut(&HeaderValue) -> bool,
) -> bool {
    headers.iter().any(|(name, value)| {
        names
            .iter()
            .any(|wanted| same_folded(name.as_str(), wanted.as_str()))
            && test(value)
    })
}

/// The first value of `name` under any of its spellings (see [`get_all`]).
pub(crate) fn get<'a>(headers: &'a HeaderMap, name: &HeaderName) -> Option<&'a HeaderValue> {
    get_all(headers, name).first().copied()
}

/// Removes `name` under every spelling.
pub(crate) fn remove_all(headers: &mut HeaderMap, name: &HeaderName) {
    headers.remove(name);
    if !foldable(name) {
        return;
    }
    let others: SmallVec<[HeaderName; 1]> = headers
        .keys()
        .filter(|other| same_folded(other.as_str(), name.as_str()))
        .cloned()
        .collect();
    for other in others {
        headers.remove(other);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(lines: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in lines {
            headers.append(
                HeaderName::from_static(name),
                HeaderValue::from_static(value),
            );
        }
        headers
    }

    #[test]
    fn screen_refuses_drops_or_keeps() {
        let lines = [("x-api-key", "a"), ("x_api_key", "b"), ("x_other", "c")];
        let mut headers = map(&lines);
        let refused = screen(&mut headers, UnderscoreHeaders::Reject).unwrap_err();
        assert!(refused.as_str().contains('_'));
        assert_eq!(headers.len(), 3, "refusing changes nothing");
        screen(&mut headers, UnderscoreHeaders::Allow).unwrap();
        assert_eq!(headers.len(), 3);
        screen(&mut headers, UnderscoreHeaders::Drop).unwrap();
        assert_eq!(headers, map(&[("x-api-key", "a")]));
        let mut plain = map(&[("x-api-key", "a")]);
        assert_eq!(screen(&mut plain, UnderscoreHeaders::Reject), Ok(()));
    }

    #[test]
    fn lookups_read_underscores_as_hyphens() {
        let headers = map(&[("x_api_key", "b"), ("x-api-key", "a"), ("x_api-key", "c")]);
        let name = HeaderName::from_static("x-api-key");
        let values: Vec<&str> = get_all(&headers, &name)
            .iter()
            .map(|v| v.to_str().unwrap())
            .collect();
        assert_eq!(values.len(), 3);
        assert_eq!(values[0], "a", "the exact spelling first");
        assert_eq!(get(&headers, &name).unwrap(), "a");
        let only_underscore = map(&[("x_api_key", "b")]);
        assert_eq!(get(&only_underscore, &name).unwrap(), "b");
        // Both ways: a rule keyed on `X_Api_Key` reads `X-Api-Key` too.
        assert_eq!(
            get(
                &map(&[("x-api-key", "a")]),
                &HeaderName::from_static("x_api_key")
            )
            .unwrap(),
            "a"
        );
        assert!(get(&map(&[("x_api_keys", "a")]), &name).is_none());

        let mut headers = map(&[
            ("x_ratelimit_fail_open", "timeout"),
            ("x-ratelimit-fail-open", "x"),
            ("other", "y"),
        ]);
        remove_all(
            &mut headers,
            &HeaderName::from_static("x-ratelimit-fail-open"),
        );
        assert_eq!(headers, map(&[("other", "y")]));
    }

    #[test]
    fn any_value_of_sees_every_value_of_every_spelling() {
        let names = [
            HeaderName::from_static("x-one"),
            HeaderName::from_static("x-two"),
        ];
        let headers = map(&[
            ("x-one", "a"),
            ("x-one", "b"),
            ("x_two", "c"),
            ("x-three", "d"),
        ]);
        let is = |wanted: &'static str| move |v: &HeaderValue| v == wanted;
        assert!(any_value_of(&headers, &names, is("b")), "a second value");
        assert!(any_value_of(&headers, &names, is("c")), "another spelling");
        assert!(!any_value_of(&headers, &names, is("d")), "another name");
        assert!(!any_value_of(&HeaderMap::new(), &names, |_| true));
    }
}
