//! `[envoy]`'s settings of the answer, each tried on a real Redis: the quota rule for the
//! overall code (and envoyproxy/ratelimit's token pattern: a look on the request path,
//! the real cost at the stream's end), the global `quota_mode` and `shadow_mode`, the
//! response's dynamic metadata, envoyproxy/ratelimit's limit headers, and the per-limit
//! hit statistics with their near-limit ratio.

use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value};
use std::fs;
use testkit::gateway::envoy::*;
use testkit::gateway::*;
use testkit::{each_flavor, Flavor};

const LLM: &str = r#"
domain: llm
descriptors:
  - key: tokens
    quota_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100}
  - key: burst
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: team
    rate_limit: {unit: hour, requests_per_unit: 50}
"#;

fn llm(redis: &Server, envoy_lines: &str) -> EnvoyGateway {
    EnvoyGateway::start_with(
        &redis_section(redis.port(), ""),
        envoy_lines,
        &[("llm.yaml", LLM)],
    )
}

fn llm_request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    request("llm", descriptors)
}

/// What is left of `entries` now, by a look (which counts nothing).
fn left(envoy: &mut EnvoyGateway, entries: &[(&str, &str)]) -> u32 {
    let look = envoy.ask(llm_request(vec![desc_hits(entries, 0, false)]));
    remaining(&look, 0)
}

#[test]
fn the_token_pattern_denies_once_the_real_costs_spent_the_quota() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let mut envoy = llm(&redis, "");
        let tokens = [("tokens", "alice")];
        let user = [("user", "alice")];
        // The request path: a look at the quota, a hit on the user's limit.
        let on_request = || llm_request(vec![desc_hits(&tokens, 0, false), desc(&user)]);
        // The stream's end: its real cost in tokens.
        let at_end = |cost| llm_request(vec![desc_hits(&tokens, cost, false)]);
        for cost in [400, 400] {
            let asked = envoy.ask(on_request());
            assert_eq!(overall(&asked), Code::Ok, "{flavor:?}: {asked:?}");
            let spent = envoy.ask(at_end(cost));
            assert_eq!(overall(&spent), Code::Ok, "{flavor:?}: {spent:?}");
        }
        assert_eq!(left(&mut envoy, &tokens), 200, "{flavor:?}");
        let asked = envoy.ask(on_request());
        assert_eq!(overall(&asked), Code::Ok, "{flavor:?}: 200 tokens left");
        // 400 do not fit in the 200 left: over, and what was left is spent.
        let spent = envoy.ask(at_end(400));
        assert_eq!(code(&spent, 0), Code::OverLimit, "{flavor:?}");
        assert_eq!(
            overall(&spent),
            Code::OverLimit,
            "{flavor:?}: the only quota is over"
        );
        assert_eq!(left(&mut envoy, &tokens), 0, "{flavor:?}");
        let user_before = left(&mut envoy, &user);
        let denied = envoy.ask(on_request());
        assert_eq!(overall(&denied), Code::OverLimit, "{flavor:?}: {denied:?}");
        assert_eq!(code(&denied, 0), Code::OverLimit);
        assert_eq!(code(&denied, 1), Code::Ok);
        assert_eq!(
            left(&mut envoy, &user),
            user_before,
            "{flavor:?}: the refused request charged nothing"
        );
    });
}

#[test]
fn a_spent_quota_gives_back_what_the_other_descriptors_were_charged() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = llm(&redis, "");
    let tokens = [("tokens", "bob")];
    let user = [("user", "bob")];
    // 1000 tokens at once: the quota is spent by this request alone, which is over.
    let both = |cost| llm_request(vec![desc_hits(&tokens, cost, false), desc(&user)]);
    let first = envoy.ask(both(1000));
    assert_eq!(overall(&first), Code::Ok, "{first:?}");
    assert_eq!(left(&mut envoy, &user), 99);
    let over = envoy.ask(both(1));
    assert_eq!(overall(&over), Code::OverLimit, "{over:?}");
    assert_eq!(code(&over, 1), Code::Ok);
    assert_eq!(left(&mut envoy, &user), 99, "the user's hit was given back");
    // Two quotas, one spent: OK, and the other is charged.
    let two = llm_request(vec![
        desc(&tokens),
        desc_hits(&[("tokens", "carol")], 5, false),
        desc(&user),
    ]);
    let answer = envoy.ask(two);
    assert_eq!(overall(&answer), Code::Ok, "{answer:?}");
    assert_eq!(left(&mut envoy, &[("tokens", "carol")]), 995);
    assert_eq!(left(&mut envoy, &user), 98);
}

#[test]
fn global_quota_mode_denies_only_when_every_descriptor_is_over() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = llm(&redis, "quota_mode = true");
    let burst = [("burst", "d")];
    let team = [("team", "d")];
    let both = || llm_request(vec![desc(&burst), desc(&team)]);
    for _ in 0..2 {
        assert_eq!(overall(&envoy.ask(both())), Code::Ok);
    }
    // burst (2 an hour) is over; team is not, and is still charged.
    let third = envoy.ask(both());
    assert_eq!(overall(&third), Code::Ok, "{third:?}");
    assert_eq!(
        (code(&third, 0), code(&third, 1)),
        (Code::OverLimit, Code::Ok)
    );
    assert_eq!(left(&mut envoy, &team), 47);
    let alone = envoy.ask(llm_request(vec![desc(&burst)]));
    assert_eq!(
        overall(&alone),
        Code::OverLimit,
        "its only descriptor is over"
    );
}

#[test]
fn global_shadow_mode_answers_ok_keeping_the_codes_and_counts_it() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = llm(&redis, "shadow_mode = true");
    let burst = [("burst", "e")];
    let team = [("team", "e")];
    let both = || llm_request(vec![desc(&burst), desc(&team)]);
    for _ in 0..2 {
        assert_eq!(overall(&envoy.ask(both())), Code::Ok);
    }
    let third = envoy.ask(both());
    assert_eq!(overall(&third), Code::Ok, "{third:?}");
    assert_eq!(
        code(&third, 0),
        Code::OverLimit,
        "the status keeps its code"
    );
    assert_eq!(
        left(&mut envoy, &team),
        47,
        "the request went through: charged"
    );
    let metrics = envoy.gateway.metrics();
    assert_eq!(
        metrics.counter("rl_gateway_envoy_total", &[("result", "shadow_mode")]),
        1.0,
        "{}",
        metrics.text
    );
}

fn string(text: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(text.into())),
    }
}

fn object(fields: &[(&str, Value)]) -> Value {
    Value {
        kind: Some(Kind::StructValue(Struct {
            fields: fields
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.clone()))
                .collect(),
        })),
    }
}

#[test]
fn dynamic_metadata_describes_the_request() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = llm(&redis, "response_dynamic_metadata = true");
    let mut asked = llm_request(vec![
        desc_hits(&[("user", "f")], 2, false),
        desc_limit(&[("team", "f")], 9, 2),
    ]);
    asked.hits_addend = 3;
    let answer = envoy.ask(asked);
    let number = |n: f64| Value {
        kind: Some(Kind::NumberValue(n)),
    };
    let list = |values: Vec<Value>| Value {
        kind: Some(Kind::ListValue(ListValue { values })),
    };
    let expected = object(&[
        ("domain", string("llm")),
        (
            "descriptors",
            list(vec![
                object(&[
                    ("entries", list(vec![string("user=f")])),
                    ("hitsAddend", number(2.0)),
                ]),
                object(&[
                    ("entries", list(vec![string("team=f")])),
                    ("limit", string("requests_per_unit:9 unit:MINUTE")),
                ]),
            ]),
        ),
        ("hitsAddend", number(3.0)),
    ]);
    let Some(Kind::StructValue(expected)) = expected.kind else {
        unreachable!("an object")
    };
    assert_eq!(answer.dynamic_metadata, Some(expected));
    // Off by default.
    let mut plain = llm(&redis, "");
    let answer = plain.ask(llm_request(vec![desc(&[("user", "g")])]));
    assert_eq!(answer.dynamic_metadata, None);
}

#[test]
fn the_limit_headers_name_the_least_remaining_beside_ours() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = llm(
        &redis,
        "limit_headers = true\nremaining_header = \"X-Left\"",
    );
    let answer = envoy.ask(llm_request(vec![
        desc(&[("user", "h")]),
        desc(&[("burst", "h")]),
    ]));
    assert_eq!(header(&answer, "RateLimit-Limit"), Some("2"), "{answer:?}");
    assert_eq!(header(&answer, "X-Left"), Some("1"));
    let reset: u64 = header(&answer, "RateLimit-Reset").unwrap().parse().unwrap();
    assert!((1..=3600).contains(&reset), "{reset}");
    assert!(header(&answer, "ratelimit").is_some(), "ours too");
    envoy.ask(llm_request(vec![desc(&[("burst", "h")])]));
    let denied = envoy.ask(llm_request(vec![
        desc(&[("user", "h")]),
        desc(&[("burst", "h")]),
    ]));
    assert_eq!(overall(&denied), Code::OverLimit);
    assert_eq!(header(&denied, "X-Left"), Some("0"));
}

#[test]
fn hits_are_counted_per_limit_split_at_the_near_and_over_thresholds() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    // A ratio of 0.5: near above 1 of burst's 2.
    let mut envoy = llm(&redis, "near_limit_ratio = 0.5");
    let burst = [("burst", "i")];
    // 0 -> 1 within; 1 -> 2 within and near; 2 -> 4 denied: both over.
    for cost in [1, 1, 2] {
        envoy.ask(llm_request(vec![desc_hits(&burst, cost, false)]));
    }
    let metrics = envoy.gateway.metrics();
    let stat = |stat: &str| {
        metrics.counter(
            "rl_gateway_envoy_hits_total",
            &[("rule", "llm.burst"), ("stat", stat)],
        )
    };
    assert_eq!(stat("total_hits"), 4.0, "{}", metrics.text);
    assert_eq!(stat("within_limit"), 2.0);
    assert_eq!(stat("near_limit"), 1.0);
    assert_eq!(stat("over_limit"), 2.0);
    assert_eq!(stat("shadow_mode"), 0.0);
}

#[test]
fn check_config_refuses_inconsistent_answer_settings() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("llm.yaml"), LLM).unwrap();
    for (lines, expected) in [
        (
            "near_limit_ratio = 1.5",
            "near_limit_ratio 1.5 is not in (0, 1]",
        ),
        (
            "limit_headers = true\nreset_header = \"no spaces\"",
            "not an HTTP header name",
        ),
        (
            "limit_header = \"X-Limit\"",
            "limit_header is set but limit_headers is false",
        ),
    ] {
        let toml = dir.path().join("gateway.toml");
        fs::write(
            &toml,
            format!(
                "[server]\nlisten = \"127.0.0.1:1\"\nmode = \"check\"\n[envoy]\nlisten = \"127.0.0.1:2\"\ndescriptors = \"llm.yaml\"\n{lines}\n"
            ),
        )
        .unwrap();
        let out = check_config(&toml);
        let text = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{lines}: accepted");
        assert!(text.contains(expected), "{lines}: {text}");
    }
}
