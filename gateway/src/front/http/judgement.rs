//! The decision for one HTTP request, shared by both modes: the rules that apply, their
//! keys, one call into the decider, and what each rule decided, counted in the metrics.

use super::responses::{local, Refusal};
use super::Body;
use crate::app::Gateway;
use crate::decider::lease_guard::LeaseGuard;
use crate::decider::{Applied, End, LeaseAnswer, RuleOutcome, Stacked};
use crate::failure::Failure;
use crate::headers;
use crate::metrics::Outcome;
use crate::rules::client_ip::client_ip;
use crate::rules::header_names;
use crate::rules::{RequestFacts, Rule, RuleSet};
use crate::verdict::Verdict;
use hyper::header::HeaderMap;
use hyper::{Response, StatusCode};
use smallvec::SmallVec;
use std::net::IpAddr;
use std::sync::Arc;

/// The rules that applied to the request, with their keys, and what they decided.
pub(super) struct Judgement {
    pub(super) applying: SmallVec<[Applied; 2]>,
    pub(super) stacked: Stacked,
    /// The lease of a `concurrency` rule, held until the response ends.
    pub(super) lease: Option<LeaseGuard>,
}

/// What a request is to the rules: its canonical method and path, its headers and the
/// address it came from.
pub(super) struct Asked<'a> {
    pub(super) peer: IpAddr,
    pub(super) method: &'a str,
    pub(super) path: &'a str,
    pub(super) headers: &'a HeaderMap,
}

impl Judgement {
    /// No rule applies: nothing asked, nothing counted.
    fn unlimited() -> Self {
        Judgement {
            applying: SmallVec::new(),
            stacked: Stacked {
                outcomes: SmallVec::new(),
                end: End::Unlimited,
                lease: LeaseAnswer::NotTaken,
            },
            lease: None,
        }
    }

    /// The denial: every enforced rule asked, the binding one first, and its Retry-After. A
    /// lease's denial says only when to retry: `RL.ACQUIRE` answers for the slots, not for
    /// what each tier has left, and a slot is not a quota per window.
    pub(super) fn too_many(
        &self,
        binding: usize,
        legacy: bool,
        status: StatusCode,
    ) -> Response<Body> {
        let mut response = local(status, "Too Many Requests\n");
        let leased = self
            .applying
            .get(binding)
            .filter(|a| a.rule.concurrency.is_some());
        if leased.is_some() {
            if let Some(RuleOutcome::Denied { verdict, .. }) = self.stacked.outcomes.get(binding) {
                headers::add_retry_after(response.headers_mut(), verdict);
            }
            return response;
        }
        let (shown, at) = self.shown_denied(binding);
        headers::add_all(response.headers_mut(), &shown, at, legacy, true);
        response
    }

    /// The reason of the first rule that failed open, for the fail-open header.
    pub(super) fn failed_open(&self) -> Option<Failure> {
        self.applying
            .iter()
            .zip(&self.stacked.outcomes)
            .find_map(|(a, o)| fail_open_reason(&a.rule, o))
    }

    /// What a denial shows: every enforced rule that was asked, with what it holds now,
    /// and the position of the binding rule among them.
    pub(super) fn shown_denied(&self, binding: usize) -> (SmallVec<[(&Rule, &Verdict); 2]>, usize) {
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
            if !is_shown(&a.rule) {
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

/// Whether a rule's state goes into the response headers: not a shadow rule's, which
/// decides nothing, nor a lease's, which has no tier state to show (see `too_many`).
fn is_shown(rule: &Rule) -> bool {
    !rule.shadow && rule.concurrency.is_none()
}

/// What an allowed request shows: every enforced rule that counted it, with `verdicts`
/// (index-aligned with the applying rules) the state after any refund, and the position
/// of the binding one: the least remaining in its binding tier, the first on a tie.
pub(super) fn shown_allowed<'a>(
    applying: &'a [Applied],
    verdicts: &'a [Option<Verdict>],
) -> (SmallVec<[(&'a Rule, &'a Verdict); 2]>, usize) {
    let mut shown: SmallVec<[(&Rule, &Verdict); 2]> = SmallVec::new();
    let mut at = 0;
    for (a, v) in applying.iter().zip(verdicts) {
        let Some(verdict) = v else { continue };
        if !is_shown(&a.rule) {
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

/// Why a rule let the request through without Redis's answer: it failed open, or its
/// local limit decided.
fn fail_open_reason(rule: &Rule, outcome: &RuleOutcome) -> Option<Failure> {
    match outcome {
        RuleOutcome::Failed(f) if !rule.on_failure.closes(*f) => Some(*f),
        RuleOutcome::Local { failure, .. } => Some(*failure),
        _ => None,
    }
}

/// The metric of one rule's outcome; `None` for a rule that counted nothing.
fn outcome_metric(rule: &Rule, outcome: &RuleOutcome) -> Option<Outcome> {
    Some(match outcome {
        RuleOutcome::Unlimited | RuleOutcome::NotAsked | RuleOutcome::Uncounted(_) => return None,
        RuleOutcome::Allowed(_) => Outcome::Allowed,
        RuleOutcome::Denied { cached: false, .. } => Outcome::Denied,
        RuleOutcome::Denied { cached: true, .. } => Outcome::DeniedCached,
        RuleOutcome::ShadowDenied => Outcome::ShadowDenied,
        RuleOutcome::Failed(failure) if rule.on_failure.closes(*failure) => Outcome::FailClosed,
        RuleOutcome::Failed(_) => Outcome::FailOpen,
        RuleOutcome::Local { verdict, .. } if verdict.allowed() => Outcome::LocalAllowed,
        RuleOutcome::Local { .. } => Outcome::LocalDenied,
    })
}

/// The key header twice: which one names the client is the upstream's choice (the first,
/// the last, or both joined), so counting either would let any other value buy a fresh
/// budget. Refused, as check mode refuses a repeated trusted header. Also under two
/// spellings (`X-Api-Key` and `X_Api_Key`, with `headers_with_underscores_action =
/// "allow"`): one header to the upstream.
fn repeated_key_header(found: &[&Arc<Rule>], headers: &HeaderMap) -> Option<Refusal> {
    let name = found
        .iter()
        .filter_map(|rule| rule.key_header())
        .find(|name| header_names::get_all(headers, name).len() > 1)?;
    Some(Refusal::naming(format!(
        "Bad Request: the header {name} appears twice\n"
    )))
}

impl Gateway {
    /// Finds the rules that apply, makes their keys and asks Redis; counts each rule's
    /// outcome.
    pub(super) async fn judge(
        &self,
        rules: &RuleSet,
        asked: Asked<'_>,
    ) -> Result<Judgement, Refusal> {
        let ignore_case = self.server.requests.paths.case_insensitive;
        let found = rules.applying(asked.method, asked.path, ignore_case);
        if found.is_empty() {
            return Ok(Judgement::unlimited());
        }
        if let Some(refusal) = repeated_key_header(&found, asked.headers) {
            return Err(refusal);
        }
        let facts = RequestFacts {
            method: asked.method,
            path: asked.path,
            headers: asked.headers,
            client_ip: self.server.client_network(client_ip(
                asked.peer,
                asked.headers,
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
        self.count_outcomes(&applying, &stacked);
        Ok(Judgement {
            applying,
            stacked,
            lease,
        })
    }

    fn count_outcomes(&self, applying: &[Applied], stacked: &Stacked) {
        for (applied, outcome) in applying.iter().zip(&stacked.outcomes) {
            if let Some(failure) = fail_open_reason(&applied.rule, outcome) {
                self.metrics().fail_open(failure);
            }
            if let Some(metric) = outcome_metric(&applied.rule, outcome) {
                self.metrics().decision(&applied.rule.name, metric);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{test_rule, RedisFailure};
    use crate::verdict::TierState;

    fn applied(name: &str, shadow: bool) -> Applied {
        let mut rule = test_rule(name, 10, 60_000, None, 1, RedisFailure::Open);
        rule.shadow = shadow;
        Applied {
            rule: Arc::new(rule),
            key: format!("rl:{name}"),
            cost: None,
        }
    }

    fn left(remaining: u64) -> Option<Verdict> {
        Some(Verdict::single(TierState {
            allowed: true,
            limit: 10,
            remaining,
            reset_after_ms: 1_000,
            retry_after_ms: 0,
        }))
    }

    fn names(shown: &[(&Rule, &Verdict)]) -> Vec<String> {
        shown.iter().map(|(rule, _)| rule.name.clone()).collect()
    }

    #[test]
    fn an_allowed_request_shows_the_rule_with_least_remaining_as_binding() {
        let applying = [
            applied("a", false),
            applied("b", false),
            applied("c", false),
        ];
        let verdicts = [left(7), left(3), left(5)];
        let (shown, binding) = shown_allowed(&applying, &verdicts);
        assert_eq!(names(&shown), ["a", "b", "c"]);
        assert_eq!(binding, 1);
    }

    #[test]
    fn on_a_tie_the_first_rule_binds() {
        let applying = [applied("a", false), applied("b", false)];
        let (_, binding) = shown_allowed(&applying, &[left(4), left(4)]);
        assert_eq!(binding, 0);
    }

    #[test]
    fn shadow_rules_and_rules_that_counted_nothing_are_not_shown() {
        let applying = [
            applied("shadow", true),
            applied("skipped", false),
            applied("c", false),
        ];
        // The shadow rule has the least remaining: it must neither show nor bind.
        let verdicts = [left(0), None, left(6)];
        let (shown, binding) = shown_allowed(&applying, &verdicts);
        assert_eq!(names(&shown), ["c"]);
        assert_eq!(binding, 0);
    }

    #[test]
    fn a_failed_open_rule_names_its_reason_and_a_failed_closed_one_does_not() {
        let open = applied("open", false);
        let closed = Applied {
            rule: Arc::new(test_rule(
                "closed",
                10,
                60_000,
                None,
                1,
                RedisFailure::Closed,
            )),
            key: "rl:closed".into(),
            cost: None,
        };
        let failed = RuleOutcome::Failed(Failure::Timeout);
        assert_eq!(
            fail_open_reason(&open.rule, &failed),
            Some(Failure::Timeout)
        );
        assert_eq!(fail_open_reason(&closed.rule, &failed), None);
        assert_eq!(
            outcome_metric(&closed.rule, &failed),
            Some(Outcome::FailClosed)
        );
        assert_eq!(outcome_metric(&open.rule, &failed), Some(Outcome::FailOpen));
        assert_eq!(outcome_metric(&open.rule, &RuleOutcome::NotAsked), None);
    }
}
