//! A descriptor's `metadata` (envoyproxy/ratelimit's): any YAML mapping, turned into the
//! protobuf `Struct` that the limit of the node returns in the response's dynamic
//! metadata. Numbers become number values (doubles, as in protobuf's JSON), booleans,
//! null, lists and mappings their kinds.

use envoy_types::pb::google::protobuf::{value::Kind, ListValue, NullValue, Struct, Value};
use serde_yaml_ng::Value as Yaml;

/// The `Struct` of `yaml`, the `metadata` at `at` (`descriptors[0].metadata`); `None` for
/// an empty mapping or `null`, which envoyproxy/ratelimit treats as no metadata. What a
/// protobuf value cannot hold is refused, the message naming the place.
pub(super) fn metadata(yaml: &Yaml, at: &str) -> Result<Option<Struct>, String> {
    match yaml {
        Yaml::Null => Ok(None),
        Yaml::Mapping(map) if map.is_empty() => Ok(None),
        Yaml::Mapping(_) => match value(yaml, at)?.kind {
            Some(Kind::StructValue(fields)) => Ok(Some(fields)),
            _ => Ok(None),
        },
        _ => Err(format!(
            "{at}: must be a mapping of names to values (`metadata: {{name: value}}`)"
        )),
    }
}

fn value(yaml: &Yaml, at: &str) -> Result<Value, String> {
    let kind =
        match yaml {
            Yaml::Null => Kind::NullValue(NullValue::NullValue as i32),
            Yaml::Bool(b) => Kind::BoolValue(*b),
            Yaml::Number(n) => Kind::NumberValue(n.as_f64().ok_or_else(|| {
                format!("{at}: the number {n} is not one a protobuf value can hold")
            })?),
            Yaml::String(s) => Kind::StringValue(s.clone()),
            Yaml::Sequence(items) => Kind::ListValue(ListValue {
                values: items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| value(item, &format!("{at}[{i}]")))
                    .collect::<Result<_, _>>()?,
            }),
            Yaml::Mapping(map) => {
                let mut fields = std::collections::HashMap::with_capacity(map.len());
                for (key, item) in map {
                    let Yaml::String(name) = key else {
                        return Err(format!(
                            "{at}: the key {} is not a string: error parsing metadata (quote it: \
                         a protobuf Struct's field names are strings)",
                            shown(key)
                        ));
                    };
                    fields.insert(name.clone(), value(item, &format!("{at}.{name}"))?);
                }
                Kind::StructValue(Struct { fields })
            }
            Yaml::Tagged(tagged) => {
                return Err(format!(
                    "{at}: the tag {} is not a value a protobuf Struct can hold: error parsing \
                 metadata (remove the tag)",
                    tagged.tag
                ))
            }
        };
    Ok(Value { kind: Some(kind) })
}

/// A key as the error shows it: short, on one line.
fn shown(key: &Yaml) -> String {
    let text = serde_yaml_ng::to_string(key).unwrap_or_default();
    let line = text.trim().lines().next().unwrap_or_default();
    line.chars().take(40).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Option<Struct>, String> {
        let yaml: Yaml = serde_yaml_ng::from_str(text).unwrap();
        metadata(&yaml, "descriptors[0].metadata")
    }

    #[test]
    fn each_yaml_kind_becomes_its_protobuf_kind() {
        let s = parsed("{s: x, i: 3, f: 1.5, b: true, n: null, l: [1, a], m: {k: v}}")
            .unwrap()
            .unwrap();
        let kind = |name: &str| s.fields[name].kind.clone().unwrap();
        assert_eq!(kind("s"), Kind::StringValue("x".into()));
        assert_eq!(kind("i"), Kind::NumberValue(3.0));
        assert_eq!(kind("f"), Kind::NumberValue(1.5));
        assert_eq!(kind("b"), Kind::BoolValue(true));
        assert_eq!(kind("n"), Kind::NullValue(0));
        let Kind::ListValue(list) = kind("l") else {
            panic!("a list")
        };
        assert_eq!(list.values[1].kind, Some(Kind::StringValue("a".into())));
        let Kind::StructValue(inner) = kind("m") else {
            panic!("a struct")
        };
        assert_eq!(inner.fields["k"].kind, Some(Kind::StringValue("v".into())));
    }

    #[test]
    fn empty_is_none_and_what_a_struct_cannot_hold_is_refused() {
        assert_eq!(parsed("{}").unwrap(), None);
        assert_eq!(parsed("null").unwrap(), None);
        for (text, expected) in [
            ("5", "descriptors[0].metadata: must be a mapping"),
            (
                "{a: {1: x}}",
                "descriptors[0].metadata.a: the key 1 is not a string",
            ),
            (
                "{a: [x, {? [1]: y}]}",
                "descriptors[0].metadata.a[1]: the key",
            ),
            ("{a: !thing x}", "descriptors[0].metadata.a: the tag !thing"),
        ] {
            let error = parsed(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
