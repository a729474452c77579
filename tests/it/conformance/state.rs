//! What a scenario leaves on a server: its keys' values and expiries, compared between
//! backends and with the replica; and which of the library's functions a server has.

use redis::{Connection, ConnectionLike};
use std::collections::BTreeSet;
use testkit::Server;

/// A key's name without the scenario's tag, its type, its value (a string's bytes, else
/// DUMP's) and its absolute expiry; one per key the scenario named.
pub type Stored = Vec<(String, String, Option<Vec<u8>>, i64)>;

pub fn show_stored(stored: &Stored) -> String {
    let keys: Vec<String> = stored
        .iter()
        .map(|(name, kind, value, expiry)| {
            let value = value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned());
            format!("{name}: {kind} {value:?} expiring at {expiry}")
        })
        .collect();
    keys.join("; ")
}

pub fn stored_state(con: &mut dyn ConnectionLike, keys: &BTreeSet<Vec<u8>>) -> Stored {
    keys.iter()
        .map(|key| {
            let text = String::from_utf8_lossy(key);
            let name = text
                .rsplit_once("}:")
                .map_or(&*text, |(_, n)| n)
                .to_string();
            let kind: String = redis::cmd("TYPE").arg(key).query(con).expect("TYPE");
            let read = if kind == "string" { "GET" } else { "DUMP" };
            let value: Option<Vec<u8>> = redis::cmd(read).arg(key).query(con).expect(read);
            let expiry: i64 = redis::cmd("PEXPIRETIME")
                .arg(key)
                .query(con)
                .expect("PEXPIRETIME");
            (name, kind, value, expiry)
        })
        .collect()
}

/// Waits for the replica to have every write of `con`, then compares each key's DUMP and
/// PEXPIRETIME there with the primary's.
pub fn same_on_replica(
    con: &mut dyn ConnectionLike,
    replica: &Server,
    keys: &BTreeSet<Vec<u8>>,
) -> Result<(), String> {
    wait_for_replica(con)?;
    let mut on_replica = replica.conn();
    for key in keys {
        let primary = dump(con, key);
        let copy = dump(&mut on_replica, key);
        if primary != copy {
            return Err(format!(
                "  replication: key {} differs: primary {primary:?}, replica {copy:?}",
                String::from_utf8_lossy(key)
            ));
        }
    }
    Ok(())
}

/// Waits until the replica has every write made on `con` (`WAIT` covers the writes of the
/// connection it is sent on).
pub fn wait_for_replica(con: &mut dyn ConnectionLike) -> Result<(), String> {
    let acked: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(10_000)
        .query(con)
        .expect("WAIT");
    match acked {
        1 => Ok(()),
        _ => Err("  the replica did not acknowledge the scenario's writes".into()),
    }
}

/// A key's serialized value and absolute expiry.
fn dump(con: &mut dyn ConnectionLike, key: &[u8]) -> (Option<Vec<u8>>, i64) {
    let value: Option<Vec<u8>> = redis::cmd("DUMP").arg(key).query(con).expect("DUMP");
    let expiry: i64 = redis::cmd("PEXPIRETIME")
        .arg(key)
        .query(con)
        .expect("PEXPIRETIME");
    (value, expiry)
}

/// The names of the functions of library `ratelimit` on the server.
pub fn library_functions(con: &mut Connection) -> BTreeSet<String> {
    let listing: redis::Value = redis::cmd("FUNCTION")
        .arg("LIST")
        .arg("LIBRARYNAME")
        .arg("ratelimit")
        .query(con)
        .expect("FUNCTION LIST");
    let mut names = BTreeSet::new();
    collect_names(&listing, &mut names);
    names
}

/// In FUNCTION LIST's RESP2 reply each function is a flat array `name <name> description
/// ... flags [...]`: every string after a `name` is a function's name.
fn collect_names(value: &redis::Value, out: &mut BTreeSet<String>) {
    if let redis::Value::Array(items) = value {
        for pair in items.windows(2) {
            if let [redis::Value::BulkString(key), redis::Value::BulkString(name)] = pair {
                if key == b"name" {
                    out.insert(String::from_utf8_lossy(name).into_owned());
                }
            }
        }
        items.iter().for_each(|item| collect_names(item, out));
    }
}
