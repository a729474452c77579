//! Check mode: a proxy (nginx `auth_request`, Traefik `forwardAuth`, Envoy's `ext_authz`)
//! asks about a client's request and gets 200 or the deny status, with the rate-limit
//! headers; the gateway forwards nothing.

use super::judgement::{shown_allowed, Asked, Judgement};
use super::responses::{local, unavailable, Refusal};
use super::target::{checked_method, path_of_target, query_of_target};
use super::Body;
use crate::app::Gateway;
use crate::decider::{End, RuleOutcome};
use crate::headers;
use crate::rules::canonical::canonicalize;
use crate::rules::header_names;
use crate::rules::RuleSet;
use crate::verdict::Verdict;
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue};
use hyper::{Request, Response, StatusCode};
use smallvec::SmallVec;
use std::net::IpAddr;

/// The client's request as the proxy reports it: its method and target (path and query),
/// from the proxy's headers or else the check request's own.
struct Reported<'a> {
    method: &'a [u8],
    path: &'a [u8],
    query: Option<&'a [u8]>,
}

impl Gateway {
    pub(super) async fn check(
        &self,
        peer: IpAddr,
        mut request: Request<Incoming>,
    ) -> Response<Body> {
        // The client's headers, passed on by the proxy, reach the upstream as they are: a
        // name with `_` is refused here as in proxy mode (`drop_header` is refused for check
        // mode when the file loads, since only the proxy could drop it).
        let underscores = self.server.requests.underscore_headers;
        if let Err(name) = header_names::screen(request.headers_mut(), underscores) {
            return Refusal::underscore(&name).into();
        }
        let rules = self.rules();
        let reported = match self.reported(peer, &request) {
            Ok(reported) => reported,
            Err(refusal) => return refusal.into(),
        };
        let headers = request.headers();
        // The proxy passes the client's headers on with the request: an override among
        // them reaches the upstream just as in proxy mode.
        let policy = self.server.requests.method_overrides;
        let method = match checked_method(reported.method, headers, reported.query, &rules, policy)
        {
            Ok(method) => method,
            Err(refusal) => return refusal.into(),
        };
        let path = match canonicalize(reported.path, &self.server.requests.paths) {
            Ok(path) => path,
            Err(refusal) => return Refusal::from(refusal).into(),
        };
        let asked = Asked {
            peer,
            method: method.as_str(),
            path: &path,
            headers,
        };
        match self.judge(&rules, asked).await {
            Ok(judgement) => self.answer(&judgement, &rules),
            Err(refusal) => refusal.into(),
        }
    }

    /// The request asked about: from the headers the configured proxy sets, and only when
    /// the peer is a trusted proxy; else the check request's own method and path (what
    /// Envoy's `ext_authz` sends).
    fn reported<'a>(
        &self,
        peer: IpAddr,
        request: &'a Request<Incoming>,
    ) -> Result<Reported<'a>, Refusal> {
        let headers = request.headers();
        let trusted = self.server.is_trusted_proxy(peer);
        let [method_header, uri_header] = self.server.check_headers.names();
        // Two values of one header leave open which one the proxy wrote: refused.
        if trusted && (repeated(headers, method_header) || repeated(headers, uri_header)) {
            let body = "Bad Request: the proxy's request header appears twice\n";
            return Err(Refusal::new(400, body));
        }
        let asked = |name: &str| trusted.then(|| headers.get(name)).flatten();
        // One of the pair without the other is a proxy set up by half (nginx with
        // `X-Original-URI` but no `X-Original-Method`): the check request's own GET would
        // stand in for the client's method, and a POST rule would never match. Refused.
        if asked(method_header).is_some() != asked(uri_header).is_some() {
            return Err(Refusal::new(
                400,
                "Bad Request: the proxy sent one of its two request headers (method and URI) \
                 without the other\n",
            ));
        }
        // A header the trusted proxy sent is used as it is, whatever its bytes (nginx passes
        // raw UTF-8 from $request_uri); one that cannot be a method or a path is refused,
        // never replaced by the check request's own method or path, which no rule expects.
        let method =
            asked(method_header).map_or(request.method().as_str().as_bytes(), |v| v.as_bytes());
        Ok(match asked(uri_header) {
            Some(uri) => Reported {
                method,
                path: path_of_target(uri.as_bytes()),
                query: query_of_target(uri.as_bytes()),
            },
            None => Reported {
                method,
                path: request.uri().path().as_bytes(),
                query: request.uri().query().map(str::as_bytes),
            },
        })
    }

    /// 200 with the rate-limit headers, the deny status, or 503.
    fn answer(&self, judgement: &Judgement, rules: &RuleSet) -> Response<Body> {
        let legacy = rules.legacy_headers;
        match judgement.stacked.end {
            End::Denied { binding, .. } => {
                let status = StatusCode::from_u16(self.server.check_deny_status)
                    .unwrap_or(StatusCode::TOO_MANY_REQUESTS);
                judgement.too_many(binding, legacy, status)
            }
            End::Closed { .. } => unavailable(),
            End::Unlimited => local(StatusCode::OK, ""),
            End::Allowed => {
                let mut response = local(StatusCode::OK, "");
                if let Some(failure) = judgement.failed_open() {
                    response.headers_mut().insert(
                        rules.fail_open_header.clone(),
                        HeaderValue::from_static(failure.label()),
                    );
                }
                let verdicts: SmallVec<[Option<Verdict>; 2]> = (judgement.stacked.outcomes.iter())
                    .map(|o| match o {
                        RuleOutcome::Allowed(v) => Some(v.clone()),
                        _ => None,
                    })
                    .collect();
                let (shown, binding) = shown_allowed(&judgement.applying, &verdicts);
                headers::add_all(response.headers_mut(), &shown, binding, legacy, false);
                response
            }
        }
    }
}

/// Whether the header `name` has two values or more.
fn repeated(headers: &HeaderMap, name: &str) -> bool {
    headers.get_all(name).iter().nth(1).is_some()
}
