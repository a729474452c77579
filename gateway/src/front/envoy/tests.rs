//! The plan and the answer with plain structs, no server: what a request asks for, and
//! what the decider's replies come to.

use super::answer::{answer, quota_all_over, refused_before_charging, Replies, Reply};
use super::descriptors::{self, Domains};
use super::plan::{plan, Ask, Early, Event, Known, Plan};
use super::settings::AnswerSettings;
use crate::decider::RuleOutcome;
use crate::failure::Failure;
use crate::metrics::{EnvoyResult, HitCounts, Outcome};
use crate::verdict::{TierState, Verdict};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{ListValue, Struct, UInt64Value, Value};
use std::sync::Arc;

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
  - key: credits
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 100}
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

fn respond(
    req: &RateLimitRequest,
    plan: &Plan<'_>,
    replies: &Replies,
) -> (RateLimitResponse, Vec<Event>) {
    respond_with(req, plan, replies, &plain())
}

/// The settings of a gateway with `response_headers = false` and nothing else on.
fn plain() -> AnswerSettings {
    AnswerSettings {
        response_headers: false,
        ..AnswerSettings::default()
    }
}

fn respond_with(
    req: &RateLimitRequest,
    plan: &Plan<'_>,
    replies: &Replies,
    settings: &AnswerSettings,
) -> (RateLimitResponse, Vec<Event>) {
    let answer = answer(req, plan, replies, settings);
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
        plan.blocks(false),
        "a blocked enforced descriptor refuses the request"
    );
    let none = replies(vec![Reply::NotAsked]);
    assert!(refused_before_charging(&plan, &none.replies, &plain()));
    let (response, _) = respond(&req, &plan, &none);
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
        &req,
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
    assert!(refused_before_charging(&plan, &looked, &plain()));
    let (response, events) = respond(&req, &plan, &replies(looked));
    assert_eq!(response.overall_code, OVER);
    assert_eq!(codes(&response), [OVER, OK]);
    // Not asked: nothing is known of its count, so no limit (whose remaining would read 0).
    assert_eq!(response.statuses[1].current_limit, None);
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
    assert!(!refused_before_charging(&plan, &looked, &plain()));
    let (response, events) = respond(&req, &plan, &replies(looked));
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
        &req,
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
    // The one quota descriptor is over: every quota descriptor is, so OVER_LIMIT.
    assert_eq!(response.overall_code, OVER);
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
    let (response, events) = respond(&req, &plan, &failed());
    assert_eq!(response.overall_code, OVER);
    assert_eq!(codes(&response), [OK, OVER]);
    assert!(events.contains(&Event::FailOpen(Failure::Timeout)));
    assert!(events.contains(&Event::Decision("api.user".into(), Outcome::FailOpen)));
    assert!(events.contains(&Event::Decision("api.strict".into(), Outcome::FailClosed)));

    // Fail-open alone: OK, and nothing else said of the descriptor.
    let req = request(vec![desc("user", "a")]);
    let plan = planned(&domains, &req);
    let (response, _) = respond(
        &req,
        &plan,
        &replies(vec![Reply::Charged(RuleOutcome::Failed(
            Failure::Connection,
        ))]),
    );
    assert_eq!(response.overall_code, OK);
    assert_eq!(
        response.statuses[0].current_limit, None,
        "not decided: no limit"
    );

    let req = request(vec![desc("deferred", "a")]);
    let plan = planned(&domains, &req);
    let answer = answer(
        &req,
        &plan,
        &replies(vec![Reply::Charged(RuleOutcome::Failed(Failure::Timeout))]),
        &plain(),
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
        &req,
        &plan,
        &replies(vec![Reply::Charged(RuleOutcome::Allowed(verdict(
            true, 10, 9,
        )))]),
    );
    assert_eq!(codes(&response), [OK, OK]);
    assert_eq!(response.statuses[0].current_limit, None);
    assert_eq!(response.statuses[1].limit_remaining, 9);
}

fn look(key: &str, value: &str) -> RateLimitDescriptor {
    RateLimitDescriptor {
        hits_addend: Some(UInt64Value { value: 0 }),
        ..desc(key, value)
    }
}

fn header<'r>(response: &'r RateLimitResponse, name: &str) -> Option<&'r str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key.eq_ignore_ascii_case(name))
        .map(|h| h.value.as_str())
}

/// The bug: with a 20/MINUTE and a 10/HOUR descriptor in one request, once the second is
/// denied from the deny cache, the first (not asked) showed `20/MINUTE, remaining 0`, and
/// Envoy's `X-RateLimit-Remaining` (the least remaining of the statuses with a limit) told
/// the client 0 of a limit it had not touched.
#[test]
fn an_unasked_or_failed_descriptor_shows_no_limit_and_so_no_remaining() {
    let domains = domains();
    let req = request(vec![desc("user", "a"), desc("team", "t")]);
    let plan = planned(&domains, &req);
    let cached = replies(vec![
        Reply::Charged(RuleOutcome::NotAsked),
        Reply::Charged(RuleOutcome::Denied {
            verdict: verdict(false, 100, 0),
            cached: true,
        }),
    ]);
    let settings = AnswerSettings {
        limit_headers: Some(Default::default()),
        ..plain()
    };
    let (response, events) = respond_with(&req, &plan, &cached, &settings);
    assert_eq!(response.overall_code, OVER);
    assert_eq!(codes(&response), [OK, OVER]);
    assert_eq!(response.statuses[0].current_limit, None);
    assert_eq!(response.statuses[0].duration_until_reset, None);
    let denied = response.statuses[1].current_limit.as_ref().expect("shown");
    assert_eq!(denied.requests_per_unit, 100);
    assert_eq!(header(&response, "RateLimit-Limit"), Some("100"));
    assert!(events.contains(&Event::Decision("api.team".into(), Outcome::DeniedCached)));
    // Not asked, so not counted as allowed either.
    assert!(!events.contains(&Event::Decision("api.user".into(), Outcome::Allowed)));

    // Fail-open: OK, and no limit shown beside the one that answered.
    let failed = replies(vec![
        Reply::Charged(RuleOutcome::Failed(Failure::Timeout)),
        Reply::Charged(RuleOutcome::Allowed(verdict(true, 100, 7))),
    ]);
    let (response, _) = respond_with(&req, &plan, &failed, &settings);
    assert_eq!(response.overall_code, OK);
    assert_eq!(response.statuses[0].current_limit, None);
    assert_eq!(header(&response, "RateLimit-Remaining"), Some("7"));
}

#[test]
fn quota_descriptors_make_the_answer_over_only_when_every_one_is_over() {
    let domains = domains();
    let settings = plain();
    let req = request(vec![desc("tokens", "a"), desc("credits", "a")]);
    let plan = planned(&domains, &req);
    let one_over = vec![
        Reply::Charged(RuleOutcome::ShadowDenied),
        Reply::Charged(RuleOutcome::Allowed(verdict(true, 100, 50))),
    ];
    assert!(!quota_all_over(&plan, &one_over, &settings));
    let (response, _) = respond(&req, &plan, &replies(one_over));
    assert_eq!(response.overall_code, OK);
    assert_eq!(codes(&response), [OVER, OK]);
    let both_over = vec![
        Reply::Charged(RuleOutcome::ShadowDenied),
        Reply::Charged(RuleOutcome::ShadowDenied),
    ];
    assert!(quota_all_over(&plan, &both_over, &settings));
    let (response, events) = respond(&req, &plan, &replies(both_over));
    assert_eq!(response.overall_code, OVER);
    assert_eq!(codes(&response), [OVER, OVER]);
    assert_eq!(events.last(), Some(&Event::Envoy(EnvoyResult::OverLimit)));

    // An enforced descriptor over is OVER_LIMIT whatever the quota ones say; one within
    // its limit does not save a request whose quota is spent.
    let req = request(vec![desc("tokens", "a"), desc("user", "u")]);
    let plan = planned(&domains, &req);
    let (response, _) = respond(
        &req,
        &plan,
        &replies(vec![
            Reply::Charged(RuleOutcome::Allowed(verdict(true, 5, 4))),
            Reply::Charged(RuleOutcome::Denied {
                verdict: verdict(false, 10, 0),
                cached: false,
            }),
        ]),
    );
    assert_eq!(
        (response.overall_code, codes(&response)),
        (OVER, vec![OK, OVER])
    );
    let spent = vec![
        Reply::Charged(RuleOutcome::ShadowDenied),
        Reply::Charged(RuleOutcome::Allowed(verdict(true, 10, 9))),
    ];
    assert!(quota_all_over(&plan, &spent, &settings));
    let (response, _) = respond(&req, &plan, &replies(spent));
    assert_eq!(
        (response.overall_code, codes(&response)),
        (OVER, vec![OVER, OK])
    );
}

/// The token pattern: a look (hits_addend 0) on the request path, the real cost charged
/// at the stream's end. A look is over when no more fits.
#[test]
fn a_quota_look_is_over_when_no_more_fits_and_then_nothing_is_charged() {
    let domains = domains();
    let settings = plain();
    let req = request(vec![look("tokens", "a"), desc("user", "u")]);
    let plan = planned(&domains, &req);
    // One more would fit (what a peek of one says): OK, the other charged.
    let room = vec![
        Reply::Looked(Ok(Some(verdict(true, 5, 0)))),
        Reply::NotAsked,
    ];
    assert!(!refused_before_charging(&plan, &room, &settings));
    let mut charged = room.clone();
    charged[1] = Reply::Charged(RuleOutcome::Allowed(verdict(true, 10, 9)));
    let (response, _) = respond(&req, &plan, &replies(charged));
    assert_eq!(response.overall_code, OK);
    assert_eq!(response.statuses[0].limit_remaining, 1, "one left now");
    // None fits: the quota is spent, the request refused before anything is charged.
    let spent = vec![
        Reply::Looked(Ok(Some(verdict(false, 5, 0)))),
        Reply::NotAsked,
    ];
    assert!(refused_before_charging(&plan, &spent, &settings));
    let (response, _) = respond(&req, &plan, &replies(spent));
    assert_eq!(response.overall_code, OVER);
    assert_eq!(codes(&response), [OVER, OK]);
    assert_eq!(response.statuses[1].current_limit, None, "not asked");
}

#[test]
fn global_quota_mode_makes_every_descriptor_a_quota_one() {
    let domains = domains();
    let settings = AnswerSettings {
        quota_mode: true,
        ..plain()
    };
    let req = request(vec![desc("user", "u"), desc("team", "t")]);
    let plan = planned(&domains, &req);
    let one = vec![
        Reply::Charged(RuleOutcome::ShadowDenied),
        Reply::Charged(RuleOutcome::Allowed(verdict(true, 100, 9))),
    ];
    let (response, _) = respond_with(&req, &plan, &replies(one.clone()), &settings);
    assert_eq!(
        (response.overall_code, codes(&response)),
        (OK, vec![OVER, OK])
    );
    // Without it, the same replies are an enforced denial.
    let (response, _) = respond(&req, &plan, &replies(one));
    assert_eq!(response.overall_code, OVER);
    let both = vec![
        Reply::Charged(RuleOutcome::ShadowDenied),
        Reply::Charged(RuleOutcome::ShadowDenied),
    ];
    let (response, _) = respond_with(&req, &plan, &replies(both), &settings);
    assert_eq!(response.overall_code, OVER);
    // A blocked descriptor no longer refuses the request on its own.
    let req = request(vec![desc("banned", "b"), desc("user", "u")]);
    let plan = planned(&domains, &req);
    assert!(plan.blocks(false));
    assert!(!plan.blocks(true));
    let fine = vec![Reply::Charged(RuleOutcome::Allowed(verdict(true, 10, 9)))];
    assert!(!refused_before_charging(&plan, &fine, &settings));
    let (response, _) = respond_with(&req, &plan, &replies(fine), &settings);
    assert_eq!(
        (response.overall_code, codes(&response)),
        (OK, vec![OVER, OK])
    );
}

#[test]
fn global_shadow_mode_keeps_the_codes_and_answers_ok() {
    let domains = domains();
    let settings = AnswerSettings {
        shadow_mode: true,
        ..plain()
    };
    let req = request(vec![desc("user", "u"), desc("team", "t")]);
    let plan = planned(&domains, &req);
    let denied = replies(vec![
        Reply::Charged(RuleOutcome::ShadowDenied),
        Reply::Charged(RuleOutcome::Allowed(verdict(true, 100, 9))),
    ]);
    let (response, events) = respond_with(&req, &plan, &denied, &settings);
    assert_eq!(response.overall_code, OK);
    assert_eq!(codes(&response), [OVER, OK]);
    assert!(events.contains(&Event::Envoy(EnvoyResult::ShadowMode)));
    assert_eq!(events.last(), Some(&Event::Envoy(EnvoyResult::Ok)));
    // Nothing over: nothing counted as shadowed.
    let fine = replies(vec![
        Reply::Charged(RuleOutcome::Allowed(verdict(true, 10, 9))),
        Reply::Charged(RuleOutcome::Allowed(verdict(true, 100, 9))),
    ]);
    let (_, events) = respond_with(&req, &plan, &fine, &settings);
    assert!(!events.contains(&Event::Envoy(EnvoyResult::ShadowMode)));
    // A descriptor whose failure would fail the call answers OK too.
    let req = request(vec![desc("deferred", "a")]);
    let plan = planned(&domains, &req);
    let failed = replies(vec![Reply::Charged(RuleOutcome::Failed(Failure::Timeout))]);
    let (response, events) = respond_with(&req, &plan, &failed, &settings);
    assert_eq!(response.overall_code, OK);
    assert!(events.contains(&Event::Envoy(EnvoyResult::ShadowMode)));
}

#[test]
fn the_limit_headers_show_the_least_remaining_or_the_enforced_denial() {
    let domains = domains();
    let settings = AnswerSettings {
        limit_headers: Some(super::settings::LimitHeaders {
            limit: "X-Limit".into(),
            remaining: "X-Left".into(),
            reset: "X-Reset".into(),
        }),
        ..plain()
    };
    let req = request(vec![
        desc("user", "u"),
        desc("team", "t"),
        desc("free", "f"),
    ]);
    let plan = planned(&domains, &req);
    let allowed = replies(vec![
        Reply::Charged(RuleOutcome::Allowed(verdict(true, 10, 4))),
        Reply::Charged(RuleOutcome::Allowed(verdict(true, 100, 3))),
    ]);
    let (response, _) = respond_with(&req, &plan, &allowed, &settings);
    let shown: Vec<(&str, &str)> = response
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.as_str(), h.value.as_str()))
        .collect();
    // The team's 3 left of 100 an hour (the unlimited one shows no limit); reset 60 s.
    assert_eq!(
        shown,
        [("X-Limit", "100"), ("X-Left", "3"), ("X-Reset", "60")]
    );
    // An enforced denial wins over a quota or a lower remaining.
    let req = request(vec![
        desc("tokens", "q"),
        desc("user", "u"),
        desc("team", "t"),
    ]);
    let plan = planned(&domains, &req);
    let denied = replies(vec![
        Reply::Charged(RuleOutcome::Allowed(verdict(true, 5, 1))),
        Reply::Charged(RuleOutcome::Denied {
            verdict: verdict(false, 10, 0),
            cached: false,
        }),
        Reply::Charged(RuleOutcome::Uncounted(verdict(true, 100, 50))),
    ]);
    let (response, _) = respond_with(&req, &plan, &denied, &settings);
    assert_eq!(header(&response, "X-Limit"), Some("10"));
    assert_eq!(header(&response, "X-Left"), Some("0"));
    // Both kinds at once: ours and theirs.
    let both = AnswerSettings {
        response_headers: true,
        ..settings.clone()
    };
    let (response, _) = respond_with(&req, &plan, &denied, &both);
    assert!(header(&response, "ratelimit").is_some());
    assert!(header(&response, "retry-after").is_some());
    assert_eq!(header(&response, "X-Left"), Some("0"));
    // Off: none of theirs.
    let (response, _) = respond(&req, &plan, &denied);
    assert!(response.response_headers_to_add.is_empty());
}

/// A descriptor limit like `limit`, with `metadata`.
fn with_metadata(
    limit: &descriptors::DescriptorLimit,
    metadata: Struct,
) -> Arc<descriptors::DescriptorLimit> {
    Arc::new(descriptors::DescriptorLimit {
        rule: limit.rule.clone(),
        name: limit.name.clone(),
        replaces: limit.replaces.clone(),
        shown: limit.shown,
        unlimited: limit.unlimited,
        blocked: limit.blocked,
        shadow: limit.shadow,
        quota: limit.quota,
        detailed_metric: limit.detailed_metric,
        on_failure: limit.on_failure,
        on_module_error: limit.on_module_error,
        limit_override: limit.limit_override,
        subject: limit.subject.clone(),
        metadata: Some(metadata),
    })
}

fn string(text: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(text.into())),
    }
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn object(fields: &[(&str, Value)]) -> Value {
    Value {
        kind: Some(Kind::StructValue(structure(fields))),
    }
}

fn structure(fields: &[(&str, Value)]) -> Struct {
    Struct {
        fields: fields
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.clone()))
            .collect(),
    }
}

fn list(values: Vec<Value>) -> Value {
    Value {
        kind: Some(Kind::ListValue(ListValue { values })),
    }
}

#[test]
fn dynamic_metadata_is_the_request_and_the_passing_descriptors_metadata_merged() {
    let domains = domains();
    let mut user = desc("user", "u");
    user.hits_addend = Some(UInt64Value { value: 3 });
    let mut team = desc("team", "t");
    team.limit = Some(RateLimitOverride {
        requests_per_unit: 7,
        unit: 3,
    });
    let req = RateLimitRequest {
        hits_addend: 2,
        ..request(vec![user, team, desc("tokens", "q"), desc("nobody", "n")])
    };
    let base = planned(&domains, &req);
    // user and team pass, tokens (quota) is over; user's and team's metadata overlap.
    let user_meta = structure(&[
        ("name", string("first")),
        ("nested", object(&[("a", number(1.0))])),
    ]);
    let team_meta = structure(&[
        ("name", string("second")),
        ("nested", object(&[("a", number(9.0)), ("b", number(2.0))])),
        ("team", string("yes")),
    ]);
    let tokens_meta = structure(&[("spent", string("no"))]);
    let limits = [
        with_metadata(base.found[0].1, user_meta),
        with_metadata(base.found[1].1, team_meta),
        with_metadata(base.found[2].1, tokens_meta),
    ];
    drop(base);
    let mut plan = planned(&domains, &req);
    for (at, limit) in limits.iter().enumerate() {
        plan.found[at].1 = limit;
    }
    for m in plan.matched.iter_mut() {
        m.limit = &limits[m.index];
    }
    // team's override is tightened: two keys.
    assert_eq!(plan.matched.len(), 4);
    let settings = AnswerSettings {
        response_dynamic_metadata: true,
        ..plain()
    };
    let replied = replies(vec![
        Reply::Charged(RuleOutcome::Allowed(verdict(true, 10, 7))),
        Reply::Charged(RuleOutcome::Allowed(verdict(true, 100, 98))),
        Reply::Charged(RuleOutcome::Allowed(verdict(true, 7, 5))),
        Reply::Charged(RuleOutcome::ShadowDenied),
    ]);
    let (response, _) = respond_with(&req, &plan, &replied, &settings);
    assert_eq!(codes(&response), [OK, OK, OVER, OK]);
    let expected = structure(&[
        ("domain", string("api")),
        (
            "descriptors",
            list(vec![
                object(&[
                    ("entries", list(vec![string("user=u")])),
                    ("hitsAddend", number(3.0)),
                ]),
                object(&[
                    ("entries", list(vec![string("team=t")])),
                    ("limit", string("requests_per_unit:7 unit:HOUR")),
                ]),
                object(&[("entries", list(vec![string("tokens=q")]))]),
                object(&[("entries", list(vec![string("nobody=n")]))]),
            ]),
        ),
        ("hitsAddend", number(2.0)),
        (
            "metadata",
            object(&[
                ("name", string("first")),
                ("nested", object(&[("a", number(1.0)), ("b", number(2.0))])),
                ("team", string("yes")),
            ]),
        ),
    ]);
    assert_eq!(response.dynamic_metadata, Some(expected));
    // Off: none.
    let (response, _) = respond(&req, &plan, &replied);
    assert_eq!(response.dynamic_metadata, None);
}

#[test]
fn dynamic_metadata_without_metadata_or_hits_has_neither_field() {
    let domains = domains();
    let req = request(vec![desc("user", "u")]);
    let plan = planned(&domains, &req);
    let settings = AnswerSettings {
        response_dynamic_metadata: true,
        ..plain()
    };
    let allowed = replies(vec![Reply::Charged(RuleOutcome::Allowed(verdict(
        true, 10, 9,
    )))]);
    let (response, _) = respond_with(&req, &plan, &allowed, &settings);
    let expected = structure(&[
        ("domain", string("api")),
        (
            "descriptors",
            list(vec![object(&[("entries", list(vec![string("user=u")]))])]),
        ),
    ]);
    assert_eq!(response.dynamic_metadata, Some(expected));
}

#[test]
fn each_limited_descriptor_counts_its_hits_split_at_the_thresholds() {
    let domains = domains();
    let req = RateLimitRequest {
        hits_addend: 3,
        ..request(vec![
            desc("user", "u"),
            desc("team", "t"),
            desc("banned", "b"),
            desc("free", "f"),
            look("wide", "w"),
            desc("trial", "s"),
        ])
    };
    let plan = planned(&domains, &req);
    let replied = replies(vec![
        // 10 a minute, 1 left after 3: 6 -> 9, one near (above 8).
        Reply::Charged(RuleOutcome::Allowed(verdict(true, 10, 1))),
        // 100 an hour, 1 left, 3 do not fit: 99 -> 102, two over, one near.
        Reply::Charged(RuleOutcome::Denied {
            verdict: verdict(false, 100, 1),
            cached: false,
        }),
        Reply::Looked(Ok(Some(verdict(true, 10, 5)))),
        Reply::Charged(RuleOutcome::ShadowDenied),
    ]);
    let (_, events) = respond(&req, &plan, &replied);
    let hits: Vec<(&str, HitCounts)> = events
        .iter()
        .filter_map(|e| match e {
            Event::Hits(name, hits) => Some((name.as_str(), *hits)),
            _ => None,
        })
        .collect();
    let counts = |total, over, near, within, shadow| HitCounts {
        total,
        over_limit: over,
        near_limit: near,
        within_limit: within,
        shadow_mode: shadow,
    };
    assert_eq!(
        hits,
        [
            ("api.user", counts(3, 0, 1, 3, 0)),
            ("api.team", counts(3, 2, 1, 0, 0)),
            ("api.banned", counts(3, 3, 0, 0, 0)),
            ("api.trial", counts(3, 3, 0, 0, 3)),
        ],
        "the unlimited and the look count nothing"
    );
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
