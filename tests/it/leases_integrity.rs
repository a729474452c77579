//! Leases against bad input, corrupt values and replication, on Redis
//! 7.0 and Valkey 8.1: every malformed call gets one exact `ERR` (or `WRONGTYPE`) and
//! writes nothing (DBSIZE and DUMP before and after); a value that is not leases is refused,
//! never read; a replica (without the module) and a restart from the AOF (plain and
//! rewritten) hold the primary's exact bytes and absolute expiries, having received only
//! SET and DEL, with the generated ids in them; a key at the `ratelimit.max-leases` cap
//! stays correct when the cap is lowered under it.

use testkit::random_calls::rng::Rng;
use testkit::*;

use redis::{Connection, Value};
use std::collections::BTreeMap;

const NOT_LEASES: &str = "ERR key holds a value that is not leases (a rate-limit state of \
                          RL.HIT, or another string)";
const LEASES_NOT_STATE: &str =
    "ERR key holds leases (RL.ACQUIRE), not a rate-limit state: use RL.LEASES to read it";
const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const TTL: &str = "ERR ttl must be a positive duration (e.g. 500ms, 30s) of at most 366d \
                   (ratelimit.max-window-ms)";
const ID: &str = "ERR ID must be followed by a lease id of 1 to 64 bytes";

fn max_error(cap: i64) -> String {
    format!("ERR max must be an integer from 1 to {cap} (ratelimit.max-leases)")
}

fn arity(command: &str) -> String {
    format!("ERR wrong number of arguments for '{command}' command")
}

fn cmd(args: &[&[u8]]) -> redis::Cmd {
    let mut cmd = redis::cmd(std::str::from_utf8(args[0]).expect("a command name"));
    for arg in &args[1..] {
        cmd.arg(*arg);
    }
    cmd
}

/// Each key's bytes (DUMP or GET) and PEXPIRETIME.
type Contents = BTreeMap<Vec<u8>, (Option<Vec<u8>>, i64)>;

/// Every key's DUMP and PEXPIRETIME, and the key count.
fn everything(con: &mut Connection) -> (i64, Contents) {
    let names: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(con).expect("KEYS");
    let dbsize: i64 = redis::cmd("DBSIZE").query(con).expect("DBSIZE");
    let keys = names
        .into_iter()
        .map(|name| {
            let dump: Option<Vec<u8>> = redis::cmd("DUMP").arg(&name).query(con).expect("DUMP");
            let expiry = pexpiretime(con, name.as_slice());
            (name, (dump, expiry))
        })
        .collect();
    (dbsize, keys)
}

#[test]
fn bad_input_gets_one_clear_error_and_writes_nothing() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let setup: [&[&[u8]]; 4] = [
            &[
                b"RL.ACQUIRE",
                b"guard",
                b"3",
                b"1h",
                b"5",
                b"1h",
                b"ID",
                b"held",
            ],
            &[b"RL.HIT", b"hit", b"5", b"1h"],
            &[b"RPUSH", b"list", b"x"],
            &[b"SET", b"text", b"hello"],
        ];
        for args in setup {
            cmd(args).exec(&mut con).expect("setup");
        }
        let long_id = [b'x'; 65];
        let max = max_error(10_000);
        #[rustfmt::skip]
        let calls: Vec<(Vec<&[u8]>, String)> = vec![
            (vec![b"RL.ACQUIRE", b"guard"], arity("RL.ACQUIRE")),
            (vec![b"RL.ACQUIRE", b"guard", b"3"], arity("RL.ACQUIRE")),
            (vec![b"RL.ACQUIRE", b"guard", b"0", b"1h"], max.clone()),
            (vec![b"RL.ACQUIRE", b"guard", b"-1", b"1h"], max.clone()),
            (vec![b"RL.ACQUIRE", b"guard", b"10001", b"1h"], max.clone()),
            (vec![b"RL.ACQUIRE", b"guard", b"99999999999999999999", b"1h"], max.clone()),
            (vec![b"RL.ACQUIRE", b"guard", b"3.0", b"1h"], max.clone()),
            (vec![b"RL.ACQUIRE", b"guard", b"", b"1h"], max.clone()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"0"], TTL.into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"0ms"], TTL.into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"-5"], TTL.into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"367d"], TTL.into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"1.5s"], TTL.into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"9223372036854775808ms"], TTL.into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"1h", b"ID", b""], ID.into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"1h", b"ID", &long_id], ID.into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"1h", b"ID"], ID.into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"1h", b"ID", b"a", b"id", b"b"],
                "ERR ID is given more than once".into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"1h", b"ID", b"held"],
                "ERR ID is already held on this key: release or renew it".into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"1h", b"COST", b"2"],
                "ERR ALGO, BURST and COST apply to tiers: give limit window first".into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"1h", b"5"],
                "ERR each limit needs a window: limit window [limit window ...]".into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"1h", b"0", b"1h"],
                "ERR limit must be a positive integer".into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"1h", b"5", b"0"],
                "ERR window must be at least 1ms".into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"1h", b"5", b"1h", b"ALGO", b"leaky"],
                "ERR ALGO must be one of fixed, sliding, log, token, gcra".into()),
            // As RL.HIT reads it: a word after the tiers that starts with a letter is an
            // option, and an unknown one is named with the valid ones.
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"1h", b"5", b"1h", b"FOO", b"1"],
                "ERR unknown option 'FOO' (expected ALGO, BURST, COST, TZ, ANCHOR or ID)".into()),
            (vec![b"RL.ACQUIRE", b"guard", b"3", b"1h", b"5", b"1h", b"COST", b"1", b"FOO", b"1"],
                "ERR unknown option 'FOO' (expected ALGO, BURST, COST, TZ, ANCHOR or ID)".into()),
            (vec![b"RL.RELEASE", b"guard"], arity("RL.RELEASE")),
            (vec![b"RL.RELEASE", b"guard", b"held", b"extra"], arity("RL.RELEASE")),
            (vec![b"RL.RELEASE", b"guard", b""], ID.into()),
            (vec![b"RL.RELEASE", b"guard", &long_id], ID.into()),
            (vec![b"RL.RENEW", b"guard", b"held"], arity("RL.RENEW")),
            (vec![b"RL.RENEW", b"guard", b"held", b"0"], TTL.into()),
            (vec![b"RL.RENEW", b"guard", b"held", b"400d"], TTL.into()),
            (vec![b"RL.RENEW", b"guard", b"", b"1h"], ID.into()),
            (vec![b"RL.LEASES", b"guard"], arity("RL.LEASES")),
            (vec![b"RL.LEASES", b"guard", b"0"], max.clone()),
            (vec![b"RL.LEASES", b"guard", b"10001"], max.clone()),
            (vec![b"RL.ACQUIRE", b"list", b"3", b"1h"], WRONGTYPE.into()),
            (vec![b"RL.RELEASE", b"list", b"held"], WRONGTYPE.into()),
            (vec![b"RL.RENEW", b"list", b"held", b"1h"], WRONGTYPE.into()),
            (vec![b"RL.LEASES", b"list", b"3"], WRONGTYPE.into()),
            (vec![b"RL.ACQUIRE", b"text", b"3", b"1h"], NOT_LEASES.into()),
            (vec![b"RL.RELEASE", b"text", b"held"], NOT_LEASES.into()),
            (vec![b"RL.RENEW", b"text", b"held", b"1h"], NOT_LEASES.into()),
            (vec![b"RL.LEASES", b"text", b"3"], NOT_LEASES.into()),
            // An RL.HIT state is not leases, and leases are not an RL.HIT state.
            (vec![b"RL.ACQUIRE", b"hit", b"3", b"1h"], NOT_LEASES.into()),
            (vec![b"RL.RELEASE", b"hit", b"held"], NOT_LEASES.into()),
            (vec![b"RL.LEASES", b"hit", b"3"], NOT_LEASES.into()),
            (vec![b"RL.HIT", b"guard", b"5", b"1h"], LEASES_NOT_STATE.into()),
            (vec![b"RL.PEEK", b"guard", b"5", b"1h"], LEASES_NOT_STATE.into()),
            (vec![b"RL.REFUND", b"guard", b"5", b"1h"], LEASES_NOT_STATE.into()),
        ];
        let before = everything(&mut con);
        assert_eq!(before.0, 4, "{flavor:?}");
        for (args, expected) in &calls {
            let error = error_text(&mut con, &cmd(args));
            assert_eq!(&error, expected, "{flavor:?} {:?}", args);
            assert_eq!(everything(&mut con), before, "{flavor:?} {args:?} wrote");
        }
        // Lowering the cap applies to the next call; the server refuses values out of range.
        redis::cmd("CONFIG")
            .arg(&["SET", "ratelimit.max-leases", "2"])
            .exec(&mut con)
            .expect("CONFIG SET");
        let error = error_text(&mut con, &cmd(&[b"RL.ACQUIRE", b"guard", b"3", b"1h"]));
        assert_eq!(error, max_error(2), "{flavor:?}");
        for bad in ["0", "10001", "-1", "many"] {
            let refused = redis::cmd("CONFIG")
                .arg(&["SET", "ratelimit.max-leases", bad])
                .exec(&mut con);
            assert!(refused.is_err(), "{flavor:?}: max-leases {bad} accepted");
        }
        assert_eq!(everything(&mut con), before, "{flavor:?}");
        // RL.RESET forgets leases as it forgets a state.
        let reset: i64 = cmd(&[b"RL.RESET", b"guard"])
            .query(&mut con)
            .expect("RL.RESET");
        assert_eq!(reset, 1, "{flavor:?}");
    });
}

/// Values that start like leases but are not whole, well-formed lease values.
fn corrupt_values() -> Vec<Vec<u8>> {
    let record = |tag: u8, id: &[u8], end: i64| {
        let mut out = vec![tag];
        out.extend_from_slice(id);
        out.extend_from_slice(&end.to_le_bytes());
        out
    };
    let far = 4_102_444_800_000i64;
    let one = record(1, b"a", far);
    vec![
        vec![0x02],
        vec![0x02, 0x00],
        vec![0x02, 0x00, 0x91, 0x4e], // 10,001 leases, none given
        [&[0x02, 0x00, 0x03][..], &one].concat(), // 3 said, 1 given
        [&[0x02, 0x00, 0x01][..], &one, &[0]].concat(), // trailing byte
        [&[0x02, 0x00, 0x01][..], &one[..5]].concat(), // truncated
        [&[0x02, 0x00, 0x01][..], &record(0, b"", far)].concat(), // empty id
        [&[0x02, 0x00, 0x01][..], &record(65, &[b'x'; 65], far)].concat(),
        // 32 lowercase hex digits stored as text: not the canonical (raw) form.
        [&[0x02, 0x00, 0x01][..], &record(32, &[b'a'; 32], far)].concat(),
        vec![0x02, 0x05, b'a', b'b'], // a tier block cut short
        vec![
            0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ],
    ]
}

#[test]
fn values_that_are_not_whole_leases_are_refused_and_kept() {
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let mut rng = Rng::new(15);
        let mut values = corrupt_values();
        for _ in 0..300 {
            let len = rng.below(60);
            let mut junk = vec![0x02];
            junk.extend(rng.bytes(len));
            values.push(junk);
        }
        let calls: [&[&[u8]]; 5] = [
            &[b"RL.ACQUIRE", b"bad", b"3", b"1h"],
            &[b"RL.ACQUIRE", b"bad", b"3", b"1h", b"5", b"1m", b"ID", b"a"],
            &[b"RL.RELEASE", b"bad", b"a"],
            &[b"RL.RENEW", b"bad", b"a", b"1h"],
            &[b"RL.LEASES", b"bad", b"3"],
        ];
        let mut refused = 0;
        for value in &values {
            redis::cmd("SET")
                .arg(b"bad")
                .arg(value.as_slice())
                .exec(&mut con)
                .expect("SET");
            for args in calls {
                let reply: redis::RedisResult<Value> = cmd(args).query(&mut con);
                let error = match &reply {
                    Ok(Value::ServerError(err)) => {
                        Some(format!("{} {}", err.code(), err.details().unwrap_or("")))
                    }
                    Ok(_) => None,
                    Err(err) => Some(format!(
                        "{} {}",
                        err.code().unwrap_or(""),
                        err.detail().unwrap_or("")
                    )),
                };
                if let Some(text) = error {
                    assert_eq!(text.trim(), NOT_LEASES, "{flavor:?} {value:?} {args:?}");
                    let kept = get_bytes(&mut con, "bad");
                    assert_eq!(
                        kept.as_ref(),
                        Some(value),
                        "{flavor:?}: refused, yet written"
                    );
                    refused += 1;
                } else {
                    // A value that does decode (random bytes can spell one): put it back.
                    redis::cmd("SET")
                        .arg(b"bad")
                        .arg(value.as_slice())
                        .exec(&mut con)
                        .expect("SET");
                }
            }
        }
        assert!(
            refused >= 5 * corrupt_values().len(),
            "{flavor:?}: {refused}"
        );
        let pong: String = redis::cmd("PING").query(&mut con).expect("alive");
        assert_eq!(pong, "PONG");
    });
}

/// The module's lease traffic on `con`: acquires with and without tiers and ids, denied
/// ones, renewals, releases (the last one deletes its key), errors, MULTI/EXEC and Lua.
fn lease_traffic(con: &mut Connection, rng: &mut Rng, calls: usize) {
    let ttls: [&[u8]; 4] = [b"1h", b"2h", b"90m", b"1d"];
    let ids: [&[u8]; 5] = [
        b"a",
        b"b",
        b"c",
        b"\0\xff\r\n",
        b"00112233445566778899aabbccddeeff",
    ];
    for _ in 0..calls {
        let key = format!("lease:{{t}}:{}", rng.below(12)).into_bytes();
        let ttl = *rng.pick(&ttls);
        let id = *rng.pick(&ids);
        let maxes: [&[u8]; 3] = [b"1", b"2", b"3"];
        let max = *rng.pick(&maxes);
        let argv: Vec<&[u8]> = match rng.below(10) {
            0..=2 => vec![b"RL.ACQUIRE", &key, max, ttl],
            3..=4 => vec![b"RL.ACQUIRE", &key, max, ttl, b"ID", id],
            5 => vec![
                b"RL.ACQUIRE",
                &key,
                max,
                ttl,
                b"3",
                b"1h",
                b"ALGO",
                b"gcra",
                b"ID",
                id,
            ],
            6..=7 => vec![b"RL.RELEASE", &key, id],
            8 => vec![b"RL.RENEW", &key, id, ttl],
            _ => vec![b"RL.ACQUIRE", &key, b"0", ttl],
        };
        let wrapped = rng.below(10);
        let reply: redis::RedisResult<Value> = match wrapped {
            0 => redis::pipe().atomic().add_command(cmd(&argv)).query(con),
            1 => {
                let mut eval = redis::cmd("EVAL");
                eval.arg("return redis.pcall(ARGV[1], KEYS[1], unpack(ARGV, 2))")
                    .arg(1)
                    .arg(argv[1])
                    .arg(argv[0]);
                for arg in &argv[2..] {
                    eval.arg(*arg);
                }
                eval.query(con)
            }
            _ => cmd(&argv).query(con),
        };
        if let Err(err) = reply {
            let text = format!("{err}");
            assert!(!text.contains("internal error"), "{argv:?}: {text}");
        }
    }
}

fn exact_contents(con: &mut Connection) -> Contents {
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

#[test]
fn a_replica_and_the_aof_hold_the_primarys_exact_leases() {
    each_flavor(|flavor| {
        let primary_config = ServerConfig::new(flavor)
            .arg("appendonly", "yes")
            .arg("aof-use-rdb-preamble", "no");
        // The replica runs without the module: plain SET and DEL are all it needs.
        let replica_config = ServerConfig::new(flavor).without_module();
        let (primary, replica) = primary_with_replica_configs(primary_config, replica_config);
        let mut con = primary.conn();
        let mut rng = Rng::new(1515);
        lease_traffic(&mut con, &mut rng, 1_500);
        wait_for_replicas(&mut con, 1);
        let on_primary = exact_contents(&mut con);
        assert!(
            on_primary.len() >= 6,
            "{flavor:?}: {} keys",
            on_primary.len()
        );
        let with_tiers = on_primary
            .values()
            .filter(|(value, _)| value.as_ref().is_some_and(|v| v.get(1) != Some(&0)))
            .count();
        assert!(with_tiers > 0, "{flavor:?}: some keys hold tier state");
        assert_eq!(
            exact_contents(&mut replica.conn()),
            on_primary,
            "{flavor:?}: the replica differs"
        );
        // Only plain writes reached the replica.
        for command in ["rl.acquire", "rl.release", "rl.renew", "eval", "exec"] {
            assert_eq!(replica.command_calls(command), None, "{flavor:?} {command}");
        }
        assert!(replica.command_calls("set").unwrap_or(0) > 0, "{flavor:?}");
        drop(replica);
        let restarted = primary.restart_on_the_aof();
        assert_eq!(
            exact_contents(&mut restarted.conn()),
            on_primary,
            "{flavor:?}: the AOF replay differs"
        );
        restarted.rewrite_aof();
        let rewritten = restarted.restart_on_the_aof();
        assert_eq!(
            exact_contents(&mut rewritten.conn()),
            on_primary,
            "{flavor:?}: the rewritten AOF differs"
        );
    });
}

/// A lease value of `count` leases with generated ids ending at `ends_at_ms`, written as
/// the module writes one (`ratelimit_core::lease::layout`): filling a key through 10,000
/// calls, each rewriting the whole value, takes half a minute in a debug build. Built here
/// byte by byte rather than with `layout::encode`, which never writes more than the cap:
/// the test needs one lease over it.
fn lease_value(count: u16, ends_at_ms: i64) -> Vec<u8> {
    let mut value = vec![0x02, 0x00];
    let mut rest = count;
    loop {
        let byte = (rest & 0x7f) as u8;
        rest >>= 7;
        if rest == 0 {
            value.push(byte);
            break;
        }
        value.push(byte | 0x80);
    }
    for n in 0..count {
        value.push(0x80);
        value.extend_from_slice(&[0xab; 14]);
        value.extend_from_slice(&n.to_be_bytes());
        value.extend_from_slice(&ends_at_ms.to_le_bytes());
    }
    value
}

#[test]
fn a_key_at_the_cap_holds_when_the_cap_is_lowered() {
    const CAP: i64 = 10_000;
    each_flavor(|flavor| {
        let server = ServerConfig::new(flavor).start();
        let mut con = server.conn();
        let key = "lease:cap";
        let ends = server_ms(&mut con) + 3_600_000;
        redis::cmd("SET")
            .arg(key)
            .arg(lease_value(CAP as u16, ends))
            .arg("PXAT")
            .arg(ends)
            .exec(&mut con)
            .expect("SET");
        let acquire = |con: &mut Connection, max: i64| -> Vec<Value> {
            let reply: Value = redis::cmd("RL.ACQUIRE")
                .arg(key)
                .arg(max)
                .arg("1h")
                .query(con)
                .expect("RL.ACQUIRE");
            match reply {
                Value::Array(fields) => fields,
                other => panic!("{other:?}"),
            }
        };
        let held = |con: &mut Connection, max: i64| -> Vec<i64> {
            redis::cmd("RL.LEASES")
                .arg(key)
                .arg(max)
                .query(con)
                .expect("RL.LEASES")
        };
        assert_eq!(&held(&mut con, CAP)[..3], &[CAP, CAP, 0], "{flavor:?}");
        let over = acquire(&mut con, CAP);
        assert_eq!(over[0], Value::Int(0), "{flavor:?}: the 10,001st is denied");
        redis::cmd("CONFIG")
            .arg(&["SET", "ratelimit.max-leases", "100"])
            .exec(&mut con)
            .expect("CONFIG SET");
        assert_eq!(&held(&mut con, 100)[..3], &[CAP, 100, 0], "{flavor:?}");
        assert_eq!(acquire(&mut con, 100)[0], Value::Int(0), "{flavor:?}");
        // A release still works on the full key, and frees one slot of the 10,000.
        let mut id = vec![0xabu8; 14];
        id.extend_from_slice(&7u16.to_be_bytes());
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let released: i64 = redis::cmd("RL.RELEASE")
            .arg(key)
            .arg(&hex)
            .query(&mut con)
            .expect("RL.RELEASE");
        assert_eq!(released, 1, "{flavor:?}");
        assert_eq!(held(&mut con, 100)[0], CAP - 1, "{flavor:?}");
        // One more value than the cap is not a lease value at all.
        redis::cmd("SET")
            .arg(key)
            .arg(lease_value(CAP as u16 + 1, ends))
            .exec(&mut con)
            .expect("SET");
        let error = error_text(&mut con, redis::cmd("RL.LEASES").arg(key).arg(3));
        assert_eq!(error, NOT_LEASES, "{flavor:?}");
    });
}
