//! Which request methods the gateway accepts, and in which spelling it decides on them.
//! Methods are case-sensitive in HTTP, but Django, Flask and others upper-case them before
//! routing, so `post` must meet the rules for `POST`: the method is upper-cased for
//! matching, for keys and for the upstream alike. A method that is neither registered
//! (IANA's HTTP Method Registry) nor named by a rule is refused, so that no made-up
//! method can reach a key or an upstream that would treat it as something else.

use crate::rules::RuleSet;
use hyper::header::HeaderMap;
use hyper::Method;

/// The longest method a request or a rule may have (the longest registered one,
/// `UPDATEREDIRECTREF`, has 17 bytes).
pub const MAX_METHOD_BYTES: usize = 32;

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
pub enum MethodRefusal {
    /// Not a method (not a token) or longer than [`MAX_METHOD_BYTES`]: 400.
    Malformed,
    /// Neither registered nor named by a rule: 501, as RFC 9110 says for a method the
    /// server does not implement.
    Unknown,
    /// A method-override header names another method: 400.
    Overridden,
}

impl MethodRefusal {
    pub fn status(self) -> u16 {
        match self {
            MethodRefusal::Malformed | MethodRefusal::Overridden => 400,
            MethodRefusal::Unknown => 501,
        }
    }

    pub fn message(self) -> &'static str {
        match self {
            MethodRefusal::Malformed => {
                "Bad Request: the method is not a token of at most 32 bytes\n"
            }
            MethodRefusal::Unknown => "Not Implemented: unknown method\n",
            MethodRefusal::Overridden => {
                "Bad Request: a method-override header names another method than the \
                 request's\n"
            }
        }
    }
}

/// The headers by which Rails, Symfony, Express's `method-override`, ASP.NET Web API and
/// Google's APIs let a POST say which method it really is. An upstream that honours them
/// runs another method than the one the rules were matched on.
const OVERRIDE_HEADERS: [&str; 3] = [
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];

/// What to do with a method-override header that names another method
/// (`[requests] method_override_headers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MethodOverrides {
    /// Refused with 400: deciding on the header's method instead would let a POST escape
    /// a POST rule wherever the upstream ignores the header, so no decision is right.
    Reject,
    /// Passed on: for upstreams known to ignore these headers.
    Keep,
}

/// Refuses, under [`MethodOverrides::Reject`], a request whose method-override headers
/// name another method than `method` (the accepted, upper-case one).
pub fn check_overrides(
    headers: &HeaderMap,
    method: &Method,
    policy: MethodOverrides,
) -> Result<(), MethodRefusal> {
    if policy == MethodOverrides::Keep {
        return Ok(());
    }
    let other = OVERRIDE_HEADERS
        .iter()
        .flat_map(|name| headers.get_all(*name))
        .any(|value| {
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

/// Whether `upper` (upper-case) is in the registry.
pub fn is_registered(upper: &str) -> bool {
    REGISTERED.contains(&upper)
}

/// The method of a request, upper-cased, if the gateway accepts it under `rules`.
pub fn accepted(raw: &[u8], rules: &RuleSet) -> Result<Method, MethodRefusal> {
    if raw.is_empty() || raw.len() > MAX_METHOD_BYTES {
        return Err(MethodRefusal::Malformed);
    }
    let upper = raw.to_ascii_uppercase();
    let method = Method::from_bytes(&upper).map_err(|_| MethodRefusal::Malformed)?;
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
        let with = |name: &'static str, value: &'static str| {
            let mut headers = HeaderMap::new();
            headers.insert(name, value.parse().unwrap());
            headers
        };
        let reject = MethodOverrides::Reject;
        assert_eq!(
            check_overrides(&HeaderMap::new(), &Method::POST, reject),
            Ok(())
        );
        for name in OVERRIDE_HEADERS {
            assert_eq!(
                check_overrides(&with(name, "delete"), &Method::POST, reject),
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
    }
}
