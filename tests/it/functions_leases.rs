//! The Functions library's concurrency leases (`rl_acquire`, `rl_release`, `rl_renew`,
//! `rl_leases`) on real Redis 7.0 and Valkey 8.1 servers: on a server that refuses modules
//! (`enable-module-command no`, no module: what a managed service offers), and beside the
//! module on one server, where a key written by one backend is read and continued by the
//! other, the same calls store the same bytes, and bad input gets the same errors.

use redis::{Connection, ConnectionLike, Value};
use std::collections::HashSet;
use std::time::Duration;
use testkit::functions::*;
use testkit::*;

/// A server as a managed service runs it: no module, `MODULE` refused; the library loaded.
fn managed(flavor: Flavor) -> Server {
    let server = ServerConfig::managed(flavor).start();
    let mut con = server.conn();
    let refused = error_text(
        &mut con,
        redis::cmd("MODULE")
            .arg("LOAD")
            .arg(module_path().to_string_lossy().as_ref()),
    );
    assert!(
        refused.starts_with("ERR"),
        "{flavor:?}: MODULE LOAD gave {refused}"
    );
    assert_eq!(server.load_functions(), "ratelimit");
    server
}

/// A server with the module and the library.
fn both(flavor: Flavor) -> Server {
    let server = ServerConfig::new(flavor).start();
    assert_eq!(server.load_functions(), "ratelimit");
    server
}

/// `FCALL <function> 1 key args...`.
fn fcall(function: &str, key: &str, args: &[&str]) -> redis::Cmd {
    fcall_cmd(function, &[key], args)
}

/// The module's `<command> key args...`.
fn module(command: &str, key: &str, args: &[&str]) -> redis::Cmd {
    let mut cmd = redis::cmd(command);
    cmd.arg(key).arg(args);
    cmd
}

/// RL.ACQUIRE's RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Acquired {
    acquired: bool,
    max: i64,
    free: i64,
    id: Option<String>,
    ttl_ms: i64,
    retry_after_ms: i64,
}

fn acquired(con: &mut impl ConnectionLike, cmd: &redis::Cmd) -> Acquired {
    let reply: Value = cmd.query(con).unwrap_or_else(|e| panic!("acquire: {e}"));
    let Value::Array(fields) = &reply else {
        panic!("acquire replied {reply:?}");
    };
    assert_eq!(fields.len(), 6, "{fields:?}");
    let int = |i: usize| match &fields[i] {
        Value::Int(n) => *n,
        other => panic!("field {i} of {fields:?} is {other:?}"),
    };
    let id = match &fields[3] {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::Nil => None,
        other => panic!("id is {other:?}"),
    };
    Acquired {
        acquired: int(0) == 1,
        max: int(1),
        free: int(2),
        id,
        ttl_ms: int(4),
        retry_after_ms: int(5),
    }
}

fn int(con: &mut impl ConnectionLike, cmd: &redis::Cmd) -> i64 {
    cmd.query(con).expect("an integer reply")
}

/// RL.LEASES's reply: `[held, max, free, retry_after_ms, reset_after_ms]`.
fn held(con: &mut impl ConnectionLike, cmd: &redis::Cmd) -> [i64; 5] {
    let values: Vec<i64> = cmd.query(con).expect("five integers");
    values.try_into().expect("five integers")
}

fn varint(bytes: &[u8], at: &mut usize) -> usize {
    let mut value = 0usize;
    for shift in (0..).step_by(7) {
        let byte = bytes[*at];
        *at += 1;
        value |= usize::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return value;
        }
    }
    unreachable!()
}

fn i64_at(bytes: &[u8], at: &mut usize) -> i64 {
    let end = i64::from_le_bytes(bytes[*at..*at + 8].try_into().expect("8 bytes"));
    *at += 8;
    end
}

/// A lease value as the module documents it: the tier state with its end, and each
/// lease's id as replies show it with its end.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Leases {
    tier: Option<(Vec<u8>, i64)>,
    leases: Vec<(String, i64)>,
}

fn decode(bytes: &[u8]) -> Leases {
    assert_eq!(bytes[0], 0x02, "a lease value: {bytes:?}");
    let mut at = 1;
    let tier_len = varint(bytes, &mut at);
    let tier = (tier_len > 0).then(|| {
        let state = bytes[at..at + tier_len].to_vec();
        at += tier_len;
        (state, i64_at(bytes, &mut at))
    });
    let count = varint(bytes, &mut at);
    let leases = (0..count)
        .map(|_| {
            let tag = bytes[at];
            let len = if tag == 0x80 { 16 } else { usize::from(tag) };
            let id = &bytes[at + 1..at + 1 + len];
            at += 1 + len;
            let shown = if tag == 0x80 {
                id.iter().map(|b| format!("{b:02x}")).collect()
            } else {
                String::from_utf8_lossy(id).into_owned()
            };
            (shown, i64_at(bytes, &mut at))
        })
        .collect();
    assert_eq!(at, bytes.len(), "nothing after the last lease");
    Leases { tier, leases }
}

/// Writes a lease value by hand (ids of other bytes than 32 hex digits).
fn encode(tier: Option<(&[u8], i64)>, leases: &[(&str, i64)]) -> Vec<u8> {
    let mut out = vec![0x02];
    match tier {
        Some((state, end)) => {
            out.push(u8::try_from(state.len()).expect("a short state"));
            out.extend_from_slice(state);
            out.extend_from_slice(&end.to_le_bytes());
        }
        None => out.push(0),
    }
    out.push(u8::try_from(leases.len()).expect("a few leases"));
    for (id, end) in leases {
        out.push(u8::try_from(id.len()).expect("a short id"));
        out.extend_from_slice(id.as_bytes());
        out.extend_from_slice(&end.to_le_bytes());
    }
    out
}

fn value(con: &mut Connection, key: &str) -> Leases {
    decode(&get_bytes(con, key).unwrap_or_else(|| panic!("{key} exists")))
}

#[test]
fn acquire_up_to_max_then_denied_and_release_frees_on_a_server_without_modules() {
    each_flavor(|flavor| {
        let server = managed(flavor);
        let mut con = server.conn();
        let key = "rl:{u42}:export";
        let first = acquired(&mut con, &fcall("rl_acquire", key, &["2", "30s"]));
        assert!(
            first.acquired && first.free == 1 && first.ttl_ms == 30_000,
            "{first:?}"
        );
        let generated = first.id.clone().expect("an id");
        assert!(
            generated.len() == 32 && generated.bytes().all(|b| b.is_ascii_hexdigit()),
            "{flavor:?}: 32 hex digits as the module's, got {generated}"
        );
        let job = acquired(
            &mut con,
            &fcall("rl_acquire", key, &["2", "30s", "ID", "job-7"]),
        );
        assert_eq!(
            (job.acquired, job.free, job.id.as_deref()),
            (true, 0, Some("job-7"))
        );
        let stored = value(&mut con, key);
        let ends: Vec<i64> = stored.leases.iter().map(|l| l.1).collect();
        assert_eq!(stored.leases[0].0, generated, "{flavor:?}: the order taken");
        assert_eq!(
            pexpiretime(&mut con, key),
            ends[1],
            "{flavor:?}: the last lease's end"
        );

        let full = acquired(&mut con, &fcall("rl_acquire", key, &["2", "30s"]));
        let now = server_ms(&mut con);
        assert_eq!(
            (
                full.acquired,
                full.max,
                full.free,
                full.id.clone(),
                full.ttl_ms
            ),
            (false, 2, 0, None, 0)
        );
        assert!(
            full.retry_after_ms > 0 && full.retry_after_ms >= ends[0] - now,
            "{flavor:?}: the wait until the first lease ends: {full:?}, {ends:?} at {now}"
        );
        let read = held(&mut con, &fcall("rl_leases", key, &["2"]));
        assert_eq!(read[..3], [2, 2, 0], "{flavor:?}");
        assert!(read[4] >= read[3] && read[3] > 0, "{flavor:?}: {read:?}");

        assert_eq!(int(&mut con, &fcall("rl_release", key, &[&generated])), 1);
        assert_eq!(
            int(&mut con, &fcall("rl_release", key, &[&generated])),
            0,
            "once"
        );
        assert_eq!(int(&mut con, &fcall("rl_release", key, &["nobody"])), 0);
        let again = acquired(
            &mut con,
            &fcall("rl_acquire", key, &["2", "30s", "ID", "job-8"]),
        );
        assert!(
            again.acquired,
            "{flavor:?}: the released slot is free: {again:?}"
        );
        for id in ["job-7", "job-8"] {
            assert_eq!(int(&mut con, &fcall("rl_release", key, &[id])), 1);
        }
        assert_eq!(
            get_bytes(&mut con, key),
            None,
            "{flavor:?}: the last release deletes"
        );
        assert_eq!(
            held(&mut con, &fcall("rl_leases", key, &["2"])),
            [0, 2, 2, 0, 0]
        );
    });
}

#[test]
fn renew_extends_never_shortens_and_moves_the_expiry() {
    each_flavor(|flavor| {
        let server = managed(flavor);
        let mut con = server.conn();
        let key = "rl:renew";
        acquired(
            &mut con,
            &fcall("rl_acquire", key, &["3", "10s", "ID", "job"]),
        );
        let before = value(&mut con, key).leases[0].1;
        assert_eq!(int(&mut con, &fcall("rl_renew", key, &["job", "1h"])), 1);
        let after = value(&mut con, key).leases[0].1;
        assert!(
            after - before >= 3_590_000,
            "{flavor:?}: {before} -> {after}"
        );
        assert_eq!(
            pexpiretime(&mut con, key),
            after,
            "{flavor:?}: the key's end moved too"
        );
        let bytes = get_bytes(&mut con, key);
        assert_eq!(
            int(&mut con, &fcall("rl_renew", key, &["job", "1s"])),
            1,
            "held"
        );
        assert_eq!(
            get_bytes(&mut con, key),
            bytes,
            "{flavor:?}: never shortened"
        );
        assert_eq!(int(&mut con, &fcall("rl_renew", key, &["other", "1h"])), 0);
        assert_eq!(
            int(&mut con, &fcall("rl_renew", "rl:none", &["job", "1h"])),
            0
        );
        assert_eq!(
            get_bytes(&mut con, "rl:none"),
            None,
            "{flavor:?}: nothing written"
        );
    });
}

#[test]
fn expired_leases_free_their_slot_and_are_dropped_by_the_next_write() {
    each_flavor(|flavor| {
        let server = managed(flavor);
        let mut con = server.conn();
        // A key left without expiry (as PERSIST leaves it) holding an ended lease.
        let now = server_ms(&mut con);
        let key = "rl:ended";
        let crafted = encode(None, &[("old", now - 1_000), ("live", now + 3_600_000)]);
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(&crafted)
            .query(&mut con)
            .expect("SET");
        assert_eq!(
            held(&mut con, &fcall("rl_leases", key, &["2"]))[..3],
            [1, 2, 1]
        );
        assert_eq!(
            int(&mut con, &fcall("rl_release", key, &["old"])),
            0,
            "ended"
        );
        let taken = acquired(
            &mut con,
            &fcall("rl_acquire", key, &["2", "1h", "ID", "new"]),
        );
        assert_eq!((taken.acquired, taken.free), (true, 0), "{flavor:?}");
        let ids: Vec<String> = value(&mut con, key)
            .leases
            .into_iter()
            .map(|l| l.0)
            .collect();
        assert_eq!(
            ids,
            ["live", "new"],
            "{flavor:?}: the ended lease is dropped"
        );

        // A lease ends at its absolute end on the server's clock.
        let key = "rl:short";
        acquired(
            &mut con,
            &fcall("rl_acquire", key, &["1", "300ms", "ID", "a"]),
        );
        let end = value(&mut con, key).leases[0].1;
        let denied = acquired(
            &mut con,
            &fcall("rl_acquire", key, &["1", "300ms", "ID", "b"]),
        );
        assert!(
            !denied.acquired && denied.retry_after_ms <= 300,
            "{flavor:?}: {denied:?}"
        );
        wait_until(Duration::from_secs(10), "the lease's end", || {
            server_ms(&mut con) >= end
        });
        let then = acquired(&mut con, &fcall("rl_acquire", key, &["1", "1h", "ID", "b"]));
        assert!(
            then.acquired,
            "{flavor:?}: the ended lease's slot is free: {then:?}"
        );
    });
}

#[test]
fn resp3_callers_get_a_null_id_when_no_lease_is_taken() {
    each_flavor(|flavor| {
        let server = managed(flavor);
        let mut con = server.conn_resp3();
        acquired(&mut con, &fcall("rl_acquire", "rl:3", &["1", "1h"]));
        let reply: Value = fcall("rl_acquire", "rl:3", &["1", "1h"])
            .query(&mut con)
            .expect("reply");
        let Value::Array(fields) = reply else {
            panic!("{flavor:?}: the RESP2 array under RESP3 too: {reply:?}");
        };
        assert_eq!(fields[3], Value::Nil, "{flavor:?}: {fields:?}");
    });
}

#[test]
fn bad_input_gets_the_modules_errors() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        let _: () = redis::cmd("SET")
            .arg("rl:text")
            .arg("hello")
            .query(&mut con)
            .expect("SET");
        let _: () = redis::cmd("SET")
            .arg("rl:state")
            .arg("7")
            .query(&mut con)
            .expect("SET");
        let _: i64 = redis::cmd("HSET")
            .arg("rl:hash")
            .arg("a")
            .arg("1")
            .query(&mut con)
            .expect("HSET");
        acquired(
            &mut con,
            &module("RL.ACQUIRE", "rl:held", &["5", "1h", "ID", "job"]),
        );
        // States whose first byte is not a digit: tiers, calendar tiers (0x02, as leases).
        hit(&mut con, "rl:tiers", &["10", "1m", "100", "1h"]);
        hit(&mut con, "rl:calendar", &["10", "day", "100", "month"]);
        let long_id = "x".repeat(65);
        let cases: &[(&str, &str, &[&str])] = &[
            ("acquire", "rl:k", &["1"]),
            ("acquire", "rl:k", &["0", "30s"]),
            ("acquire", "rl:k", &["10001", "30s"]),
            ("acquire", "rl:k", &["99999999999999999999", "30s"]),
            ("acquire", "rl:k", &["-1", "30s"]),
            ("acquire", "rl:k", &["1.5", "30s"]),
            ("acquire", "rl:k", &["2", "0"]),
            ("acquire", "rl:k", &["2", "367d"]),
            ("acquire", "rl:k", &["2", "99999999999999999999999d"]),
            ("acquire", "rl:k", &["2", "5w"]),
            ("acquire", "rl:k", &["2", "1.5s"]),
            ("acquire", "rl:k", &["2", "30s", "ID"]),
            ("acquire", "rl:k", &["2", "30s", "ID", ""]),
            ("acquire", "rl:k", &["2", "30s", "ID", &long_id]),
            ("acquire", "rl:k", &["2", "30s", "ID", "a", "id", "b"]),
            ("acquire", "rl:k", &["2", "30s", "IDS", "x"]),
            ("acquire", "rl:k", &["2", "30s", "COST", "2"]),
            ("acquire", "rl:k", &["2", "30s", "algo", "gcra"]),
            ("acquire", "rl:k", &["2", "30s", "10"]),
            ("acquire", "rl:k", &["2", "30s", "10", "1m", "BOGUS", "1"]),
            ("acquire", "rl:k", &["2", "30s", "10", "1m", "COST", "0"]),
            ("acquire", "rl:k", &["2", "30s", "0", "1m"]),
            (
                "acquire",
                "rl:k",
                &["2", "30s", "10", "1m", "ID", "a", "ID", "b"],
            ),
            ("acquire", "rl:k", &["2", "30s", "10", "1m", "BURST", "3"]),
            ("acquire", "rl:text", &["2", "30s"]),
            ("acquire", "rl:state", &["2", "30s"]),
            ("acquire", "rl:hash", &["2", "30s"]),
            ("acquire", "rl:tiers", &["2", "30s"]),
            ("acquire", "rl:calendar", &["2", "30s"]),
            ("release", "rl:calendar", &["a"]),
            ("leases", "rl:calendar", &["3"]),
            ("acquire", "rl:held", &["5", "1h", "ID", "job"]),
            ("release", "rl:k", &[]),
            ("release", "rl:k", &["a", "b"]),
            ("release", "rl:k", &[""]),
            ("release", "rl:text", &["a"]),
            ("release", "rl:hash", &["a"]),
            ("renew", "rl:k", &["a"]),
            ("renew", "rl:k", &["a", "0ms"]),
            ("renew", "rl:k", &[&long_id, "1s"]),
            ("renew", "rl:state", &["a", "1s"]),
            ("leases", "rl:k", &[]),
            ("leases", "rl:k", &["0"]),
            ("leases", "rl:k", &["ten"]),
            ("leases", "rl:text", &["3"]),
            ("leases", "rl:hash", &["3"]),
        ];
        for (command, key, args) in cases {
            let expected = error_text(&mut con, &module(&format!("RL.{command}"), key, args));
            let got = error_text(&mut con, &fcall(&format!("rl_{command}"), key, args));
            assert_eq!(got, expected, "{flavor:?}: {command} {key} {args:?}");
        }
        assert_eq!(
            get_bytes(&mut con, "rl:k"),
            None,
            "{flavor:?}: nothing written"
        );
        assert_eq!(
            get_bytes(&mut con, "rl:text").as_deref(),
            Some(&b"hello"[..])
        );
        // The state commands name a lease key, as the module's do.
        let expected = error_text(&mut con, &module("RL.HIT", "rl:held", &["10", "1m"]));
        let got = error_text(&mut con, &fcall("rl_hit", "rl:held", &["10", "1m"]));
        assert_eq!(got, expected, "{flavor:?}");
    });
}

#[test]
fn a_key_written_by_one_backend_is_read_and_continued_by_the_other() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        let key = "rl:{u1}:jobs";
        let by_module = acquired(&mut con, &module("RL.ACQUIRE", key, &["3", "1h"]));
        let generated = by_module.id.expect("an id");
        acquired(
            &mut con,
            &module("RL.ACQUIRE", key, &["3", "1h", "ID", "a"]),
        );
        let library = held(&mut con, &fcall("rl_leases", key, &["3"]));
        let modules = held(&mut con, &module("RL.LEASES", key, &["3"]));
        assert_eq!(library[..3], modules[..3], "{flavor:?}: [held, max, free]");
        assert_eq!(library[..3], [2, 3, 1], "{flavor:?}");
        // The library releases the module's generated id (stored as its 16 bytes).
        assert_eq!(int(&mut con, &fcall("rl_release", key, &[&generated])), 1);
        assert_eq!(held(&mut con, &module("RL.LEASES", key, &["3"]))[0], 1);
        let taken = acquired(&mut con, &fcall("rl_acquire", key, &["3", "1h", "ID", "b"]));
        assert!(taken.acquired, "{flavor:?}");
        let own = acquired(&mut con, &fcall("rl_acquire", key, &["3", "1h"]));
        let own = own.id.expect("the library's id");
        assert_eq!(
            held(&mut con, &module("RL.LEASES", key, &["3"]))[..3],
            [3, 3, 0]
        );
        let full = acquired(&mut con, &module("RL.ACQUIRE", key, &["3", "1h"]));
        assert!(
            !full.acquired,
            "{flavor:?}: the module counts the library's leases"
        );
        assert_eq!(
            int(&mut con, &module("RL.RELEASE", key, &[&own])),
            1,
            "{flavor:?}"
        );
        assert_eq!(int(&mut con, &module("RL.RENEW", key, &["b", "2h"])), 1);
        assert_eq!(int(&mut con, &fcall("rl_renew", key, &["a", "3h"])), 1);
        let ids: Vec<String> = value(&mut con, key)
            .leases
            .into_iter()
            .map(|l| l.0)
            .collect();
        assert_eq!(ids, ["a", "b"], "{flavor:?}");
        for (id, by_library) in [("a", false), ("b", true)] {
            let cmd = if by_library {
                fcall("rl_release", key, &[id])
            } else {
                module("RL.RELEASE", key, &[id])
            };
            assert_eq!(int(&mut con, &cmd), 1, "{flavor:?}: {id}");
        }
        assert_eq!(get_bytes(&mut con, key), None, "{flavor:?}");
        // RL.RESET deletes a lease key in both backends.
        acquired(&mut con, &module("RL.ACQUIRE", key, &["3", "1h"]));
        assert_eq!(int(&mut con, &fcall_cmd("rl_reset", &[key], &[])), 1);
        assert_eq!(get_bytes(&mut con, key), None, "{flavor:?}");
    });
}

#[test]
fn a_time_beyond_exact_doubles_is_refused_never_misread() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        // No backend writes such an end; a value restored from elsewhere could hold one.
        let far = (1i64 << 53) + 1;
        let bytes = encode(None, &[("a", far)]);
        let _: () = redis::cmd("SET")
            .arg("rl:far")
            .arg(&bytes)
            .query(&mut con)
            .expect("SET");
        for (function, args) in [
            ("rl_leases", &["3"][..]),
            ("rl_acquire", &["3", "1h"]),
            ("rl_release", &["a"]),
            ("rl_renew", &["a", "1h"]),
        ] {
            let error = error_text(&mut con, &fcall(function, "rl:far", args));
            assert!(
                error
                    .starts_with("ERR the functions library handles values up to 9007199254740991"),
                "{flavor:?}: {function}: {error}"
            );
        }
        assert_eq!(
            get_bytes(&mut con, "rl:far"),
            Some(bytes),
            "{flavor:?}: unchanged"
        );
        // The module reads it: a lease held until then.
        assert_eq!(held(&mut con, &module("RL.LEASES", "rl:far", &["3"]))[0], 1);
        // It is leases all the same: RL.RESET deletes it, as the module's does.
        assert_eq!(int(&mut con, &fcall_cmd("rl_reset", &["rl:far"], &[])), 1);
        assert_eq!(get_bytes(&mut con, "rl:far"), None, "{flavor:?}");
    });
}

#[test]
fn tiers_beside_leases_count_across_backends() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        // Fixed windows of an hour must not end mid-test and reset the count.
        stay_clear_of_window_edges(&server, 3_600_000, 30_000);
        let key = "rl:{u2}:tiered";
        let with = |id: &'static str| ["9", "1h", "5", "1h", "100", "300d", "ID", id];
        // Three hits: the module's, the library's, the module's.
        assert!(acquired(&mut con, &module("RL.ACQUIRE", key, &with("t1"))).acquired);
        let first = value(&mut con, key).tier.expect("a tier state");
        assert!(acquired(&mut con, &fcall("rl_acquire", key, &with("t2"))).acquired);
        assert!(acquired(&mut con, &module("RL.ACQUIRE", key, &with("t3"))).acquired);
        let (state, end) = value(&mut con, key).tier.expect("a tier state");
        assert_eq!(end, first.1, "{flavor:?}: the tiers' end stays");
        // Without tiers the library keeps the module's tier state as it is.
        assert!(
            acquired(
                &mut con,
                &fcall("rl_acquire", key, &["9", "1h", "ID", "t4"])
            )
            .acquired
        );
        assert_eq!(value(&mut con, key).tier, Some((state, end)), "{flavor:?}");
        // Five an hour: two more, one by each backend, then both deny.
        assert!(acquired(&mut con, &fcall("rl_acquire", key, &with("t5"))).acquired);
        assert!(acquired(&mut con, &module("RL.ACQUIRE", key, &with("t6"))).acquired);
        let by_library = acquired(&mut con, &fcall("rl_acquire", key, &with("t7")));
        let by_module = acquired(&mut con, &module("RL.ACQUIRE", key, &with("t7")));
        for denied in [&by_library, &by_module] {
            assert!(
                !denied.acquired && denied.retry_after_ms > 0,
                "{flavor:?}: {denied:?}"
            );
            assert_eq!(denied.free, 3, "{flavor:?}: {denied:?}");
        }
        let leases = value(&mut con, key).leases.len();
        assert_eq!(leases, 6, "{flavor:?}: a denied tier takes no lease");
    });
}

/// Puts `key` back as `stored` read it: its bytes and absolute expiry, or no key.
fn restore(con: &mut Connection, key: &str, (bytes, at): &(Option<Vec<u8>>, i64)) {
    let mut cmd = match bytes {
        None => redis::cmd("DEL"),
        Some(_) => redis::cmd("SET"),
    };
    cmd.arg(key);
    if let Some(bytes) = bytes {
        cmd.arg(bytes);
        if *at > 0 {
            cmd.arg("PXAT").arg(*at);
        }
    }
    let _: Value = cmd.query(con).expect("restore");
}

fn ms((secs, micros): (i64, i64)) -> i64 {
    secs * 1_000 + micros / 1_000
}

/// The end of the lease `p` of key `rl:probe` (taken by the module for a day if missing):
/// RL.LEASES on it tells the module's clock reading as `end - reset_after_ms`.
fn probe_end(con: &mut Connection) -> i64 {
    if get_bytes(con, "rl:probe").is_none() {
        acquired(
            con,
            &module("RL.ACQUIRE", "rl:probe", &["1", "1d", "ID", "p"]),
        );
    }
    value(con, "rl:probe").leases[0].1
}

/// Runs the lease `command` on key `rl:a` with the module and on `rl:b` with the library
/// in one transaction during which both clocks read the same ms (retried from the keys as
/// they were until they do). The library reads `TIME`; the module its own clock, which
/// RL.LEASES on a probe shows: on Valkey `TIME` is the transaction's start all through it,
/// so only the probes before and after show that the module's call saw the same ms.
fn on_both(con: &mut Connection, command: &str, args: &[&str]) -> (Value, Value) {
    let before = [stored(con, b"rl:a"), stored(con, b"rl:b")];
    let end = probe_end(con);
    for _ in 0..1_000 {
        restore(con, "rl:a", &before[0]);
        restore(con, "rl:b", &before[1]);
        let mut pipe = redis::pipe();
        let probe = module("RL.LEASES", "rl:probe", &["1"]);
        pipe.atomic()
            .ignore_errors()
            .cmd("TIME")
            .add_command(probe.clone());
        pipe.add_command(module(
            &format!("RL.{}", command.to_uppercase()),
            "rl:a",
            args,
        ));
        pipe.add_command(fcall(&format!("rl_{command}"), "rl:b", args));
        pipe.add_command(probe).cmd("TIME");
        type Reply = ((i64, i64), [i64; 5], Value, Value, [i64; 5], (i64, i64));
        let (t0, p0, a, b, p1, t1): Reply = pipe.query(con).expect("EXEC");
        let now = ms(t0);
        if now == ms(t1) && end - p0[4] == now && end - p1[4] == now {
            return (a, b);
        }
    }
    panic!("{command} {args:?}: no transaction ran within one ms in 1000 tries");
}

fn same_bytes(con: &mut Connection, flavor: Flavor, step: &str) {
    assert_eq!(
        get_bytes(con, "rl:a"),
        get_bytes(con, "rl:b"),
        "{flavor:?}: {step}"
    );
    assert_eq!(
        pexpiretime(con, "rl:a"),
        pexpiretime(con, "rl:b"),
        "{flavor:?}: {step}"
    );
}

#[test]
fn the_same_calls_at_the_same_ms_store_the_same_bytes() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        let now = server_ms(&mut con);
        let raw = "00112233445566778899aabbccddeeff";
        // A tier state (a plain count, its window's end), an ended lease and two held.
        let leases = [
            ("gone", now - 5),
            ("x", now + 3_600_000),
            ("y", now + 1_800_000),
        ];
        let start = encode(Some((b"2", now + 7_200_000)), &leases);
        for key in ["rl:a", "rl:b"] {
            restore(&mut con, key, &(Some(start.clone()), 0));
        }
        let steps: &[(&str, &[&str])] = &[
            ("renew", &["x", "1s"]),
            ("renew", &["y", "2h"]),
            ("release", &["gone"]),
            ("acquire", &["3", "1h", "ID", raw]),
            ("acquire", &["3", "1h"]),
            ("acquire", &["4", "1h", "10", "1m", "ID", "t"]),
            ("acquire", &["5", "30s", "3", "1m", "ID", "u"]),
            ("release", &[raw]),
            ("release", &["x"]),
            ("release", &["y"]),
            ("release", &["t"]),
            ("leases", &["3"]),
        ];
        for (command, args) in steps {
            let (a, b) = on_both(&mut con, command, args);
            let step = format!("{command} {args:?}");
            assert_eq!(a, b, "{flavor:?}: the replies to {step}");
            assert!(
                !matches!(a, Value::ServerError(_)),
                "{flavor:?}: {step}: {a:?}"
            );
            same_bytes(&mut con, flavor, &step);
        }
        // `u` was refused by its tier (3 a minute, and the state already counts 3), so
        // only the tier state is left, the releases having freed every lease.
        let left = value(&mut con, "rl:a");
        assert_eq!(left.tier.map(|t| t.0), Some(b"3".to_vec()), "{flavor:?}");
        assert!(left.leases.is_empty(), "{flavor:?}: {:?}", left.leases);
    });
}

#[test]
fn generated_ids_are_distinct_and_the_module_releases_them() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        let key = "rl:many";
        // In one transaction: calls as close together as the server runs them.
        let mut pipe = redis::pipe();
        pipe.atomic();
        for _ in 0..300 {
            pipe.add_command(fcall("rl_acquire", key, &["1000", "1h"]));
        }
        let replies: Vec<Value> = pipe.query(&mut con).expect("EXEC");
        let ids: Vec<String> = replies
            .iter()
            .map(|reply| match reply {
                Value::Array(fields) => match &fields[3] {
                    Value::BulkString(id) => String::from_utf8_lossy(id).into_owned(),
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            })
            .collect();
        let distinct: HashSet<&String> = ids.iter().collect();
        assert_eq!(distinct.len(), 300, "{flavor:?}");
        for id in &ids {
            assert!(id.len() == 32 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
            assert_eq!(
                int(&mut con, &module("RL.RELEASE", key, &[id])),
                1,
                "{flavor:?}: {id}"
            );
        }
        assert_eq!(get_bytes(&mut con, key), None, "{flavor:?}");
    });
}

#[test]
fn a_replica_holds_the_librarys_bytes_and_answers_rl_leases() {
    each_flavor(|flavor| {
        let config = || ServerConfig::managed(flavor);
        let (primary, replica) = primary_with_replica_configs(config(), config());
        let mut con = primary.conn();
        load_functions(&mut con);
        acquired(&mut con, &fcall("rl_acquire", "rl:r", &["2", "1h"]));
        acquired(
            &mut con,
            &fcall("rl_acquire", "rl:r", &["2", "1h", "ID", "job"]),
        );
        int(&mut con, &fcall("rl_release", "rl:r", &["job"]));
        wait_for_replicas(&mut con, 1);
        let mut on_replica = replica.conn();
        assert_eq!(
            get_bytes(&mut on_replica, "rl:r"),
            get_bytes(&mut con, "rl:r"),
            "{flavor:?}"
        );
        assert_eq!(
            pexpiretime(&mut on_replica, "rl:r"),
            pexpiretime(&mut con, "rl:r")
        );
        let mut read = redis::cmd("FCALL_RO");
        read.arg("rl_leases").arg(1).arg("rl:r").arg(2);
        assert_eq!(held(&mut on_replica, &read)[..3], [1, 2, 1], "{flavor:?}");
    });
}

/// A small seeded generator (xorshift64), so that a failure replays.
struct Seeded(u64);

impl Seeded {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// One random call on up to 60 ids: an acquire (some with a tier), a release, a renewal or
/// a read, with ttls that end during the run and ttls that do not.
fn random_call(rng: &mut Seeded) -> (&'static str, Vec<String>) {
    let id = match rng.below(60) {
        n if n < 50 => format!("job-{n}"),
        n => format!("{n:032x}"),
    };
    let ttl = ["50ms", "300ms", "2s", "1h"][rng.below(4)].to_string();
    match rng.below(10) {
        0..=3 => {
            let mut args = vec![(5 + rng.below(50)).to_string(), ttl, "ID".into(), id];
            if rng.below(4) == 0 {
                args.extend(["30".into(), "1m".into()]);
            }
            ("acquire", args)
        }
        4..=6 => ("release", vec![id]),
        7 | 8 => ("renew", vec![id, ttl]),
        _ => ("leases", vec![(1 + rng.below(60)).to_string()]),
    }
}

#[test]
fn random_calls_on_many_leases_reply_and_store_as_the_module() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        let mut rng = Seeded(0x005e_ed1e_a5e5);
        let mut errors = 0;
        for n in 0..400 {
            let (command, args) = random_call(&mut rng);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let (a, b) = on_both(&mut con, command, &args);
            let step = format!("step {n}: {command} {args:?}");
            assert_eq!(a, b, "{flavor:?}: the replies to {step}");
            errors += usize::from(matches!(a, Value::ServerError(_)));
            same_bytes(&mut con, flavor, &step);
        }
        // The sequence reached its cases: duplicate ids refused, and a key of many leases.
        assert!(errors > 0, "{flavor:?}: some acquire met a held id");
        let held = held(&mut con, &fcall("rl_leases", "rl:b", &["60"]))[0];
        println!("{flavor:?}: {errors} errors; {held} leases held at the end");
    });
}

#[test]
fn the_functions_route_by_their_key_in_a_cluster_and_read_on_replicas() {
    each_flavor(|flavor| {
        let cluster = testkit::cluster::Cluster::start(flavor, 3, 1);
        // A cluster keeps its libraries per node: loaded on every primary, replicated.
        for primary in cluster.primaries() {
            let mut con = primary.conn();
            load_functions(&mut con);
            wait_for_replicas(&mut con, 1);
        }
        let mut client = cluster.client();
        for primary in cluster.primaries() {
            let key = format!("rl:{{{}}}:lease", cluster.tag_on(primary, "lease"));
            let taken = acquired(
                &mut client,
                &fcall("rl_acquire", &key, &["2", "1h", "5", "1m", "ID", "w1"]),
            );
            assert!(taken.acquired, "{flavor:?} {key}");
            assert_eq!(held(&mut client, &fcall("rl_leases", &key, &["2"]))[0], 1);
            let owner = cluster.owner_of(key.as_str());
            assert_eq!(
                owner.port(),
                primary.port(),
                "{flavor:?}: routed by its key"
            );
            let mut on_owner = owner.conn();
            assert!(
                get_bytes(&mut on_owner, key.as_str()).is_some(),
                "{flavor:?}"
            );
            // A write on this connection, so that WAIT covers everything before it.
            assert_eq!(
                int(&mut on_owner, &fcall("rl_renew", &key, &["w1", "2h"])),
                1
            );
            wait_for_replicas(&mut on_owner, 1);
            let mut on_replica = cluster.replica_of(owner).conn();
            redis::cmd("READONLY")
                .exec(&mut on_replica)
                .expect("READONLY");
            let mut read = redis::cmd("FCALL_RO");
            read.arg("rl_leases").arg(1).arg(&key).arg(2);
            assert_eq!(held(&mut on_replica, &read)[..3], [1, 2, 1], "{flavor:?}");
            let refused = error_text(&mut on_replica, &fcall("rl_acquire", &key, &["2", "1h"]));
            assert!(refused.starts_with("MOVED"), "{flavor:?}: {refused}");
            // The module on the owner reads and releases the library's lease.
            assert_eq!(int(&mut client, &module("RL.RELEASE", &key, &["w1"])), 1);
            assert_eq!(held(&mut client, &fcall("rl_leases", &key, &["2"]))[0], 0);
        }
    });
}

#[test]
fn over_maxmemory_acquire_is_refused_and_release_and_renew_still_run_as_in_the_module() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        for key in ["rl:m", "rl:l"] {
            acquired(
                &mut con,
                &module("RL.ACQUIRE", key, &["5", "1h", "ID", "a"]),
            );
            acquired(
                &mut con,
                &module("RL.ACQUIRE", key, &["5", "1h", "ID", "b"]),
            );
        }
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(1)
            .query(&mut con)
            .expect("CONFIG SET");
        let by_module = error_text(&mut con, &module("RL.ACQUIRE", "rl:m", &["5", "1h"]));
        let by_library = error_text(&mut con, &fcall("rl_acquire", "rl:l", &["5", "1h"]));
        assert!(by_module.starts_with("OOM"), "{flavor:?}: {by_module}");
        assert_eq!(by_library, by_module, "{flavor:?}");
        for (command, function, args) in [
            ("RL.RENEW", "rl_renew", &["a", "2h"][..]),
            ("RL.RELEASE", "rl_release", &["b"]),
        ] {
            assert_eq!(
                int(&mut con, &module(command, "rl:m", args)),
                1,
                "{flavor:?}"
            );
            assert_eq!(
                int(&mut con, &fcall(function, "rl:l", args)),
                1,
                "{flavor:?}"
            );
        }
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(0)
            .query(&mut con)
            .expect("CONFIG SET");
        for key in ["rl:m", "rl:l"] {
            assert_eq!(
                held(&mut con, &fcall("rl_leases", key, &["5"]))[0],
                1,
                "{flavor:?}"
            );
        }
    });
}

/// `base` damaged by `rng`: a byte changed, the value cut short or extended, a byte put in.
fn damaged(base: &[u8], rng: &mut Seeded) -> Vec<u8> {
    let mut bytes = base.to_vec();
    let at = rng.below(bytes.len());
    match rng.below(5) {
        0 => bytes[at] = rng.below(256) as u8,
        1 => bytes[at] ^= 1 << rng.below(8),
        2 => bytes.truncate(at),
        3 => bytes.extend((0..1 + rng.below(9)).map(|_| rng.below(256) as u8)),
        _ => bytes.insert(at, rng.below(256) as u8),
    }
    bytes
}

#[test]
fn damaged_lease_values_are_read_or_refused_as_the_module_does() {
    each_flavor(|flavor| {
        let server = both(flavor);
        let mut con = server.conn();
        let now = server_ms(&mut con);
        let mut bases = vec![
            encode(
                None,
                &[("a", now + 60_000), ("bb", now - 1), ("c", now + 9_000)],
            ),
            encode(Some((b"3", now + 60_000)), &[("job", now + 1_000)]),
        ];
        acquired(&mut con, &module("RL.ACQUIRE", "rl:g", &["5", "1h"]));
        acquired(
            &mut con,
            &module("RL.ACQUIRE", "rl:g", &["5", "1h", "10", "1m"]),
        );
        bases.push(get_bytes(&mut con, "rl:g").expect("rl:g"));
        let mut rng = Seeded(0x00da_3a6e_d5ee);
        let (mut read, mut refused) = (0, 0);
        for n in 0..240 {
            let bytes = damaged(&bases[n % bases.len()], &mut rng);
            for key in ["rl:a", "rl:b"] {
                restore(&mut con, key, &(Some(bytes.clone()), 0));
            }
            for (command, args) in [("leases", &["5"][..]), ("acquire", &["5", "1h", "ID", "z"])] {
                let (a, b) = on_both(&mut con, command, args);
                let step = format!("case {n}: {command} on {bytes:?}");
                if let Value::ServerError(err) = &b {
                    if err
                        .details()
                        .is_some_and(|d| d.contains("handles values up to"))
                    {
                        // A time beyond 2^53 the module reads and the library refuses.
                        assert!(!matches!(a, Value::ServerError(_)), "{flavor:?}: {step}");
                        continue;
                    }
                }
                assert_eq!(a, b, "{flavor:?}: the replies to {step}");
                same_bytes(&mut con, flavor, &step);
                if command == "leases" {
                    match a {
                        Value::ServerError(_) => refused += 1,
                        _ => read += 1,
                    }
                }
            }
        }
        println!("{flavor:?}: {read} damaged values read as leases, {refused} refused");
        assert!(
            read > 10 && refused > 10,
            "{flavor:?}: {read} read, {refused} refused"
        );
    });
}
