//! What a server holds, to compare a primary with its replica and with its own AOF replay:
//! every key's type, value and absolute expiry, and the named policies.
//!
//! Only keys that outlive the comparison are taken: no expiry, or one after a threshold
//! that the caller sets comfortably in the future. A key that expires meanwhile is deleted
//! on the primary at some moment and on the replica only when the `DEL` arrives, so
//! comparing it would compare timing, not the module.

use redis::{Connection, Value};
use std::collections::BTreeMap;

/// A key's type, its value in a form that does not depend on the encoding, and its
/// absolute expiry (`-1`: none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: String,
    pub value: Vec<Vec<u8>>,
    pub expiry_ms: i64,
}

/// The keys and the policies of a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub keys: BTreeMap<Vec<u8>, Entry>,
    /// `RL.POLICY LIST`, each with `RL.POLICY GET`.
    pub policies: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

/// Takes the snapshot of the server behind `con`, keeping the keys without expiry or
/// expiring after `expires_after_ms`.
pub fn take(con: &mut Connection, expires_after_ms: i64) -> Snapshot {
    let mut keys = BTreeMap::new();
    for name in all_keys(con) {
        if let Some(entry) = entry(con, &name) {
            if entry.expiry_ms == -1 || entry.expiry_ms > expires_after_ms {
                keys.insert(name, entry);
            }
        }
    }
    Snapshot {
        keys,
        policies: policies(con),
    }
}

fn all_keys(con: &mut Connection) -> Vec<Vec<u8>> {
    let mut cursor = 0u64;
    let mut names = Vec::new();
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(con)
            .expect("SCAN");
        names.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    names.sort();
    names.dedup();
    names
}

/// The key's entry, `None` if it is gone (or logically expired on a replica).
fn entry(con: &mut Connection, name: &[u8]) -> Option<Entry> {
    let kind: String = redis::cmd("TYPE").arg(name).query(con).expect("TYPE");
    let value: Vec<Vec<u8>> = match kind.as_str() {
        "none" => return None,
        "string" => {
            let value: Option<Vec<u8>> = redis::cmd("GET").arg(name).query(con).expect("GET");
            vec![value?]
        }
        "list" => redis::cmd("LRANGE")
            .arg(name)
            .arg(0)
            .arg(-1)
            .query(con)
            .expect("LRANGE"),
        "hash" => {
            let mut pairs: Vec<(Vec<u8>, Vec<u8>)> =
                redis::cmd("HGETALL").arg(name).query(con).expect("HGETALL");
            pairs.sort();
            pairs.into_iter().flat_map(|(f, v)| [f, v]).collect()
        }
        other => panic!("the random traffic makes no {other} key"),
    };
    let expiry_ms: i64 = redis::cmd("PEXPIRETIME")
        .arg(name)
        .query(con)
        .expect("PEXPIRETIME");
    (expiry_ms != -2).then_some(Entry {
        kind,
        value,
        expiry_ms,
    })
}

fn policies(con: &mut Connection) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let names: Vec<Vec<u8>> = redis::cmd("RL.POLICY")
        .arg("LIST")
        .query(con)
        .expect("RL.POLICY LIST");
    names
        .into_iter()
        .map(|name| {
            let definition: Value = redis::cmd("RL.POLICY")
                .arg("GET")
                .arg(&name)
                .query(con)
                .expect("RL.POLICY GET");
            let definition = match definition {
                Value::Nil => None,
                Value::BulkString(bytes) => Some(bytes),
                Value::SimpleString(text) => Some(text.into_bytes()),
                other => Some(format!("{other:?}").into_bytes()),
            };
            (name, definition)
        })
        .collect()
}

/// The differences between two snapshots, for a failure message (empty: the same).
pub fn differences(expected: &Snapshot, actual: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for (name, entry) in &expected.keys {
        match actual.keys.get(name) {
            None => out.push(format!(
                "{:?} missing (expected {entry:?})",
                name.escape_ascii().to_string()
            )),
            Some(other) if other != entry => out.push(format!(
                "{:?}: expected {entry:?}, found {other:?}",
                name.escape_ascii().to_string()
            )),
            Some(_) => {}
        }
    }
    for (name, entry) in &actual.keys {
        if !expected.keys.contains_key(name) {
            out.push(format!(
                "{:?} unexpected: {entry:?}",
                name.escape_ascii().to_string()
            ));
        }
    }
    if expected.policies != actual.policies {
        out.push(format!(
            "policies differ: expected {:?}, found {:?}",
            expected.policies, actual.policies
        ));
    }
    out
}
