//! Proxy mode: the request is decided on in its canonical spelling, then forwarded to the
//! upstream (with the rate-limit headers on its response) or answered 429 or 503.

use super::judgement::{shown_allowed, Asked, Judgement};
use super::responses::{closing, local, unavailable, Refusal};
use super::target::{checked_method, rewrite_target};
use super::Body;
use crate::app::Gateway;
use crate::decider::lease_guard::{LeaseGuard, Leased};
use crate::decider::{Applied, End, RuleOutcome};
use crate::headers;
use crate::logging::{log_throttled, Kind};
use crate::metrics::ReleaseCause;
use crate::rules::canonical::canonicalize;
use crate::rules::header_names;
use crate::rules::RuleSet;
use crate::upstream::{strip_hop_by_hop, wants_upgrade, UpstreamError};
use crate::verdict::Verdict;
use http_body_util::Either;
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::{Method, Request, Response, StatusCode};
use smallvec::SmallVec;
use std::net::IpAddr;

impl Gateway {
    pub(super) async fn proxy(
        &self,
        peer: IpAddr,
        mut request: Request<Incoming>,
    ) -> Response<Body> {
        let rules = self.rules();
        let (method, path) = match self.canonical_request(&mut request, &rules) {
            Ok(canonical) => canonical,
            Err(refusal) => return refusal.into(),
        };
        let asked = Asked {
            peer,
            method: method.as_str(),
            path: &path,
            headers: request.headers(),
        };
        let mut judgement = match self.judge(&rules, asked).await {
            Ok(judgement) => judgement,
            Err(refusal) => return refusal.into(),
        };
        let fail_open_mark = match judgement.stacked.end {
            End::Denied { binding, .. } => {
                let status = StatusCode::TOO_MANY_REQUESTS;
                return judgement.too_many(binding, rules.legacy_headers, status);
            }
            End::Closed { .. } => return unavailable(),
            End::Allowed | End::Unlimited => judgement
                .failed_open()
                .map(|failure| HeaderValue::from_static(failure.label())),
        };
        let Some(upstream) = &self.upstream else {
            return unavailable();
        };
        let mut lease = judgement.lease.take();
        let forwarded = upstream
            .forward(request, peer, &rules.fail_open_header, fail_open_mark)
            .await;
        let response = match forwarded {
            Ok(response) => response,
            Err(error) => {
                release(&mut lease, ReleaseCause::Error);
                return self.upstream_failed(error, peer);
            }
        };
        // The response is not moved into a future of its own: only the lease's wait is.
        if hyper::body::Body::is_end_stream(response.body()) {
            self.release_before_answering(&mut lease).await;
        }
        let mut response = response.map(|body| Either::Left(Leased::new(body, lease)));
        let Judgement {
            applying, stacked, ..
        } = judgement;
        let status = response.status().as_u16();
        // The common case, every rule counting this status, needs no refund and no wait.
        let verdicts = match applying.iter().all(|applied| applied.rule.counts(status)) {
            true => counted(stacked.outcomes),
            false => self.settle(&applying, stacked.outcomes, status).await,
        };
        let (shown, binding) = shown_allowed(&applying, &verdicts);
        let legacy = rules.legacy_headers;
        headers::add_all(response.headers_mut(), &shown, binding, legacy, false);
        response
    }

    /// The request made ready to be decided on and forwarded: its headers screened, and its
    /// method and target made canonical, so that what the upstream routes is what was
    /// counted. A refusal is the answer to the client.
    fn canonical_request(
        &self,
        request: &mut Request<Incoming>,
        rules: &RuleSet,
    ) -> Result<(Method, String), Refusal> {
        // First: a name with `_` may be another spelling of any header read below.
        let underscores = self.server.requests.underscore_headers;
        if let Err(name) = header_names::screen(request.headers_mut(), underscores) {
            return Err(Refusal::underscore(&name));
        }
        if wants_upgrade(request.headers()) {
            // WebSocket and other upgrades are not proxied: say so rather than turning
            // them into plain requests.
            return Err(Refusal::new(501, "Upgrades are not supported\n"));
        }
        // Before the decision: a header the client names in Connection (say, the one the
        // rule keys on) never reaches the upstream, so it must not choose the budget either.
        strip_hop_by_hop(request.headers_mut());
        let raw = request.method().as_str().as_bytes();
        let query = request.uri().query().map(str::as_bytes);
        let policy = self.server.requests.method_overrides;
        let method = checked_method(raw, request.headers(), query, rules, policy)?;
        let path = canonicalize(request.uri().path().as_bytes(), &self.server.requests.paths)?;
        rewrite_target(request, &method, &path)?;
        Ok((method, path))
    }

    /// Gives back the lease of a response without a body. hyper writes an answer with no
    /// body (204, 304, a HEAD's) without asking the body, so its end cannot be held back:
    /// the release is waited for here, as `Leased` waits for it at a body's end (for
    /// `deadline_ms` at most), so that the client's next request does not meet this lease.
    /// Otherwise the body, streamed, holds the lease and gives it back when it ends.
    async fn release_before_answering(&self, lease: &mut Option<LeaseGuard>) {
        if let Some(settled) = lease.take().and_then(|mut l| l.release(ReleaseCause::End)) {
            let _ = tokio::time::timeout(self.decider.deadline(), settled).await;
        }
    }

    /// The answer when forwarding failed, and what it is counted as.
    fn upstream_failed(&self, error: UpstreamError, peer: IpAddr) -> Response<Body> {
        match error {
            UpstreamError::Failed(error) => {
                self.metrics().upstream_error();
                log_throttled!(Kind::Upstream, "upstream error: {error}");
                local(StatusCode::BAD_GATEWAY, "Bad Gateway\n")
            }
            // The client's body, not the upstream, failed: its connection is closed after
            // the answer, since what is left of its body cannot be told from a next request.
            UpstreamError::BodyTimeout => {
                self.metrics().body_timeout();
                log_throttled!(
                    Kind::Client,
                    "client error from {peer}: the request body did not arrive within \
                     body_timeout_ms; its upstream request was cut"
                );
                closing(local(StatusCode::REQUEST_TIMEOUT, "Request Timeout\n"))
            }
            UpstreamError::BrokenBody(error) => {
                self.metrics().broken_body();
                log_throttled!(Kind::Client, "client error from {peer}: {error}");
                let body = "Bad Request: the request body broke off\n";
                closing(local(StatusCode::BAD_REQUEST, body))
            }
            // Logged by the upstream, once per cause rather than once a second.
            UpstreamError::Tls => {
                self.metrics().upstream_error();
                local(StatusCode::BAD_GATEWAY, "Bad Gateway\n")
            }
            UpstreamError::Timeout => {
                self.metrics().upstream_error();
                local(StatusCode::GATEWAY_TIMEOUT, "Gateway Timeout\n")
            }
        }
    }

    /// Gives back what a rule that does not count `status` was charged, before answering so
    /// that the client's next request sees it; answers each counted rule's state to show
    /// (index-aligned with the applying rules, `None` for one that did not count).
    async fn settle(
        &self,
        applying: &[Applied],
        outcomes: impl IntoIterator<Item = RuleOutcome>,
        status: u16,
    ) -> SmallVec<[Option<Verdict>; 2]> {
        let mut verdicts = SmallVec::new();
        for (applied, outcome) in applying.iter().zip(outcomes) {
            verdicts.push(self.settle_one(applied, outcome, status).await);
        }
        verdicts
    }

    async fn settle_one(
        &self,
        applied: &Applied,
        outcome: RuleOutcome,
        status: u16,
    ) -> Option<Verdict> {
        let counts = applied.rule.counts(status);
        match outcome {
            RuleOutcome::Local { .. } if !counts => {
                self.decider.refund_locally(applied);
                None
            }
            RuleOutcome::Allowed(verdict) if !counts => {
                let refunded = self.decider.refund(&applied.rule, &applied.key).await;
                Some(refunded.unwrap_or(verdict))
            }
            RuleOutcome::Allowed(verdict) => Some(verdict),
            _ => None,
        }
    }
}

/// What [`Gateway::settle`] answers when every rule counts the status: each allowed
/// rule's verdict, `None` for the others.
fn counted(outcomes: impl IntoIterator<Item = RuleOutcome>) -> SmallVec<[Option<Verdict>; 2]> {
    outcomes
        .into_iter()
        .map(|outcome| match outcome {
            RuleOutcome::Allowed(verdict) => Some(verdict),
            _ => None,
        })
        .collect()
}

/// Starts giving back the request's lease, if it holds one.
fn release(lease: &mut Option<LeaseGuard>, cause: ReleaseCause) {
    if let Some(mut lease) = lease.take() {
        let _ = lease.release(cause);
    }
}
