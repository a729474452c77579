//! Reads the command descriptions, `commands/*.json` (Redis's own command JSON format), and
//! writes what `COMMAND DOCS` and `COMMAND INFO` show of each command as Rust consts
//! (`$OUT_DIR/command_docs.rs`, included by `src/command_docs.rs`): its summary,
//! complexity, since, tips, the key spec of a command whose keys follow a count, and its
//! arguments. The pages of `docs/src/commands` come from the same files
//! (`scripts/command_pages.py`), so nothing is written twice.

use serde_json::{Map, Value};
use std::fmt::Write as _;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=commands");
    let mut files: Vec<_> = std::fs::read_dir("commands")
        .expect("the folder commands/ holds the command descriptions")
        .map(|entry| entry.expect("a readable folder entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    let mut out = String::from(
        "/// Every described command, from `commands/*.json`, in file order.\n\
         pub(crate) const DESCRIBED: &[CommandDoc] = &[\n",
    );
    for path in &files {
        println!("cargo:rerun-if-changed={}", path.display());
        let (name, doc) = read(path);
        out.push_str(&command(&name, &doc));
    }
    out.push_str("];\n");
    let target =
        Path::new(&std::env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("command_docs.rs");
    std::fs::write(target, out).expect("OUT_DIR is writable");
}

/// The one command a file describes: its full name (`RL.POLICY|SET` for a subcommand) and
/// its fields.
fn read(path: &Path) -> (String, Map<String, Value>) {
    let text = std::fs::read_to_string(path).expect("a readable description");
    let value: Value = serde_json::from_str(&text)
        .unwrap_or_else(|err| panic!("{}: not JSON: {err}", path.display()));
    let Value::Object(top) = value else {
        panic!("{}: not an object", path.display());
    };
    let [(name, Value::Object(doc))]: [(String, Value); 1] = top
        .into_iter()
        .collect::<Vec<_>>()
        .try_into()
        .unwrap_or_else(|_| panic!("{}: describe exactly one command", path.display()))
    else {
        panic!("{}: the command's fields must be an object", path.display());
    };
    let full = match doc.get("container").and_then(Value::as_str) {
        Some(container) => format!("{container}|{name}"),
        None => name,
    };
    (full, doc)
}

/// A C string literal of `text`: Rust's own escapes are valid in `c"..."`.
fn c_str(text: &str) -> String {
    assert!(!text.contains('\0'), "no NUL in a description: {text:?}");
    format!("c{text:?}")
}

fn text<'a>(doc: &'a Map<String, Value>, field: &str, name: &str) -> &'a str {
    doc.get(field)
        .and_then(Value::as_str)
        .unwrap_or_else(|| panic!("{name}: `{field}` must be a string"))
}

fn command(name: &str, doc: &Map<String, Value>) -> String {
    let tips: Vec<String> = doc
        .get("command_tips")
        .and_then(Value::as_array)
        .map(|tips| {
            let tips = tips.iter().filter_map(Value::as_str);
            tips.map(str::to_ascii_lowercase).collect()
        })
        .unwrap_or_default();
    let tips = if tips.is_empty() {
        "None".to_string()
    } else {
        format!("Some({})", c_str(&tips.join(" ")))
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "    CommandDoc {{\n        name: {},\n        syntax: {},\n        flags: {},\n        \
         summary: {},\n        complexity: {},\n        since: {},\n        tips: {tips},\n        \
         counted_keys: {},\n        args: {},\n    }},",
        c_str(name),
        c_str(&command_syntax(name, doc)),
        c_str(&flags(name, doc)),
        c_str(text(doc, "summary", name)),
        c_str(text(doc, "complexity", name)),
        c_str(text(doc, "since", name)),
        counted_keys(name, doc),
        args(name, doc.get("arguments"), 2),
    );
    out
}

/// The syntax line (`RL.POLICY GET name`), written as `scripts/command_pages.py` writes it
/// on the command's page.
fn command_syntax(name: &str, doc: &Map<String, Value>) -> String {
    let mut line = name.replace('|', " ");
    for arg in doc
        .get("arguments")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        line.push(' ');
        line.push_str(&syntax(name, arg));
    }
    line
}

/// One argument as redis.io's syntax lines write it: `[ALGO <fixed | gcra>]`,
/// `key [key ...]`, `SPEC rule [SPEC rule ...]`.
fn syntax(name: &str, arg: &Value) -> String {
    let field = |f: &str| arg.get(f).and_then(Value::as_str);
    let flag = |f: &str| arg.get(f).and_then(Value::as_bool).unwrap_or(false);
    let subargs = || -> Vec<String> {
        let list = arg.get("arguments").and_then(Value::as_array);
        list.into_iter()
            .flatten()
            .map(|a| syntax(name, a))
            .collect()
    };
    let token = field("token");
    let arg_name = field("name").unwrap_or_else(|| panic!("{name}: an argument needs a name"));
    let mut body = match (field("type"), token) {
        (Some("pure-token"), Some(token)) => token.to_string(),
        (Some("pure-token"), None) => panic!("{name}: a pure-token needs its token"),
        (Some("oneof"), Some(token)) => format!("{token} <{}>", subargs().join(" | ")),
        (Some("oneof"), None) if flag("optional") => subargs().join(" | "),
        (Some("oneof"), None) => format!("<{}>", subargs().join(" | ")),
        (Some("block"), Some(token)) => format!("{token} {}", subargs().join(" ")),
        (Some("block"), None) => subargs().join(" "),
        (_, Some(token)) => format!("{token} {arg_name}"),
        (_, None) => arg_name.to_string(),
    };
    if flag("multiple") {
        let repeated = match token {
            Some(token) if !flag("multiple_token") => body[token.len() + 1..].to_string(),
            _ => body.clone(),
        };
        body = format!("{body} [{repeated} ...]");
    }
    if flag("optional") {
        body = format!("[{body}]");
    }
    body
}

/// The command's flags as the module registers them (`write deny-oom`): the JSON's
/// `command_flags`, named as `RedisModule_CreateCommand` reads them.
fn flags(name: &str, doc: &Map<String, Value>) -> String {
    let flags = doc.get("command_flags").and_then(Value::as_array);
    let names: Vec<String> = flags
        .into_iter()
        .flatten()
        .map(|flag| match flag.as_str() {
            Some("DENYOOM") => "deny-oom".into(),
            Some("GETKEYS_API") => "getkeys-api".into(),
            Some(other) => other.to_ascii_lowercase(),
            None => panic!("{name}: command_flags must be strings"),
        })
        .collect();
    names.join(" ")
}

/// The key spec the module gives the server itself: only for keys that follow a count
/// (`find_keys.keynum`); a command whose key is at a fixed position is registered with
/// that position, and the server derives its spec.
fn counted_keys(name: &str, doc: &Map<String, Value>) -> String {
    let Some(specs) = doc.get("key_specs").and_then(Value::as_array) else {
        return "None".into();
    };
    let counted = specs
        .iter()
        .find(|spec| spec.pointer("/find_keys/keynum").is_some());
    let Some(spec) = counted else {
        return "None".into();
    };
    let count_at = spec
        .pointer("/begin_search/index/pos")
        .and_then(Value::as_i64)
        .unwrap_or_else(|| panic!("{name}: a keynum spec needs begin_search.index.pos"));
    let writes = spec
        .get("flags")
        .and_then(Value::as_array)
        .is_some_and(|flags| flags.iter().any(|f| f == "RW"));
    format!("Some(CountedKeys {{ count_at: {count_at}, writes: {writes} }})")
}

/// `&[ArgDoc { .. }, ..]` for a list of arguments (and, recursively, their subarguments).
fn args(name: &str, list: Option<&Value>, depth: usize) -> String {
    let Some(list) = list.and_then(Value::as_array) else {
        return "&[]".into();
    };
    let pad = "    ".repeat(depth + 1);
    let mut out = String::from("&[\n");
    for arg in list {
        let arg = arg
            .as_object()
            .unwrap_or_else(|| panic!("{name}: an argument must be an object"));
        let arg_name = text(arg, "name", name);
        let optional_text = |field: &str| {
            arg.get(field)
                .and_then(Value::as_str)
                .map_or("None".into(), |t| format!("Some({})", c_str(t)))
        };
        let flag = |field: &str| arg.get(field).and_then(Value::as_bool).unwrap_or(false);
        let _ = writeln!(
            out,
            "{pad}ArgDoc {{ name: {}, kind: ArgKind::{}, token: {}, summary: {}, \
             optional: {}, multiple: {}, multiple_token: {}, args: {} }},",
            c_str(arg_name),
            kind(name, text(arg, "type", name)),
            optional_text("token"),
            optional_text("summary"),
            flag("optional"),
            flag("multiple"),
            flag("multiple_token"),
            args(name, arg.get("arguments"), depth + 1),
        );
    }
    out.push_str(&"    ".repeat(depth));
    out.push(']');
    out
}

/// The `ArgKind` of a JSON argument type.
fn kind(name: &str, json_type: &str) -> &'static str {
    match json_type {
        "string" => "String",
        "integer" => "Integer",
        "double" => "Double",
        "key" => "Key",
        "pattern" => "Pattern",
        "unix-time" => "UnixTime",
        "pure-token" => "PureToken",
        "oneof" => "OneOf",
        "block" => "Block",
        other => panic!("{name}: unknown argument type {other:?}"),
    }
}
