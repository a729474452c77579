//! What a random-traffic run checks in every reply: each error, at any depth (EXEC's array,
//! a script's result), must start with `ERR` or `WRONGTYPE`, and none may be the panic
//! guard's "internal error".

use redis::Value;
use std::collections::BTreeMap;

/// The panic guard's reply names this; it must never appear.
const PANIC_GUARD: &str = "internal error";

/// What one client saw over a run.
#[derive(Default, Debug)]
pub struct Tally {
    pub calls: u64,
    /// Error replies by their first word.
    pub errors: BTreeMap<String, u64>,
    /// Errors that break the contract, with the command that got them (the first few).
    pub violations: Vec<String>,
    pub violation_count: u64,
    /// Error messages by how often they came (to see what the traffic exercised).
    pub messages: BTreeMap<String, u64>,
    /// Decisions of `RL.HIT` replies: allowed and denied.
    pub allowed: u64,
    pub denied: u64,
}

impl Tally {
    /// Checks every error inside `reply`, the answer to `argv`.
    pub fn record(&mut self, argv: &[Vec<u8>], reply: &Value) {
        self.calls += 1;
        let mut errors = Vec::new();
        collect_errors(reply, &mut errors);
        self.count_decision(argv, reply);
        for text in errors {
            let message: String = text.chars().take(70).collect();
            *self.messages.entry(message).or_default() += 1;
            let code = text.split(' ').next().unwrap_or("").to_string();
            *self.errors.entry(code.clone()).or_default() += 1;
            let allowed = code == "ERR" || code == "WRONGTYPE";
            if !allowed || text.contains(PANIC_GUARD) {
                self.violation(format!("{} -> {text}", show(argv)));
            }
        }
    }

    /// Counts an `RL.HIT` reply's decision: `allowed` is the first of the five integers
    /// (RESP2) or the map's `allowed` field (RESP3).
    fn count_decision(&mut self, argv: &[Vec<u8>], reply: &Value) {
        if !argv
            .first()
            .is_some_and(|c| c.eq_ignore_ascii_case(b"RL.HIT"))
        {
            return;
        }
        let allowed = match reply {
            Value::Array(items) if items.len() == 5 => items.first(),
            Value::Map(pairs) => pairs
                .iter()
                .find(|(k, _)| match k {
                    Value::BulkString(name) => name == b"allowed",
                    Value::SimpleString(name) => name == "allowed",
                    _ => false,
                })
                .map(|(_, v)| v),
            _ => None,
        };
        match allowed {
            Some(Value::Int(1)) | Some(Value::Boolean(true)) => self.allowed += 1,
            Some(Value::Int(0)) | Some(Value::Boolean(false)) => self.denied += 1,
            _ => {}
        }
    }

    /// The most frequent error messages, most frequent first.
    pub fn top_messages(&self, n: usize) -> Vec<(u64, &str)> {
        let mut all: Vec<(u64, &str)> = self
            .messages
            .iter()
            .map(|(m, count)| (*count, m.as_str()))
            .collect();
        all.sort_by_key(|(count, _)| std::cmp::Reverse(*count));
        all.truncate(n);
        all
    }

    pub fn violation(&mut self, what: String) {
        self.violation_count += 1;
        if self.violations.len() < 20 {
            self.violations.push(what);
        }
    }

    /// Adds another client's tally to this one.
    pub fn merge(&mut self, other: Tally) {
        self.calls += other.calls;
        for (code, n) in other.errors {
            *self.errors.entry(code).or_default() += n;
        }
        self.violation_count += other.violation_count;
        self.allowed += other.allowed;
        self.denied += other.denied;
        for (message, n) in other.messages {
            *self.messages.entry(message).or_default() += n;
        }
        for v in other.violations {
            if self.violations.len() < 20 {
                self.violations.push(v);
            }
        }
    }
}

/// The full text (code and message) of every error in `value`.
fn collect_errors(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::ServerError(err) => {
            let text = format!("{} {}", err.code(), err.details().unwrap_or(""));
            out.push(text.trim().to_string());
        }
        Value::Array(items) | Value::Set(items) => {
            items.iter().for_each(|v| collect_errors(v, out));
        }
        Value::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            collect_errors(k, out);
            collect_errors(v, out);
        }),
        Value::Attribute { data, .. } => collect_errors(data, out),
        Value::Push { data, .. } => data.iter().for_each(|v| collect_errors(v, out)),
        _ => {}
    }
}

/// A command line for a message: printable bytes as they are, others escaped.
pub fn show(argv: &[Vec<u8>]) -> String {
    argv.iter()
        .map(|arg| format!("\"{}\"", arg.escape_ascii()))
        .collect::<Vec<_>>()
        .join(" ")
}
