//! envoyproxy/ratelimit's config tests of its stats keys (`detailed_metric`,
//! `value_to_metric`, `share_threshold`) and of the keys `share_threshold` shares: our
//! metric name of a match is its stats key made a rule name (`rule_name`: `*` and `/`
//! become `_`), and a shared entry's Redis key holds the pattern where theirs does.
//! Configs it builds in Go are written as YAML here.

use super::*;

/// The metric name of what `entries` match in the one domain of `text`.
fn metric(text: &str, entries: &[(&str, &str)]) -> String {
    let domains = from_texts(&[text]).expect("the file loads");
    let (name, d) = domains.domains.iter().next().expect("a domain");
    let found = d.find(entries.iter().copied()).expect("the entries match");
    metric_name(&found, name, entries.iter().copied())
}

/// The Redis key of what `entries` match.
fn redis_key(d: &Domain, entries: &[(&str, &str)]) -> String {
    let found = d.find(entries.iter().copied()).expect("the entries match");
    key(
        "",
        "test-domain",
        found.limit().subject.as_deref(),
        found.key_entries(entries.iter().copied()),
        None,
    )
}

/// Asserts that `entries` are named `stats_key` (theirs, made a rule name).
fn assert_named(text: &str, entries: &[(&str, &str)], stats_key: &str) {
    assert_eq!(
        metric(text, entries),
        metric_label(stats_key),
        "{entries:?}"
    );
}

#[test]
fn basic_config_names() {
    let text = include_str!("../../../../tests/it/peer_cases/config/basic_config.yaml");
    for (entries, stats_key) in [
        (
            &[("key1", "value1"), ("subkey1", "something")][..],
            "test-domain.key1_value1.subkey1",
        ),
        (
            &[("key1", "value1"), ("subkey1", "subvalue1")],
            "test-domain.key1_value1.subkey1_subvalue1",
        ),
        (&[("key2", "something")], "test-domain.key2"),
        (&[("key2", "value2")], "test-domain.key2_value2"),
        (&[("key3", "foo")], "test-domain.key3"),
        (&[("key6", "foo")], "test-domain.key6"),
        (
            &[("key7", "unspecified_value")],
            "test-domain.key7_unspecified_value",
        ),
        (
            &[("key7", "another_value")],
            "test-domain.key7_another_value",
        ),
    ] {
        assert_named(text, entries, stats_key);
    }
    // A limit with a name is still named by its path, as theirs (the name is what
    // `current_limit` shows).
    assert_eq!(metric(text, &[("key4", "foo")]), "test-domain.key4");
}

const NESTED: &str = "
domain: nested
descriptors:
  - key: key-1
    detailed_metric: DETAILED1
    rate_limit: {unit: minute, requests_per_unit: 100}
    descriptors:
      - key: key-2
        detailed_metric: DETAILED2
        rate_limit: {unit: minute, requests_per_unit: 5}
";

const REALISTIC: &str = "
domain: nested
descriptors:
  - {key: key_1, detailed_metric: true, rate_limit: {requests_per_unit: 500, unit: minute}}
  - {key: key_1, value: some-value-for-key-1, rate_limit: {requests_per_unit: 500, unit: minute}}
  - key: key_2
    detailed_metric: true
    rate_limit: {requests_per_unit: 5000, unit: minute}
    descriptors:
      - {key: key_3, detailed_metric: true}
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {requests_per_unit: 5, unit: minute}
  - key: key_2
    value: specific-id
    detailed_metric: true
    rate_limit: {requests_per_unit: 50000, unit: minute}
    descriptors:
      - {key: key_3, detailed_metric: true}
      - key: key_3
        value: requested-key3-value
        detailed_metric: true
        rate_limit: {requests_per_unit: 100, unit: minute}
";

#[test]
fn detailed_metric() {
    let nested = |one: bool, two: bool| {
        NESTED
            .replace("DETAILED1", &one.to_string())
            .replace("DETAILED2", &two.to_string())
    };
    let one = [("key-1", "value-1")];
    let two = [("key-1", "value-1"), ("key-2", "value-2")];
    assert_named(&nested(true, false), &one, "nested.key-1_value-1");
    assert_named(&nested(false, false), &one, "nested.key-1");
    assert_named(
        &nested(true, true),
        &two,
        "nested.key-1_value-1.key-2_value-2",
    );
    assert_named(&nested(false, false), &two, "nested.key-1.key-2");
    assert_named(
        REALISTIC,
        &[("key_1", "value-for-key-1")],
        "nested.key_1_value-for-key-1",
    );
    assert_named(
        REALISTIC,
        &[("key_2", "key-2-value")],
        "nested.key_2_key-2-value",
    );
    assert_named(
        REALISTIC,
        &[("key_2", "key-2-value"), ("key_3", "requested-key3-value")],
        "nested.key_2_key-2-value.key_3_requested-key3-value",
    );
}

const ROUTE_METHOD_SUBJECT: &str = "
domain: domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value_to_metric: true
        descriptors:
          - key: subject_id
            DETAILED
            rate_limit: {requests_per_unit: 60, unit: minute}
";

#[test]
fn value_to_metric() {
    let plain = ROUTE_METHOD_SUBJECT.replace("DETAILED", "");
    let detailed = ROUTE_METHOD_SUBJECT.replace("DETAILED", "detailed_metric: true");
    let entries = |route, method| {
        [
            ("route", route),
            ("http_method", method),
            ("subject_id", "123"),
        ]
    };
    assert_named(
        &plain,
        &entries("draw", "GET"),
        "domain.route_draw.http_method_GET.subject_id",
    );
    assert_named(
        &detailed,
        &entries("draw", "GET"),
        "domain.route_draw.http_method_GET.subject_id_123",
    );
    // An empty value adds neither `_` nor the value.
    assert_named(
        &plain,
        &entries("", "GET"),
        "domain.route.http_method_GET.subject_id",
    );
    assert_named(
        &plain,
        &entries("draw", ""),
        "domain.route_draw.http_method.subject_id",
    );
    assert_named(
        &plain,
        &entries("", ""),
        "domain.route.http_method.subject_id",
    );

    let levels = "domain: d\ndescriptors:\n  - key: k1\n    V1\n    descriptors:\n      - key: k2\n        V2\n        descriptors:\n          - {key: k3, rate_limit: {requests_per_unit: 1, unit: second}}\n";
    let flags = |one: &str, two: &str| levels.replace("V1", one).replace("V2", two);
    let xyz = [("k1", "X"), ("k2", "Y"), ("k3", "Z")];
    assert_named(&flags("", "value_to_metric: true"), &xyz, "d.k1.k2_Y.k3");
    assert_named(&flags("value_to_metric: true", ""), &xyz, "d.k1_X.k2.k3");
    assert_named(&flags("", ""), &xyz, "d.k1.k2.k3");
}

#[test]
fn value_to_metric_with_configured_values_and_wildcards() {
    let configured = "
domain: test-domain
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: http_method
        value: GET
        value_to_metric: true
        descriptors:
          - {key: subject_id, rate_limit: {requests_per_unit: 60, unit: minute}}
      - key: http_method
        value: POST
        value_to_metric: true
        descriptors:
          - {key: subject_id, rate_limit: {requests_per_unit: 30, unit: minute}}
";
    for method in ["GET", "POST"] {
        let entries = [
            ("route", "api"),
            ("http_method", method),
            ("subject_id", "u"),
        ];
        let expected = format!("test-domain.route_api.http_method_{method}.subject_id");
        assert_named(configured, &entries, &expected);
    }
    let wildcard = "
domain: domain
descriptors:
  - key: user
    value_to_metric: true
    descriptors:
      - key: action
        value: read*
        value_to_metric: true
        descriptors:
          - {key: resource, rate_limit: {requests_per_unit: 100, unit: minute}}
";
    let entries = [
        ("user", "alice"),
        ("action", "readfile"),
        ("resource", "documents"),
    ];
    assert_named(
        wildcard,
        &entries,
        "domain.user_alice.action_readfile.resource",
    );
}

#[test]
fn wildcard_stats_behavior() {
    let one = |value: &str, flags: &str| {
        format!("domain: test-domain\ndescriptors:\n  - key: wild\n    value: '{value}'\n    {flags}\n    rate_limit: {{requests_per_unit: 20, unit: minute}}\n")
    };
    for pattern in ["foo*", "foo*bar*"] {
        let named = |flags: &str, value: &str| metric(&one(pattern, flags), &[("wild", value)]);
        let plain = metric_label(&format!("test-domain.wild_{pattern}"));
        assert_eq!(named("", "foo1bar"), plain);
        assert_eq!(named("", "foo2bar"), plain);
        assert_eq!(
            named("value_to_metric: true", "foo1bar"),
            metric_label("test-domain.wild_foo1bar")
        );
        assert_eq!(named("share_threshold: true", "foo1bar"), plain);
        assert_eq!(
            named(
                "share_threshold: true\n    value_to_metric: true",
                "foo1bar"
            ),
            plain
        );
    }
    let other = "
domain: test-domain
descriptors:
  - key: wild
    value: foo*
    descriptors:
      - key: other
        value_to_metric: true
        descriptors:
          - {key: limit, rate_limit: {requests_per_unit: 20, unit: minute}}
";
    let entries = [("wild", "foo1"), ("other", "bar"), ("limit", "X")];
    assert_named(other, &entries, "test-domain.wild_foo*.other_bar.limit");
}

#[test]
fn share_threshold_names() {
    let text = include_str!("../../../../tests/it/peer_cases/config/share_threshold.yaml");
    for (entries, stats_key) in [
        (&[("files", "files/a.pdf")][..], "test-domain.files_files/*"),
        (
            &[("route", "api/v1"), ("method", "GET")],
            "test-domain.route_api/*.method",
        ),
        (
            &[("service", "svc/user"), ("endpoint", "get")],
            "test-domain.service_svc/*.endpoint_get",
        ),
        (
            &[("nested", "parent"), ("files", "nested/file1.txt")],
            "test-domain.nested_parent.files_nested/*",
        ),
        (
            &[("files", "top/file1.txt"), ("files", "nested/file1.txt")],
            "test-domain.files_top/*.files_nested/*",
        ),
        (
            &[("path", "path/foo"), ("file", "file/doc1"), ("type", "pdf")],
            "test-domain.path_path/*.file_file/*.type",
        ),
        (
            &[
                ("user", "user/alice"),
                ("resource", "res/file1"),
                ("action", "read"),
            ],
            "test-domain.user_user/*.resource_res/*.action",
        ),
        (&[("file", "test1")], "test-domain.file_test1"),
        (&[("file", "test23")], "test-domain.file_test*"),
        (
            &[("midpath", "/api-beta-v1")],
            "test-domain.midpath_/api*v1",
        ),
        (
            &[("multiroute", "svcXXXepYYYrpc")],
            "test-domain.multiroute_svc*ep*rpc",
        ),
        (&[("midroute", "/api/v2")], "test-domain.midroute_/api*v2"),
        (
            &[("tenant", "t1prod"), ("resource", "resAv2")],
            "test-domain.tenant_t*prod.resource_res*v2",
        ),
    ] {
        assert_named(text, entries, stats_key);
    }
}

/// The values a `share_threshold` node matches count in one key, the pattern in place of
/// each (at whatever level the node is, the limit deeper or not); an exact value keeps its
/// own key, and an entry matched otherwise keeps its value.
#[test]
fn share_threshold_shares_one_key() {
    let d = parse(include_str!(
        "../../../../tests/it/peer_cases/config/share_threshold.yaml"
    ))
    .unwrap();
    let shared = |a: &[(&str, &str)], b: &[(&str, &str)]| {
        assert_eq!(redis_key(&d, a), redis_key(&d, b), "{a:?} {b:?}");
    };
    shared(&[("files", "files/a.pdf")], &[("files", "files/b.csv")]);
    assert_eq!(
        redis_key(&d, &[("files", "files/c.txt")]),
        "{files=files/*}:test-domain:files=files/*"
    );
    shared(&[("file", "test2")], &[("file", "test123")]);
    assert_ne!(
        redis_key(&d, &[("file", "test1")]),
        redis_key(&d, &[("file", "test2")])
    );
    shared(&[("midpath", "/api/v1")], &[("midpath", "/apiXYZv1")]);
    shared(
        &[("multiroute", "svcAepBrpc")],
        &[("multiroute", "svceprpc")],
    );
    shared(
        &[("tenant", "t1prod"), ("resource", "resAv2")],
        &[("tenant", "t99prod"), ("resource", "resBBBv2")],
    );
    // The limit is below the share_threshold node: the pattern still stands for the value.
    shared(
        &[("route", "api/v1"), ("method", "GET")],
        &[("route", "api/v2"), ("method", "GET")],
    );
    let key = redis_key(&d, &[("route", "api/v1"), ("method", "GET")]);
    assert_eq!(key, "{route=api/*}:test-domain:route=api/*:method=GET");
    // A wildcard without share_threshold keeps each value's own key.
    let path = |file: &str| redis_key(&d, &[("path", "path/foo"), ("file", file), ("type", "pdf")]);
    assert_ne!(path("file/doc1"), path("file/doc2"));
    assert_eq!(
        path("file/doc1"),
        "{path=path/*}:test-domain:path=path/*:file=file/doc1:type=pdf"
    );
}
