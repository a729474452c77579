//! What envoyproxy/ratelimit's config tests (`test/config/config_test.go`) ask of a loaded
//! file, `GetLimit` and the stats of the limit it returns, replayed as `ShouldRateLimit`
//! calls over gRPC (envoy-types' tonic client) on Redis 7.0 and on Valkey 8.1, with the
//! peer's files unchanged (`peer_cases/config/`): the limit each descriptor is given (its
//! `current_limit`, none where `GetLimit` returns nil), the limit's name, and the stats
//! (`<domain>.<key>_<value>...<stat>` there, `rl_gateway_envoy_hits_total{rule, stat}` here).
//! (`envoy_peer_config.rs` checks which files load.)

use crate::envoy_peer_readme::on_each_server;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::Value;
use testkit::gateway::envoy::*;
use testkit::gateway::*;

const BASIC_CONFIG: &str = include_str!("peer_cases/config/basic_config.yaml");
const WILDCARD: &str = include_str!("peer_cases/config/wildcard.yaml");
const SHADOW: &str = include_str!("peer_cases/config/shadowmode_config.yaml");
const METADATA: &str = include_str!("peer_cases/config/metadata.yaml");

/// A descriptor's entries.
type Entries = &'static [(&'static str, &'static str)];
/// A limit shown: `(requests_per_unit, unit)`, `None` for none.
type Shown = Option<(u32, i32)>;

fn ask(envoy: &mut EnvoyGateway, entries: &[(&str, &str)]) -> RateLimitResponse {
    envoy.ask(request("test-domain", vec![desc(entries)]))
}

/// TestBasicConfig's descriptors: entries, the limit `GetLimit` returns (`None`: nil), and
/// the stats key its hits count under.
const BASIC_LOOKUPS: &[(Entries, Shown, &str)] = &[
    (&[("key1", "something")], None, ""),
    (&[("key1", "value1")], None, ""),
    (&[("key2", "value2"), ("subkey", "subvalue")], None, ""),
    (&[("key5", "value5"), ("subkey5", "subvalue")], None, ""),
    (
        &[("key1", "value1"), ("subkey1", "something")],
        Some((5, UNIT_SECOND)),
        "test-domain.key1_value1.subkey1",
    ),
    (
        &[("key1", "value1"), ("subkey1", "subvalue1")],
        Some((10, UNIT_SECOND)),
        "test-domain.key1_value1.subkey1_subvalue1",
    ),
    (
        &[("key2", "something")],
        Some((20, UNIT_MINUTE)),
        "test-domain.key2",
    ),
    (
        &[("key2", "value2")],
        Some((30, UNIT_MINUTE)),
        "test-domain.key2_value2",
    ),
    (&[("key2", "value3")], None, ""),
    (&[("key3", "foo")], Some((1, UNIT_HOUR)), "test-domain.key3"),
    (&[("key4", "foo")], Some((1, UNIT_DAY)), "test-domain.key4"),
    (
        &[("key7", "unspecified_value")],
        Some((70, UNIT_MINUTE)),
        "test-domain.key7_unspecified_value",
    ),
    (
        &[("key7", "another_value")],
        Some((70, UNIT_MINUTE)),
        "test-domain.key7_another_value",
    ),
];

// TestBasicConfig: the limit each descriptor gets (a first hit, so one less is left), none
// for an unknown domain, an unmatched value or depth, or a whitelisted value (key2=value3);
// key6 is unlimited.
#[test]
fn basic_config_limits() {
    on_each_server(&[("basic_config.yaml", BASIC_CONFIG)], |_, envoy| {
        let unknown = envoy.ask(request("foo_domain", vec![desc(&[("key1", "value1")])]));
        assert_status(&unknown, 0, (Code::Ok, None, 0), "foo_domain");
        for &(entries, limit, _) in BASIC_LOOKUPS {
            let answer = ask(envoy, entries);
            let left = limit.map_or(0, |(n, _)| n - 1);
            assert_status(&answer, 0, (Code::Ok, limit, left), &format!("{entries:?}"));
        }
        let key6 = ask(envoy, &[("key6", "foo")]);
        assert_status(&key6, 0, (Code::Ok, None, u32::MAX), "key6 unlimited");
    });
}

// TestBasicConfig: the limit's name is the `name:` of its rate_limit (key4_rate_limit),
// empty when it has none (key3: "No name provided in config").
#[test]
fn basic_config_limit_names() {
    on_each_server(&[("basic_config.yaml", BASIC_CONFIG)], |_, envoy| {
        let name = |answer: &RateLimitResponse| {
            let limit = answer.statuses[0].current_limit.as_ref();
            limit.map(|l| l.name.clone()).unwrap_or_default()
        };
        let key4 = ask(envoy, &[("key4", "foo")]);
        assert_eq!(name(&key4), "key4_rate_limit", "{key4:?}");
        let key3 = ask(envoy, &[("key3", "foo")]);
        assert_eq!(name(&key3), "", "{key3:?}");
    });
}

// TestBasicConfig: each hit counts under its stats key (total_hits and within_limit), the
// matched value in it for key7 (detailed_metric). key6 is unlimited: the peer's config test
// counts it by hand, but its service never passes an unlimited descriptor to the counting
// (its limit is dropped before), and neither do we.
#[test]
fn basic_config_stats() {
    on_each_server(&[("basic_config.yaml", BASIC_CONFIG)], |_, envoy| {
        for &(entries, _, _) in BASIC_LOOKUPS {
            ask(envoy, entries);
        }
        ask(envoy, &[("key6", "foo")]);
        let metrics = envoy.gateway.metrics();
        let counted = BASIC_LOOKUPS.iter().map(|l| l.2).filter(|k| !k.is_empty());
        for rule in counted {
            for stat in ["total_hits", "within_limit"] {
                let value = metrics.envoy_hits(rule, stat);
                assert_eq!(value, 1.0, "{rule} {stat}:\n{}", metrics.text);
            }
        }
        let unlimited = metrics.envoy_hits("test-domain.key6", "total_hits");
        assert_eq!(unlimited, 0.0, "{}", metrics.text);
    });
}

// TestConfigLimitOverride: a descriptor's own limit replaces the configured one (ours with
// `limit_override: replace` in the file; by default ours only tightens): 10 a day, then 42
// an hour on the same entries (one stats key, test-domain.key1_value1.subkey1_something),
// then 42 an hour on another value (a counter and a stats key of its own). An override in
// a domain no file defines limits nothing.
#[test]
fn limit_override_replaces_the_configured_limit() {
    let file = format!("limit_override: replace\n{BASIC_CONFIG}");
    on_each_server(&[("basic_config.yaml", &file)], |_, envoy| {
        let entries = |value| [("key1", "value1"), ("subkey1", value)];
        let with = |envoy: &mut EnvoyGateway, value, n, unit| {
            let descriptor = desc_limit(&entries(value), n, unit);
            envoy.ask(request("test-domain", vec![descriptor]))
        };
        let none = envoy.ask(request(
            "foo_domain",
            vec![desc_limit(&entries("x"), 10, 4)],
        ));
        assert_status(&none, 0, (Code::Ok, None, 0), "no matching domain");
        let day = with(envoy, "something", 10, 4);
        assert_status(&day, 0, (Code::Ok, Some((10, UNIT_DAY)), 9), "10 a day");
        let hour = with(envoy, "something", 42, 3);
        assert_eq!(code(&hour, 0), Code::Ok);
        assert_eq!(shown_limit(&hour, 0), Some((42, UNIT_HOUR)), "{hour:?}");
        let other = with(envoy, "something_else", 42, 3);
        assert_status(
            &other,
            0,
            (Code::Ok, Some((42, UNIT_HOUR)), 41),
            "something_else",
        );
        let metrics = envoy.gateway.metrics();
        let hits = |rule: &str| metrics.envoy_hits(rule, "total_hits");
        let same = "test-domain.key1_value1.subkey1_something";
        assert_eq!(hits(same), 2.0, "{}", metrics.text);
        assert_eq!(hits("test-domain.key1_value1.subkey1_something_else"), 1.0);
    });
}

// TestWildcardConfig: foo* matches foo1 and foo2, goo* under nestedWild=val1 matches goo2,
// bar*b matches barab, bar123b and barb (a `*` matches nothing too), foo*bar*baz matches
// foo123bar456baz and foobarbaz; bar, a noWild value other than foo, bara, xbarb,
// foo123baz and bar456baz match nothing. Every value matching one pattern counts under the
// pattern's stats key (test-domain.wild_foo*), as a node without a value does under its key.
#[test]
fn wildcard_config_matches() {
    on_each_server(&[("wildcard.yaml", WILDCARD)], |_, envoy| {
        let twenty = Some((20, UNIT_MINUTE));
        let cases: &[(Entries, Shown)] = &[
            (&[("noVal", "foo1")], twenty),
            (&[("noVal", "foo2")], twenty),
            (&[("wild", "foo1")], twenty),
            (&[("wild", "foo2")], twenty),
            (&[("nestedWild", "val1"), ("wild", "goo2")], twenty),
            (&[("wild", "bar")], None),
            (&[("noWild", "foo1")], None),
            (&[("midWild", "barab")], twenty),
            (&[("midWild", "bar123b")], twenty),
            (&[("midWild", "barb")], twenty),
            (&[("midWild", "bara")], None),
            (&[("midWild", "xbarb")], None),
            (&[("multiWild", "foo123bar456baz")], Some((10, UNIT_MINUTE))),
            (&[("multiWild", "foobarbaz")], Some((10, UNIT_MINUTE))),
            (&[("multiWild", "foo123baz")], None),
            (&[("multiWild", "bar456baz")], None),
        ];
        for &(entries, limit) in cases {
            let answer = ask(envoy, entries);
            assert_eq!(shown_limit(&answer, 0), limit, "{entries:?}: {answer:?}");
        }
        let metrics = envoy.gateway.metrics();
        let keys = [
            ("test-domain.noVal", 2.0),
            ("test-domain.wild_foo*", 2.0),
            ("test-domain.nestedWild_val1.wild_goo*", 1.0),
            ("test-domain.midWild_bar*b", 3.0),
            ("test-domain.multiWild_foo*bar*baz", 2.0),
        ];
        metrics.assert_decisions("stats keys", &keys.map(|(rule, n)| (rule, "allowed", n)));
    });
}

// TestShadowModeConfig: key2 (20 a minute) is in shadow mode: 21 hits in a minute are all
// OK, the 21st showing the limit with 0 left and counted in the shadow_mode stat;
// key2=value2 (30 a minute) is not in shadow mode.
#[test]
fn shadowmode_config_never_denies() {
    on_each_server(&[("shadowmode_config.yaml", SHADOW)], |_, envoy| {
        let answers = in_one_window(|attempt| {
            let value = format!("something-{attempt}");
            (0..21).map(|_| ask(envoy, &[("key2", &value)])).collect()
        });
        for (i, answer) in answers.iter().enumerate() {
            let left = 19u32.saturating_sub(i as u32);
            assert_eq!(overall(answer), Code::Ok, "call {i}");
            assert_status(answer, 0, (Code::Ok, Some((20, UNIT_MINUTE)), left), "key2");
        }
        let value2 = ask(envoy, &[("key2", "value2")]);
        assert_status(
            &value2,
            0,
            (Code::Ok, Some((30, UNIT_MINUTE)), 29),
            "value2",
        );
        let metrics = envoy.gateway.metrics();
        let shadow = metrics.envoy_hits("test-domain.key2", "shadow_mode");
        assert!(shadow >= 1.0, "{}", metrics.text);
        assert_eq!(
            metrics.envoy_hits("test-domain.key2_value2", "shadow_mode"),
            0.0
        );
    });
}

// TestMetadata: a limit's `metadata` is what the peer returns with it, and with
// RESPONSE_DYNAMIC_METADATA (ours `[envoy] response_dynamic_metadata = true`) the answer's
// dynamic_metadata holds the domain and, under "metadata", the metadata of the limits
// that passed: key2's service_with_quota.name is service_2.
#[test]
fn metadata_config_in_the_dynamic_metadata() {
    each_flavor(|flavor| {
        let redis = ServerConfig::new(flavor).start();
        let lines = "response_dynamic_metadata = true";
        let mut envoy = EnvoyGateway::on_with(&redis, lines, &[("metadata.yaml", METADATA)]);
        let answer = ask(&mut envoy, &[("key2", "something")]);
        assert_status(&answer, 0, (Code::Ok, Some((20, UNIT_MINUTE)), 19), "key2");
        let fields = &answer
            .dynamic_metadata
            .as_ref()
            .expect("dynamic_metadata")
            .fields;
        let text = |value: Option<&Value>| match value.and_then(|v| v.kind.as_ref()) {
            Some(Kind::StringValue(text)) => text.clone(),
            other => panic!("not a string: {other:?}"),
        };
        let inner = |value: Option<&Value>, name: &str| match value.and_then(|v| v.kind.as_ref()) {
            Some(Kind::StructValue(inner)) => inner.fields.get(name).cloned(),
            other => panic!("not a struct: {other:?}"),
        };
        assert_eq!(text(fields.get("domain")), "test-domain");
        let service = inner(fields.get("metadata"), "service_with_quota");
        assert_eq!(text(inner(service.as_ref(), "name").as_ref()), "service_2");
    });
}
