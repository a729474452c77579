//! The response's `dynamic_metadata` (pure), as envoyproxy/ratelimit builds it with
//! `RESPONSE_DYNAMIC_METADATA`: the request's domain, its descriptors (entries as
//! `key=value`, the descriptor's own limit, its `hits_addend`), the request's `hitsAddend`,
//! and the `metadata` of the descriptors that passed, merged.

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::r#type::v3::RateLimitUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::value::Kind;
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value};

/// The metadata of `request`, with `passed` the `metadata` of each descriptor that was not
/// over its limit, in request order (merged: see [`merge`]).
pub(super) fn dynamic_metadata<'m>(
    request: &RateLimitRequest,
    passed: impl Iterator<Item = &'m Struct>,
) -> Struct {
    let mut fields = std::collections::HashMap::new();
    fields.insert("domain".to_owned(), string(&request.domain));
    let descriptors = request.descriptors.iter().map(descriptor).collect();
    fields.insert("descriptors".to_owned(), list(descriptors));
    if request.hits_addend != 0 {
        fields.insert(
            "hitsAddend".to_owned(),
            number(f64::from(request.hits_addend)),
        );
    }
    let mut merged = Struct::default();
    for metadata in passed {
        merge(&mut merged, metadata);
    }
    if !merged.fields.is_empty() {
        fields.insert("metadata".to_owned(), structure(merged));
    }
    Struct { fields }
}

/// One request descriptor: its entries as `key=value`, its own limit, its `hits_addend`.
fn descriptor(d: &RateLimitDescriptor) -> Value {
    let mut fields = std::collections::HashMap::new();
    let entries = d
        .entries
        .iter()
        .map(|e| string(&format!("{}={}", e.key, e.value)))
        .collect();
    fields.insert("entries".to_owned(), list(entries));
    if let Some(limit) = &d.limit {
        // The override in the protobuf text format, which theirs writes with Go's
        // `String()`: `requests_per_unit:10 unit:MINUTE`.
        let unit = RateLimitUnit::try_from(limit.unit)
            .map_or_else(|_| limit.unit.to_string(), |u| u.as_str_name().to_owned());
        let text = format!("requests_per_unit:{} unit:{unit}", limit.requests_per_unit);
        fields.insert("limit".to_owned(), string(&text));
    }
    if let Some(hits) = &d.hits_addend {
        // A JSON number, as theirs: exact up to 2^53, and a hits_addend is at most 2^32.
        fields.insert("hitsAddend".to_owned(), number(hits.value as f64));
    }
    structure(Struct { fields })
}

/// Puts `from`'s fields into `into`: a field `into` lacks is added; where both hold a
/// struct, the two are merged the same way; otherwise the first value stays.
pub(super) fn merge(into: &mut Struct, from: &Struct) {
    for (name, value) in &from.fields {
        match into.fields.get_mut(name) {
            None => {
                into.fields.insert(name.clone(), value.clone());
            }
            Some(Value {
                kind: Some(Kind::StructValue(held)),
            }) => {
                if let Some(Kind::StructValue(more)) = &value.kind {
                    merge(held, more);
                }
            }
            Some(_) => {}
        }
    }
}

fn string(text: &str) -> Value {
    Value {
        kind: Some(Kind::StringValue(text.to_owned())),
    }
}

fn number(n: f64) -> Value {
    Value {
        kind: Some(Kind::NumberValue(n)),
    }
}

fn list(values: Vec<Value>) -> Value {
    Value {
        kind: Some(Kind::ListValue(ListValue { values })),
    }
}

fn structure(s: Struct) -> Value {
    Value {
        kind: Some(Kind::StructValue(s)),
    }
}
