//! envoyproxy/ratelimit's config tests (`test/config/config_test.go`), one test here for
//! each of its, on its YAML files (copied once, for these tests and the integration tests,
//! under `gateway/tests/it/peer_cases/config/`, their provenance in each): we accept what it accepts, with the same matches, and refuse what it refuses. Where it
//! builds a config in Go rather than YAML, the same config is written as YAML here (see
//! `peer_metric_tests.rs` for its metric names and shared keys).
//!
//! Not here: `TestConfigLimitOverride` (a request's own limit is decided when a request is
//! planned, by the node's `limit_override`; see `front::envoy::tests`).

use super::*;
use std::sync::Arc;

macro_rules! case {
    ($file:literal) => {
        include_str!(concat!("../../../../tests/it/peer_cases/config/", $file))
    };
}

/// A request descriptor's entries.
type Entries<'a> = &'a [(&'a str, &'a str)];

/// The domain of the one file `text`.
fn domain(text: &str) -> Domain {
    parse(text).expect("the file loads")
}

/// The limit `entries` match, as (requests_per_unit, unit).
fn shown(domain: &Domain, entries: &[(&str, &str)]) -> Option<(u32, Unit)> {
    domain.find(entries.iter().copied())?.limit().shown
}

/// The refusal of `texts` (loaded in order), as a message.
fn refusal(texts: &[&str], merge: bool) -> String {
    from_texts_merging(texts, merge)
        .expect_err("the files are refused")
        .to_string()
}

#[test]
fn basic_config() {
    let d = domain(case!("basic_config.yaml"));
    for entries in [
        &[("key1", "something")][..],
        &[("key1", "value1")],
        &[("key2", "value2"), ("subkey", "subvalue")],
        &[("key5", "value5"), ("subkey5", "subvalue")],
        &[("key2", "value3")],
    ] {
        assert!(d.find(entries.iter().copied()).is_none(), "{entries:?}");
    }
    let cases: [(Entries, (u32, Unit)); 7] = [
        (
            &[("key1", "value1"), ("subkey1", "something")],
            (5, Unit::Second),
        ),
        (
            &[("key1", "value1"), ("subkey1", "subvalue1")],
            (10, Unit::Second),
        ),
        (&[("key2", "something")], (20, Unit::Minute)),
        (&[("key2", "value2")], (30, Unit::Minute)),
        (&[("key3", "foo")], (1, Unit::Hour)),
        (&[("key4", "foo")], (1, Unit::Day)),
        (&[("key7", "unspecified_value")], (70, Unit::Minute)),
    ];
    for (entries, expected) in cases {
        assert_eq!(shown(&d, entries), Some(expected), "{entries:?}");
    }
    let key4 = d.find([("key4", "foo")]).unwrap();
    assert_eq!(key4.limit().name.as_deref(), Some("key4_rate_limit"));
    assert!(d.find([("key3", "foo")]).unwrap().limit().name.is_none());
    assert!(d.find([("key6", "foo")]).unwrap().limit().unlimited);
}

#[test]
fn domain_merge() {
    let files = [
        case!("merge_domain_key1.yaml"),
        case!("merge_domain_key2.yaml"),
    ];
    let domains = from_texts_merging(&files, true).unwrap();
    let d = domains.get("test-domain").unwrap();
    assert_eq!(shown(d, &[("key1", "value1")]), Some((10, Unit::Minute)));
    assert_eq!(shown(d, &[("key2", "value2")]), Some((20, Unit::Minute)));
    // Without merge_domains (the default, as theirs), the second file is refused.
    let error = refusal(&files, false);
    assert!(
        error.contains("text 1: domain 'test-domain' is loaded twice"),
        "{error}"
    );
}

#[test]
fn domain_merge_from_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.yaml"), case!("merge_domain_key1.yaml")).unwrap();
    std::fs::write(dir.path().join("b.yaml"), case!("merge_domain_key2.yaml")).unwrap();
    let domains = load(dir.path(), true).unwrap();
    assert_eq!(domains.limit_count(), 2);
    let error = load(dir.path(), false).unwrap_err().to_string();
    assert!(
        error.contains("b.yaml: domain 'test-domain' is already loaded from"),
        "{error}"
    );
    assert!(error.contains("a.yaml"), "{error}");
}

#[test]
fn duplicate_key_domain_merge() {
    let file = case!("merge_domain_key1.yaml");
    let error = refusal(&[file, file], true);
    assert!(
        error.contains("text 1: descriptors[0]: a descriptor with key 'key1' and this value is already defined")
            && error.contains("duplicate descriptor composite key 'test-domain.key1_value1'"),
        "{error}"
    );
}

/// The files each of its `expectConfigPanic` tests refuses, and a part of our message:
/// the place, and their words where the refusal is theirs.
#[test]
fn what_it_refuses_is_refused_naming_the_place() {
    let basic = case!("basic_config.yaml");
    let cases: [(&[&str], &str); 14] = [
        (
            &[case!("empty_domain.yaml")],
            "text 0: domain: missing or empty (config file cannot have empty domain)",
        ),
        (
            &[basic, case!("duplicate_domain.yaml")],
            "text 1: domain 'test-domain' is loaded twice",
        ),
        (
            &[case!("empty_key.yaml")],
            "text 0: descriptors[0].key: missing or empty (descriptor has empty key)",
        ),
        (
            &[case!("duplicate_key.yaml")],
            "text 0: descriptors[1]: a descriptor with key 'key1' and this value is already \
             defined at this level (duplicate descriptor composite key 'test-domain.key1_value1')",
        ),
        (
            &[case!("bad_limit_unit.yaml")],
            "text 0: descriptors[0].rate_limit.unit: 'foo' is not second, minute",
        ),
        (
            &[case!("replaces_self.yaml")],
            "text 0: descriptors[0].descriptors[0].rate_limit.replaces[0].name: 'self' is this \
             limit's own name (replaces should not contain name of same descriptor)",
        ),
        (
            &[case!("replaces_empty.yaml")],
            "text 0: descriptors[0].descriptors[0].rate_limit.replaces[0].name: missing or \
             empty (should not have an empty replaces entry)",
        ),
        (&[case!("bad_yaml.yaml")], "text 0: "),
        (
            &[case!("misspelled_key.yaml")],
            "text 0: descriptors[0]: unknown field `ratelimit`",
        ),
        (
            &[case!("misspelled_key2.yaml")],
            "text 0: descriptors[0].rate_limit: unknown field `requestsperunit`",
        ),
        (&[case!("non_string_key.yaml")], "text 0: "),
        (
            &[case!("non_map_list.yaml")],
            "text 0: descriptors[0]: invalid type: string \"a\", expected a descriptor: a mapping",
        ),
        (
            &[case!("unlimited_with_unit.yaml")],
            "text 0: descriptors[0].rate_limit: should not specify rate limit unit when unlimited",
        ),
        (
            &["domain: d\ndescriptors:\n  - key: k\n    value: v\n    share_threshold: true\n"],
            "text 0: descriptors[0].share_threshold: the value has no '*' (share_threshold can \
             only be used with wildcard values)",
        ),
    ];
    for (texts, expected) in cases {
        let error = refusal(texts, false);
        assert!(error.starts_with(expected), "{expected}\n  got: {error}");
    }
}

/// The YAML errors, which serde_yaml_ng words: still the file and the line.
#[test]
fn bad_yaml_and_a_non_string_key_say_where() {
    let error = refusal(&[case!("bad_yaml.yaml")], false);
    assert!(error.contains("line 3"), "{error}");
    let error = refusal(&[case!("non_string_key.yaml")], false);
    assert!(error.contains("line 3"), "{error}");
}

#[test]
fn shadow_mode_config() {
    let d = domain(case!("shadowmode_config.yaml"));
    let limit = |entries: &[(&str, &str)]| d.find(entries.iter().copied()).unwrap().limit().clone();
    let sub = limit(&[("key1", "value1"), ("subkey1", "something")]);
    assert!(!sub.shadow);
    assert_eq!(sub.shown, Some((5, Unit::Second)));
    let sub = limit(&[("key1", "value1"), ("subkey1", "subvalue1")]);
    assert!(sub.shadow);
    assert_eq!(sub.shown, Some((10, Unit::Second)));
    let key2 = limit(&[("key2", "something")]);
    assert!(key2.shadow);
    assert_eq!(key2.shown, Some((20, Unit::Minute)));
    let key2 = limit(&[("key2", "value2")]);
    assert!(!key2.shadow);
    assert_eq!(key2.shown, Some((30, Unit::Minute)));
}

#[test]
fn wildcard_config() {
    let d = domain(case!("wildcard.yaml"));
    let same = |a: &[(&str, &str)], b: &[(&str, &str)]| {
        let a = d.find(a.iter().copied()).expect("a matches");
        let b = d.find(b.iter().copied()).expect("b matches");
        assert!(Arc::ptr_eq(a.limit(), b.limit()));
    };
    same(&[("noVal", "foo1")], &[("noVal", "foo2")]);
    same(&[("wild", "foo1")], &[("wild", "foo2")]);
    same(&[("midWild", "barab")], &[("midWild", "bar123b")]);
    same(&[("midWild", "barb")], &[("midWild", "bar123b")]);
    same(
        &[("multiWild", "foo123bar456baz")],
        &[("multiWild", "foobarbaz")],
    );
    assert!(d.find([("nestedWild", "val1"), ("wild", "goo2")]).is_some());
    for entries in [
        ("wild", "bar"),
        ("noWild", "foo1"),
        ("midWild", "bara"),
        ("midWild", "xbarb"),
        ("multiWild", "foo123baz"),
        ("multiWild", "bar456baz"),
    ] {
        assert!(d.find([entries]).is_none(), "{entries:?}");
    }
}

#[test]
fn metadata_config() {
    use envoy_types::pb::google::protobuf::value::Kind;
    let d = domain(case!("metadata.yaml"));
    let found = d
        .find([("key1", "value1"), ("subkey1", "something")])
        .unwrap();
    assert_eq!(found.limit().shown, Some((5, Unit::Second)));
    let metadata = found.limit().metadata.as_ref().expect("metadata");
    assert_eq!(
        metadata.fields["name"].kind,
        Some(Kind::StringValue("service_1".into()))
    );
    let found = d.find([("key2", "something")]).unwrap();
    let metadata = found.limit().metadata.as_ref().expect("metadata");
    let Some(Kind::StructValue(inner)) = &metadata.fields["service_with_quota"].kind else {
        panic!("a struct: {metadata:?}")
    };
    assert_eq!(
        inner.fields["name"].kind,
        Some(Kind::StringValue("service_2".into()))
    );
    // A node without metadata has none.
    let found = d
        .find([("key1", "value1"), ("subkey1", "subvalue1")])
        .unwrap();
    assert!(found.limit().metadata.is_none());
}

/// Refused here, accepted there: a deliberate difference, written down.
#[test]
fn metadata_with_a_non_string_key_is_refused_naming_the_place() {
    let text = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n    metadata: {codes: {429: slow}}\n";
    let error = refusal(&[text], false);
    assert!(
        error.starts_with("text 0: descriptors[0].metadata.codes: the key 429 is not a string"),
        "{error}"
    );
}
