//! rl-gateway as Envoy's rate limit service (`[envoy]`), asked over gRPC with envoy-types'
//! tonic client, on a real Redis with the module, beside envoyproxy/ratelimit's README
//! examples (replayed in `envoy_peer_readme.rs`): descriptors all or nothing, `hits_addend` 0 and `is_negative_hits`, limit
//! overrides, the RateLimit fields, shadow and quota mode, unknown domains and descriptors.

// envoyproxy/ratelimit's README examples 2, 3, 5, 6 and 7, as written there, each in a
// file of its own in one directory beside ours (their replay is in envoy_peer_readme.rs).
use crate::envoy_peer_readme::{EXAMPLE_2, EXAMPLE_3, EXAMPLE_5, EXAMPLE_6, EXAMPLE_7};
use std::fs;
use std::time::Duration;
use testkit::gateway::envoy::*;
use testkit::gateway::*;

/// Ours: a user's daily budget and a per-path one of the same subject, a quota-mode
/// descriptor, and per-descriptor failure answers.
const OURS: &str = r#"
domain: api
subject: user
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 100
    descriptors:
      - key: path
        rate_limit:
          unit: day
          requests_per_unit: 2
  - key: plan
    quota_mode: true
    rate_limit:
      unit: day
      requests_per_unit: 1
  - key: wallet
    rate_limit:
      unit: day
      requests_per_unit: 5
      algorithm: sliding
  - key: tenant
    detailed_metric: true
    rate_limit:
      unit: day
      requests_per_unit: 50
"#;

fn files() -> Vec<(&'static str, &'static str)> {
    vec![
        ("example2.yaml", EXAMPLE_2),
        ("example3.yaml", EXAMPLE_3),
        ("example5.yml", EXAMPLE_5),
        ("example6.yaml", EXAMPLE_6),
        ("example7.yaml", EXAMPLE_7),
        ("ours.yaml", OURS),
        ("notes.txt", "not a descriptor file: skipped"),
    ]
}

#[test]
fn descriptors_are_all_or_nothing_and_hits_addend_zero_counts_nothing() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = EnvoyGateway::on(&redis, &files());
    let both = || {
        request(
            "api",
            vec![
                desc(&[("user", "u1")]),
                desc(&[("user", "u1"), ("path", "/orders")]),
            ],
        )
    };
    let mhit_before = redis.command_calls("RL.MHIT").unwrap_or(0);
    assert_eq!(overall(&envoy.ask(both())), Code::Ok);
    assert_eq!(overall(&envoy.ask(both())), Code::Ok);
    assert_eq!(
        redis.command_calls("RL.MHIT").unwrap_or(0) - mhit_before,
        2,
        "one RL.MHIT per request"
    );
    let third = envoy.ask(both());
    assert_eq!(overall(&third), Code::OverLimit);
    assert_eq!(code(&third, 1), Code::OverLimit);
    assert_eq!(code(&third, 0), Code::Ok);
    // A look (hits_addend 0) says what is left and counts nothing.
    let hits_before = redis.command_calls("RL.HIT").unwrap_or(0);
    for _ in 0..3 {
        let look = envoy.ask(request("api", vec![desc_hits(&[("user", "u1")], 0, false)]));
        assert_eq!(overall(&look), Code::Ok);
        assert_eq!(remaining(&look, 0), 98, "two counted, the denied one not");
        let shown = header(&look, "ratelimit").unwrap();
        assert!(shown.contains(";r=98;"), "the field says the same: {shown}");
    }
    assert_eq!(redis.command_calls("RL.HIT").unwrap_or(0), hits_before);
    assert!(redis.command_calls("RL.PEEK").unwrap_or(0) >= 3);
    // A look at a full budget says OVER_LIMIT, and then nothing of the request is charged.
    let mixed = envoy.ask(request(
        "api",
        vec![
            desc_hits(&[("user", "u1"), ("path", "/orders")], 0, false),
            desc(&[("user", "u1")]),
        ],
    ));
    assert_eq!(overall(&mixed), Code::OverLimit, "{mixed:?}");
    let look = envoy.ask(request("api", vec![desc_hits(&[("user", "u1")], 0, false)]));
    assert_eq!(
        remaining(&look, 0),
        98,
        "the other descriptor was not charged"
    );
}

#[test]
fn negative_hits_refund_never_above_the_limit_and_hits_addend_counts_that_many() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = EnvoyGateway::on(&redis, &files());
    let wallet = || [("wallet", "w1")];
    let spent = envoy.ask(request("api", vec![desc_hits(&wallet(), 3, false)]));
    assert_eq!(remaining(&spent, 0), 2);
    let mut request_level = request("api", vec![desc(&wallet())]);
    request_level.hits_addend = 2;
    let spent = envoy.ask(request_level);
    assert_eq!(remaining(&spent, 0), 0);
    assert_eq!(
        overall(&envoy.ask(request("api", vec![desc(&wallet())]))),
        Code::OverLimit
    );
    let refund = envoy.ask(request("api", vec![desc_hits(&wallet(), 2, true)]));
    assert_eq!(overall(&refund), Code::Ok);
    assert_eq!(remaining(&refund, 0), 2, "{refund:?}");
    assert!(redis.command_calls("RL.REFUND").unwrap_or(0) >= 1);
    let after = envoy.ask(request("api", vec![desc(&wallet())]));
    assert_eq!(overall(&after), Code::Ok, "the refund is spendable again");
    assert_eq!(remaining(&after, 0), 1);
    let too_much = envoy.ask(request("api", vec![desc_hits(&wallet(), 1000, true)]));
    assert_eq!(remaining(&too_much, 0), 5, "never above the limit");
    // u32::MAX hits can never pass: OVER_LIMIT, no Retry-After (no wait helps).
    let huge = envoy.ask(request(
        "api",
        vec![desc_hits(&wallet(), u64::from(u32::MAX), false)],
    ));
    assert_eq!(overall(&huge), Code::OverLimit);
    assert!(header(&huge, "retry-after").is_none(), "{huge:?}");
    let look = envoy.ask(request("api", vec![desc_hits(&wallet(), 0, false)]));
    assert_eq!(remaining(&look, 0), 5, "nothing was counted");
}

#[test]
fn overrides_headers_quota_mode_and_what_no_rule_limits() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = EnvoyGateway::on(&redis, &files());
    // A descriptor's own limit: 2 a minute beside the configured 5 a day (by default an
    // override only tightens), counted in the descriptor's one key.
    for i in 0..2 {
        let answer = envoy.ask(request("api", vec![desc_limit(&[("wallet", "w9")], 2, 2)]));
        assert_eq!(overall(&answer), Code::Ok, "call {i}");
        let limit = answer.statuses[0].current_limit.as_ref().unwrap();
        assert_eq!((limit.requests_per_unit, limit.unit), (2, 2));
        let policy = header(&answer, "ratelimit-policy").unwrap();
        assert!(policy.contains(";q=2;w=60"), "{policy}");
        assert!(header(&answer, "ratelimit")
            .unwrap()
            .contains(&format!(";r={}", 1 - i)));
        assert!(header(&answer, "retry-after").is_none());
    }
    let denied = envoy.ask(request("api", vec![desc_limit(&[("wallet", "w9")], 2, 2)]));
    assert_eq!(overall(&denied), Code::OverLimit);
    let retry: u64 = header(&denied, "retry-after").unwrap().parse().unwrap();
    // The wallet's algorithm is the sliding window: a wait of up to two windows.
    assert!((1..=120).contains(&retry), "{retry}");
    let reset = denied.statuses[0].duration_until_reset.unwrap();
    assert!(reset.seconds <= 120, "{reset:?}");
    let own = envoy.ask(request("api", vec![desc(&[("wallet", "w9")])]));
    assert_eq!(
        overall(&own),
        Code::Ok,
        "the override's denial is not cached: {own:?}"
    );
    assert_eq!(
        remaining(&own, 0),
        2,
        "the override spent the configured budget: 5 - 2 - 1"
    );

    // Quota mode: its own code says OVER_LIMIT; the answer is OVER_LIMIT only when every
    // quota descriptor of the request is over (here the only one), as theirs.
    let plan = || request("api", vec![desc(&[("plan", "free")])]);
    assert_eq!(overall(&envoy.ask(plan())), Code::Ok);
    let over = envoy.ask(plan());
    assert_eq!(overall(&over), Code::OverLimit, "{over:?}");
    assert_eq!(code(&over, 0), Code::OverLimit);
    let beside = envoy.ask(request(
        "api",
        vec![desc(&[("plan", "free")]), desc(&[("plan", "pro")])],
    ));
    assert_eq!(overall(&beside), Code::Ok, "one quota left: {beside:?}");
    assert_eq!(code(&beside, 0), Code::OverLimit);

    // What no rule limits is OK, and counted.
    let unknown = envoy.ask(request("nowhere", vec![desc(&[("a", "b")])]));
    assert_eq!(overall(&unknown), Code::Ok);
    assert_eq!(unknown.statuses.len(), 1);
    let unmatched = envoy.ask(request("api", vec![desc(&[("colour", "red")])]));
    assert_eq!(overall(&unmatched), Code::Ok);
    assert!(unmatched.statuses[0].current_limit.is_none());
    let metrics = envoy.gateway.metrics();
    assert_eq!(
        metrics.counter("rl_gateway_envoy_total", &[("result", "unknown_domain")]),
        1.0,
        "{}",
        metrics.text
    );
    assert_eq!(
        metrics.counter("rl_gateway_envoy_total", &[("result", "no_match")]),
        1.0
    );
}

/// Two limits in one request, as in envoyproxy/ratelimit's integration test (key2 20 a
/// minute, key3 10 an hour).
const PAIR: &str = r#"
domain: pair
descriptors:
  - key: key2
    rate_limit: {unit: minute, requests_per_unit: 20}
  - key: key3
    rate_limit: {unit: hour, requests_per_unit: 10}
"#;

/// Once key3 is denied and its denial cached, key2 is not asked: its status shows no
/// limit, so Envoy's `X-RateLimit-Remaining` (the least remaining of the statuses with a
/// limit) is not told 0 of a limit the client has not touched.
#[test]
fn a_descriptor_not_asked_shows_no_limit_and_no_remaining() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = EnvoyGateway::on(&redis, &[("pair.yaml", PAIR)]);
    let both = || request("pair", vec![desc(&[("key2", "a")]), desc(&[("key3", "a")])]);
    for i in 0..10 {
        assert_eq!(overall(&envoy.ask(both())), Code::Ok, "call {i}");
    }
    // Denied by Redis: key2's count is known (it was asked with key3).
    let denied = envoy.ask(both());
    assert_eq!(overall(&denied), Code::OverLimit);
    assert_eq!(code(&denied, 0), Code::Ok);
    assert!(denied.statuses[0].current_limit.is_some());
    assert!(remaining(&denied, 0) >= 10, "{denied:?}");
    // Denied from the deny cache: key2 was not asked.
    let cached = envoy.ask(both());
    assert_eq!(overall(&cached), Code::OverLimit);
    assert_eq!(code(&cached, 0), Code::Ok);
    assert_eq!(cached.statuses[0].current_limit, None, "{cached:?}");
    let shown = cached.statuses[1]
        .current_limit
        .as_ref()
        .expect("key3's limit");
    assert_eq!(shown.requests_per_unit, 10);
    let metrics = envoy.gateway.metrics();
    assert_eq!(
        metrics.decisions("pair.key3", "denied_cached"),
        1.0,
        "{}",
        metrics.text
    );
}

#[test]
fn malformed_requests_get_invalid_argument_and_keys_stay_bounded() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = EnvoyGateway::on(&redis, &files());
    let invalid = |envoy: &mut EnvoyGateway, request: RateLimitRequest, what: &str| match envoy
        .call(request)
    {
        Err(status) => assert_eq!(
            status.code(),
            tonic::Code::InvalidArgument,
            "{what}: {status:?}"
        ),
        Ok(answer) => panic!("{what}: answered {answer:?}"),
    };
    invalid(
        &mut envoy,
        request("", vec![desc(&[("user", "u")])]),
        "empty domain",
    );
    invalid(&mut envoy, request("api", vec![]), "no descriptors");
    invalid(&mut envoy, request("api", vec![desc(&[])]), "no entries");
    let many: Vec<_> = (0..17)
        .map(|i| desc(&[("user", &format!("u{i}"))]))
        .collect();
    invalid(&mut envoy, request("api", many), "17 descriptors");
    let entries: Vec<(String, String)> = (0..17).map(|i| (format!("k{i}"), "v".into())).collect();
    let entries: Vec<(&str, &str)> = entries
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    invalid(
        &mut envoy,
        request("api", vec![desc(&entries)]),
        "17 entries",
    );
    let long_key = "k".repeat(256);
    invalid(
        &mut envoy,
        request("api", vec![desc(&[(&long_key, "v")])]),
        "a 256-byte key",
    );
    let long_value = "v".repeat(1025);
    invalid(
        &mut envoy,
        request("api", vec![desc(&[("user", &long_value)])]),
        "a 1025-byte value",
    );
    invalid(
        &mut envoy,
        request(&"d".repeat(256), vec![desc(&[("user", "u")])]),
        "a 256-byte domain",
    );
    invalid(
        &mut envoy,
        request(
            "api",
            vec![desc_hits(&[("user", "u")], u64::from(u32::MAX) + 1, false)],
        ),
        "hits_addend over u32::MAX",
    );
    invalid(
        &mut envoy,
        request("api", vec![desc_limit(&[("user", "u")], 5, 0)]),
        "an override of unit UNKNOWN",
    );
    invalid(
        &mut envoy,
        request("api", vec![desc_limit(&[("user", "u")], 5, 8)]),
        "an override of a unit Envoy does not define",
    );
    // Over the message bound: refused before it is decoded.
    let giant = "g".repeat(70 * 1024);
    let refused = envoy.call(request("api", vec![desc(&[("user", &giant)])]));
    assert!(refused.is_err(), "a 70 KiB message is refused");
    // The largest values allowed make keys of at most 256 bytes.
    let value = "v{}:=%".repeat(171);
    let value = &value[..1024];
    let answer = envoy.ask(request(
        "api",
        vec![
            desc(&[("user", value)]),
            desc(&[("user", value), ("path", value)]),
        ],
    ));
    assert_eq!(overall(&answer), Code::Ok);
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut redis.conn())
        .unwrap();
    assert!(!keys.is_empty());
    for key in &keys {
        assert!(
            key.len() <= 256,
            "{} bytes: {}",
            key.len(),
            String::from_utf8_lossy(key)
        );
    }
    let metrics = envoy.gateway.metrics();
    assert!(metrics.counter("rl_gateway_envoy_total", &[("result", "invalid_argument")]) >= 10.0);
    // Still serving.
    assert_eq!(
        overall(&envoy.ask(request("api", vec![desc(&[("user", "fine")])]))),
        Code::Ok
    );
}

#[test]
fn a_descriptor_file_that_does_not_load_stops_the_start_naming_file_and_place() {
    let yaml = tempfile::tempdir().unwrap();
    fs::write(
        yaml.path().join("bad.yaml"),
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n",
    )
    .unwrap();
    let toml = yaml.path().join("gateway.toml");
    fs::write(
        &toml,
        format!(
            "[server]\nlisten = \"127.0.0.1:1\"\nmode = \"check\"\n[envoy]\nlisten = \"127.0.0.1:2\"\ndescriptors = \"{}\"\n",
            yaml.path().display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(gateway_binary())
        .arg("--check-config")
        .arg(&toml)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(text.contains("bad.yaml"), "{text}");
    assert!(text.contains("descriptors[0].rate_limit.unit"), "{text}");
}

#[test]
fn descriptors_reload_when_a_file_changes_and_a_broken_one_is_refused() {
    let redis = ServerConfig::new(Flavor::Redis).start();
    let mut envoy = EnvoyGateway::on(&redis, &files());
    // detailed_metric: the matched value is in the metric's rule label.
    envoy.ask(request("api", vec![desc(&[("tenant", "acme")])]));
    let metrics = envoy.gateway.metrics();
    assert_eq!(
        metrics.decisions("api.tenant_acme", "allowed"),
        1.0,
        "{}",
        metrics.text
    );
    let limit_of = |envoy: &mut EnvoyGateway| {
        let answer = envoy.ask(request("internal", vec![desc(&[("azure", "x")])]));
        answer.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.requests_per_unit)
    };
    assert_eq!(limit_of(&mut envoy), Some(100));
    envoy.write_descriptors("example5.yml", &EXAMPLE_5.replace("100", "7"));
    wait_until(Duration::from_secs(30), "the new limit", || {
        limit_of(&mut envoy) == Some(7)
    });
    envoy.write_descriptors(
        "example5.yml",
        "domain: internal\ndescriptors:\n  - nokey: 1\n",
    );
    wait_until(Duration::from_secs(30), "the refusal", || {
        envoy
            .gateway
            .log()
            .contains("Envoy descriptors not reloaded")
    });
    assert!(
        envoy.gateway.log().contains("example5.yml"),
        "{}",
        envoy.gateway.log()
    );
    assert_eq!(limit_of(&mut envoy), Some(7), "the old descriptors stay");
}
