//! CL.THROTTLE against real Redis and Valkey servers, as a drop-in for redis-cell: its
//! README example, the sequence of calls its tests make (replayed on a server), quantity 0
//! that only looks, exact argument errors, effects replication, and the flat reply of five
//! integers for RESP3 clients too.

use testkit::*;

use redis::{Connection, Value};
use std::time::{Duration, Instant};

/// `CL.THROTTLE key <args>`, decoded: `[limited, limit, remaining, retry_after_s,
/// reset_after_s]`.
fn throttle(con: &mut Connection, key: &[u8], args: &str) -> [i64; 5] {
    let args: Vec<&str> = args.split_whitespace().collect();
    let reply: Vec<i64> = redis::cmd("CL.THROTTLE")
        .arg(key)
        .arg(&args)
        .query(con)
        .unwrap_or_else(|e| panic!("CL.THROTTLE {key:?} {args:?}: {e}"));
    reply
        .try_into()
        .unwrap_or_else(|r| panic!("CL.THROTTLE replied {r:?}, not five integers"))
}

/// Makes a single-tier GCRA key look as if `ms` had passed, without waiting: its whole
/// state is one absolute time (the theoretical arrival time), which the short form keeps as
/// the key's expiry (the value holds the parameters and the ns below that ms, both
/// unchanged by time). Moving the expiry back by `ms` is what the server would see `ms`
/// later, as the module computes everything from stored absolute times and the clock.
fn age(con: &mut Connection, key: &[u8], ms: i64) {
    let Some(value) = get_bytes(&mut *con, key) else {
        return; // No state: time passing changes nothing.
    };
    assert_eq!(value[0] & 0xF8, 0xF8, "the short form: {value:?}");
    assert_eq!(value[0] & 0b100, 0b100, "GCRA: {value:?}");
    let expiry = pexpiretime(&mut *con, key) - ms;
    if expiry <= server_ms(con) {
        redis::cmd("DEL").arg(key).exec(con).expect("DEL");
    } else {
        redis::cmd("SET")
            .arg(key)
            .arg(value)
            .arg("PXAT")
            .arg(expiry)
            .exec(con)
            .expect("SET");
    }
}

#[test]
fn the_redis_cell_readme_example() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        for name in [&b"user123"[..], b"user\0\xff\r\n123"] {
            assert_eq!(
                throttle(&mut con, name, "15 30 60"),
                [0, 16, 15, -1, 2],
                "{flavor:?} {name:?}"
            );
        }
    });
}

/// redis-cell's own test sequence (the one src/core/cell.rs replays on the pure core):
/// max_burst 4 (limit 5), 1 per second; (ms after the first call, quantity, reply).
#[rustfmt::skip]
const CELL_SEQUENCE: [(i64, i64, [i64; 5]); 15] = [
    // A quantity above the limit never fits.
    (0,     6, [1, 5, 5, -1, 0]),
    (0,     1, [0, 5, 4, -1, 1]),
    (0,     1, [0, 5, 3, -1, 2]),
    (0,     1, [0, 5, 2, -1, 3]),
    (0,     1, [0, 5, 1, -1, 4]),
    (0,     1, [0, 5, 0, -1, 5]),
    (0,     1, [1, 5, 0, 1, 5]),
    (3_000, 1, [0, 5, 2, -1, 3]),
    (3_100, 1, [0, 5, 1, -1, 4]),
    (4_000, 1, [0, 5, 1, -1, 4]),
    (8_000, 1, [0, 5, 4, -1, 1]),
    (9_500, 1, [0, 5, 4, -1, 1]),
    // Quantity 0 only looks.
    (9_500, 0, [0, 5, 4, -1, 1]),
    (9_500, 2, [0, 5, 2, -1, 3]),
    (9_500, 5, [1, 5, 2, 3, 3]),
];

#[test]
fn redis_cells_sequence_replayed_on_a_server() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let name = b"cell:sequence";
        // The scenario's clock: its calls at time 0 happened at or before `start`, and
        // `skipped` ms were passed by ageing the key instead of waiting, so every later
        // call happens at or a few ms after its offset, never before. Being late by a few ms moves no
        // answer: the times are rounded up to seconds from whole multiples of them.
        let mut start = None;
        let mut skipped = 0;
        for (n, (at, quantity, expected)) in CELL_SEQUENCE.into_iter().enumerate() {
            if let Some(start) = start {
                let elapsed = server_ms(&mut con) - start + skipped;
                if at > elapsed {
                    age(&mut con, name, at - elapsed);
                    skipped += at - elapsed;
                }
            }
            let reply = throttle(&mut con, name, &format!("4 1 1 {quantity}"));
            if at == 0 {
                // The state's time 0 is that of the first call that wrote (not step 0, a
                // denial): reading the clock after each call at 0 is never earlier.
                start = Some(server_ms(&mut con));
            }
            assert_eq!(
                reply, expected,
                "{flavor:?} step {n}: at {at} ms, quantity {quantity}"
            );

            if n == 6 {
                // Denied, to retry in 1 s: really waiting that long is enough for a unit
                // (a quantity 0 look shows one remaining, and takes nothing).
                std::thread::sleep(Duration::from_millis(1_000));
                let look = throttle(&mut con, name, "4 1 1 0");
                assert!(look[0] == 0 && look[2] >= 1, "{flavor:?}: {look:?}");
                let waited = server_ms(&mut con) - start.expect("started") + skipped;
                if waited < 1_900 {
                    assert_eq!(look, [0, 5, 1, -1, 4], "{flavor:?} after {waited} ms");
                }
            }
        }
    });
}

#[test]
fn a_long_period_gives_the_same_answers_scaled() {
    // The calls at time 0 of the sequence, with a period of a minute, an hour and a day:
    // the ms that pass between calls never show in seconds rounded up.
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        for period in [60, 3_600, 86_400] {
            let name = format!("cell:period:{period}");
            let args = |quantity: i64| format!("4 1 {period} {quantity}");
            let context = format!("{flavor:?} period {period}");
            assert_eq!(
                throttle(&mut con, name.as_bytes(), &args(6)),
                [1, 5, 5, -1, 0]
            );
            for taken in 1..=5 {
                let reply = throttle(&mut con, name.as_bytes(), &args(1));
                assert_eq!(reply, [0, 5, 5 - taken, -1, taken * period], "{context}");
            }
            let denied = throttle(&mut con, name.as_bytes(), &args(1));
            assert_eq!(denied, [1, 5, 0, period, 5 * period], "{context}");
        }
    });
}

#[test]
fn quantity_0_and_denials_write_and_propagate_nothing() {
    each_flavor(|flavor| {
        // No pings: only writes move the primary's replication offset.
        let (primary, _replica) = primary_with_replica_configs(
            ServerConfig::new(flavor).arg("repl-ping-replica-period", "3600"),
            ServerConfig::new(flavor),
        );
        let (mut con, mut watcher) = (primary.conn(), primary.conn());
        let (full, partly) = (b"cell:full".as_slice(), b"cell:partly".as_slice());
        let filled = Instant::now();
        assert_eq!(throttle(&mut con, full, "1 1 3600 2"), [0, 2, 0, -1, 7_200]);
        assert_eq!(throttle(&mut con, partly, "4 1 3600"), [0, 5, 4, -1, 3_600]);
        wait_for_replicas(&mut con, 1);
        let offset = primary.master_repl_offset();
        let calls: [(&[u8], &str, [i64; 5]); 5] = [
            // A look at a full bucket is allowed: it takes nothing.
            (full, "1 1 3600 0", [0, 2, 0, -1, 7_200]),
            (full, "1 1 3600 1", [1, 2, 0, 3_600, 7_200]),
            (full, "1 1 3600 3", [1, 2, 0, -1, 7_200]),
            (partly, "4 1 3600 0", [0, 5, 4, -1, 3_600]),
            // No key: a look creates none.
            (b"cell:none", "4 1 3600 0", [0, 5, 5, -1, 0]),
        ];
        for (name, args, expected) in calls {
            let before = stored(&mut con, name);
            let mut reply = None;
            let survives = watch_survives(&mut watcher, name, || {
                reply = Some(throttle(&mut con, name, args));
            });
            let context = format!("{flavor:?} CL.THROTTLE {name:?} {args}");
            assert_eq!(
                reply.map(|r| within_elapsed(r, expected, filled.elapsed())),
                Some(expected),
                "{context}: {reply:?}"
            );
            assert!(survives, "{context}: broke a WATCH");
            assert_eq!(stored(&mut con, name), before, "{context}");
        }
        assert_eq!(primary.master_repl_offset(), offset, "{flavor:?}");
    });
}

/// `reply` with its two times (retry and reset, whole seconds rounded up) taken as
/// `expected`'s when they are short of them by no more than the seconds `elapsed` since the
/// bucket was filled: the server's clock moves on between calls, and on a loaded machine a
/// second can pass. Every other field, and any time off by more, stays as it came.
fn within_elapsed(reply: [i64; 5], expected: [i64; 5], elapsed: Duration) -> [i64; 5] {
    let slack = i64::try_from(elapsed.as_secs())
        .unwrap_or(i64::MAX)
        .saturating_add(1);
    let mut seen = reply;
    for i in [3, 4] {
        let behind = expected[i] - reply[i];
        if expected[i] > 0 && (0..=slack).contains(&behind) {
            seen[i] = expected[i];
        }
    }
    seen
}

/// Each key's type, value (for strings) and expiry.
fn snapshot(con: &mut Connection, keys: &[&str]) -> Vec<(String, Option<Vec<u8>>, i64)> {
    keys.iter()
        .map(|k| {
            let kind: String = redis::cmd("TYPE").arg(k).query(con).expect("TYPE");
            let value = (kind == "string")
                .then(|| get_bytes(&mut *con, k))
                .flatten();
            (kind, value, pexpiretime(con, k))
        })
        .collect()
}

#[test]
fn malformed_arguments_get_exact_errors_and_change_nothing() {
    let arity = "ERR wrong number of arguments for 'CL.THROTTLE' command";
    let max_burst = "ERR max_burst must be an integer from 0 to 9223372036854775806";
    let count = "ERR count_per_period must be a positive integer";
    let period = "ERR period must be a positive integer of seconds";
    let too_long = "ERR period must be at most 31622400 seconds (366 days)";
    let quantity = "ERR quantity must be a non-negative integer";
    let not_ours = "ERR key holds a string that is not a ratelimit state";
    let wrongtype = "WRONGTYPE Operation against a key holding the wrong kind of value";
    #[rustfmt::skip]
    let cases: [(&[&str], &str); 25] = [
        (&[], arity),
        (&["guard"], arity),
        (&["guard", "1"], arity),
        (&["guard", "1", "2"], arity),
        (&["guard", "1", "2", "3", "4", "5"], arity),
        (&["guard", "-1", "1", "1"], max_burst),
        (&["guard", "+1", "1", "1"], max_burst),
        (&["guard", "1.5", "1", "1"], max_burst),
        (&["guard", "x", "1", "1"], max_burst),
        (&["guard", "", "1", "1"], max_burst),
        (&["guard", "9223372036854775807", "1", "1"], max_burst),
        (&["guard", "1", "0", "1"], count),
        (&["guard", "1", "-5", "1"], count),
        (&["guard", "1", "2.0", "1"], count),
        (&["guard", "1", "9223372036854775808", "1"], count),
        (&["guard", "1", "1", "0"], period),
        (&["guard", "1", "1", "-1"], period),
        (&["guard", "1", "1", "60s"], period),
        (&["guard", "1", "1", "31622401"], too_long),
        (&["guard", "1", "1", "99999999999999999999"], too_long),
        (&["guard", "1", "1", "1", "-1"], quantity),
        (&["guard", "1", "1", "1", "one"], quantity),
        (&["guard", "1", "1", "1", "9223372036854775808"], quantity),
        (&["list", "1", "1", "1"], wrongtype),
        (&["text", "1", "1", "1"], not_ours),
    ];
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        assert_eq!(
            throttle(&mut con, b"guard", "4 1 3600"),
            [0, 5, 4, -1, 3_600]
        );
        redis::cmd("RPUSH")
            .arg("list")
            .arg("x")
            .exec(&mut con)
            .expect("RPUSH");
        redis::cmd("SET")
            .arg("text")
            .arg("hello")
            .exec(&mut con)
            .expect("SET");
        let guarded = snapshot(&mut con, &["guard", "list", "text"]);
        for (args, expected) in cases {
            let error = error_text(&mut con, redis::cmd("CL.THROTTLE").arg(args));
            assert_eq!(error, expected, "{flavor:?} CL.THROTTLE {args:?}");
        }
        let after = snapshot(&mut con, &["guard", "list", "text"]);
        assert_eq!(after, guarded, "{flavor:?}: nothing changed");
    });
}

#[test]
fn replicas_hold_the_primarys_bytes_and_expiries() {
    each_flavor(|flavor| {
        let (primary, replica) = primary_with_replica(flavor);
        let mut con = primary.conn();
        let mut allowed_writes = 0;
        let mut keys = Vec::new();
        for n in 0..12_u8 {
            let name = [b"cell:\0\xff\r\n".as_slice(), &[n]].concat();
            // max_burst 0..=3, 1..=3 per 10 s to 10 min, quantities 0..=3.
            let (burst, count, period) = (n % 4, 1 + n % 3, [10, 60, 600][usize::from(n % 3)]);
            let mut last = None;
            for call in 0..6 + n % 4 {
                let quantity = (call + n) % 4;
                let args = format!("{burst} {count} {period} {quantity}");
                let before = server_ms(&mut con);
                let reply = throttle(&mut con, &name, &args);
                let after = server_ms(&mut con);
                allowed_writes += i64::from(reply[0] == 0 && quantity > 0);
                last = Some((reply, before, after));
            }
            keys.push((name, last.expect("calls")));
        }
        wait_for_replicas(&mut con, 1);
        let mut on_replica = replica.conn();
        for (name, (reply, before, after)) in &keys {
            let context = format!("{flavor:?} {name:?} last reply {reply:?}");
            let on_primary = stored(&mut con, name);
            assert_eq!(stored(&mut on_replica, name), on_primary, "{context}");
            // The key expires when the bucket is full again: reset_after_s, rounded up,
            // after the last call.
            let expiry = on_primary.1;
            let reset_s = reply[4];
            if reset_s == 0 {
                assert_eq!(expiry, -2, "{context}");
            } else {
                let (low, high) = (before + (reset_s - 1) * 1_000, after + reset_s * 1_000);
                assert!(low < expiry && expiry <= high, "{context}: expiry {expiry}");
            }
        }
        // Every write reached the replica as a SET; the command never ran there.
        assert!(allowed_writes > 0, "{flavor:?}");
        assert_eq!(
            replica.command_calls("set"),
            Some(allowed_writes),
            "{flavor:?}"
        );
        assert_eq!(replica.command_calls("CL.THROTTLE"), None, "{flavor:?}");
    });
}

#[test]
fn a_resp3_client_gets_the_same_flat_array() {
    // The same calls on twin keys, one per protocol: allowed, full, never, a look.
    let quantities = [1, 1, 1, 1, 5, 0];
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let (mut con2, mut con3) = (server.conn(), server.conn_resp3());
        for quantity in quantities {
            let args = format!("2 1 60 {quantity}");
            let resp2 = throttle(&mut con2, b"cell:resp2", &args);
            let argv: Vec<&str> = args.split_whitespace().collect();
            let resp3: Value = redis::cmd("CL.THROTTLE")
                .arg("cell:resp3")
                .arg(&argv)
                .query(&mut con3)
                .expect("CL.THROTTLE");
            let expected: Vec<Value> = resp2.iter().map(|v| Value::Int(*v)).collect();
            assert_eq!(resp3, Value::Array(expected), "{flavor:?} {args}");
        }
    });
}

#[test]
fn cl_throttle_and_rl_hit_with_gcra_share_one_state() {
    // CL.THROTTLE key 4 1 60 is GCRA with limit 1, window 60 s and burst 5: RL.HIT with
    // those parameters counts on from what CL.THROTTLE stored, and the other way round.
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let name = b"cell:shared".as_slice();
        assert_eq!(throttle(&mut con, name, "4 1 60 2"), [0, 5, 3, -1, 120]);
        let r = hit(&mut con, name, &["1", "60s", "ALGO", "gcra", "BURST", "5"]);
        assert_eq!(
            (r.allowed, r.limit, r.remaining),
            (true, 5, 2),
            "{flavor:?}"
        );
        assert_eq!(throttle(&mut con, name, "4 1 60"), [0, 5, 1, -1, 240]);
    });
}
