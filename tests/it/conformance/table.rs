//! The conformance table: `tests/conformance/*.toml`, one file per area, read into
//! scenarios of steps. A step is a call in the module's syntax and the reply expected, as
//! `["RL.HIT {key} 3 1h", [1, 3, 2, "edge:1h", 0]]`, or as a table when it needs more:
//! `{ call = ..., reply = ..., functions = ..., only = "module", on = "replica" }`; a step
//! `{ wait = "700ms" }` lets time pass.
//!
//! The expected reply is an integer, an array of them, `{ error = "ERR ..." }`, `{ text =
//! "..." }` (a string reply, exact), `"nil"`, or one of the clock-aware matchers:
//!
//! - `"edge:1h"`: the ms from the call to the end of the current window of 1h aligned to the
//!   Unix epoch (how fixed and sliding windows are cut); `"edge:1h+20m"` adds 20 minutes;
//! - `"end:1h"`: that end as an absolute time in ms (what PEXPIRETIME of a fixed window
//!   answers);
//! - `"~6m"`: 6 minutes counted from the scenario's first call, so at least 6m less the ms
//!   the scenario has taken so far and at most 6m (what token, gcra, log and lease times
//!   read, since their state holds the absolute time of a call);
//! - `"calendar:week"`: the ms until the next week starts (Monday, midnight UTC); also
//!   `"calendar:month anchor 15"`, `"calendar:day Europe/Paris"`, `"calendar:year"`;
//! - `"a..=b"`: any integer in that range;
//! - `"id"`: any string of 1 to 64 bytes (a lease id); `"id>name"` also keeps it, and a
//!   later call names it `{name}`.
//!
//! In calls, `{key}`, `{key2}`, ... name the scenario's fresh keys (one hash tag for the
//! scenario, so that several keys share a Cluster slot).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use toml::Value as Toml;

/// Where the table lives, from the checkout's root.
pub const TABLE_DIR: &str = "tests/conformance";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    Int(i64),
    Range(i64, i64),
    /// ms until the end of the epoch-aligned window of `window_ms`, plus `plus_ms`.
    Edge {
        window_ms: i64,
        plus_ms: i64,
    },
    /// The absolute end of the epoch-aligned window, in ms.
    End {
        window_ms: i64,
    },
    /// `ms` less the time since the scenario's first call.
    Since {
        ms: i64,
    },
    /// ms until the next calendar period starts: `day`, `week` (Monday), `month` (on the
    /// anchor day, 1 unless given), `year`, at midnight in `zone` (UTC unless given).
    Calendar {
        period: String,
        anchor: u32,
        zone: String,
    },
    Nil,
    /// A string of 1 to 64 bytes, kept under the name given.
    Id(Option<String>),
    Text(String),
    Error(String),
    Array(Vec<Expect>),
}

/// Which backends run a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Only {
    Both,
    Module,
}

#[derive(Debug, Clone)]
pub struct Step {
    /// The call's words, in the module's syntax, placeholders not yet replaced.
    pub call: Vec<String>,
    pub reply: Expect,
    /// What the library answers instead, where the table documents a difference.
    pub functions: Option<Expect>,
    pub only: Only,
    /// Run on the primary's replica, once it has the scenario's writes (skipped where the
    /// target has no replica: a cluster).
    pub on_replica: bool,
    /// A step that only lets this much time pass (the calls after it check what it did).
    pub wait_ms: Option<i64>,
}

#[derive(Debug, Clone)]
pub struct Scenario {
    /// The table's file, from the checkout's root.
    pub file: String,
    pub name: String,
    pub steps: Vec<Step>,
    /// Functions the library does not offer yet: on the functions backend the scenario is
    /// reported as pending while one of them is missing, and fails once all are there (so
    /// that the mark is removed and the scenario runs).
    pub pending: Vec<String>,
    /// Windows whose epoch-aligned edges the scenario must not straddle, besides those its
    /// `edge:` and `end:` matchers name.
    pub clear_of_ms: Vec<i64>,
}

impl Scenario {
    /// Every window whose edge the scenario must stay clear of.
    pub fn windows_ms(&self) -> BTreeSet<i64> {
        let mut windows: BTreeSet<i64> = self.clear_of_ms.iter().copied().collect();
        for step in &self.steps {
            for expect in std::iter::once(&step.reply).chain(step.functions.as_ref()) {
                expect.collect_windows(&mut windows);
            }
        }
        windows
    }
}

impl Scenario {
    /// Whether what the scenario stores depends on window edges only: no step expects a
    /// time counted from a call (`~`) or a lease id, and none takes or renews a lease
    /// (whose end is a time counted from the call), all of which the state would hold.
    pub fn clock_free(&self) -> bool {
        self.steps.iter().all(|step| {
            let leases = step.call.first().is_some_and(|c| {
                c.eq_ignore_ascii_case("RL.ACQUIRE") || c.eq_ignore_ascii_case("RL.RENEW")
            });
            !leases
                && std::iter::once(&step.reply)
                    .chain(step.functions.as_ref())
                    .all(Expect::clock_free)
        })
    }
}

impl Expect {
    fn clock_free(&self) -> bool {
        match self {
            Expect::Since { .. } | Expect::Id(_) => false,
            Expect::Array(items) => items.iter().all(Expect::clock_free),
            _ => true,
        }
    }

    fn collect_windows(&self, out: &mut BTreeSet<i64>) {
        match self {
            Expect::Edge { window_ms, .. } | Expect::End { window_ms } => {
                out.insert(*window_ms);
            }
            // A day's edges, in every zone with whole-hour offsets, are among the hour's.
            Expect::Calendar { .. } => {
                out.insert(3_600_000);
            }
            Expect::Array(items) => items.iter().for_each(|e| e.collect_windows(out)),
            _ => {}
        }
    }
}

/// Every scenario of every file of the table, files in name order.
pub fn load_all(root: &Path) -> Vec<Scenario> {
    let dir = root.join(TABLE_DIR);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|ext| ext == "toml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no scenario files in {}", dir.display());
    files
        .iter()
        .flat_map(|path| {
            let name = format!(
                "{TABLE_DIR}/{}",
                path.file_name().unwrap_or_default().to_string_lossy()
            );
            let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{name}: {e}"));
            parse_file(&name, &text).unwrap_or_else(|e| panic!("{name}: {e}"))
        })
        .collect()
}

/// The scenarios of one file's text.
pub fn parse_file(file: &str, text: &str) -> Result<Vec<Scenario>, String> {
    let table: toml::Table = text.parse().map_err(|e| format!("not TOML: {e}"))?;
    let scenarios = table
        .get("scenario")
        .and_then(Toml::as_array)
        .ok_or("no [[scenario]]")?;
    scenarios
        .iter()
        .enumerate()
        .map(|(i, s)| parse_scenario(file, s).map_err(|e| format!("scenario {}: {e}", i + 1)))
        .collect()
}

fn parse_scenario(file: &str, value: &Toml) -> Result<Scenario, String> {
    let table = value.as_table().ok_or("a scenario is a table")?;
    let known = ["name", "steps", "pending", "clear_of", "note"];
    if let Some(unknown) = table.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("unknown field {unknown:?} (known: {known:?})"));
    }
    let name = table
        .get("name")
        .and_then(Toml::as_str)
        .ok_or("a scenario needs a name")?
        .to_string();
    let steps = table
        .get("steps")
        .and_then(Toml::as_array)
        .ok_or_else(|| format!("{name:?} has no steps"))?
        .iter()
        .enumerate()
        .map(|(i, s)| parse_step(s).map_err(|e| format!("{name:?} step {}: {e}", i + 1)))
        .collect::<Result<Vec<_>, _>>()?;
    let strings = |field: &str| -> Result<Vec<String>, String> {
        match table.get(field) {
            None => Ok(Vec::new()),
            Some(Toml::Array(items)) => items
                .iter()
                .map(|v| v.as_str().map(str::to_string))
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| format!("{name:?}: {field} is a list of strings")),
            Some(_) => Err(format!("{name:?}: {field} is a list of strings")),
        }
    };
    let clear_of_ms = strings("clear_of")?
        .iter()
        .map(|d| duration_ms(d))
        .collect::<Result<Vec<_>, _>>()?;
    let pending = strings("pending")?;
    Ok(Scenario {
        file: file.to_string(),
        name,
        steps,
        pending,
        clear_of_ms,
    })
}

fn parse_step(value: &Toml) -> Result<Step, String> {
    if let Some(wait) = value.as_table().and_then(|t| t.get("wait")) {
        let wait_ms = match (wait.as_str(), value.as_table().map(toml::Table::len)) {
            (Some(text), Some(1)) => duration_ms(text)?,
            _ => return Err("a wait step is { wait = \"700ms\" }, alone".into()),
        };
        return Ok(Step {
            call: Vec::new(),
            reply: Expect::Nil,
            functions: None,
            only: Only::Both,
            on_replica: false,
            wait_ms: Some(wait_ms),
        });
    }
    let (call, reply, functions, only, on) = match value {
        Toml::Array(pair) if pair.len() == 2 => (&pair[0], &pair[1], None, None, None),
        Toml::Table(table) => {
            let known = ["call", "reply", "functions", "only", "on"];
            if let Some(unknown) = table.keys().find(|k| !known.contains(&k.as_str())) {
                return Err(format!("unknown field {unknown:?} (known: {known:?})"));
            }
            (
                table.get("call").ok_or("no call")?,
                table.get("reply").ok_or("no reply")?,
                table.get("functions"),
                table.get("only"),
                table.get("on"),
            )
        }
        _ => return Err("a step is [call, reply] or { call, reply, ... }".into()),
    };
    let call = match call {
        Toml::String(text) => text.split_whitespace().map(str::to_string).collect(),
        Toml::Array(words) => words
            .iter()
            .map(|w| w.as_str().map(str::to_string))
            .collect::<Option<Vec<_>>>()
            .ok_or("a call given as a list holds strings")?,
        _ => return Err("a call is a string or a list of strings".into()),
    };
    let only = match only.map(|v| v.as_str()) {
        None => Only::Both,
        Some(Some("module")) => Only::Module,
        Some(other) => return Err(format!("only = {other:?}: the one value is \"module\"")),
    };
    let on_replica = match on.map(|v| v.as_str()) {
        None => false,
        Some(Some("replica")) => true,
        Some(other) => return Err(format!("on = {other:?}: the one value is \"replica\"")),
    };
    Ok(Step {
        call,
        reply: parse_expect(reply)?,
        functions: functions.map(parse_expect).transpose()?,
        only,
        on_replica,
        wait_ms: None,
    })
}

fn parse_expect(value: &Toml) -> Result<Expect, String> {
    Ok(match value {
        Toml::Integer(n) => Expect::Int(*n),
        Toml::Array(items) => {
            Expect::Array(items.iter().map(parse_expect).collect::<Result<_, _>>()?)
        }
        Toml::String(text) => parse_matcher(text)?,
        Toml::Table(table) => match (table.get("error"), table.get("text"), table.len()) {
            (Some(Toml::String(e)), None, 1) => Expect::Error(e.clone()),
            (None, Some(Toml::String(t)), 1) => Expect::Text(t.clone()),
            _ => {
                return Err(format!(
                    "{table}: a table reply is {{ error }} or {{ text }}"
                ))
            }
        },
        other => return Err(format!("{other}: not a reply")),
    })
}

fn parse_matcher(text: &str) -> Result<Expect, String> {
    if text == "nil" {
        return Ok(Expect::Nil);
    }
    if text == "id" {
        return Ok(Expect::Id(None));
    }
    if let Some(name) = text.strip_prefix("id>") {
        return Ok(Expect::Id(Some(name.to_string())));
    }
    if let Some(spec) = text.strip_prefix("edge:") {
        let (window, plus) = spec.split_once('+').unwrap_or((spec, "0ms"));
        return Ok(Expect::Edge {
            window_ms: duration_ms(window)?,
            plus_ms: duration_ms(plus)?,
        });
    }
    if let Some(window) = text.strip_prefix("end:") {
        return Ok(Expect::End {
            window_ms: duration_ms(window)?,
        });
    }
    if let Some(span) = text.strip_prefix('~') {
        return Ok(Expect::Since {
            ms: duration_ms(span)?,
        });
    }
    if let Some(spec) = text.strip_prefix("calendar:") {
        return parse_calendar(spec).map_err(|e| format!("{text:?}: {e}"));
    }
    if let Some((low, high)) = text.split_once("..=") {
        let bound = |s: &str| {
            s.trim()
                .parse::<i64>()
                .map_err(|e| format!("{text:?}: {e}"))
        };
        return Ok(Expect::Range(bound(low)?, bound(high)?));
    }
    Err(format!(
        "{text:?} is no matcher (nil, id, id>name, edge:, end:, ~, a..=b)"
    ))
}

/// `week`, `month anchor 15`, `day Europe/Paris`.
fn parse_calendar(spec: &str) -> Result<Expect, String> {
    let mut words = spec.split_whitespace();
    let period = words.next().unwrap_or("").to_string();
    if !["day", "week", "month", "year"].contains(&period.as_str()) {
        return Err(format!("{period:?} is not day, week, month or year"));
    }
    let (mut anchor, mut zone) = (1, "UTC".to_string());
    while let Some(word) = words.next() {
        if word == "anchor" {
            let day = words.next().unwrap_or("");
            anchor = day.parse().map_err(|e| format!("anchor {day:?}: {e}"))?;
        } else {
            zone = word.to_string();
        }
    }
    Ok(Expect::Calendar {
        period,
        anchor,
        zone,
    })
}

/// `250ms`, `10s`, `5m`, `1h`, `1d` in ms.
pub fn duration_ms(text: &str) -> Result<i64, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("{text:?} needs a unit (ms, s, m, h, d)"))?;
    let (digits, unit) = text.split_at(split);
    let n: i64 = digits.parse().map_err(|e| format!("{text:?}: {e}"))?;
    let unit_ms = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return Err(format!("{text:?}: unknown unit {unit:?}")),
    };
    Ok(n * unit_ms)
}

impl std::fmt::Display for Expect {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Expect::Int(n) => write!(f, "{n}"),
            Expect::Range(a, b) => write!(f, "{a}..={b}"),
            Expect::Edge { window_ms, plus_ms } => {
                write!(f, "edge:{window_ms}ms+{plus_ms}ms")
            }
            Expect::End { window_ms } => write!(f, "end:{window_ms}ms"),
            Expect::Since { ms } => write!(f, "~{ms}ms"),
            Expect::Calendar {
                period,
                anchor,
                zone,
            } => write!(f, "calendar:{period} anchor {anchor} {zone}"),
            Expect::Nil => write!(f, "nil"),
            Expect::Id(None) => write!(f, "id"),
            Expect::Id(Some(name)) => write!(f, "id>{name}"),
            Expect::Text(t) => write!(f, "{t:?}"),
            Expect::Error(e) => write!(f, "(error) {e}"),
            Expect::Array(items) => {
                let parts: Vec<String> = items.iter().map(ToString::to_string).collect();
                write!(f, "[{}]", parts.join(", "))
            }
        }
    }
}
