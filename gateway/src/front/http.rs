//! The HTTP front end. Both modes make the same decision (rule, key, RL.HIT, through
//! [`crate::decider`]) and differ only in what they do with it: proxy mode forwards or
//! answers 429, check mode answers 200 or 429 to the proxy that asked.

use crate::config::Mode;
use crate::decider::lease_guard::{LeaseGuard, Leased};
use crate::decider::{Applied, End, LeaseAnswer, RuleOutcome, Stacked};
use crate::failure::Failure;
use crate::headers;
use crate::logging::{log_throttled, Kind};
use crate::metrics::{Outcome, ReleaseCause};
use crate::rules::canonical::{canonicalize, PathRefusal};
use crate::rules::client_ip::client_ip;
use crate::rules::header_names;
use crate::rules::methods;
use crate::rules::{RequestFacts, Rule, RuleSet};
use crate::upstream::{strip_hop_by_hop, wants_upgrade, UpstreamError};
use crate::verdict::Verdict;
use bytes::Bytes;
use http_body_util::{Either, Full};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, CONNECTION, CONTENT_TYPE};
use hyper::{Request, Response, StatusCode};
use smallvec::SmallVec;
use std::net::IpAddr;

/// A response body: the upstream's, streamed (with the request's lease, if it holds one),
/// or one the gateway wrote.
pub type Body = Either<Leased<Incoming>, Full<Bytes>>;

pub use crate::app::Gateway;

/// The rules that applied to the request, with their keys, and what they decided.
struct Judgement {
    applying: SmallVec<[Applied; 2]>,
    stacked: Stacked,
    /// The lease of a `concurrency` rule, held until the response ends.
    lease: Option<LeaseGuard>,
}

impl Judgement {
    /// The reason of the first rule that failed open, for the fail-open header.
    fn failed_open(&self) -> Option<Failure> {
        self.applying
            .iter()
            .zip(&self.stacked.outcomes)
            .find_map(|(a, o)| match o {
                RuleOutcome::Failed(f) if !a.rule.on_failure.closes(*f) => Some(*f),
                RuleOutcome::Local { failure, .. } => Some(*failure),
                _ => None,
            })
    }

    /// What a denial shows: every enforced rule that was asked, with what it holds now,
    /// and the position of the binding rule among them.
    fn shown_denied(&self, binding: usize) -> (SmallVec<[(&Rule, &Verdict); 2]>, usize) {
        let mut shown = SmallVec::new();
        let mut at = 0;
        for (i, (a, o)) in self.applying.iter().zip(&self.stacked.outcomes).enumerate() {
            let verdict = match o {
                RuleOutcome::Allowed(v)
                | RuleOutcome::Uncounted(v)
                | RuleOutcome::Denied { verdict: v, .. }
                | RuleOutcome::Local { verdict: v, .. } => v,
                _ => continue,
            };
            if a.rule.shadow || a.rule.concurrency.is_some() {
                continue;
            }
            if i == binding {
                at = shown.len();
            }
            shown.push((&*a.rule, verdict));
        }
        (shown, at)
    }
}

/// What an allowed request shows: every enforced rule that counted it, with `verdicts`
/// (index-aligned with the applying rules) the state after any refund, and the position
/// of the binding one: the least remaining in its binding tier, the first on a tie.
fn shown_allowed<'a>(
    applying: &'a [Applied],
    verdicts: &'a [Option<Verdict>],
) -> (SmallVec<[(&'a Rule, &'a Verdict); 2]>, usize) {
    let mut shown: SmallVec<[(&Rule, &Verdict); 2]> = SmallVec::new();
    let mut at = 0;
    for (a, v) in applying.iter().zip(verdicts) {
        let Some(verdict) = v else { continue };
        // A lease's answer has no tier state to show (see `too_many`).
        if a.rule.shadow || a.rule.concurrency.is_some() {
            continue;
        }
        if let Some((_, best)) = shown.get(at) {
            if verdict.binding_tier().remaining < best.binding_tier().remaining {
                at = shown.len();
            }
        }
        shown.push((&*a.rule, verdict));
    }
    (shown, at)
}

impl Gateway {
    pub async fn handle(&self, peer: IpAddr, request: Request<Incoming>) -> Response<Body> {
        match self.server.mode {
            Mode::Proxy => self.proxy(peer, request).await,
            Mode::Check => self.check(peer, request).await,
        }
    }

    /// Finds the rules that apply, makes their keys and asks Redis; counts each rule's
    /// outcome.
    async fn judge(
        &self,
        rules: &RuleSet,
        peer: IpAddr,
        method: &str,
        path: &str,
        headers: &HeaderMap,
    ) -> Result<Judgement, Response<Body>> {
        let ignore_case = self.server.requests.paths.case_insensitive;
        let found = rules.applying(method, path, ignore_case);
        if found.is_empty() {
            return Ok(Judgement {
                applying: SmallVec::new(),
                stacked: Stacked {
                    outcomes: SmallVec::new(),
                    end: End::Unlimited,
                    lease: LeaseAnswer::NotTaken,
                },
                lease: None,
            });
        }
        // The key header twice: which one names the client is the upstream's choice (the
        // first, the last, or both joined), so counting either would let any other value
        // buy a fresh budget. Refused, as check mode refuses a repeated trusted header.
        for rule in &found {
            if let Some(name) = rule.key_header() {
                // Also under two spellings (`X-Api-Key` and `X_Api_Key`, with
                // `headers_with_underscores_action = "allow"`): one header to the upstream.
                if header_names::get_all(headers, name).len() > 1 {
                    return Err(refused_text(
                        StatusCode::BAD_REQUEST,
                        format!("Bad Request: the header {name} appears twice\n"),
                    ));
                }
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
        let applying: SmallVec<[Applied; 2]> = found
            .into_iter()
            .map(|rule| Applied {
                key: rule.key(&self.key_prefix, &facts),
                rule: rule.clone(),
                cost: None,
            })
            .collect();
        // A lease is asked for under an id of the gateway's and guarded from before the
        // call, so that any way out of this request gives it back: also a drop while the
        // call is in flight, and a call unanswered in time that Redis may still run.
        let asking = match &applying[..] {
            [applied] if applied.rule.concurrency.is_some() => Some(LeaseGuard::asking(
                self.decider.clone(),
                applied.rule.clone(),
                applied.key.clone(),
            )),
            _ => None,
        };
        let stacked = self
            .decider
            .decide(&applying, asking.as_ref().map(LeaseGuard::id))
            .await;
        let lease = asking.and_then(|guard| guard.answered(stacked.lease));
        for (applied, outcome) in applying.iter().zip(&stacked.outcomes) {
            let rule = &applied.rule;
            let outcome = match outcome {
                RuleOutcome::Unlimited | RuleOutcome::NotAsked | RuleOutcome::Uncounted(_) => None,
                RuleOutcome::Allowed(_) => Some(Outcome::Allowed),
                RuleOutcome::Denied { cached: false, .. } => Some(Outcome::Denied),
                RuleOutcome::Denied { cached: true, .. } => Some(Outcome::DeniedCached),
                RuleOutcome::ShadowDenied => Some(Outcome::ShadowDenied),
                RuleOutcome::Failed(failure) if rule.on_failure.closes(*failure) => {
                    Some(Outcome::FailClosed)
                }
                RuleOutcome::Failed(failure) => {
                    self.metrics().fail_open(*failure);
                    Some(Outcome::FailOpen)
                }
                RuleOutcome::Local { verdict, failure } => {
                    self.metrics().fail_open(*failure);
                    Some(match verdict.allowed() {
                        true => Outcome::LocalAllowed,
                        false => Outcome::LocalDenied,
                    })
                }
            };
            if let Some(outcome) = outcome {
                self.metrics().decision(&rule.name, outcome);
            }
        }
        Ok(Judgement {
            applying,
            stacked,
            lease,
        })
    }

    async fn proxy(&self, peer: IpAddr, mut request: Request<Incoming>) -> Response<Body> {
        // First: a name with `_` may be another spelling of any header read below.
        let underscores = self.server.requests.underscore_headers;
        if let Err(name) = header_names::screen(request.headers_mut(), underscores) {
            return underscore_refusal(&name);
        }
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
                methods::check_overrides(request.headers(), &method, policy)?;
                let query = request.uri().query().map(str::as_bytes);
                methods::check_query_override(query, &method, policy).map(|()| method)
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
        let mut judgement = match self
            .judge(&rules, peer, method.as_str(), &path, request.headers())
            .await
        {
            Ok(judgement) => judgement,
            Err(refusal) => return refusal,
        };
        let mut fail_open_mark = None;
        let mut lease = judgement.lease.take();
        match judgement.stacked.end {
            End::Denied { binding, .. } => {
                return too_many(
                    &judgement,
                    binding,
                    rules.legacy_headers,
                    StatusCode::TOO_MANY_REQUESTS,
                );
            }
            End::Closed { .. } => return unavailable(),
            End::Allowed | End::Unlimited => {
                if let Some(failure) = judgement.failed_open() {
                    fail_open_mark = Some(HeaderValue::from_static(failure.label()));
                }
            }
        }
        let Some(upstream) = &self.upstream else {
            return unavailable();
        };
        let mut response = match upstream
            .forward(request, peer, &rules.fail_open_header, fail_open_mark)
            .await
        {
            Ok(response) => {
                // hyper writes an answer with no body (204, 304, a HEAD's) without asking the
                // body, so its end cannot be held back: the release is waited for here, as
                // `Leased` waits for it at a body's end (for `deadline_ms` at most), so that
                // the client's next request does not meet this lease.
                if hyper::body::Body::is_end_stream(response.body()) {
                    if let Some(settled) =
                        lease.take().and_then(|mut l| l.release(ReleaseCause::End))
                    {
                        let _ = tokio::time::timeout(self.decider.deadline(), settled).await;
                    }
                }
                response.map(|body| Either::Left(Leased::new(body, lease.take())))
            }
            Err(UpstreamError::Failed(error)) => {
                release(&mut lease, ReleaseCause::Error);
                self.metrics().upstream_error();
                log_throttled!(Kind::Upstream, "upstream error: {error}");
                local(StatusCode::BAD_GATEWAY, "Bad Gateway\n")
            }
            // The client's body, not the upstream, failed: its connection is closed after
            // the answer, since what is left of its body cannot be told from a next request.
            Err(UpstreamError::BodyTimeout) => {
                release(&mut lease, ReleaseCause::Error);
                self.metrics().body_timeout();
                log_throttled!(
                    Kind::Client,
                    "client error from {peer}: the request body did not arrive within \
                     body_timeout_ms; its upstream request was cut"
                );
                closing(local(StatusCode::REQUEST_TIMEOUT, "Request Timeout\n"))
            }
            Err(UpstreamError::BrokenBody(error)) => {
                release(&mut lease, ReleaseCause::Error);
                self.metrics().broken_body();
                log_throttled!(Kind::Client, "client error from {peer}: {error}");
                closing(local(
                    StatusCode::BAD_REQUEST,
                    "Bad Request: the request body broke off\n",
                ))
            }
            Err(UpstreamError::Timeout) => {
                release(&mut lease, ReleaseCause::Error);
                self.metrics().upstream_error();
                local(StatusCode::GATEWAY_TIMEOUT, "Gateway Timeout\n")
            }
        };
        let status = response.status().as_u16();
        let Judgement {
            applying, stacked, ..
        } = judgement;
        let mut verdicts: SmallVec<[Option<Verdict>; 2]> = SmallVec::new();
        for (applied, outcome) in applying.iter().zip(stacked.outcomes) {
            if let RuleOutcome::Local { .. } = outcome {
                if !applied.rule.counts(status) {
                    self.decider.refund_locally(applied);
                }
            }
            let RuleOutcome::Allowed(verdict) = outcome else {
                verdicts.push(None);
                continue;
            };
            let mut shown = verdict;
            if !applied.rule.counts(status) {
                // Refunded before answering, so that the client's next request sees it.
                if let Some(after) = self.decider.refund(&applied.rule, &applied.key).await {
                    shown = after;
                }
            }
            verdicts.push(Some(shown));
        }
        let (shown, binding) = shown_allowed(&applying, &verdicts);
        headers::add_all(
            response.headers_mut(),
            &shown,
            binding,
            rules.legacy_headers,
            false,
        );
        response
    }

    async fn check(&self, peer: IpAddr, mut request: Request<Incoming>) -> Response<Body> {
        // The client's headers, passed on by the proxy, reach the upstream as they are: a
        // name with `_` is refused here as in proxy mode (`drop_header` is refused for check
        // mode when the file loads, since only the proxy could drop it).
        let underscores = self.server.requests.underscore_headers;
        if let Err(name) = header_names::screen(request.headers_mut(), underscores) {
            return underscore_refusal(&name);
        }
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
        let query = match asked(uri_header) {
            Some(uri) => query_of_target(uri.as_bytes()),
            None => request.uri().query().map(str::as_bytes),
        };
        let method = match methods::accepted(method, &rules).and_then(|method| {
            let policy = self.server.requests.method_overrides;
            methods::check_overrides(headers, &method, policy)?;
            methods::check_query_override(query, &method, policy).map(|()| method)
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
        let judgement = match self.judge(&rules, peer, method, &path, headers).await {
            Ok(judgement) => judgement,
            Err(refusal) => return refusal,
        };
        match judgement.stacked.end {
            End::Denied { binding, .. } => {
                let status = StatusCode::from_u16(self.server.check_deny_status)
                    .unwrap_or(StatusCode::TOO_MANY_REQUESTS);
                too_many(&judgement, binding, rules.legacy_headers, status)
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
                let verdicts: SmallVec<[Option<Verdict>; 2]> = judgement
                    .stacked
                    .outcomes
                    .iter()
                    .map(|o| match o {
                        RuleOutcome::Allowed(v) => Some(v.clone()),
                        _ => None,
                    })
                    .collect();
                let (shown, binding) = shown_allowed(&judgement.applying, &verdicts);
                headers::add_all(
                    response.headers_mut(),
                    &shown,
                    binding,
                    rules.legacy_headers,
                    false,
                );
                response
            }
        }
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

/// The query of a request target as a proxy reports it: after the first `?`, up to a `#`.
fn query_of_target(target: &[u8]) -> Option<&[u8]> {
    let start = target.iter().position(|&b| b == b'?')? + 1;
    let rest = target.get(start..)?;
    let end = rest.iter().position(|&b| b == b'#').unwrap_or(rest.len());
    rest.get(..end)
}

/// 400 for a header name with `_` under `headers_with_underscores_action =
/// "reject_request"`, naming the header and the setting.
fn underscore_refusal(name: &hyper::header::HeaderName) -> Response<Body> {
    refused_text(
        StatusCode::BAD_REQUEST,
        format!(
            "Bad Request: the header name {name} has an underscore, which CGI-style servers \
             read as a hyphen; see [requests] headers_with_underscores_action\n"
        ),
    )
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

/// The denial: every enforced rule asked, the binding one first, and its Retry-After. A
/// lease's denial says only when to retry: `RL.ACQUIRE` answers for the slots, not for
/// what each tier has left, and a slot is not a quota per window.
fn too_many(
    judgement: &Judgement,
    binding: usize,
    legacy: bool,
    status: StatusCode,
) -> Response<Body> {
    let mut response = local(status, "Too Many Requests\n");
    let leased = judgement
        .applying
        .get(binding)
        .filter(|a| a.rule.concurrency.is_some());
    if leased.is_some() {
        if let Some(RuleOutcome::Denied { verdict, .. }) = judgement.stacked.outcomes.get(binding) {
            headers::add_retry_after(response.headers_mut(), verdict);
        }
        return response;
    }
    let (shown, at) = judgement.shown_denied(binding);
    headers::add_all(response.headers_mut(), &shown, at, legacy, true);
    response
}

/// Starts giving back the request's lease, if it holds one.
fn release(lease: &mut Option<LeaseGuard>, cause: ReleaseCause) {
    if let Some(mut lease) = lease.take() {
        let _ = lease.release(cause);
    }
}

/// `response` with `Connection: close`.
fn closing(mut response: Response<Body>) -> Response<Body> {
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

fn unavailable() -> Response<Body> {
    local(StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable\n")
}
