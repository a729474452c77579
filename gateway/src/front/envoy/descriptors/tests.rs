use super::*;
use crate::rules::MAX_RULE_NAME_BYTES;

const MESSAGING: &str = r#"
domain: messaging
descriptors:
  # Only allow 5 marketing messages a day
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 5

  # Only allow 100 messages a day to any unique phone number
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 100
"#;

#[test]
fn nested_and_value_less_descriptors_match_as_envoyproxy_ratelimit_does() {
    let domain = parse(MESSAGING).unwrap();
    let limit = domain
        .find([("message_type", "marketing"), ("to_number", "2061111111")])
        .unwrap();
    assert_eq!(limit.limit.shown, Some((5, Unit::Day)));
    let limit = domain.find([("to_number", "2061111111")]).unwrap();
    assert_eq!(limit.limit.shown, Some((100, Unit::Day)));
    assert!(domain.find([("message_type", "marketing")]).is_none());
    assert!(domain
        .find([("message_type", "other"), ("to_number", "1")])
        .is_none());
    assert!(domain.find([("to_number", "1"), ("extra", "x")]).is_none());
}

#[test]
fn the_exact_value_wins_over_a_prefix_and_any_value() {
    let domain = parse(
        "domain: d\ndescriptors:\n  - key: ip\n    rate_limit: {unit: second, requests_per_unit: 10}\n  - key: ip\n    value: 50.0.0.5\n    rate_limit: {unit: second, requests_per_unit: 0}\n  - key: ip\n    value: '10.*'\n    rate_limit: {unit: minute, requests_per_unit: 7}\n",
    )
    .unwrap();
    assert!(domain.find([("ip", "50.0.0.5")]).unwrap().limit.blocked);
    assert_eq!(
        domain.find([("ip", "10.1.1.1")]).unwrap().limit.shown,
        Some((7, Unit::Minute))
    );
    assert_eq!(
        domain.find([("ip", "1.1.1.1")]).unwrap().limit.shown,
        Some((10, Unit::Second))
    );
}

#[test]
fn errors_name_the_place() {
    for (text, expected) in [
        ("descriptors: []\n", "domain"),
        ("domain: d\ndescriptors:\n  - value: x\n", "descriptors[0].key"),
        (
            "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
            "descriptors[0].descriptors[0].rate_limit.unit",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second}\n",
            "requests_per_unit",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1, algorithm: magic}\n",
            "descriptors[0].rate_limit",
        ),
        ("domain: d\ndescriptors:\n  - key: a\n    colour: red\n", "colour"),
        (
            "domain: d\ndescriptors:\n  - key: a\n  - key: a\n",
            "already defined",
        ),
        ("domain: d\non_failure: maybe\n", "on_failure"),
        ("domain: d\non_module_error: open\n", "on_module_error"),
        (
            "domain: d\ndescriptors:\n  - key: a\n    limit_override: raise\n",
            "descriptors[0].limit_override: 'raise' is not one of tighten, replace, ignore",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: month, requests_per_unit: 1, tz: Mars/Olympus}\n",
            "TZ must be an IANA time zone name",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1, anchor: 5}\n",
            "descriptors[0].rate_limit",
        ),
        (
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {policy: p, tz: UTC}\n",
            "belong to the policy",
        ),
    ] {
        let error = parse(text).unwrap_err().to_string();
        assert!(error.contains(expected), "{text}: {error}");
    }
}

#[test]
fn keys_are_bounded_escaped_and_tagged_by_the_subject() {
    let entries = [("user", "alice"), ("path", "/a:b={c}")];
    let key = key("rl:", "api", None, entries.iter().copied(), None);
    assert_eq!(key, "rl:{user=alice}:api:user=alice:path=/a%3Ab%3D%7Bc%7D");
    let tagged = super::key("rl:", "api", Some("path"), entries.iter().copied(), None);
    assert!(
        tagged.starts_with("rl:{path=/a%3Ab%3D%7Bc%7D}:"),
        "{tagged}"
    );
    let huge = "v".repeat(100_000);
    let many: Vec<(&str, &str)> = (0..16).map(|_| ("k", huge.as_str())).collect();
    let prefix = "p".repeat(crate::rules::MAX_KEY_PREFIX_BYTES);
    let key = super::key(
        &prefix,
        &huge,
        None,
        many.iter().copied(),
        Some((u32::MAX, Unit::Second)),
    );
    assert!(key.len() <= crate::rules::MAX_KEY_BYTES, "{}", key.len());
    let own = super::key(
        "rl:",
        "api",
        None,
        [("user", "alice")].into_iter(),
        Some((5, Unit::Month)),
    );
    assert_eq!(own, "rl:{user=alice}:api:user=alice:limit=5/month");
}

#[test]
fn an_alias_bomb_a_deep_nest_and_a_huge_file_are_refused() {
    // Nine levels of ten aliases each: 10^9 descriptors if expanded.
    let mut bomb = String::from("domain: d\ndescriptors:\n  - key: k0\n    descriptors: &l0 [");
    bomb.push_str(&["{key: a, value: x}"; 10].join(", "));
    bomb.push_str("]\n");
    for i in 1..9 {
        let alias = format!("{{key: a, descriptors: *l{}}}", i - 1);
        bomb.push_str(&format!(
            "  - key: k{i}\n    descriptors: &l{i} [{}]\n",
            vec![alias; 10].join(", ")
        ));
    }
    let error = parse(&bomb).unwrap_err().to_string();
    assert!(error.contains("repetition limit"), "{error}");
    // Also on the way of a file with merge keys (read as a YAML value first).
    let error = parse(&format!("# <<\n{bomb}")).unwrap_err().to_string();
    assert!(error.contains("repetition limit"), "{error}");

    let mut deep = String::from("domain: d\ndescriptors:\n");
    for i in 0..=MAX_DEPTH {
        let indent = "    ".repeat(i);
        deep.push_str(&format!(
            "{indent}  - key: k{i}\n{indent}    descriptors:\n"
        ));
    }
    let error = parse(&deep).unwrap_err().to_string();
    assert!(error.contains("nested more than 16 deep"), "{error}");
    // 16 deep is fine.
    let mut fine = String::from("domain: d\ndescriptors:\n");
    for i in 0..MAX_DEPTH {
        let indent = "    ".repeat(i);
        fine.push_str(&format!(
            "{indent}  - key: k{i}\n{indent}    descriptors:\n"
        ));
    }
    fine.push_str(&format!("{}  []\n", "    ".repeat(MAX_DEPTH)));
    parse(&fine).unwrap();

    let dir = tempfile::tempdir().unwrap();
    let huge = dir.path().join("huge.yaml");
    let mut text = String::from("domain: d\ndescriptors:\n");
    while text.len() as u64 <= MAX_FILE_BYTES {
        text.push_str("# padding padding padding padding padding padding padding\n");
    }
    std::fs::write(&huge, &text).unwrap();
    let error = load(dir.path(), false).unwrap_err().to_string();
    assert!(error.contains("larger than 4194304 bytes"), "{error}");
    for i in 0..=MAX_FILES {
        std::fs::write(dir.path().join(format!("{i}.yml")), "domain: x\n").unwrap();
    }
    let error = load(dir.path(), false).unwrap_err().to_string();
    assert!(error.contains("at most 1000"), "{error}");
}

#[test]
fn long_names_stay_bounded() {
    let name = rule_name(&"x".repeat(500));
    assert!(name.len() <= MAX_RULE_NAME_BYTES);
    assert_eq!(rule_name("a b\"c"), "a_b_c");
}

/// A metric name keeps the stats key's `*`, `/` and spaces, but never a character that
/// would end or break the label in the unescaped exposition, and stays bounded, cut on a
/// character boundary.
#[test]
fn metric_labels_keep_the_stats_key_but_nothing_that_breaks_the_exposition() {
    assert_eq!(metric_label("d.path_/api/*"), "d.path_/api/*");
    assert_eq!(metric_label("a\"} 1\nb\\c"), "a_} 1_b_c");
    for filler in ["x", "é", "日"] {
        let long = metric_label(&filler.repeat(400));
        assert!(long.len() <= names::MAX_METRIC_NAME_BYTES, "{}", long.len());
        assert!(long.contains('~'));
    }
    assert_ne!(
        metric_label(&"x".repeat(400)),
        metric_label(&"x".repeat(401))
    );
}

/// YAML merge keys are applied (envoyproxy/ratelimit's YAML reader applies them), in the
/// descriptors and in metadata; the errors of such a file still name the place.
#[test]
fn yaml_merge_keys_are_applied() {
    let text = "
domain: d
descriptors:
  - &base
    key: k
    value: a
    rate_limit: {unit: minute, requests_per_unit: 3}
    metadata: &meta {team: x}
  - <<: *base
    value: b
    metadata: {<<: *meta, extra: 1}
";
    let domain = parse(text).unwrap();
    let b = domain.find([("k", "b")]).unwrap();
    assert_eq!(b.limit.shown, Some((3, Unit::Minute)));
    let metadata = b.limit.metadata.as_ref().unwrap();
    assert!(metadata.fields.contains_key("team") && metadata.fields.contains_key("extra"));
    assert!(!metadata.fields.contains_key("<<"));
    let error = parse(&text.replace("value: b", "value: a"))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("descriptors[1]: a descriptor with key 'k'"),
        "{error}"
    );
    let error = parse(&text.replace("value: b", "colour: b"))
        .unwrap_err()
        .to_string();
    assert!(
        error.contains("descriptors[1]: unknown field `colour`"),
        "{error}"
    );
}

/// envoyproxy/ratelimit ignores a requests_per_unit beside `unlimited: true` (0 included,
/// which does not block then) and refuses a unit: so do we.
#[test]
fn unlimited_ignores_requests_per_unit_and_refuses_a_unit() {
    for n in [0, 5] {
        let text = format!(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {{unlimited: true, requests_per_unit: {n}}}\n"
        );
        let domain = parse(&text).unwrap();
        let found = domain.find([("k", "v")]).unwrap();
        assert!(found.limit.unlimited && !found.limit.blocked, "{n}");
    }
    let error = parse(
        "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true, unit: day}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        error.contains("should not specify rate limit unit when unlimited"),
        "{error}"
    );
}
