//! The generated reference against the committed pages, against serde (the keys it reads)
//! and against loading (each documented key is accepted), and the generator's refusals.

use super::super::schema::{
    DenyCacheSection, EnvoySection, FileConfig, HeadersSection, LocalQuotaSection, RedisSection,
    RuleSection, RulesDocument, ServerSection,
};
use super::*;
use serde::de::{DeserializeOwned, Deserializer, Error as _, Visitor};
use serde_json::json;

/// The workspace's root, where [`PAGES`] are.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The committed pages, in the order of [`PAGES`].
fn committed() -> Vec<String> {
    PAGES
        .iter()
        .map(|page| {
            let path = workspace().join(page);
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        })
        .collect()
}

#[test]
fn the_reference_pages_are_the_generated_ones() {
    let committed = committed();
    let generated = generate(&committed).unwrap_or_else(|e| panic!("{e}"));
    for ((page, old), new) in PAGES.iter().zip(&committed).zip(&generated) {
        if old != new {
            let line = old
                .lines()
                .zip(new.lines())
                .position(|(a, b)| a != b)
                .unwrap_or_else(|| old.lines().count().min(new.lines().count()));
            panic!(
                "{page} differs from the configuration schema (gateway/src/config/schema.rs) \
                 from line {}: run {COMMAND}",
                line + 1
            );
        }
    }
}

/// The tables of a page: each marker's label and the keys its rows name.
fn documented(page: &str) -> Vec<(String, Vec<String>)> {
    let mut tables = Vec::new();
    let mut current: Option<(String, Vec<String>)> = None;
    for line in page.lines() {
        if let Some(label) = line.strip_prefix(START) {
            let label = label.strip_suffix(START_END).expect("a whole start marker");
            current = Some((label.to_owned(), Vec::new()));
        } else if line == END {
            tables.extend(current.take());
        } else if let (Some((_, keys)), Some(row)) = (&mut current, line.strip_prefix("| `")) {
            keys.push(row.split('`').next().expect("a key").to_owned());
        }
    }
    tables
}

/// The sections a label names: `[[rule]] and [default]` is `rule` and `default`.
fn sections_of(label: &str) -> Vec<&str> {
    label
        .split(" and ")
        .map(|part| part.trim_matches(|c| c == '[' || c == ']'))
        .collect()
}

/// Every table of the committed pages, by section: the keys documented for it.
fn documented_sections() -> Vec<(String, Vec<String>)> {
    let mut sections = Vec::new();
    for page in committed() {
        for (label, keys) in documented(&page) {
            for section in sections_of(&label) {
                sections.push((section.to_owned(), keys.clone()));
            }
        }
    }
    sections
}

/// The field names serde's derive reads for `T` (the `FIELDS` it hands to
/// `deserialize_struct`), caught by a deserializer that records them and stops.
fn serde_fields<T: DeserializeOwned>() -> Vec<String> {
    struct Recorder<'a>(&'a mut Vec<String>);
    impl<'de> Deserializer<'de> for Recorder<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(Self::Error::custom("not a struct"))
        }
        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _: &'static str,
            fields: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            self.0.extend(fields.iter().map(|f| f.to_string()));
            Err(Self::Error::custom("recorded"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }
    let mut fields = Vec::new();
    assert!(T::deserialize(Recorder(&mut fields)).is_err());
    fields
}

#[test]
fn every_key_serde_reads_is_in_the_committed_reference() {
    // Serde's own lists, not the schema's: what the file is really read with.
    let sections: Vec<(&str, Vec<String>)> = vec![
        ("server", serde_fields::<ServerSection>()),
        ("redis", serde_fields::<RedisSection>()),
        ("headers", serde_fields::<HeadersSection>()),
        ("deny_cache", serde_fields::<DenyCacheSection>()),
        ("local_quota", serde_fields::<LocalQuotaSection>()),
        ("rule", serde_fields::<RuleSection>()),
        ("default", serde_fields::<RuleSection>()),
        (
            "connections",
            serde_fields::<crate::net::connection_limits::ConnectionSection>(),
        ),
        (
            "client_ip",
            serde_fields::<crate::rules::client_ip::PrefixSection>(),
        ),
        (
            "requests",
            serde_fields::<crate::rules::request_policy::RequestsSection>(),
        ),
        ("envoy", serde_fields::<EnvoySection>()),
    ];
    let names: Vec<&str> = sections.iter().map(|(name, _)| *name).collect();
    assert_eq!(
        serde_fields::<FileConfig>(),
        names,
        "a section was added to or taken from FileConfig: list its struct here"
    );
    let documented = documented_sections();
    for (section, keys) in &sections {
        let shown = documented
            .iter()
            .find(|(name, _)| name == section)
            .map(|(_, keys)| keys)
            .unwrap_or_else(|| panic!("[{section}] has no table in {PAGES:?}"));
        assert_eq!(
            shown, keys,
            "[{section}]: the documented keys are not serde's"
        );
    }
    assert!(serde_fields::<ServerSection>().contains(&"listen".to_owned()));
}

/// A value of the type `schema` describes: its default when it has one, else a value of
/// the first type it allows.
fn sample(schema: &Value, defs: &Map<String, Value>) -> Value {
    if let Some(default) = schema.get("default").filter(|d| !d.is_null()) {
        return default.clone();
    }
    if let Some(def) = schema.get("$ref").and_then(Value::as_str) {
        let name = def.strip_prefix("#/$defs/").expect("a local definition");
        return sample(&defs[name], defs);
    }
    if let Some(first) = schema["anyOf"].as_array().and_then(|a| a.first()) {
        return sample(first, defs);
    }
    let kind = match &schema["type"] {
        Value::Array(types) => types[0].clone(),
        one => one.clone(),
    };
    match kind.as_str() {
        Some("string") => json!("x"),
        Some("integer") => json!(1),
        Some("number") => json!(0.5),
        Some("boolean") => json!(true),
        Some("array") => json!([sample(&schema["items"], defs)]),
        _ => panic!("no sample of {schema}"),
    }
}

/// `key = value` in TOML.
fn assignment(key: &str, value: &Value) -> String {
    let value = toml::Value::try_from(value).expect("a TOML value");
    format!("{key} = {value}\n")
}

/// The file of `section` holding `lines` and the keys it requires, after the `[server]`
/// every file has.
fn file_with(section: &str, lines: &str, root: &Value) -> String {
    let defs = root["$defs"].as_object().expect("$defs");
    let (def, array) = section_of(section, &root["properties"][section]).expect("a section");
    let mut text = match section {
        "server" => String::new(),
        _ => "[server]\nlisten = \"127.0.0.1:1\"\n".into(),
    };
    text.push_str(&match array {
        true => format!("[[{section}]]\n"),
        false => format!("[{section}]\n"),
    });
    let schema = &defs[&def];
    for required in schema["required"].as_array().into_iter().flatten() {
        let key = required.as_str().expect("a key");
        if !lines.starts_with(&format!("{key} =")) {
            text.push_str(&assignment(key, &sample(&schema["properties"][key], defs)));
        }
    }
    text.push_str(lines);
    text
}

#[test]
fn every_documented_key_loads_and_an_unknown_one_is_refused() {
    let root = file_schema();
    let defs = root["$defs"].as_object().expect("$defs");
    let mut loaded = 0;
    for (section, keys) in documented_sections() {
        let (def, _) = section_of(&section, &root["properties"][&section]).expect("a section");
        for key in keys {
            let field = &defs[&def]["properties"][&key];
            let text = file_with(&section, &assignment(&key, &sample(field, defs)), &root);
            if let Err(error) = toml::from_str::<FileConfig>(&text) {
                panic!("[{section}] {key} is documented but does not load: {error}\n{text}");
            }
            loaded += 1;
        }
        // The other way: what the reference leaves out is refused, not ignored.
        let text = file_with(&section, "no_such_key = 1\n", &root);
        let error = toml::from_str::<FileConfig>(&text)
            .err()
            .unwrap_or_else(|| panic!("[{section}] accepts an unknown key"));
        assert!(error.to_string().contains("unknown field"), "{error}");
    }
    assert!(loaded > 100, "only {loaded} keys loaded");
}

#[test]
fn the_rules_kept_in_redis_are_documented_by_the_file_s_tables() {
    let file = file_schema();
    let document = schemars::schema_for!(RulesDocument).to_value();
    for (name, property) in object_field(&document, "properties").expect("properties") {
        let in_document = section_of(name, property).expect("a section");
        let in_file = section_of(name, &file["properties"][name]).expect("in the file too");
        assert_eq!(in_document, in_file, "[{name}]");
    }
}

#[test]
fn a_table_without_its_place_or_a_marker_without_its_table_is_refused() {
    let mut pages = committed();
    pages[0] = pages[0].replace(&format!("{START}[envoy]{START_END}"), "");
    let error = generate(&pages).unwrap_err().to_string();
    assert!(
        error.contains("the table of [envoy] is in no page"),
        "{error}"
    );

    let mut pages = committed();
    pages[1].push_str(&format!("{START}[proxy]{START_END}\n{END}\n"));
    let error = generate(&pages).unwrap_err().to_string();
    assert!(error.contains("no section is [proxy]"), "{error}");

    let mut pages = committed();
    pages[1].push_str(&format!("{START}[server]{START_END}\n"));
    let error = generate(&pages).unwrap_err().to_string();
    assert!(error.contains("[server] has no"), "{error}");

    let mut pages = committed();
    pages[1].push_str(&format!("{START}[server]{START_END}\n{END}\n"));
    let error = generate(&pages).unwrap_err().to_string();
    assert!(error.contains("[server] is in 2 places"), "{error}");
}

/// A file of one section `[s]` whose field `k` has the schema `field`.
fn one_field(field: Value, section: Value) -> Value {
    let mut section = section;
    section["properties"] = json!({ "k": field });
    json!({
        "properties": { "s": { "$ref": "#/$defs/S" } },
        "$defs": { "S": section },
    })
}

#[test]
fn a_row_comes_from_the_field_s_schema() {
    let reload = json!({ "x-reload": "restart", "required": ["k"] });
    let row = |field: Value| {
        let tables = tables(&one_field(field, reload.clone())).unwrap_or_else(|e| panic!("{e}"));
        let row = &tables[0].rows[0];
        [&row.kind, &row.default, &row.text, &row.reload].map(|s| s.to_string())
    };
    assert_eq!(
        row(json!({ "type": "integer", "description": "At least 1:\nmany | few." })),
        [
            "integer",
            "required",
            "At least 1: many \\| few.",
            "restart"
        ]
    );
    assert_eq!(
        row(json!({
            "type": ["array", "null"], "items": { "type": "string" }, "default": ["a"],
            "description": "d", "x-reload": "yes",
        })),
        ["list of string", "`[\"a\"]`", "d", "yes"]
    );
    assert_eq!(
        row(json!({
            "type": "string", "x-type": "path", "x-default": "the URL's", "description": "d",
        })),
        ["path", "the URL's", "d", "restart"]
    );
    assert_eq!(
        row(json!({ "anyOf": [{ "type": "string" }, { "type": "null" }], "description": "d" })),
        ["string", "required", "d", "restart"]
    );
}

#[test]
fn a_field_the_table_cannot_show_is_refused_by_name() {
    let cases = [
        (
            json!({ "type": "string" }),
            json!({ "x-reload": "yes" }),
            "[s] k has no doc comment",
        ),
        (
            json!({ "type": "string", "description": "d" }),
            json!({}),
            "[s] k: say whether it reloads",
        ),
        (
            json!({ "type": "object", "description": "d" }),
            json!({ "x-reload": "yes" }),
            "[s] k: a type the reference cannot name",
        ),
    ];
    for (field, section, expected) in cases {
        let error = tables(&one_field(field, section)).unwrap_err().to_string();
        assert!(error.contains(expected), "{error}");
    }
    let loose = json!({ "properties": { "port": { "type": "integer" } } });
    let error = tables(&loose).unwrap_err().to_string();
    assert!(error.contains("port is not a table"), "{error}");
}
