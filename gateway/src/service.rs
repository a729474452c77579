//! The gateway's request path. Both modes make the same decision (rule, key, RL.HIT) and
//! differ only in what they do with it: proxy mode forwards or answers 429, check mode
//! answers 200 or 429 to the proxy that asked.

use crate::canonical::{canonicalize, PathRefusal};
use crate::client_ip::client_ip;
use crate::config::{Mode, ServerSettings};
use crate::decider::{Decider, Decision};
use crate::headers;
use crate::methods;
use crate::metrics::{Metrics, Outcome};
use crate::rules::{RequestFacts, Rule, RuleSet};
use crate::upstream::{strip_hop_by_hop, wants_upgrade, Upstream, UpstreamError};
use crate::verdict::Verdict;
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use std::net::IpAddr;
use std::sync::{Arc, RwLock};

/// A response body: the upstream's, streamed, or one the gateway wrote.
pub type Body = Either<Incoming, Full<Bytes>>;

pub struct Gateway {
    server: ServerSettings,
    key_prefix: String,
    rules: RwLock<Arc<RuleSet>>,
    decider: Decider,
    upstream: Option<Upstream>,
}

/// What the decision means for the request.
struct Judgement {
    rule: Option<Arc<Rule>>,
    key: String,
    decision: Decision,
}

impl Gateway {
    pub fn new(
        server: ServerSettings,
        key_prefix: String,
        rules: RuleSet,
        decider: Decider,
    ) -> Self {
        let upstream = server
            .upstream
            .clone()
            .map(|base| Upstream::new(base, server.upstream_timeout));
        Gateway {
            server,
            key_prefix,
            rules: RwLock::new(Arc::new(rules)),
            decider,
            upstream,
        }
    }

    /// The counters, kept by the decider, which counts its own work too.
    pub fn metrics(&self) -> &Metrics {
        self.decider.metrics()
    }

    /// Whether the circuit breaker skips Redis now (`rl_gateway_breaker_open`).
    pub fn breaker_open(&self) -> bool {
        self.decider.breaker_open()
    }

    /// The `[server]` settings it runs on.
    pub fn server(&self) -> &ServerSettings {
        &self.server
    }

    pub fn rules(&self) -> Arc<RuleSet> {
        self.rules.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn replace_rules(&self, rules: RuleSet) {
        *self.rules.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(rules);
        self.decider.forget_denials();
    }

    pub async fn handle(&self, peer: IpAddr, request: Request<Incoming>) -> Response<Body> {
        match self.server.mode {
            Mode::Proxy => self.proxy(peer, request).await,
            Mode::Check => self.check(peer, request).await,
        }
    }

    /// Finds the rule, makes the key and asks Redis; counts the outcome.
    async fn judge(
        &self,
        rules: &RuleSet,
        peer: IpAddr,
        method: &str,
        path: &str,
        headers: &HeaderMap,
    ) -> Result<Judgement, Response<Body>> {
        let ignore_case = self.server.requests.paths.case_insensitive;
        let Some(rule) = rules.find_with_case(method, path, ignore_case) else {
            return Ok(Judgement {
                rule: None,
                key: String::new(),
                decision: Decision::Unlimited,
            });
        };
        // The key header twice: which one names the client is the upstream's choice (the
        // first, the last, or both joined), so counting either would let any other value
        // buy a fresh budget. Refused, as check mode refuses a repeated trusted header.
        if let Some(name) = rule.key_header() {
            if headers.get_all(name).iter().nth(1).is_some() {
                return Err(refused_text(
                    StatusCode::BAD_REQUEST,
                    format!("Bad Request: the header {name} appears twice\n"),
                ));
            }
        }
        let facts = RequestFacts {
            method,
            path,
            headers,
            client_ip: self.server.client_network(client_ip(
                peer,
                headers,
                &self.server.trusted_proxies,
            )),
        };
        let key = rule.key(&self.key_prefix, &facts);
        let decision = self.decider.hit(rule, &key).await;
        let outcome = match &decision {
            Decision::Unlimited => None,
            Decision::Allowed(_) => Some(Outcome::Allowed),
            Decision::Denied { cached: false, .. } => Some(Outcome::Denied),
            Decision::Denied { cached: true, .. } => Some(Outcome::DeniedCached),
            Decision::ShadowDenied => Some(Outcome::ShadowDenied),
            Decision::Failed(failure) if rule.on_failure.closes(*failure) => {
                Some(Outcome::FailClosed)
            }
            Decision::Failed(failure) => {
                self.metrics().fail_open(*failure);
                Some(Outcome::FailOpen)
            }
        };
        if let Some(outcome) = outcome {
            self.metrics().decision(&rule.name, outcome);
        }
        Ok(Judgement {
            rule: Some(rule.clone()),
            key,
            decision,
        })
    }

    async fn proxy(&self, peer: IpAddr, mut request: Request<Incoming>) -> Response<Body> {
        if wants_upgrade(request.headers()) {
            // WebSocket and other upgrades are not proxied: say so rather than turning
            // them into plain requests.
            return local(StatusCode::NOT_IMPLEMENTED, "Upgrades are not supported\n");
        }
        // Before the decision: a header the client names in Connection (say, the one the
        // rule keys on) never reaches the upstream, so it must not choose the budget either.
        strip_hop_by_hop(request.headers_mut());
        let rules = self.rules();
        // The method and path are decided on in their canonical spelling, and the upstream
        // gets that same spelling: what it routes is what was counted.
        let method = match methods::accepted(request.method().as_str().as_bytes(), &rules).and_then(
            |method| {
                let policy = self.server.requests.method_overrides;
                methods::check_overrides(request.headers(), &method, policy).map(|()| method)
            },
        ) {
            Ok(method) => method,
            Err(refusal) => return refused(refusal.status(), refusal.message()),
        };
        let path = match canonicalize(request.uri().path().as_bytes(), &self.server.requests.paths)
        {
            Ok(path) => path,
            Err(refusal) => return refused(refusal.status(), refusal.message()),
        };
        if let Err(refusal) = rewrite_target(&mut request, &method, &path) {
            return refused(refusal.status(), refusal.message());
        }
        let judgement = match self
            .judge(&rules, peer, method.as_str(), &path, request.headers())
            .await
        {
            Ok(judgement) => judgement,
            Err(refusal) => return refusal,
        };
        let Judgement {
            rule,
            key,
            decision,
        } = judgement;
        let mut fail_open_mark = None;
        let mut charged = None;
        match (&rule, &decision) {
            (Some(rule), Decision::Denied { verdict, .. }) => {
                return too_many(
                    rule,
                    verdict,
                    rules.legacy_headers,
                    StatusCode::TOO_MANY_REQUESTS,
                );
            }
            (Some(rule), Decision::Failed(failure)) if rule.on_failure.closes(*failure) => {
                return unavailable()
            }
            (Some(_), Decision::Failed(failure)) => {
                fail_open_mark = Some(HeaderValue::from_static(failure.label()));
            }
            (Some(rule), Decision::Allowed(verdict)) => charged = Some((rule, verdict)),
            _ => {}
        }
        let Some(upstream) = &self.upstream else {
            return unavailable();
        };
        let mut response = match upstream
            .forward(request, peer, &rules.fail_open_header, fail_open_mark)
            .await
        {
            Ok(response) => response.map(Either::Left),
            Err(UpstreamError::Failed(error)) => {
                self.metrics().upstream_error();
                crate::logging::log!("upstream error: {error}");
                local(StatusCode::BAD_GATEWAY, "Bad Gateway\n")
            }
            Err(UpstreamError::Timeout) => {
                self.metrics().upstream_error();
                local(StatusCode::GATEWAY_TIMEOUT, "Gateway Timeout\n")
            }
        };
        if let Some((rule, verdict)) = charged {
            let mut shown = None;
            if !rule.counts(response.status().as_u16()) {
                // Refunded before answering, so that the client's next request sees it.
                shown = self.decider.refund(rule, &key).await;
            }
            let shown = shown.as_ref().unwrap_or(verdict);
            add_headers(
                response.headers_mut(),
                rule,
                shown,
                rules.legacy_headers,
                false,
            );
        }
        response
    }

    async fn check(&self, peer: IpAddr, request: Request<Incoming>) -> Response<Body> {
        let rules = self.rules();
        let headers = request.headers();
        // The request asked about: from the headers the configured proxy sets, and only
        // when the peer is a trusted proxy; else the check request's own method and path
        // (what Envoy's ext_authz sends).
        let trusted = self.server.is_trusted_proxy(peer);
        let [method_header, uri_header] = self.server.check_headers.names();
        // Two values of one header leave open which one the proxy wrote: refused.
        let repeated = |name: &str| headers.get_all(name).iter().nth(1).is_some();
        if trusted && (repeated(method_header) || repeated(uri_header)) {
            return refused(
                400,
                "Bad Request: the proxy's request header appears twice\n",
            );
        }
        let asked = |name: &str| trusted.then(|| headers.get(name)).flatten();
        // One of the pair without the other is a proxy set up by half (nginx with
        // `X-Original-URI` but no `X-Original-Method`): the check request's own GET would
        // stand in for the client's method, and a POST rule would never match. Refused.
        if asked(method_header).is_some() != asked(uri_header).is_some() {
            return refused(
                400,
                "Bad Request: the proxy sent one of its two request headers (method and URI) \
                 without the other\n",
            );
        }
        // A header the trusted proxy sent is used as it is, whatever its bytes (nginx passes
        // raw UTF-8 from $request_uri); one that cannot be a method or a path is refused,
        // never replaced by the check request's own method or path, which no rule expects.
        let method =
            asked(method_header).map_or(request.method().as_str().as_bytes(), |v| v.as_bytes());
        // The proxy passes the client's headers on with the request: an override among
        // them reaches the upstream just as in proxy mode.
        let method = match methods::accepted(method, &rules).and_then(|method| {
            let policy = self.server.requests.method_overrides;
            methods::check_overrides(headers, &method, policy).map(|()| method)
        }) {
            Ok(method) => method,
            Err(refusal) => return refused(refusal.status(), refusal.message()),
        };
        let path = match asked(uri_header) {
            Some(uri) => path_of_target(uri.as_bytes()),
            None => request.uri().path().as_bytes(),
        };
        let path = match canonicalize(path, &self.server.requests.paths) {
            Ok(path) => path,
            Err(refusal) => return refused(refusal.status(), refusal.message()),
        };
        let method = method.as_str();
        let Judgement { rule, decision, .. } =
            match self.judge(&rules, peer, method, &path, headers).await {
                Ok(judgement) => judgement,
                Err(refusal) => return refusal,
            };
        let Some(rule) = rule else {
            return local(StatusCode::OK, "");
        };
        match &decision {
            Decision::Denied { verdict, .. } => {
                let status = StatusCode::from_u16(self.server.check_deny_status)
                    .unwrap_or(StatusCode::TOO_MANY_REQUESTS);
                too_many(&rule, verdict, rules.legacy_headers, status)
            }
            Decision::Failed(failure) if rule.on_failure.closes(*failure) => unavailable(),
            Decision::Failed(failure) => {
                let mut response = local(StatusCode::OK, "");
                response.headers_mut().insert(
                    rules.fail_open_header.clone(),
                    HeaderValue::from_static(failure.label()),
                );
                response
            }
            Decision::Allowed(verdict) => {
                let mut response = local(StatusCode::OK, "");
                add_headers(
                    response.headers_mut(),
                    &rule,
                    verdict,
                    rules.legacy_headers,
                    false,
                );
                response
            }
            Decision::ShadowDenied | Decision::Unlimited => local(StatusCode::OK, ""),
        }
    }
}

/// The headers of an enforced rule; a shadow rule shows the client nothing.
fn add_headers(
    headers: &mut HeaderMap,
    rule: &Rule,
    verdict: &Verdict,
    legacy: bool,
    denied: bool,
) {
    if !rule.shadow {
        headers::add(headers, rule, verdict, legacy, denied);
    }
}

/// A refusal of the request itself, with the status a refusal names (400, 414, 501).
fn refused(status: u16, body: &'static str) -> Response<Body> {
    local(
        StatusCode::from_u16(status).unwrap_or(StatusCode::BAD_REQUEST),
        body,
    )
}

/// The path of a request target as a proxy reports it (`X-Original-URI`): the query and
/// fragment cut off, and the scheme and authority of an absolute URI too (nginx reports the
/// request line's target as sent).
fn path_of_target(target: &[u8]) -> &[u8] {
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

/// Makes the request's method and target the canonical ones (origin form, the query kept
/// byte for byte), so that the upstream receives what was decided on.
fn rewrite_target(
    request: &mut Request<Incoming>,
    method: &hyper::Method,
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

/// A refusal whose body names something of the request (a header's name).
fn refused_text(status: StatusCode, body: String) -> Response<Body> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from(body))));
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn local(status: StatusCode, body: &'static str) -> Response<Body> {
    let mut response = Response::new(Either::Right(Full::new(Bytes::from_static(
        body.as_bytes(),
    ))));
    *response.status_mut() = status;
    if !body.is_empty() {
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
    }
    response
}

fn too_many(rule: &Rule, verdict: &Verdict, legacy: bool, status: StatusCode) -> Response<Body> {
    let mut response = local(status, "Too Many Requests\n");
    headers::add(response.headers_mut(), rule, verdict, legacy, true);
    response
}

fn unavailable() -> Response<Body> {
    local(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable\n")
}
