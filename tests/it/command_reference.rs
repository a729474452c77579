//! The command reference against the real servers: `COMMAND DOCS` shows what
//! `commands/*.json` describes (summary and arguments), the pages of `docs/src/commands`
//! are the ones the generator writes from those files, and the error messages a user meets
//! first name what is wrong and what would be right.
use redis::Value;
use testkit::*;

/// Every description: the command's full name (`RL.POLICY|SET` for a subcommand) and its
/// fields, read from `commands/*.json`.
fn descriptions() -> Vec<(String, serde_json::Value)> {
    let dir = workspace_root().join("commands");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| entry.expect("a folder entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path).expect("readable");
            let top: serde_json::Value = serde_json::from_str(&text).expect("JSON");
            let (name, doc) = top
                .as_object()
                .and_then(|top| top.iter().next())
                .expect("one command per file");
            let full = match doc.get("container").and_then(|c| c.as_str()) {
                Some(container) => format!("{container}|{name}"),
                None => name.clone(),
            };
            (full, doc.clone())
        })
        .collect()
}

/// The argument names of a description, depth first.
fn described_names(args: Option<&serde_json::Value>, into: &mut Vec<String>) {
    for arg in args.and_then(|a| a.as_array()).into_iter().flatten() {
        let name = arg.get("name").and_then(|n| n.as_str()).expect("a name");
        into.push(name.to_string());
        described_names(arg.get("arguments"), into);
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        Value::VerbatimString { text, .. } => text.clone(),
        other => format!("{other:?}"),
    }
}

/// The field/value pairs of a reply, whether a RESP2 flat array or a RESP3 map.
fn pairs(value: &Value) -> Vec<(String, Value)> {
    match value {
        Value::Map(entries) => entries.iter().map(|(k, v)| (text(k), v.clone())).collect(),
        Value::Array(items) => items
            .chunks(2)
            .filter_map(|pair| match pair {
                [k, v] => Some((text(k), v.clone())),
                _ => None,
            })
            .collect(),
        other => panic!("expected field/value pairs, got {other:?}"),
    }
}

fn field(value: &Value, name: &str) -> Option<Value> {
    pairs(value)
        .into_iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v)
}

/// The argument names `COMMAND DOCS` shows, depth first.
fn shown_names(args: Option<Value>, into: &mut Vec<String>) {
    let Some(Value::Array(args)) = args else {
        return;
    };
    for arg in &args {
        into.push(field(arg, "name").map(|n| text(&n)).expect("a name"));
        shown_names(field(arg, "arguments"), into);
    }
}

#[test]
fn command_docs_and_info_show_what_every_description_says() {
    let described = descriptions();
    assert!(described.len() >= 19, "{} descriptions", described.len());
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        for (name, doc) in &described {
            let reply: Value = redis::cmd("COMMAND")
                .arg("DOCS")
                .arg(name)
                .query(&mut con)
                .expect("COMMAND DOCS");
            let docs = pairs(&reply)
                .into_iter()
                .next()
                .unwrap_or_else(|| panic!("{flavor:?}: no docs for {name}"))
                .1;
            let summary = field(&docs, "summary").map(|s| text(&s));
            let expected = doc.get("summary").and_then(|s| s.as_str());
            assert_eq!(summary.as_deref(), expected, "{flavor:?} {name}");
            let since = field(&docs, "since").map(|s| text(&s));
            assert_eq!(since.as_deref(), doc.get("since").and_then(|s| s.as_str()));
            let (mut want, mut got) = (Vec::new(), Vec::new());
            described_names(doc.get("arguments"), &mut want);
            shown_names(field(&docs, "arguments"), &mut got);
            assert_eq!(got, want, "{flavor:?} {name}");
            command_info_agrees(&mut con, flavor, name, doc);
        }
    });
}

/// `COMMAND INFO` answers the description's arity and flags.
fn command_info_agrees(
    con: &mut redis::Connection,
    flavor: Flavor,
    name: &str,
    doc: &serde_json::Value,
) {
    let reply: Value = redis::cmd("COMMAND")
        .arg("INFO")
        .arg(name)
        .query(con)
        .expect("COMMAND INFO");
    let Value::Array(commands) = reply else {
        panic!("{flavor:?} {name}: {reply:?}");
    };
    let Some(Value::Array(info)) = commands.first() else {
        panic!("{flavor:?} {name}: no COMMAND INFO");
    };
    let arity = doc.get("arity").and_then(|a| a.as_i64());
    assert_eq!(
        Some(&Value::Int(arity.expect("an arity"))),
        info.get(1),
        "{name}"
    );
    let Some(Value::Array(flags)) = info.get(2) else {
        panic!("{flavor:?} {name}: no flags in {info:?}");
    };
    let shown: Vec<String> = flags.iter().map(text).collect();
    let described = doc.get("command_flags").and_then(|f| f.as_array());
    for flag in described.into_iter().flatten().filter_map(|f| f.as_str()) {
        // `getkeys-api` shows as `movablekeys`.
        let flag = match flag {
            "GETKEYS_API" => "movablekeys".to_string(),
            other => other.to_ascii_lowercase(),
        };
        assert!(
            shown.contains(&flag),
            "{flavor:?} {name}: {flag} not in {shown:?}"
        );
    }
}

#[test]
fn the_command_pages_are_the_generated_ones() {
    let status = std::process::Command::new("python3")
        .arg(workspace_root().join("scripts/command_pages.py"))
        .arg("--check")
        .current_dir(workspace_root())
        .status()
        .expect("python3 runs");
    assert!(
        status.success(),
        "docs/src/commands differs from commands/*.json: run python3 scripts/command_pages.py"
    );
}

/// The expected list of options of a call and of a policy's definition.
const CALL_OPTIONS: &str = "(expected ALGO, BURST, COST, TZ or ANCHOR)";
const LEASE_OPTIONS: &str = "(expected ALGO, BURST, COST, TZ, ANCHOR or ID)";
const POLICY_OPTIONS: &str = "(expected ALGO, BURST, MODE, TZ or ANCHOR)";

#[test]
fn an_unknown_keyword_is_named_with_the_valid_ones() {
    each_flavor(|flavor| {
        // Redis 7.0 refuses RL.POLICY SET without it, before reading the definition.
        let server = ServerConfig::new(flavor)
            .module_arg("policies-in-rdb")
            .module_arg("yes")
            .start();
        let mut con = server.conn();
        let cases: [(&[&str], String); 7] = [
            (
                &["RL.HIT", "k", "5", "1m", "COSTS", "2"],
                format!("ERR unknown option 'COSTS' {CALL_OPTIONS}"),
            ),
            (
                &["RL.PEEK", "k", "5", "1m", "10", "1h", "algorithm", "gcra"],
                format!("ERR unknown option 'algorithm' {CALL_OPTIONS}"),
            ),
            (
                &["RL.ACQUIRE", "k", "2", "30s", "5", "1m", "COSTS", "2"],
                format!("ERR unknown option 'COSTS' {LEASE_OPTIONS}"),
            ),
            (
                &["RL.ACQUIRE", "k", "2", "30s", "IDS", "job-7"],
                format!("ERR unknown option 'IDS' {LEASE_OPTIONS}"),
            ),
            (
                &["RL.MHIT", "1", "k", "SPEC", "5", "1m", "COSTS", "2"],
                format!("ERR SPEC 0 (key 'k'): unknown option 'COSTS' {CALL_OPTIONS}"),
            ),
            (
                &["RL.POLICY", "SET", "p", "5", "1m", "MODES", "shadow"],
                format!("ERR unknown option 'MODES' {POLICY_OPTIONS}"),
            ),
            (
                &["RL.HIT", "k", "POLICY", "p", "COSTS", "2"],
                "ERR unknown option 'COSTS' after POLICY name (expected COST)".to_string(),
            ),
        ];
        for (call, expected) in &cases {
            let mut cmd = redis::cmd(call[0]);
            cmd.arg(&call[1..]);
            assert_eq!(&error_text(&mut con, &cmd), expected, "{flavor:?} {call:?}");
        }
        // A first word that is no number still reads as a limit.
        let cmd = redis::cmd("RL.HIT").arg(&["k", "five", "1m"]).clone();
        let refused = error_text(&mut con, &cmd);
        assert_eq!(
            refused, "ERR limit must be a positive integer",
            "{flavor:?}"
        );
    });
}

#[test]
fn an_unknown_unit_suggests_the_week_and_lists_the_units() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let expected = "ERR window has an unknown unit: use ms, s, m, h or d (a week is 7d), \
                        or a calendar period: day, week, month or year";
        for window in ["1w", "2y", "5sec", "1mo"] {
            let cmd = redis::cmd("RL.HIT").arg(&["k", "5", window]).clone();
            assert_eq!(error_text(&mut con, &cmd), expected, "{flavor:?} {window}");
        }
        // What the message suggests works.
        for window in ["7d", "week"] {
            let allowed = hit(&mut con, "k", &["5", window]);
            assert!(allowed.allowed, "{flavor:?} {window}");
        }
    });
}

/// Starts `flavor` with the module and `module_args`, which must refuse the load; returns
/// the server log.
fn refused_load(flavor: Flavor, module_args: &[&str]) -> String {
    let config = ServerConfig::new(flavor);
    let log = config.dir().join("refused.log");
    let status = std::process::Command::new(flavor.binary())
        .args(["--port", &config.port.to_string(), "--bind", "127.0.0.1"])
        .arg("--logfile")
        .arg(&log)
        .arg("--loadmodule")
        .arg(module_path())
        .args(module_args)
        .status()
        .expect("the server runs");
    assert!(
        !status.success(),
        "{flavor:?}: {module_args:?} must not load"
    );
    std::fs::read_to_string(&log).unwrap_or_default()
}

#[test]
fn a_load_argument_that_is_no_config_refuses_the_load_and_is_named() {
    let names = "default-algorithm, max-window-ms, max-log-limit, max-leases, \
                 policies-in-rdb, notify-denied";
    each_flavor(|flavor| {
        for (args, named) in [
            (&["FOO", "1"][..], "'FOO'"),
            (&["default-algoritm", "gcra"][..], "'default-algoritm'"),
            (&["policies-in-rdb", "yes", "extra"][..], "'extra'"),
        ] {
            let log = refused_load(flavor, args);
            let expected = format!("ratelimit: unknown load argument {named}");
            assert!(log.contains(&expected), "{flavor:?} {args:?}: {log}");
            assert!(log.contains(names), "{flavor:?} {args:?}: {log}");
        }
        let log = refused_load(flavor, &["max-leases"]);
        assert!(log.contains("ratelimit: max-leases needs a value"), "{log}");
        // Names and values are read in any case, as CONFIG SET reads them.
        let server = ServerConfig::new(flavor)
            .module_arg("DEFAULT-ALGORITHM")
            .module_arg("GCRA")
            .module_arg("Max-Log-Limit")
            .module_arg("20")
            .start();
        let pair: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("ratelimit.default-algorithm")
            .query(&mut server.conn())
            .expect("CONFIG GET");
        assert_eq!(pair[1], "gcra", "{flavor:?}");
        let pair: Vec<String> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("ratelimit.max-log-limit")
            .query(&mut server.conn())
            .expect("CONFIG GET");
        assert_eq!(pair[1], "20", "{flavor:?}");
    });
}

#[test]
fn a_bad_value_of_a_config_names_the_config_and_its_values() {
    each_flavor(|flavor| {
        let log = refused_load(flavor, &["default-algorithm", "leaky"]);
        let expected = "ratelimit: default-algorithm must be one of fixed, sliding, log, token, \
                        gcra, not 'leaky'";
        assert!(log.contains(expected), "{flavor:?}: {log}");
        let log = refused_load(flavor, &["notify-denied", "true"]);
        let expected = "ratelimit: notify-denied must be yes or no, not 'true'";
        assert!(log.contains(expected), "{flavor:?}: {log}");
        let log = refused_load(flavor, &["max-leases", "ten"]);
        let expected = "ratelimit: max-leases must be an integer, not 'ten'";
        assert!(log.contains(expected), "{flavor:?}: {log}");
        // At run time the server's own CONFIG SET names the config and its values.
        let server = ServerConfig::new(flavor).start();
        let cmd = redis::cmd("CONFIG")
            .arg(&["SET", "ratelimit.default-algorithm", "leaky"])
            .clone();
        let refused = error_text(&mut server.conn(), &cmd);
        assert!(
            refused.contains("default-algorithm") && refused.contains("gcra"),
            "{flavor:?}: {refused}"
        );
    });
}

#[test]
fn rl_policy_help_shows_each_subcommands_syntax_from_its_description() {
    let described = descriptions();
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let lines: Vec<String> = redis::cmd("RL.POLICY")
            .arg("HELP")
            .query(&mut server.conn())
            .expect("RL.POLICY HELP");
        assert_eq!(lines.len(), 5, "{flavor:?}: {lines:?}");
        for (line, sub) in lines.iter().zip(["SET", "GET", "DEL", "LIST", "HELP"]) {
            assert!(line.starts_with(&format!("RL.POLICY {sub}")), "{line}");
            let doc = &described
                .iter()
                .find(|(name, _)| *name == format!("RL.POLICY|{sub}"))
                .expect("described")
                .1;
            // Values show by name, keywords by token; blocks and choices by what they hold.
            for name in value_names(doc.get("arguments")) {
                assert!(line.contains(&name), "{flavor:?}: {name} not in {line}");
            }
        }
        assert!(lines[0].contains("[TZ zone] [ANCHOR day]"), "{}", lines[0]);
    });
}

/// The names of the arguments that are values (no subarguments, no keyword alone).
fn value_names(args: Option<&serde_json::Value>) -> Vec<String> {
    let mut names = Vec::new();
    for arg in args.and_then(|a| a.as_array()).into_iter().flatten() {
        match arg.get("arguments") {
            Some(sub) => names.extend(value_names(Some(sub))),
            None if arg.get("type").and_then(|t| t.as_str()) == Some("pure-token") => {}
            None => names.extend(arg.get("name").and_then(|n| n.as_str()).map(String::from)),
        }
    }
    names
}
