//! The end of an answer, once every status is written: the overall code (the quota rule,
//! the global shadow mode), the header fields and the dynamic metadata.

use super::{Answer, Answering, Said};
use crate::front::envoy::plan::{quota, Event};
use crate::front::envoy::{limit_headers, metadata};
use crate::headers;
use crate::metrics::EnvoyResult;
use crate::rules::Rule;
use crate::verdict::Verdict;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Struct;
use hyper::header::HeaderMap;
use smallvec::SmallVec;
use tonic::Status;

impl Answering<'_, '_> {
    /// Whether every quota descriptor of the request is over (at least one): the peer's
    /// rule for the overall code, from the statuses' codes.
    fn quota_all_over(&self, statuses: &[DescriptorStatus]) -> bool {
        let mut quotas = 0;
        for (i, status) in statuses.iter().enumerate() {
            let Some(limit) = self.plan.applied(i) else {
                continue;
            };
            if limit.unlimited || !quota(limit, self.settings.quota_mode) {
                continue;
            }
            quotas += 1;
            if status.code != Code::OverLimit as i32 {
                return false;
            }
        }
        quotas > 0
    }

    /// The response of `statuses`, or UNAVAILABLE.
    pub(super) fn finish(
        mut self,
        request: &RateLimitRequest,
        statuses: Vec<DescriptorStatus>,
    ) -> Answer {
        self.overall_over |= self.quota_all_over(&statuses);
        // `[envoy] shadow_mode`: whatever the statuses say, the request goes through.
        if self.settings.shadow_mode && (self.overall_over || self.unavailable) {
            self.events.push(Event::Envoy(EnvoyResult::ShadowMode));
            self.overall_over = false;
            self.unavailable = false;
        }
        if self.unavailable {
            self.events.push(Event::Envoy(EnvoyResult::Unavailable));
            return Answer {
                result: Err(Status::unavailable(
                    "Redis could not decide within the deadline",
                )),
                events: self.events,
            };
        }
        let (result, code) = match self.overall_over {
            true => (EnvoyResult::OverLimit, Code::OverLimit),
            false => (EnvoyResult::Ok, Code::Ok),
        };
        self.events.push(Event::Envoy(result));
        let mut response = RateLimitResponse {
            overall_code: code as i32,
            ..Default::default()
        };
        if self.settings.response_headers && !self.shown.is_empty() {
            response.response_headers_to_add = self.header_fields();
        }
        if let Some(names) = &self.settings.limit_headers {
            let enforced: SmallVec<[bool; 4]> = (0..statuses.len())
                .map(|i| self.plan.applied(i).is_some_and(|l| self.enforced(l)))
                .collect();
            let more = limit_headers::limit_headers(&statuses, &enforced, names);
            response.response_headers_to_add.extend(more);
        }
        if self.settings.response_dynamic_metadata {
            response.dynamic_metadata = Some(self.dynamic_metadata(request, &statuses));
        }
        response.statuses = statuses;
        Answer {
            result: Ok(response),
            events: self.events,
        }
    }

    /// The dynamic metadata of the response: the request, and the `metadata` of every
    /// limited descriptor that passed (not over its limit; an unlimited one is not
    /// counted, as theirs).
    fn dynamic_metadata(
        &self,
        request: &RateLimitRequest,
        statuses: &[DescriptorStatus],
    ) -> Struct {
        let passed = statuses.iter().enumerate().filter_map(|(i, status)| {
            let limit = self.plan.applied(i)?;
            let passed = !limit.unlimited && status.code != Code::OverLimit as i32;
            limit.metadata.as_ref().filter(|_| passed)
        });
        metadata::dynamic_metadata(request, passed)
    }

    /// The RateLimit header fields of the enforced verdicts: the first denial's, else the
    /// one with the least left.
    fn header_fields(&self) -> Vec<HeaderValue> {
        let shown: SmallVec<[(&Rule, &Verdict); 4]> = self
            .shown
            .iter()
            .filter_map(|&i| {
                let m = &self.plan.matched[self.settled.source[i]?];
                match &self.settled.said[i] {
                    Said::Verdict(verdict) => Some((m.rule.as_ref(), verdict)),
                    _ => None,
                }
            })
            .collect();
        let at = self.binding.unwrap_or_else(|| least_remaining(&shown));
        let mut fields = HeaderMap::new();
        let denied = self.overall_over && self.binding.is_some();
        headers::add_all(&mut fields, &shown, at, false, denied);
        fields
            .iter()
            .filter_map(|(name, value)| {
                Some(HeaderValue {
                    key: name.as_str().to_owned(),
                    value: value.to_str().ok()?.to_owned(),
                    ..Default::default()
                })
            })
            .collect()
    }
}

/// The position in `shown` of the one with the least remaining in its binding tier.
fn least_remaining(shown: &[(&Rule, &Verdict)]) -> usize {
    shown
        .iter()
        .enumerate()
        .min_by_key(|(i, (_, v))| (v.binding_tier().remaining, *i))
        .map_or(0, |(i, _)| i)
}
