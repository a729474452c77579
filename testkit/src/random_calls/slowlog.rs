//! The slow log of a random-traffic run: no call of the module may take 1 ms or more.
//!
//! Only entries of the module's own commands (`RL.*`, `CL.*`, also when they ran inside
//! MULTI/EXEC, where the server logs each command) count. `EVAL` is the script's time (Lua
//! included), `BGSAVE`/`BGREWRITEAOF` the fork, `CONFIG` the server's own work: those are
//! reported, not held against the module.

use redis::{Connection, Value};

/// `slowlog-log-slower-than`, in microseconds: 1 ms.
pub const THRESHOLD_US: i64 = 1_000;

/// One slow-log entry.
#[derive(Debug, Clone)]
pub struct SlowCall {
    pub micros: i64,
    pub argv: Vec<Vec<u8>>,
}

impl SlowCall {
    /// Whether it is a call of the module.
    pub fn is_ours(&self) -> bool {
        self.argv.first().is_some_and(|name| {
            let upper = name.to_ascii_uppercase();
            upper.starts_with(b"RL.") || upper.starts_with(b"CL.")
        })
    }
}

/// Every entry of the slow log.
pub fn entries(con: &mut Connection) -> Vec<SlowCall> {
    let entries: Vec<Value> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(100_000)
        .query(con)
        .expect("SLOWLOG GET");
    entries
        .into_iter()
        .filter_map(|entry| {
            let Value::Array(fields) = entry else {
                return None;
            };
            let micros = match fields.get(2) {
                Some(Value::Int(us)) => *us,
                _ => return None,
            };
            let argv = match fields.get(3) {
                Some(Value::Array(args)) => args
                    .iter()
                    .map(|arg| match arg {
                        Value::BulkString(bytes) => bytes.clone(),
                        Value::SimpleString(text) => text.clone().into_bytes(),
                        other => format!("{other:?}").into_bytes(),
                    })
                    .collect(),
                _ => Vec::new(),
            };
            Some(SlowCall { micros, argv })
        })
        .collect()
}
