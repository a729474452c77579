//! Which request methods the gateway accepts, and in which spelling it decides on them.
//! Methods are case-sensitive in HTTP, but Django, Flask and others upper-case them before
//! routing, so `post` must meet the rules for `POST`: the method is upper-cased for
//! matching, for keys and for the upstream alike. A method that is neither registered
//! (IANA's HTTP Method Registry) nor named by a rule is refused, so that no made-up
//! method can reach a key or an upstream that would treat it as something else.

use crate::rules::header_names;
use crate::rules::RuleSet;
use hyper::header::{HeaderMap, HeaderName};
use hyper::Method;

/// The longest method a request or a rule may have (the longest registered one,
/// `UPDATEREDIRECTREF`, has 17 bytes).
pub(crate) const MAX_METHOD_BYTES: usize = 32;

/// The IANA HTTP Method Registry, less `PRI` (the HTTP/2 preface) and `*`.
const REGISTERED: [&str; 39] = [
    "ACL",
    "BASELINE-CONTROL",
    "BIND",
    "CHECKIN",
    "CHECKOUT",
    "CONNECT",
    "COPY",
    "DELETE",
    "GET",
    "HEAD",
    "LABEL",
    "LINK",
    "LOCK",
    "MERGE",
    "MKACTIVITY",
    "MKCALENDAR",
    "MKCOL",
    "MKREDIRECTREF",
    "MKWORKSPACE",
    "MOVE",
    "OPTIONS",
    "ORDERPATCH",
    "PATCH",
    "POST",
    "PROPFIND",
    "PROPPATCH",
    "PUT",
    "QUERY",
    "REBIND",
    "REPORT",
    "SEARCH",
    "TRACE",
    "UNBIND",
    "UNCHECKOUT",
    "UNLINK",
    "UNLOCK",
    "UPDATE",
    "UPDATEREDIRECTREF",
    "VERSION-CONTROL",
];

/// Why a method is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MethodRefusal {
    /// Not a method (not a token) or longer than [`MAX_METHOD_BYTES`]: 400.
    Malformed,
    /// Neither registered nor named by a rule: 501, as RFC 9110 says for a method the
    /// server does not implement.
    Unknown,
    /// A method-override header names another method: 400.
    Overridden,
    /// A `_method` query parameter names another method: 400.
    OverriddenByQuery,
    /// `CONNECT`: 400. The gateway is no forward proxy, and a CONNECT forwarded would ask
    /// the upstream for a tunnel on a budget counted as a request.
    Connect,
}

impl MethodRefusal {
    pub(crate) fn status(self) -> u16 {
        match self {
            MethodRefusal::Malformed
            | MethodRefusal::Overridden
            | MethodRefusal::OverriddenByQuery
            | MethodRefusal::Connect => 400,
            MethodRefusal::Unknown => 501,
        }
    }

    pub(crate) fn message(self) -> &'static str {
        match self {
            MethodRefusal::Malformed => {
                "Bad Request: the method is not a token of at most 32 bytes\n"
            }
            MethodRefusal::Unknown => "Not Implemented: unknown method\n",
            MethodRefusal::Overridden => {
                "Bad Request: a method-override header names another method than the \
                 request's (see [requests] method_override_headers)\n"
            }
            MethodRefusal::OverriddenByQuery => {
                "Bad Request: a _method query parameter names another method than the \
                 request's (see [requests] method_override_headers)\n"
            }
            MethodRefusal::Connect => "Bad Request: CONNECT is not supported\n",
        }
    }
}

/// The headers by which Rails, Symfony, Express's `method-override`, ASP.NET Web API and
/// Google's APIs let a POST say which method it really is. An upstream that honours them
/// runs another method than the one the rules were matched on.
/// Made once: `HeaderName::from_static` checks its text each time it runs.
static OVERRIDE_HEADERS: [HeaderName; 3] = [
    HeaderName::from_static("x-http-method-override"),
    HeaderName::from_static("x-http-method"),
    HeaderName::from_static("x-method-override"),
];

/// What to do with a method-override header, or a `_method` query parameter, that names
/// another method (`[requests] method_override_headers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MethodOverrides {
    /// Refused with 400: deciding on the header's method instead would let a POST escape
    /// a POST rule wherever the upstream ignores the header, so no decision is right.
    Reject,
    /// Passed on: for upstreams known to ignore these headers.
    Keep,
}

/// Refuses, under [`MethodOverrides::Reject`], a request whose method-override headers
/// name another method than `method` (the accepted, upper-case one).
pub(crate) fn check_overrides(
    headers: &HeaderMap,
    method: &Method,
    policy: MethodOverrides,
) -> Result<(), MethodRefusal> {
    if policy == MethodOverrides::Keep {
        return Ok(());
    }
    // Every spelling of each name: with `headers_with_underscores_action = "allow"`,
    // `X_HTTP_Method_Override` reaches a CGI-style upstream as this header.
    let other = header_names::any_value_of(headers, &OVERRIDE_HEADERS, |value| {
        !value
            .as_bytes()
            .trim_ascii()
            .eq_ignore_ascii_case(method.as_str().as_bytes())
    });
    match other {
        true => Err(MethodRefusal::Overridden),
        false => Ok(()),
    }
}

/// Refuses, under [`MethodOverrides::Reject`], a request whose query (the bytes after
/// `?`, as sent) has a `_method` parameter naming another method than `method`: Rack's
/// `MethodOverride`, Symfony, Laravel and Express's `method-override` read it there.
/// The parameter is found as those parsers would find it: pairs split at `&` and `;`
/// (older Rack and Python split at both), name and value percent-decoded with `+` as a
/// space, the name compared regardless of case and with PHP's renaming of `.` and ` `
/// (and an unclosed `[`) to `_` and its dropping of leading spaces, the value trimmed and
/// compared regardless of case. Every occurrence counts, since parsers differ in whether
/// the first or the last wins. Like an override header, an empty value is refused too.
pub(crate) fn check_query_override(
    query: Option<&[u8]>,
    method: &Method,
    policy: MethodOverrides,
) -> Result<(), MethodRefusal> {
    let Some(query) = query else {
        return Ok(());
    };
    if policy == MethodOverrides::Keep || query.is_empty() {
        return Ok(());
    }
    let mut name = Vec::new();
    let mut value = Vec::new();
    for pair in query.split(|&b| b == b'&' || b == b';') {
        let mut parts = pair.splitn(2, |&b| b == b'=');
        let raw_name = parts.next().unwrap_or_default();
        let raw_value = parts.next().unwrap_or_default();
        form_decode(raw_name, &mut name);
        if !is_method_parameter(&name) {
            continue;
        }
        form_decode(raw_value, &mut value);
        if !value
            .trim_ascii()
            .eq_ignore_ascii_case(method.as_str().as_bytes())
        {
            return Err(MethodRefusal::OverriddenByQuery);
        }
    }
    Ok(())
}

/// Whether a decoded parameter name is `_method` to some framework.
fn is_method_parameter(name: &[u8]) -> bool {
    let name = name.trim_ascii();
    const WANTED: &[u8] = b"_method";
    name.len() == WANTED.len()
        && name.iter().zip(WANTED).all(|(&got, &want)| {
            let got = match got {
                b'.' | b' ' | b'[' => b'_',
                other => other.to_ascii_lowercase(),
            };
            got == want
        })
}

/// `application/x-www-form-urlencoded` decoding into `out`: `+` is a space, `%XX` its
/// byte; a `%` not followed by two hex digits is kept as it is, as the parsers do.
fn form_decode(raw: &[u8], out: &mut Vec<u8>) {
    out.clear();
    let mut i = 0;
    while let Some(&byte) = raw.get(i) {
        let decoded = match byte {
            b'+' => Some((b' ', 1)),
            b'%' => match (raw.get(i + 1).and_then(hex), raw.get(i + 2).and_then(hex)) {
                (Some(high), Some(low)) => Some((high << 4 | low, 3)),
                _ => None,
            },
            _ => None,
        };
        let (byte, width) = decoded.unwrap_or((byte, 1));
        out.push(byte);
        i += width;
    }
}

fn hex(digit: &u8) -> Option<u8> {
    (*digit as char).to_digit(16).map(|d| d as u8)
}

/// Refuses `CONNECT`, whatever its target: it asks for a tunnel, not a resource.
pub(crate) fn check_connect(method: &Method) -> Result<(), MethodRefusal> {
    match *method == Method::CONNECT {
        true => Err(MethodRefusal::Connect),
        false => Ok(()),
    }
}

/// Whether `upper` (upper-case) is in the registry.
pub(crate) fn is_registered(upper: &str) -> bool {
    REGISTERED.contains(&upper)
}

/// The method of a request, upper-cased, if the gateway accepts it under `rules`.
pub(crate) fn accepted(raw: &[u8], rules: &RuleSet) -> Result<Method, MethodRefusal> {
    if raw.is_empty() || raw.len() > MAX_METHOD_BYTES {
        return Err(MethodRefusal::Malformed);
    }
    let upper = raw.to_ascii_uppercase();
    let method = Method::from_bytes(&upper).map_err(|_| MethodRefusal::Malformed)?;
    check_connect(&method)?;
    if is_registered(method.as_str()) || rules.names_method(method.as_str()) {
        Ok(method)
    } else {
        Err(MethodRefusal::Unknown)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::parse;

    fn rules(methods: &str) -> RuleSet {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:1\"\nupstream = \"http://127.0.0.1:2\"\n\
             [[rule]]\nname = \"a\"\nmethods = {methods}\nlimits = [\"5/1m\"]\n"
        );
        parse(&text).unwrap().rules
    }

    #[test]
    fn case_registry_and_rules() {
        let set = rules("[\"purge\"]");
        assert_eq!(accepted(b"post", &set), Ok(Method::POST));
        assert_eq!(accepted(b"Get", &set), Ok(Method::GET));
        assert_eq!(accepted(b"propfind", &set).unwrap().as_str(), "PROPFIND");
        assert_eq!(accepted(b"purge", &set).unwrap().as_str(), "PURGE");
        assert_eq!(accepted(b"BREW", &set), Err(MethodRefusal::Unknown));
        assert_eq!(accepted(b"", &set), Err(MethodRefusal::Malformed));
        assert_eq!(accepted(b"GE T", &set), Err(MethodRefusal::Malformed));
        assert_eq!(accepted(b"G\xc3\xa9T", &set), Err(MethodRefusal::Malformed));
        let long = vec![b'A'; MAX_METHOD_BYTES + 1];
        assert_eq!(accepted(&long, &set), Err(MethodRefusal::Malformed));
        assert!(REGISTERED.iter().all(|m| m.len() <= MAX_METHOD_BYTES));
    }

    #[test]
    fn method_overrides() {
        let with = |name: &str, value: &'static str| {
            let mut headers = HeaderMap::new();
            let name = HeaderName::from_bytes(name.as_bytes()).unwrap();
            headers.insert(name, value.parse().unwrap());
            headers
        };
        let reject = MethodOverrides::Reject;
        assert_eq!(
            check_overrides(&HeaderMap::new(), &Method::POST, reject),
            Ok(())
        );
        for name in &OVERRIDE_HEADERS {
            assert_eq!(
                check_overrides(&with(name.as_str(), "delete"), &Method::POST, reject),
                Err(MethodRefusal::Overridden),
                "{name}"
            );
        }
        assert_eq!(
            check_overrides(
                &with("x-http-method-override", " post "),
                &Method::POST,
                reject
            ),
            Ok(()),
            "the method itself"
        );
        let keep = MethodOverrides::Keep;
        assert_eq!(
            check_overrides(&with("x-http-method", "DELETE"), &Method::POST, keep),
            Ok(())
        );
        // The underscore spelling is the same header to a CGI-style upstream.
        assert_eq!(
            check_overrides(
                &with("x_http_method_override", "DELETE"),
                &Method::POST,
                reject
            ),
            Err(MethodRefusal::Overridden)
        );
    }

    #[test]
    fn method_in_the_query() {
        let check = |query: &str| {
            check_query_override(
                Some(query.as_bytes()),
                &Method::POST,
                MethodOverrides::Reject,
            )
        };
        let refused = Err(MethodRefusal::OverriddenByQuery);
        for query in [
            "_method=DELETE",
            "a=1&_method=delete",
            "_method=POST&_method=DELETE",
            "_method=DELETE&_method=POST",
            "a=1;_method=PUT",
            "%5Fmethod=DELETE",
            "%5fMETHOD=DELETE",
            "_%6Dethod=DELETE",
            "_method=DEL%45TE",
            "_method=%44ELETE",
            ".method=DELETE",
            "+_method=DELETE",
            "_method+=DELETE",
            "_method=",
            "_method",
        ] {
            assert_eq!(check(query), refused, "{query}");
        }
        for query in [
            "",
            "_method=POST",
            "_method=post",
            "_method=+p%4fst+",
            "method=DELETE",
            "x_method=DELETE",
            "_methods=DELETE",
            "q=_method%3DDELETE",
            "%=DELETE&%zz",
        ] {
            assert_eq!(check(query), Ok(()), "{query}");
        }
        assert_eq!(
            check_query_override(None, &Method::POST, MethodOverrides::Reject),
            Ok(())
        );
        assert_eq!(
            check_query_override(
                Some(b"_method=DELETE"),
                &Method::POST,
                MethodOverrides::Keep
            ),
            Ok(())
        );
        // Bytes that are no UTF-8, or a lone `%` at the end, are compared as they are.
        assert_eq!(
            check_query_override(
                Some(b"_method=\xff%"),
                &Method::POST,
                MethodOverrides::Reject
            ),
            refused
        );
    }

    #[test]
    fn connect_is_refused_even_when_a_rule_names_it() {
        let set = rules("[\"CONNECT\"]");
        assert_eq!(accepted(b"CONNECT", &set), Err(MethodRefusal::Connect));
        assert_eq!(accepted(b"connect", &set), Err(MethodRefusal::Connect));
        assert_eq!(MethodRefusal::Connect.status(), 400);
    }
}
