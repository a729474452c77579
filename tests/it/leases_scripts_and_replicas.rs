//! The lease commands inside scripts, transactions, replicas and failovers, and against
//! crafted values, on Redis 7.0 and Valkey 8.1, beside `leases.rs` and `leases_integrity.rs`:
//!
//! 1. RL.ACQUIRE with generated ids inside EVAL, FCALL and MULTI/EXEC (and a script that
//!    acquires and releases): the replica and an AOF replay hold the primary's exact bytes
//!    and expiries, the ids never generated again.
//! 2. A writable replica (`replica-read-only no`): a local write, as any write there.
//! 3. COPY, RENAME, RESTORE of a DUMP, OBJECT ENCODING, MEMORY USAGE, DEBUG RELOAD,
//!    PERSIST, and values changed by SETRANGE and APPEND: a clear answer, never a crash.
//! 4. Failover: the promoted replica holds the leases to their absolute end and releases
//!    them by id, propagating to the old primary, now its replica.
//! 5. The cost of RL.RELEASE and RL.RENEW on a full key of 64-byte ids (figures printed,
//!    not asserted: run with `--nocapture`, on a release build with `RL_MODULE`).
//! 6. Odd ids (NUL, 0xFF), RL.LEASES with another `max`, ends far ahead of the clock (a
//!    clock that jumped back), RL.RESET.

use testkit::*;

use ratelimit_core::lease::{layout, LeaseId};
use redis::{Connection, Value};
use std::collections::BTreeMap;
use std::time::Duration;

const NOT_LEASES: &str = "ERR key holds a value that is not leases (a rate-limit state of \
                          RL.HIT, or another string)";

/// Every key's GET and PEXPIRETIME.
type Contents = BTreeMap<Vec<u8>, (Option<Vec<u8>>, i64)>;

fn contents(con: &mut Connection) -> Contents {
    let names: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(con).expect("KEYS");
    names
        .into_iter()
        .map(|name| {
            let value = get_bytes(&mut *con, name.as_slice());
            let expiry = pexpiretime(con, name.as_slice());
            (name, (value, expiry))
        })
        .collect()
}

/// RL.ACQUIRE's RESP2 reply as `(acquired, free, id)`.
fn decode(reply: &Value) -> (bool, i64, Option<Vec<u8>>) {
    let Value::Array(fields) = reply else {
        panic!("RL.ACQUIRE replied {reply:?}");
    };
    let int = |i: usize| match fields.get(i) {
        Some(Value::Int(n)) => *n,
        other => panic!("field {i} of {fields:?} is {other:?}"),
    };
    let id = match fields.get(3) {
        Some(Value::BulkString(bytes)) => Some(bytes.clone()),
        // Lua turns a null bulk string into false, and EVAL answers that as a null.
        Some(Value::Nil) | None => None,
        other => panic!("id is {other:?}"),
    };
    (int(0) == 1, int(2), id)
}

fn acquire(con: &mut Connection, key: &[u8], args: &[&[u8]]) -> (bool, i64, Option<Vec<u8>>) {
    let mut cmd = redis::cmd("RL.ACQUIRE");
    cmd.arg(key);
    for arg in args {
        cmd.arg(*arg);
    }
    let reply: Value = cmd
        .query(con)
        .unwrap_or_else(|e| panic!("RL.ACQUIRE {key:?} {args:?}: {e}"));
    decode(&reply)
}

/// RL.LEASES: `[held, max, free, retry_after_ms, reset_after_ms]`.
fn leases(con: &mut Connection, key: &[u8], max: i64) -> Vec<i64> {
    redis::cmd("RL.LEASES")
        .arg(key)
        .arg(max)
        .query(con)
        .unwrap_or_else(|e| panic!("RL.LEASES {key:?}: {e}"))
}

fn release(con: &mut Connection, key: &[u8], id: &[u8]) -> i64 {
    redis::cmd("RL.RELEASE")
        .arg(key)
        .arg(id)
        .query(con)
        .unwrap_or_else(|e| panic!("RL.RELEASE {key:?}: {e}"))
}

fn renew(con: &mut Connection, key: &[u8], id: &[u8], ttl: &str) -> i64 {
    redis::cmd("RL.RENEW")
        .arg(key)
        .arg(id)
        .arg(ttl)
        .query(con)
        .unwrap_or_else(|e| panic!("RL.RENEW {key:?}: {e}"))
}

fn is_hex_id(id: &[u8]) -> bool {
    id.len() == 32 && id.iter().all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
}

const SCRIPT_ACQUIRE: &str = "return redis.call('RL.ACQUIRE', KEYS[1], ARGV[1], ARGV[2])";
/// Two acquires on one key and one on another, in one script.
const SCRIPT_THREE: &str = "local a = redis.call('RL.ACQUIRE', KEYS[1], 3, '1h') \
     local b = redis.call('RL.ACQUIRE', KEYS[1], 3, '2h', 5, '1h', 'ALGO', 'gcra') \
     local c = redis.call('RL.ACQUIRE', KEYS[2], 1, '90m') \
     return {a[4], b[4], c[4]}";
/// Acquires, renews, releases and acquires again: the key keeps only the last lease.
const SCRIPT_ROUND_TRIP: &str = "local a = redis.call('RL.ACQUIRE', KEYS[1], 2, '1h') \
     local renewed = redis.call('RL.RENEW', KEYS[1], a[4], '2h') \
     local released = redis.call('RL.RELEASE', KEYS[1], a[4]) \
     local gone = redis.call('EXISTS', KEYS[1]) \
     local b = redis.call('RL.ACQUIRE', KEYS[1], 2, '1h') \
     return {a[4], renewed, released, gone, b[4]}";
const LIBRARY: &str = "#!lua name=leasetest\n\
     redis.register_function('take', function(keys, args) \
       return redis.call('RL.ACQUIRE', keys[1], args[1], args[2]) end)";

#[test]
fn generated_ids_in_scripts_and_transactions_reach_the_replica_and_aof_as_bytes() {
    each_flavor(|flavor| {
        let primary_config = ServerConfig::new(flavor)
            .arg("appendonly", "yes")
            .arg("aof-use-rdb-preamble", "no");
        // The replica has the module, so its commandstats would show an RL.ACQUIRE run there.
        let (primary, replica) =
            primary_with_replica_configs(primary_config, ServerConfig::new(flavor));
        let mut con = primary.conn();
        let mut ids: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();

        let reply: Value = redis::cmd("EVAL")
            .arg(SCRIPT_ACQUIRE)
            .arg(1)
            .arg("s:eval")
            .arg(2)
            .arg("1h")
            .query(&mut con)
            .expect("EVAL");
        let (taken, free, id) = decode(&reply);
        assert!(taken && free == 1, "{flavor:?} {reply:?}");
        ids.push((b"s:eval".to_vec(), id.expect("an id")));

        let three: Vec<Vec<u8>> = redis::cmd("EVAL")
            .arg(SCRIPT_THREE)
            .arg(2)
            .arg("s:{x}three")
            .arg("s:{x}other")
            .query(&mut con)
            .expect("EVAL");
        assert_eq!(three.len(), 3, "{flavor:?}");
        for (key, id) in [b"s:{x}three", b"s:{x}three", b"s:{x}other"]
            .iter()
            .zip(three)
        {
            ids.push((key.to_vec(), id));
        }

        let trip: Value = redis::cmd("EVAL")
            .arg(SCRIPT_ROUND_TRIP)
            .arg(1)
            .arg("s:trip")
            .query(&mut con)
            .expect("EVAL");
        let Value::Array(trip) = trip else {
            panic!("{flavor:?} {trip:?}")
        };
        assert_eq!(
            &trip[1..4],
            &[Value::Int(1), Value::Int(1), Value::Int(0)],
            "{flavor:?}: renewed, released, and the key gone with its last lease"
        );
        let (Value::BulkString(first), Value::BulkString(last)) = (&trip[0], &trip[4]) else {
            panic!("{flavor:?} {trip:?}")
        };
        assert_ne!(first, last, "{flavor:?}");
        ids.push((b"s:trip".to_vec(), last.clone()));

        redis::cmd("FUNCTION")
            .arg("LOAD")
            .arg(LIBRARY)
            .exec(&mut con)
            .expect("FUNCTION LOAD");
        let reply: Value = redis::cmd("FCALL")
            .arg("take")
            .arg(1)
            .arg("s:fcall")
            .arg(1)
            .arg("30m")
            .query(&mut con)
            .expect("FCALL");
        ids.push((b"s:fcall".to_vec(), decode(&reply).2.expect("an id")));

        let replies: Vec<Value> = redis::pipe()
            .atomic()
            .cmd("RL.ACQUIRE")
            .arg("s:multi")
            .arg(3)
            .arg("1h")
            .cmd("RL.ACQUIRE")
            .arg("s:multi")
            .arg(3)
            .arg("3h")
            .arg(10)
            .arg("1h")
            // Sliding, not the default fixed window: a fixed window ends on the clock's
            // minute or hour, which a run can cross between here and the AOF replay; a
            // sliding tier's state lives two windows from its last count, whenever it is.
            .arg("ALGO")
            .arg("sliding")
            .cmd("RL.ACQUIRE")
            .arg("s:multi")
            .arg(3)
            .arg("1h")
            .arg("ID")
            .arg("given")
            .query(&mut con)
            .expect("MULTI/EXEC");
        for reply in &replies[..2] {
            ids.push((b"s:multi".to_vec(), decode(reply).2.expect("an id")));
        }

        // A read-only script cannot take a lease, and writes nothing trying.
        let before = contents(&mut con);
        let refused = error_text(
            &mut con,
            redis::cmd("EVAL_RO")
                .arg(SCRIPT_ACQUIRE)
                .arg(1)
                .arg("s:ro")
                .arg(1)
                .arg("1h"),
        );
        assert!(
            refused.contains("Write commands are not allowed from read-only scripts"),
            "{flavor:?}: {refused}"
        );
        let refused = error_text(
            &mut con,
            redis::cmd("EVAL")
                .arg(format!("#!lua flags=no-writes\n{SCRIPT_ACQUIRE}"))
                .arg(1)
                .arg("s:ro")
                .arg(1)
                .arg("1h"),
        );
        assert!(
            refused.contains("Write commands are not allowed from read-only scripts"),
            "{flavor:?}: {refused}"
        );
        assert_eq!(contents(&mut con), before, "{flavor:?}");

        for (_, id) in &ids {
            assert!(is_hex_id(id), "{flavor:?}: {id:?}");
        }
        wait_for_replicas(&mut con, 1);
        let on_primary = contents(&mut con);
        assert_eq!(on_primary.len(), 6, "{flavor:?}: {on_primary:?}");
        let mut replica_con = replica.conn();
        assert_eq!(
            contents(&mut replica_con),
            on_primary,
            "{flavor:?}: the replica differs"
        );
        // The replica received SET, never a command that would generate an id again.
        for command in ["rl.acquire", "rl.release", "rl.renew", "eval", "fcall"] {
            assert_eq!(replica.command_calls(command), None, "{flavor:?} {command}");
        }
        drop(replica_con);
        drop(replica);

        let restarted = primary.restart_on_the_aof();
        let mut con = restarted.conn();
        assert_eq!(
            contents(&mut con),
            on_primary,
            "{flavor:?}: the AOF replay differs"
        );
        // The ids the scripts answered are the ones stored: each releases once.
        for (key, id) in &ids {
            assert_eq!(release(&mut con, key, id), 1, "{flavor:?} {key:?}");
        }
        assert_eq!(release(&mut con, b"s:multi", b"given"), 1, "{flavor:?}");
        let left: i64 = redis::cmd("DBSIZE").query(&mut con).expect("DBSIZE");
        // s:{x}three and s:multi keep their tiers' states after their last leases go.
        assert_eq!(left, 2, "{flavor:?}: {:?}", contents(&mut con));
    });
}

#[test]
fn a_writable_replica_takes_leases_locally_and_its_primary_overwrites_them() {
    each_flavor(|flavor| {
        let replica_config = ServerConfig::new(flavor).arg("replica-read-only", "no");
        let (primary, replica) =
            primary_with_replica_configs(ServerConfig::new(flavor), replica_config);
        let mut con = primary.conn();
        let mut local = replica.conn();
        let (_, _, primary_id) = acquire(&mut con, b"w:shared", &[b"2", b"1h"]);
        let primary_id = primary_id.expect("an id");
        wait_for_replicas(&mut con, 1);

        // On the replica, a lease of its own on a key of its own, and one on the primary's.
        let (taken, _, own) = acquire(&mut local, b"w:local", &[b"1", b"1h"]);
        assert!(taken && own.is_some(), "{flavor:?}");
        let (taken, free, _) = acquire(&mut local, b"w:shared", &[b"2", b"1h", b"ID", b"r"]);
        assert!(
            taken && free == 0,
            "{flavor:?}: a local write, as any write here"
        );
        assert_eq!(leases(&mut local, b"w:shared", 2)[0], 2, "{flavor:?}");
        // The primary knows nothing of it: the two diverge, as for a SET on this replica.
        assert_eq!(leases(&mut con, b"w:shared", 2)[0], 1, "{flavor:?}");
        assert_eq!(
            get_bytes(&mut con, "w:local"),
            None,
            "{flavor:?}: not sent up"
        );
        // The primary's next write on the key replaces the replica's value whole.
        assert_eq!(renew(&mut con, b"w:shared", &primary_id, "2h"), 1);
        wait_for_replicas(&mut con, 1);
        assert_eq!(
            contents(&mut local).get(b"w:shared".as_slice()),
            contents(&mut con).get(b"w:shared".as_slice()),
            "{flavor:?}"
        );
        assert_eq!(release(&mut local, b"w:shared", b"r"), 0, "{flavor:?}");
        // A lease written on the replica expires there by its clock like any key.
        let (taken, _, _) = acquire(&mut local, b"w:short", &[b"1", b"50ms", b"ID", b"s"]);
        assert!(taken, "{flavor:?}");
        wait_until(Duration::from_secs(10), "the local lease expires", || {
            leases(&mut local, b"w:short", 1)[0] == 0
        });
        let (taken, _, _) = acquire(&mut local, b"w:short", &[b"1", b"1h", b"ID", b"s"]);
        assert!(taken, "{flavor:?}: the expired id is free again");
        let pong: String = redis::cmd("PING").query(&mut local).expect("replica alive");
        assert_eq!(pong, "PONG");
        assert_eq!(
            replica
                .info_field("replication", "master_link_status")
                .as_deref(),
            Some("up"),
            "{flavor:?}"
        );
    });
}

/// A lease value of `count` leases with ids of `id_len` bytes ([`lease_id`]) ending at
/// `ends_at_ms`, encoded by the module's own `ratelimit_core::lease::layout`.
fn lease_value(count: u16, id_len: u8, ends_at_ms: i64) -> Vec<u8> {
    // 32 bytes could be lowercase hex, which the layout stores as the 16 bytes it spells.
    assert!((3..=64).contains(&id_len) && id_len != 32);
    let ids: Vec<Vec<u8>> = (0..count).map(|n| lease_id(id_len, n)).collect();
    let leases = ids
        .iter()
        .map(|id| layout::Lease {
            id: LeaseId::Given(id),
            expires_at_ms: ends_at_ms,
        })
        .collect();
    layout::encode(&layout::Value { tier: None, leases }).to_vec()
}

fn lease_id(id_len: u8, n: u16) -> Vec<u8> {
    let mut id = vec![b'L'; usize::from(id_len) - 2];
    id.extend_from_slice(&n.to_be_bytes());
    id
}

#[test]
fn copy_rename_restore_reload_and_crafted_values_answer_clearly() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        acquire(&mut con, b"c:a", &[b"3", b"1h", b"ID", b"x"]);
        acquire(
            &mut con,
            b"c:a",
            &[b"3", b"2h", b"10", b"1m", b"ALGO", b"log"],
        );
        let original = contents(&mut con)[b"c:a".as_slice()].clone();

        // COPY and RENAME carry the bytes and the expiry: the copy is leases of its own.
        let copied: i64 = redis::cmd("COPY")
            .arg("c:a")
            .arg("c:copy")
            .query(&mut con)
            .expect("COPY");
        assert_eq!(copied, 1);
        assert_eq!(contents(&mut con)[b"c:copy".as_slice()], original);
        assert_eq!(release(&mut con, b"c:copy", b"x"), 1, "{flavor:?}");
        assert_eq!(
            leases(&mut con, b"c:a", 3)[0],
            2,
            "{flavor:?}: the original keeps x"
        );
        redis::cmd("RENAME")
            .arg("c:copy")
            .arg("c:renamed")
            .exec(&mut con)
            .expect("RENAME");
        assert_eq!(leases(&mut con, b"c:renamed", 3)[0], 1, "{flavor:?}");

        // OBJECT ENCODING and MEMORY USAGE see a plain string.
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg("c:a")
            .query(&mut con)
            .expect("OBJECT ENCODING");
        assert!(
            ["embstr", "raw"].contains(&encoding.as_str()),
            "{flavor:?} {encoding}"
        );
        let usage: i64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg("c:a")
            .query(&mut con)
            .expect("MEMORY USAGE");
        assert!((50..400).contains(&usage), "{flavor:?} {usage}");

        // RESTORE of a DUMP: the same leases. With TTL 0 the key has no expiry, but its
        // leases still end at their absolute times; the next write sets the expiry again.
        let dumped: Vec<u8> = redis::cmd("DUMP").arg("c:a").query(&mut con).expect("DUMP");
        redis::cmd("RESTORE")
            .arg("c:restored")
            .arg(0)
            .arg(&dumped)
            .exec(&mut con)
            .expect("RESTORE");
        assert_eq!(pexpiretime(&mut con, "c:restored"), -1, "{flavor:?}");
        assert_eq!(get_bytes(&mut con, "c:restored"), original.0, "{flavor:?}");
        assert_eq!(leases(&mut con, b"c:restored", 3)[0], 2, "{flavor:?}");
        assert_eq!(renew(&mut con, b"c:restored", b"x", "90m"), 1, "{flavor:?}");
        assert!(pexpiretime(&mut con, "c:restored") > 0, "{flavor:?}");
        // PERSIST, likewise: the next write gives the key its expiry back.
        redis::cmd("PERSIST")
            .arg("c:a")
            .exec(&mut con)
            .expect("PERSIST");
        acquire(&mut con, b"c:a", &[b"3", b"1h", b"ID", b"y"]);
        assert_eq!(
            pexpiretime(&mut con, "c:a"),
            original.1,
            "{flavor:?}: the 2h lease still ends last"
        );

        // DEBUG RELOAD keeps every byte and expiry.
        let before = contents(&mut con);
        let server = server.debug_reload();
        let mut con = server.conn();
        assert_eq!(contents(&mut con), before, "{flavor:?}: DEBUG RELOAD");

        // Values an attacker with plain write access crafts with SETRANGE and APPEND.
        let far = server_ms(&mut con) + 3_600_000;
        let mut crafted: Vec<(&str, Vec<u8>, Result<i64, &str>)> = Vec::new();
        // A count of 10,000 with no records: refused, nothing allocated for it.
        crafted.push((
            "count without records",
            vec![0x02, 0x00, 0x90, 0x4e],
            Err(NOT_LEASES),
        ));
        // A tier state said to be 2^62 bytes long.
        crafted.push((
            "huge tier length",
            vec![0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x3f],
            Err(NOT_LEASES),
        ));
        // A well-formed value whose tier state is junk (as RL.HIT would refuse it): read
        // only by a call with tiers, which refuses it.
        let mut junk_tier = vec![0x02, 0x04, b'j', b'u', b'n', b'k'];
        junk_tier.extend_from_slice(&far.to_le_bytes());
        junk_tier.push(0x00);
        crafted.push(("junk tier state", junk_tier, Err(NOT_LEASES)));
        // A lease that ends at the end of time: held, and the key expires then too.
        crafted.push(("a lease until i64::MAX", lease_value(1, 3, i64::MAX), Ok(1)));
        // Leases that ended before the epoch: expired, the key is written without them.
        crafted.push(("leases of i64::MIN", lease_value(3, 3, i64::MIN), Ok(0)));
        // The cap with the longest ids: 730 KB, read, not refused.
        crafted.push((
            "10,000 ids of 64 bytes",
            lease_value(10_000, 64, far),
            Ok(10_000),
        ));
        for (what, value, expected) in crafted {
            // Built by SETRANGE from an empty key, then APPEND of the rest.
            let _: i64 = redis::cmd("DEL")
                .arg("c:crafted")
                .query(&mut con)
                .expect("DEL");
            let (head, tail) = value.split_at(value.len().min(3));
            redis::cmd("SETRANGE")
                .arg("c:crafted")
                .arg(0)
                .arg(head)
                .exec(&mut con)
                .expect("SETRANGE");
            redis::cmd("APPEND")
                .arg("c:crafted")
                .arg(tail)
                .exec(&mut con)
                .expect("APPEND");
            let got = redis::cmd("RL.LEASES")
                .arg("c:crafted")
                .arg(10_000)
                .query::<Vec<i64>>(&mut con);
            match expected {
                Err(_) if what == "junk tier state" => {
                    assert_eq!(got.expect("leases")[0], 0, "{flavor:?}: no lease in it");
                    let error = error_text(
                        &mut con,
                        redis::cmd("RL.ACQUIRE")
                            .arg("c:crafted")
                            .arg(3)
                            .arg("1h")
                            .arg(5)
                            .arg("1m"),
                    );
                    assert_eq!(error, NOT_LEASES, "{flavor:?} {what}");
                }
                Ok(held) => {
                    let got = got.unwrap_or_else(|e| panic!("{flavor:?} {what}: {e}"));
                    assert_eq!(got[0], held, "{flavor:?} {what}");
                    let (taken, _, _) =
                        acquire(&mut con, b"c:crafted", &[b"10000", b"1h", b"ID", b"new"]);
                    assert_eq!(taken, held < 10_000, "{flavor:?} {what}");
                }
                Err(message) => {
                    let error = error_text(
                        &mut con,
                        redis::cmd("RL.ACQUIRE")
                            .arg("c:crafted")
                            .arg(3)
                            .arg("1h")
                            .arg(5)
                            .arg("1m"),
                    );
                    assert_eq!(error, message, "{flavor:?} {what}");
                    assert_eq!(get_bytes(&mut con, "c:crafted"), Some(value), "{what}");
                }
            }
        }
        // The lease until the end of time gives the key that expiry; releasing it by id
        // brings the key back to its other lease's end.
        redis::cmd("SET")
            .arg("c:forever")
            .arg(lease_value(1, 3, i64::MAX))
            .exec(&mut con)
            .expect("SET");
        acquire(&mut con, b"c:forever", &[b"3", b"1h", b"ID", b"mine"]);
        assert_eq!(pexpiretime(&mut con, "c:forever"), i64::MAX, "{flavor:?}");
        assert_eq!(release(&mut con, b"c:forever", &lease_id(3, 0)), 1);
        let end = pexpiretime(&mut con, "c:forever");
        assert!(end > 0 && end < i64::MAX, "{flavor:?} {end}");

        // Every byte of a lease value with tiers overwritten in turn (SETRANGE): each
        // call answers leases or the one error, and the server stays up.
        acquire(
            &mut con,
            b"c:src",
            &[b"3", b"1h", b"5", b"1m", b"ALGO", b"sliding"],
        );
        acquire(
            &mut con,
            b"c:src",
            &[b"3", b"1h", b"5", b"1m", b"ALGO", b"sliding", b"ID", b"q"],
        );
        let source = get_bytes(&mut con, "c:src").expect("a value");
        for at in 0..source.len() {
            for byte in [0x00u8, 0x7f, 0x80, 0xff] {
                redis::cmd("SET")
                    .arg("c:mut")
                    .arg(&source)
                    .exec(&mut con)
                    .expect("SET");
                redis::cmd("SETRANGE")
                    .arg("c:mut")
                    .arg(at)
                    .arg(&[byte][..])
                    .exec(&mut con)
                    .expect("SETRANGE");
                let calls: [redis::Cmd; 4] = [
                    redis::cmd("RL.ACQUIRE")
                        .arg("c:mut")
                        .arg(3)
                        .arg("1h")
                        .arg(5)
                        .arg("1m")
                        .arg("ALGO")
                        .arg("sliding")
                        .to_owned(),
                    redis::cmd("RL.RENEW")
                        .arg("c:mut")
                        .arg("q")
                        .arg("2h")
                        .to_owned(),
                    redis::cmd("RL.RELEASE").arg("c:mut").arg("q").to_owned(),
                    redis::cmd("RL.LEASES").arg("c:mut").arg(3).to_owned(),
                ];
                for call in &calls {
                    match call.query::<Value>(&mut con) {
                        Ok(Value::ServerError(err)) => {
                            let text = format!("{} {}", err.code(), err.details().unwrap_or(""));
                            assert!(
                                text.starts_with("ERR ") && !text.contains("internal"),
                                "{flavor:?} byte {at} = {byte}: {text}"
                            );
                        }
                        Ok(_) => {}
                        Err(err) => {
                            let text = format!("{err}");
                            assert!(err.code().is_some(), "{flavor:?} byte {at}: {text}");
                            assert!(!text.contains("internal"), "{flavor:?}: {text}");
                        }
                    }
                }
            }
        }
        let pong: String = redis::cmd("PING").query(&mut con).expect("alive");
        assert_eq!(pong, "PONG", "{flavor:?}");
    });
}

#[test]
fn a_promoted_replica_holds_leases_to_their_end_and_releases_them_by_id() {
    each_flavor(|flavor| {
        let (primary, replica) = primary_with_replica(flavor);
        let mut con = primary.conn();
        let (_, _, long) = acquire(&mut con, b"f:key", &[b"3", b"1h"]);
        let (_, _, short) = acquire(&mut con, b"f:key", &[b"3", b"300ms"]);
        acquire(&mut con, b"f:key", &[b"3", b"2h", b"ID", b"named"]);
        let (long, short) = (long.expect("an id"), short.expect("an id"));
        wait_for_replicas(&mut con, 1);
        let before = contents(&mut con);

        // The primary goes away; the replica is promoted.
        drop(con);
        drop(primary);
        let mut promoted = replica.conn();
        redis::cmd("REPLICAOF")
            .arg("NO")
            .arg("ONE")
            .exec(&mut promoted)
            .expect("REPLICAOF NO ONE");
        assert_eq!(contents(&mut promoted), before, "{flavor:?}");
        // The short lease frees at its absolute end on the new primary's clock.
        wait_until(Duration::from_secs(10), "the short lease ends", || {
            leases(&mut promoted, b"f:key", 3)[0] == 2
        });
        assert_eq!(
            renew(&mut promoted, b"f:key", &short, "1h"),
            0,
            "{flavor:?}"
        );
        assert_eq!(
            pexpiretime(&mut promoted, "f:key"),
            before[b"f:key".as_slice()].1,
            "{flavor:?}: the 2h lease still ends the key"
        );

        // A new replica of the promoted server gets its releases.
        let sub = ServerConfig::new(flavor)
            .arg("replicaof", &format!("127.0.0.1 {}", replica.port()))
            .start();
        wait_for_link(&sub);
        assert_eq!(release(&mut promoted, b"f:key", &long), 1, "{flavor:?}");
        assert_eq!(release(&mut promoted, b"f:key", &long), 0, "{flavor:?}");
        let (taken, free, _) = acquire(&mut promoted, b"f:key", &[b"3", b"1h"]);
        assert!(taken && free == 1, "{flavor:?}");
        wait_for_replicas(&mut promoted, 1);
        assert_eq!(
            contents(&mut sub.conn()),
            contents(&mut promoted),
            "{flavor:?}"
        );
        assert_eq!(release(&mut promoted, b"f:key", b"named"), 1, "{flavor:?}");
    });
}

/// A figure of `INFO commandstats` for `command`: `usec_per_call`.
fn usec_per_call(con: &mut Connection, command: &str) -> f64 {
    let stats: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(con)
        .expect("INFO");
    let name = format!("cmdstat_{command}:");
    stats
        .lines()
        .find_map(|line| {
            let fields = line.strip_prefix(&name)?;
            let usec = fields
                .split(',')
                .find_map(|f| f.strip_prefix("usec_per_call="))?;
            usec.parse().ok()
        })
        .unwrap_or_else(|| panic!("no {command} in {stats}"))
}

fn repl_offset(con: &mut Connection) -> i64 {
    let info: String = redis::cmd("INFO")
        .arg("replication")
        .query(con)
        .expect("INFO");
    info.lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .expect("master_repl_offset")
        .trim()
        .parse()
        .expect("an offset")
}

#[test]
fn release_and_renew_on_a_full_key_of_long_ids_cost_their_change() {
    const COUNT: u16 = 10_000;
    const CALLS: u16 = 200;
    each_flavor(|flavor| {
        // A replica, so that every write is propagated, as in production.
        let (primary, replica) = primary_with_replica(flavor);
        let mut con = primary.conn();
        let ends = server_ms(&mut con) + 3_600_000;
        let value = lease_value(COUNT, 64, ends);
        assert_eq!(value.len(), 4 + 73 * usize::from(COUNT));
        redis::cmd("SET")
            .arg("full")
            .arg(&value)
            .arg("PXAT")
            .arg(ends)
            .exec(&mut con)
            .expect("SET");
        redis::cmd("CONFIG")
            .arg(&[
                "SET",
                "slowlog-log-slower-than",
                "0",
                "slowlog-max-len",
                "1024",
            ])
            .exec(&mut con)
            .expect("CONFIG SET");
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .exec(&mut con)
            .expect("RESETSTAT");
        let start = repl_offset(&mut con);
        for n in 0..CALLS {
            assert_eq!(renew(&mut con, b"full", &lease_id(64, n), "2h"), 1);
        }
        let renew_bytes = repl_offset(&mut con) - start;
        let start = repl_offset(&mut con);
        for n in 0..CALLS {
            assert_eq!(release(&mut con, b"full", &lease_id(64, n)), 1);
        }
        let release_bytes = repl_offset(&mut con) - start;
        // A denied acquire (the key is full for max 9,800) and a look write nothing.
        for _ in 0..CALLS {
            let (taken, _, _) = acquire(&mut con, b"full", &[b"9800", b"1h"]);
            assert!(!taken);
            assert_eq!(
                leases(&mut con, b"full", 10_000)[0],
                i64::from(COUNT - CALLS)
            );
        }
        // A renewal that changes nothing (it already ends later) writes nothing.
        let start = repl_offset(&mut con);
        for n in CALLS..2 * CALLS {
            assert_eq!(renew(&mut con, b"full", &lease_id(64, n), "1s"), 1);
        }
        // (A replication PING, 14 bytes every 10 s, may fall in between.)
        assert!(repl_offset(&mut con) - start < 100, "{flavor:?}");
        let slowest: Vec<Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(1024)
            .query(&mut con)
            .expect("SLOWLOG");
        let mut max_usec: BTreeMap<String, i64> = BTreeMap::new();
        for entry in &slowest {
            let Value::Array(fields) = entry else {
                continue;
            };
            let (Some(Value::Int(usec)), Some(Value::Array(argv))) = (fields.get(2), fields.get(3))
            else {
                continue;
            };
            if let Some(Value::BulkString(name)) = argv.first() {
                let name = String::from_utf8_lossy(name).to_uppercase();
                let slot = max_usec.entry(name).or_insert(0);
                *slot = (*slot).max(*usec);
            }
        }
        eprintln!(
            "{flavor:?}: {COUNT} leases of 64-byte ids, {} bytes: usec_per_call RL.RENEW {:.1} \
             RL.RELEASE {:.1} RL.ACQUIRE (denied) {:.1} RL.LEASES {:.1}; slow log max {:?}; \
             propagated per call: RL.RENEW {} bytes, RL.RELEASE {} bytes",
            value.len(),
            usec_per_call(&mut con, "RL.RENEW"),
            usec_per_call(&mut con, "RL.RELEASE"),
            usec_per_call(&mut con, "RL.ACQUIRE"),
            usec_per_call(&mut con, "RL.LEASES"),
            max_usec,
            renew_bytes / i64::from(CALLS),
            release_bytes / i64::from(CALLS),
        );
        // A renewal changes 8 bytes of the 730 KB: it is propagated as those bytes
        // (SETRANGE, and PEXPIREAT when the key's end moves), not as the whole value. A
        // release changes the length: the whole value, in a SET.
        assert!(
            renew_bytes / i64::from(CALLS) < 1_000,
            "{flavor:?}: {renew_bytes}"
        );
        assert!(
            release_bytes / i64::from(CALLS) > 700_000,
            "{flavor:?}: {release_bytes}"
        );
        // And the replica holds the primary's bytes and expiry after all of them.
        wait_for_replicas(&mut con, 1);
        assert_eq!(
            contents(&mut replica.conn()),
            contents(&mut con),
            "{flavor:?}"
        );
    });
}

#[test]
fn renewals_propagated_as_patches_replay_from_the_aof_as_the_primary_holds_them() {
    each_flavor(|flavor| {
        // 2,000 generated leases (50 KB), renewed one by one: each renewal is propagated as
        // its 8 bytes (SETRANGE) and the key's new end (PEXPIREAT), and an AOF replay of
        // them, with acquires and releases between, gives the same bytes and expiry.
        let server = ServerConfig::new(flavor).arg("appendonly", "yes").start();
        let mut con = server.conn();
        let mut ids = Vec::new();
        for _ in 0..2_000 {
            let (taken, _, id) = acquire(&mut con, b"big", &[b"5000", b"1h"]);
            assert!(taken, "{flavor:?}");
            ids.push(id.expect("a generated id"));
        }
        for (n, id) in ids.iter().enumerate() {
            let ttl = format!("{}s", 3_600 + n);
            assert_eq!(renew(&mut con, b"big", id, &ttl), 1, "{flavor:?}");
            if n % 500 == 0 {
                assert_eq!(release(&mut con, b"big", &ids[n / 2]), 1, "{flavor:?}");
                assert!(acquire(&mut con, b"big", &[b"5000", b"2h"]).0, "{flavor:?}");
            }
        }
        let before = contents(&mut con);
        drop(con);
        let server = server.restart_on_the_aof();
        assert_eq!(contents(&mut server.conn()), before, "{flavor:?}");
    });
}

#[test]
fn odd_ids_other_maxes_far_ends_and_reset() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        // Ids of NUL bytes, 0xFF bytes, CR LF, and 32 upper-case hex digits (kept as
        // given: only the lower-case form is stored raw), all distinct leases.
        let ids: [&[u8]; 6] = [
            b"\0",
            &[0xff; 64],
            &[0; 64],
            b"\r\n*1\r\n$4\r\nPING\r\n",
            b"00112233445566778899AABBCCDDEEFF",
            b"00112233445566778899aabbccddeeff",
        ];
        for id in ids {
            let (taken, _, shown) = acquire(&mut con, b"o:ids", &[b"10", b"1h", b"ID", id]);
            assert!(taken, "{flavor:?} {id:?}");
            assert_eq!(shown.as_deref(), Some(id), "{flavor:?}: the id as given");
        }
        assert_eq!(leases(&mut con, b"o:ids", 10)[0], 6, "{flavor:?}");
        // A prefix, or the id with one more byte, is another id.
        assert_eq!(release(&mut con, b"o:ids", &[0xff; 63]), 0, "{flavor:?}");
        assert_eq!(release(&mut con, b"o:ids", b"\0\0"), 0, "{flavor:?}");
        for id in ids {
            assert_eq!(release(&mut con, b"o:ids", id), 1, "{flavor:?} {id:?}");
        }
        assert_eq!(get_bytes(&mut con, "o:ids"), None, "{flavor:?}");

        // RL.LEASES and RL.ACQUIRE with a max below what is held: full, and the wait is
        // until enough leases end to drop below that max.
        let now = server_ms(&mut con);
        for (n, ttl) in ["1h", "2h", "3h", "4h", "5h"].iter().enumerate() {
            let id = format!("m{n}");
            acquire(
                &mut con,
                b"o:max",
                &[b"5", ttl.as_bytes(), b"ID", id.as_bytes()],
            );
        }
        let low = leases(&mut con, b"o:max", 2);
        assert_eq!(&low[..3], &[5, 2, 0], "{flavor:?}");
        let hour = 3_600_000;
        // Fewer than 2 held once the 4th earliest (4h) ended.
        let wait = low[3];
        assert!(
            (4 * hour - (server_ms(&mut con) - now) - 1_000..=4 * hour).contains(&wait),
            "{flavor:?} {wait}"
        );
        let (taken, free, _) = acquire(&mut con, b"o:max", &[b"2", b"1h"]);
        assert!(!taken && free == 0, "{flavor:?}");
        assert_eq!(leases(&mut con, b"o:max", 10_000)[2], 9_995, "{flavor:?}");
        let (taken, free, _) = acquire(&mut con, b"o:max", &[b"7", b"1h"]);
        assert!(taken && free == 1, "{flavor:?}");

        // Leases whose ends lie years ahead (written before the clock jumped back, or by
        // hand): held until then; a renewal never shortens them; the key lasts as long.
        let far = server_ms(&mut con) + 10 * 366 * 24 * hour;
        redis::cmd("SET")
            .arg("o:far")
            .arg(lease_value(2, 3, far))
            .arg("PXAT")
            .arg(far)
            .exec(&mut con)
            .expect("SET");
        assert_eq!(renew(&mut con, b"o:far", &lease_id(3, 0), "366d"), 1);
        assert_eq!(
            pexpiretime(&mut con, "o:far"),
            far,
            "{flavor:?}: not shortened"
        );
        let (taken, _, _) = acquire(&mut con, b"o:far", &[b"2", b"366d"]);
        assert!(!taken, "{flavor:?}");
        let look = leases(&mut con, b"o:far", 2);
        assert!(look[3] > 9 * 366 * 24 * hour, "{flavor:?} {look:?}");
        assert_eq!(
            release(&mut con, b"o:far", &lease_id(3, 1)),
            1,
            "{flavor:?}"
        );
        let (taken, _, _) = acquire(&mut con, b"o:far", &[b"2", b"366d"]);
        assert!(taken, "{flavor:?}");

        // RL.RESET deletes a lease key (with or without tiers) and nothing else; the
        // released ids are unknown afterwards.
        acquire(
            &mut con,
            b"o:tiers",
            &[b"2", b"1h", b"5", b"1m", b"ID", b"t"],
        );
        for key in ["o:max", "o:far", "o:tiers"] {
            let reset: i64 = redis::cmd("RL.RESET")
                .arg(key)
                .query(&mut con)
                .expect("RESET");
            assert_eq!(reset, 1, "{flavor:?} {key}");
            assert_eq!(get_bytes(&mut con, key), None, "{flavor:?} {key}");
        }
        assert_eq!(release(&mut con, b"o:tiers", b"t"), 0, "{flavor:?}");
        let again: i64 = redis::cmd("RL.RESET")
            .arg("o:max")
            .query(&mut con)
            .expect("RESET");
        assert_eq!(again, 0, "{flavor:?}");
    });
}
