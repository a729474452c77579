//! The configuration reference, generated: the tables of `docs/src/gateway/configuration.md`
//! (one per section) and the rule table of `docs/src/gateway/rules.md` are rendered from the
//! JSON Schema of the structs the file is read into (`schema.rs`, derived with schemars from
//! serde's own attributes), so that a key the file accepts cannot be left out of the
//! reference, nor its text written twice. The prose around the tables stays hand-written;
//! each table sits between two markers:
//!
//! ```text
//! <!-- generated from gateway/src/config/schema.rs by make config-reference: [server] -->
//! ... the table ...
//! <!-- end of generated table -->
//! ```
//!
//! A row shows a field's key, its type (`x-type`, else the JSON type), its default
//! (`x-default` as prose, else the schema's `default` written as TOML, else "required" or
//! "none"), its doc comment and whether it reloads (`x-reload`, on the field or its
//! struct). The example `config_reference` rewrites the pages; a unit test fails when the
//! committed ones differ.

use super::schema::FileConfig;
use serde_json::{Map, Value};
use std::fmt;
use std::path::{Path, PathBuf};

/// The pages holding generated tables, relative to the workspace's root.
#[doc(hidden)]
pub const PAGES: [&str; 2] = [
    "docs/src/gateway/configuration.md",
    "docs/src/gateway/rules.md",
];

/// The command that rewrites the pages, for the messages that ask for it.
#[doc(hidden)]
pub const COMMAND: &str =
    "make config-reference (cargo run -p rl-gateway --example config_reference)";

/// The marker before a table, up to its label (`[server]`).
const START: &str = "<!-- generated from gateway/src/config/schema.rs by make config-reference: ";
/// The end of the start marker, after the label.
const START_END: &str = " -->";
/// The marker after a table.
const END: &str = "<!-- end of generated table -->";
/// The columns of every table.
const HEADER: &str = "| key | type | default | range, values | reload |\n|---|---|---|---|---|\n";

/// Why the reference could not be generated.
#[doc(hidden)]
#[derive(Debug)]
pub enum ReferenceError {
    /// A page could not be read or written.
    Io {
        /// The page.
        path: PathBuf,
        /// What the system said.
        error: std::io::Error,
    },
    /// The schema has what a table cannot show: a field without a doc comment or a reload
    /// column, a nested table.
    Schema(String),
    /// The markers of a page: a label no table has, a marker without its end, a table in
    /// no page or in two.
    Markers(String),
}

impl fmt::Display for ReferenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReferenceError::Io { path, error } => write!(f, "{}: {error}", path.display()),
            ReferenceError::Schema(what) => write!(f, "the configuration schema: {what}"),
            ReferenceError::Markers(what) => write!(f, "the reference's markers: {what}"),
        }
    }
}

impl std::error::Error for ReferenceError {}

/// One table: the sections it documents (`[[rule]] and [default]` share one) and a row per
/// key.
#[derive(Debug)]
pub(super) struct Table {
    /// The marker's label: the sections' names as the file writes them, joined by "and".
    pub(super) label: String,
    pub(super) rows: Vec<Row>,
}

/// One key of a section.
#[derive(Debug)]
pub(super) struct Row {
    pub(super) key: String,
    pub(super) kind: String,
    pub(super) default: String,
    pub(super) text: String,
    pub(super) reload: String,
}

/// The JSON Schema of the whole file.
pub(super) fn file_schema() -> Value {
    schemars::schema_for!(FileConfig).to_value()
}

/// Rewrites the pages under `workspace` whose tables differ from the schema's; returns
/// the pages it wrote.
#[doc(hidden)]
pub fn rewrite(workspace: &Path) -> Result<Vec<PathBuf>, ReferenceError> {
    let paths: Vec<PathBuf> = PAGES.iter().map(|page| workspace.join(page)).collect();
    let texts = paths
        .iter()
        .map(|path| {
            std::fs::read_to_string(path).map_err(|error| ReferenceError::Io {
                path: path.clone(),
                error,
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let generated = generate(&texts)?;
    let mut written = Vec::new();
    for ((path, old), new) in paths.into_iter().zip(&texts).zip(generated) {
        if *old != new {
            std::fs::write(&path, new).map_err(|error| ReferenceError::Io {
                path: path.clone(),
                error,
            })?;
            written.push(path);
        }
    }
    Ok(written)
}

/// The pages (the texts of [`PAGES`], in order) with every table between its markers
/// rendered from the schema; an error when a table is in no page, or in two.
#[doc(hidden)]
pub fn generate(pages: &[String]) -> Result<Vec<String>, ReferenceError> {
    let tables = tables(&file_schema())?;
    let mut placed = vec![0usize; tables.len()];
    let pages = pages
        .iter()
        .map(|page| render_page(page, &tables, &mut placed))
        .collect::<Result<Vec<_>, _>>()?;
    for (table, count) in tables.iter().zip(placed) {
        let label = &table.label;
        match count {
            0 => {
                return Err(ReferenceError::Markers(format!(
                    "the table of {label} is in no page: put `{START}{label}{START_END}` and \
                     `{END}` where it belongs"
                )))
            }
            1 => {}
            _ => {
                return Err(ReferenceError::Markers(format!(
                    "the table of {label} is in {count} places; keep one"
                )))
            }
        }
    }
    Ok(pages)
}

/// `page` with each marked table rendered; `placed` counts the tables placed.
fn render_page(
    page: &str,
    tables: &[Table],
    placed: &mut [usize],
) -> Result<String, ReferenceError> {
    let mut out = String::with_capacity(page.len());
    let mut rest = page;
    while let Some(start) = rest.find(START) {
        let after_start = &rest[start + START.len()..];
        let label_end = after_start
            .find(START_END)
            .ok_or_else(|| ReferenceError::Markers(format!("`{START}` without `{START_END}`")))?;
        let label = &after_start[..label_end];
        let body = &after_start[label_end + START_END.len()..];
        let end = body.find(END).ok_or_else(|| {
            ReferenceError::Markers(format!("the table of {label} has no `{END}`"))
        })?;
        let index = tables
            .iter()
            .position(|t| t.label == label)
            .ok_or_else(|| {
                let known: Vec<&str> = tables.iter().map(|t| t.label.as_str()).collect();
                ReferenceError::Markers(format!(
                    "no section is {label}; the tables are {}",
                    known.join(", ")
                ))
            })?;
        placed[index] += 1;
        out.push_str(&rest[..start + START.len() + label_end + START_END.len()]);
        out.push_str("\n\n");
        out.push_str(&render_table(&tables[index]));
        out.push('\n');
        rest = &body[end..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The Markdown table of `table`.
fn render_table(table: &Table) -> String {
    let mut out = String::from(HEADER);
    for row in &table.rows {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            row.key, row.kind, row.default, row.text, row.reload
        ));
    }
    out
}

/// Every table of the file, in the order of its sections: one per section struct, the
/// sections that share one (`rule`, `default`) in one table.
pub(super) fn tables(root: &Value) -> Result<Vec<Table>, ReferenceError> {
    let defs = root.get("$defs").and_then(Value::as_object);
    let no_defs = Map::new();
    let defs = defs.unwrap_or(&no_defs);
    let mut groups: Vec<(String, Vec<(String, bool)>)> = Vec::new();
    for (name, property) in object_field(root, "properties")? {
        let (def, array) = section_of(name, property)?;
        match groups.iter_mut().find(|(d, _)| *d == def) {
            Some((_, names)) => names.push((name.clone(), array)),
            None => groups.push((def, vec![(name.clone(), array)])),
        }
    }
    groups
        .into_iter()
        .map(|(def, names)| {
            let spelled: Vec<String> = names
                .iter()
                .map(|(name, array)| match array {
                    true => format!("[[{name}]]"),
                    false => format!("[{name}]"),
                })
                .collect();
            let label = spelled.join(" and ");
            let schema = defs
                .get(&def)
                .ok_or_else(|| ReferenceError::Schema(format!("{label}: no definition {def}")))?;
            Ok(Table {
                rows: rows(&label, schema, defs)?,
                label,
            })
        })
        .collect()
}

/// The definition a top-level property is a section of, and whether it is an array of
/// tables (`[[rule]]`): a `$ref`, an `Option` of one (`anyOf` with null), or an array of
/// one.
fn section_of(name: &str, property: &Value) -> Result<(String, bool), ReferenceError> {
    let reference = |schema: &Value| {
        schema
            .get("$ref")
            .and_then(Value::as_str)
            .and_then(|r| r.strip_prefix("#/$defs/"))
            .map(str::to_owned)
    };
    if let Some(def) = reference(property) {
        return Ok((def, false));
    }
    if let Some(def) = property.get("items").and_then(reference) {
        return Ok((def, true));
    }
    let alternatives = property.get("anyOf").and_then(Value::as_array);
    if let Some(def) = alternatives.into_iter().flatten().find_map(reference) {
        return Ok((def, false));
    }
    Err(ReferenceError::Schema(format!(
        "the top-level key {name} is not a table: every setting belongs to a section"
    )))
}

/// The rows of the section `label` whose schema is `section`.
fn rows(
    label: &str,
    section: &Value,
    defs: &Map<String, Value>,
) -> Result<Vec<Row>, ReferenceError> {
    let required: Vec<&str> = section
        .get("required")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let section_reload = section.get("x-reload").and_then(Value::as_str);
    let mut rows = Vec::new();
    for (key, field) in object_field(section, "properties")? {
        let place = format!("{label} {key}");
        let text = field
            .get("description")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                ReferenceError::Schema(format!(
                    "{place} has no doc comment, which is its text in the reference"
                ))
            })?;
        let reload = field
            .get("x-reload")
            .and_then(Value::as_str)
            .or(section_reload)
            .ok_or_else(|| {
                ReferenceError::Schema(format!(
                    "{place}: say whether it reloads, by `#[schemars(extend(\"x-reload\" = \
                     ...))]` on the field or its struct"
                ))
            })?;
        let kind = match field.get("x-type").and_then(Value::as_str) {
            Some(kind) => kind.to_owned(),
            None => type_name(&place, field, defs)?,
        };
        rows.push(Row {
            key: key.clone(),
            kind,
            default: default_text(&place, field, required.contains(&key.as_str()))?,
            text: cell(text),
            reload: reload.to_owned(),
        });
    }
    Ok(rows)
}

/// The default column: `x-default`'s prose, else the schema's default written as TOML,
/// else "required" or "none".
fn default_text(place: &str, field: &Value, required: bool) -> Result<String, ReferenceError> {
    if let Some(prose) = field.get("x-default").and_then(Value::as_str) {
        return Ok(cell(prose));
    }
    match field.get("default") {
        None | Some(Value::Null) if required => Ok("required".into()),
        None | Some(Value::Null) => Ok("none".into()),
        Some(value) => {
            let toml = toml::Value::try_from(value).map_err(|e| {
                ReferenceError::Schema(format!("{place}: the default {value} is not TOML: {e}"))
            })?;
            Ok(format!("`{toml}`"))
        }
    }
}

/// A type as the tables name it: `string`, `integer`, `number`, `bool`, `list of ...`,
/// alternatives joined by "or".
fn type_name(
    place: &str,
    schema: &Value,
    defs: &Map<String, Value>,
) -> Result<String, ReferenceError> {
    if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
        let resolved = reference
            .strip_prefix("#/$defs/")
            .and_then(|def| defs.get(def))
            .ok_or_else(|| ReferenceError::Schema(format!("{place}: no definition {reference}")))?;
        return type_name(place, resolved, defs);
    }
    let alternatives = schema
        .get("anyOf")
        .or_else(|| schema.get("oneOf"))
        .and_then(Value::as_array);
    if let Some(alternatives) = alternatives {
        let names = alternatives
            .iter()
            .filter(|a| a.get("type").and_then(Value::as_str) != Some("null"))
            .map(|a| type_name(place, a, defs))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(names.join(" or "));
    }
    let types: Vec<&str> = match schema.get("type") {
        Some(Value::String(one)) => vec![one.as_str()],
        Some(Value::Array(many)) => many.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    match types.iter().filter(|t| **t != "null").collect::<Vec<_>>()[..] {
        [&"string"] => Ok("string".into()),
        [&"integer"] => Ok("integer".into()),
        [&"number"] => Ok("number".into()),
        [&"boolean"] => Ok("bool".into()),
        [&"array"] => {
            let items = schema.get("items").unwrap_or(&Value::Null);
            Ok(format!("list of {}", type_name(place, items, defs)?))
        }
        _ => Err(ReferenceError::Schema(format!(
            "{place}: a type the reference cannot name ({schema}): give it \
             `#[schemars(extend(\"x-type\" = ...))]` (a nested table belongs in a section of \
             its own)"
        ))),
    }
}

/// `text` as one table cell: the doc comment's lines joined, `|` escaped.
fn cell(text: &str) -> String {
    let joined: Vec<&str> = text.split_whitespace().collect();
    joined.join(" ").replace('|', "\\|")
}

/// The object `schema[field]`.
fn object_field<'a>(
    schema: &'a Value,
    field: &str,
) -> Result<&'a Map<String, Value>, ReferenceError> {
    schema
        .get(field)
        .and_then(Value::as_object)
        .ok_or_else(|| ReferenceError::Schema(format!("no `{field}` in {schema}")))
}

#[cfg(test)]
#[path = "reference_tests.rs"]
mod tests;
