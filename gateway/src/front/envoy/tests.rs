//! The plan and the answer with plain structs, no server: what a request asks for, and
//! what the decider's replies come to.

use super::answer::{answer, refused_before_charging, Replies, Reply};
use super::descriptors::{self, Domains};
use super::plan::{plan, Ask, Early, Event, Known, Plan};
use crate::decider::RuleOutcome;
use crate::failure::Failure;
use crate::metrics::{EnvoyResult, Outcome};
use crate::verdict::{TierState, Verdict};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::UInt64Value;

const FILE: &str = r#"
domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: team
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: tokens
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: wide
    limit_override: replace
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: fixed
    limit_override: ignore
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: strict
    on_failure: over_limit
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: deferred
    on_failure: unavailable
    rate_limit: {unit: minute, requests_per_unit: 10}
"#;

fn domains() -> Domains {
    descriptors::from_texts(&[FILE]).expect("the file loads")
}

fn desc(key: &str, value: &str) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value: value.into(),
        }],
        ..Default::default()
    }
}

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "api".into(),
        descriptors,
        ..Default::default()
    }
}

fn planned<'a>(domains: &'a Domains, request: &RateLimitRequest) -> Plan<'a> {
    plan(domains, request, "rl:").expect("a plan")
}

fn verdict(allowed: bool, limit: u64, remaining: u64) -> Verdict {
    Verdict::single(TierState {
        allowed,
        limit,
        remaining,
        reset_after_ms: 60_000,
        retry_after_ms: if allowed { 0 } else { 1_000 },
    })
}

fn replies(replies: Vec<Reply>) -> Replies {
    Replies {
        replies: replies.into_iter().collect(),
        closed: None,
    }
}

fn respond(plan: &Plan<'_>, replies: &Replies) -> (RateLimitResponse, Vec<Event>) {
    let answer = answer(plan, replies, false);
    (answer.result.expect("a response"), answer.events)
}

fn codes(response: &RateLimitResponse) -> Vec<i32> {
    response.statuses.iter().map(|s| s.code).collect()
}

const OK: i32 = Code::Ok as i32;
const OVER: i32 = Code::OverLimit as i32;

#[test]
fn a_request_out_of_bounds_or_of_an_unknown_domain_asks_nothing() {
    let domains = domains();
    let empty = RateLimitRequest {
        domain: "api".into(),
        ..Default::default()
    };
    assert_eq!(
        plan(&domains, &empty, "rl:").unwrap_err(),
        Early::Invalid(super::RequestError::NoDescriptors)
    );
    let elsewhere = RateLimitRequest {
        domain: "other".into(),
        ..request(vec![desc("user", "a")])
    };
    assert_eq!(
        plan(&domains, &elsewhere, "rl:").unwrap_err(),
        Early::UnknownDomain
    );
}

#[test]
fn each_matched_descriptor_asks_for_its_key_with_its_units() {
    let domains = domains();
    let mut look = desc("team", "t");
    look.hits_addend = Some(UInt64Value { value: 0 });
    let mut refund = desc("user", "b");
    refund.hits_addend = Some(UInt64Value { value: 3 });
    refund.is_negative_hits = true;
    let req = RateLimitRequest {
        hits_addend: 2,
        ..request(vec![desc("user", "a"), look, refund, desc("nobody", "x")])
    };
    let plan = planned(&domains, &req);
    let asked: Vec<(usize, Ask, u64, &str)> = plan
        .matched
        .iter()
        .map(|m| (m.index, m.ask, m.cost, m.key.as_str()))
        .collect();
    assert_eq!(
        asked,
        [
            (0, Ask::Charge, 2, "rl:{user=a}:api:user=a"),
            (1, Ask::Peek, 1, "rl:{team=t}:api:team=t"),
            (2, Ask::Refund, 3, "rl:{user=b}:api:user=b"),
        ]
    );
    assert_eq!(plan.events, [Event::Envoy(EnvoyResult::NoMatch)]);
}

#[test]
fn unlimited_and_blocked_descriptors_are_known_without_asking() {
    let domains = domains();
    let req = request(vec![
        desc("free", "a"),
        desc("banned", "b"),
        desc("user", "c"),
    ]);
    let plan = planned(&domains, &req);
    assert_eq!(plan.known[0], Known::Unlimited);
    assert!(matches!(plan.known[1], Known::Blocked(Some((0, _)))));
    assert_eq!(plan.matched.len(), 1);
    assert!(
        plan.blocks(),
        "a blocked enforced descriptor refuses the request"
    );
    let none = replies(vec![Reply::NotAsked]);
    assert!(refused_before_charging(&plan, &none.replies));
    let (response, _) = respond(&plan, &none);
    assert_eq!(response.overall_code, OVER);
    assert_eq!(codes(&response), [OK, OVER, OK]);
    assert_eq!(response.statuses[0].limit_remaining, u32::MAX);
}

#[test]
fn overrides_tighten_beside_the_node_replace_it_or_are_ignored() {
    let domains = domains();
    let with_limit = |key: &str| RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: 3,
            unit: 2,
        }),
        ..desc(key, "v")
    };
    let req = request(vec![
        with_limit("user"),
        with_limit("wide"),
        with_limit("fixed"),
    ]);
    let plan = planned(&domains, &req);
    let keys: Vec<(usize, &str, Option<u32>)> = plan
        .matched
        .iter()
        .map(|m| (m.index, m.key.as_str(), m.overriding.map(|(n, _)| n)))
        .collect();
    assert_eq!(
        keys,
        [
            (0, "rl:{user=v}:api:user=v", None),
            (0, "rl:{user=v}:api:user=v:limit=3/minute", Some(3)),
            (1, "rl:{wide=v}:api:wide=v", Some(3)),
            (2, "rl:{fixed=v}:api:fixed=v", None),
        ]
    );
    assert_eq!(plan.events, [Event::Envoy(EnvoyResult::OverrideIgnored)]);
    // The weightier of a descriptor's two answers stands: the tighter one's.
    let (response, _) = respond(
        &plan,
        &replies(vec![
            Reply::Charged(RuleOutcome::Allowed(verdict(true, 10, 9))),
            Reply::Charged(RuleOutcome::Allowed(verdict(true, 3, 2))),
            Reply::Charged(RuleOutcome::Allowed(verdict(true, 3, 2))),
            Reply::Charged(RuleOutcome::Allowed(verdict(true, 10, 9))),
        ]),
    );
    assert_eq!(response.statuses[0].limit_remaining, 2);
    let shown = response.statuses[0].current_limit.as_ref().expect("shown");
    assert_eq!(shown.requests_per_unit, 3);
}

#[test]
fn a_look_over_the_limit_charges_nothing_all_or_nothing() {
    let domains = domains();
    let mut look = desc("team", "t");
    look.hits_addend = Some(UInt64Value { value: 0 });
    let req = request(vec![look, desc("user", "a")]);
    let plan = planned(&domains, &req);
    let looked = vec![
        Reply::Looked(Ok(Some(verdict(false, 100, 0)))),
        Reply::NotAsked,
    ];
    assert!(refused_before_charging(&plan, &looked));
    let (response, events) = respond(&plan, &replies(looked));
    assert_eq!(response.overall_code, OVER);
    assert_eq!(codes(&response), [OVER, OK]);
    let not_asked = response.statuses[1].current_limit.as_ref().expect("shown");
    assert_eq!(not_asked.requests_per_unit, 10);
    assert_eq!(events.last(), Some(&Event::Envoy(EnvoyResult::OverLimit)));
}

#[test]
fn a_look_within_the_limit_shows_what_is_left_now() {
    let domains = domains();
    let mut look = desc("team", "t");
    look.hits_addend = Some(UInt64Value { value: 0 });
    let req = request(vec![look]);
    let plan = planned(&domains, &req);
    // One more hit would leave 41: 42 are left now.
    let looked = vec![Reply::Looked(Ok(Some(verdict(true, 100, 41))))];
    assert!(!refused_before_charging(&plan, &looked));
    let (response, events) = respond(&plan, &replies(looked));
    assert_eq!(response.overall_code, OK);
    assert_eq!(response.statuses[0].limit_remaining, 42);
    assert_eq!(events, [Event::Envoy(EnvoyResult::Ok)]);
}

#[test]
fn shadow_descriptors_answer_ok_and_quota_ones_their_own_code() {
    let domains = domains();
    let req = request(vec![
        desc("trial", "a"),
        desc("tokens", "b"),
        desc("user", "c"),
    ]);
    let plan = planned(&domains, &req);
    let (response, events) = respond(
        &plan,
        &replies(vec![
            Reply::Charged(RuleOutcome::ShadowDenied),
            Reply::Charged(RuleOutcome::Denied {
                verdict: verdict(false, 5, 0),
                cached: false,
            }),
            Reply::Charged(RuleOutcome::Allowed(verdict(true, 10, 9))),
        ]),
    );
    assert_eq!(response.overall_code, OK);
    assert_eq!(codes(&response), [OK, OVER, OK]);
    assert!(events.contains(&Event::Decision("api.trial".into(), Outcome::ShadowDenied)));
    assert!(events.contains(&Event::Decision("api.tokens".into(), Outcome::Denied)));
    assert!(events.contains(&Event::Decision("api.user".into(), Outcome::Allowed)));
}

#[test]
fn a_failure_answers_as_the_descriptor_says() {
    let domains = domains();
    let req = request(vec![desc("user", "a"), desc("strict", "b")]);
    let plan = planned(&domains, &req);
    let failed = || {
        replies(vec![
            Reply::Charged(RuleOutcome::Failed(Failure::Timeout)),
            Reply::Charged(RuleOutcome::Failed(Failure::Timeout)),
        ])
    };
    let (response, events) = respond(&plan, &failed());
    assert_eq!(response.overall_code, OVER);
    assert_eq!(codes(&response), [OK, OVER]);
    assert!(events.contains(&Event::FailOpen(Failure::Timeout)));
    assert!(events.contains(&Event::Decision("api.user".into(), Outcome::FailOpen)));
    assert!(events.contains(&Event::Decision("api.strict".into(), Outcome::FailClosed)));

    // Fail-open alone: OK, and nothing else said of the descriptor.
    let req = request(vec![desc("user", "a")]);
    let plan = planned(&domains, &req);
    let (response, _) = respond(
        &plan,
        &replies(vec![Reply::Charged(RuleOutcome::Failed(
            Failure::Connection,
        ))]),
    );
    assert_eq!(response.overall_code, OK);
    assert_eq!(response.statuses[0].limit_remaining, 0);

    let req = request(vec![desc("deferred", "a")]);
    let plan = planned(&domains, &req);
    let answer = answer(
        &plan,
        &replies(vec![Reply::Charged(RuleOutcome::Failed(Failure::Timeout))]),
        false,
    );
    let status = answer.result.expect_err("UNAVAILABLE");
    assert_eq!(status.code(), tonic::Code::Unavailable);
    assert_eq!(
        answer.events.last(),
        Some(&Event::Envoy(EnvoyResult::Unavailable))
    );
}

#[test]
fn unknown_descriptors_are_ok_and_counted_as_no_match() {
    let domains = domains();
    let req = request(vec![desc("nobody", "a"), desc("user", "b")]);
    let plan = planned(&domains, &req);
    assert_eq!(plan.events, [Event::Envoy(EnvoyResult::NoMatch)]);
    let (response, _) = respond(
        &plan,
        &replies(vec![Reply::Charged(RuleOutcome::Allowed(verdict(
            true, 10, 9,
        )))]),
    );
    assert_eq!(codes(&response), [OK, OK]);
    assert_eq!(response.statuses[0].current_limit, None);
    assert_eq!(response.statuses[1].limit_remaining, 9);
}

/// `share_threshold`: the values a pattern matches charge one key, written with the
/// pattern (the request's own limit's key too); `value_to_metric`: the metric name shows
/// the request's value.
#[test]
fn shared_patterns_charge_one_key_and_value_to_metric_names_the_value() {
    let file = "
domain: api
descriptors:
  - key: path
    value: /files/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: route
    value_to_metric: true
    rate_limit: {unit: second, requests_per_unit: 0}
";
    let domains = descriptors::from_texts(&[file]).expect("the file loads");
    let mut own = desc("path", "/files/b");
    own.limit = Some(RateLimitOverride {
        requests_per_unit: 5,
        unit: 2,
    });
    let req = request(vec![
        desc("path", "/files/a"),
        own,
        desc("route", "checkout"),
    ]);
    let plan = planned(&domains, &req);
    let keys: Vec<(usize, &str)> = plan
        .matched
        .iter()
        .map(|m| (m.index, m.key.as_str()))
        .collect();
    assert_eq!(
        keys,
        [
            (0, "rl:{path=/files/*}:api:path=/files/*"),
            (1, "rl:{path=/files/*}:api:path=/files/*"),
            (1, "rl:{path=/files/*}:api:path=/files/*:limit=5/minute"),
        ]
    );
    assert_eq!(
        plan.events,
        [Event::Decision(
            "api.route_checkout".into(),
            Outcome::Denied
        )]
    );
}
