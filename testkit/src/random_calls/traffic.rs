//! What other clients do to the same keys meanwhile: plain writes of every kind
//! (`SET k garbage PX n`, `APPEND`, `SETRANGE`, `PERSIST`, `PEXPIRE`, `HSET`, `LPUSH`,
//! `DEL`), MULTI/EXEC blocks mixing them with the module's calls, Lua scripts calling the
//! module, `CONFIG SET ratelimit.*` with good and bad values, and background saves.

use super::calls::{any_call, Argv};
use super::keys::key;
use super::rng::Rng;

/// One step of a client: a command, or a MULTI/EXEC block of several.
pub enum Step {
    Command(Argv),
    Transaction(Vec<Argv>),
}

/// Values another client stores: garbage, numbers that look like a fixed window's count,
/// and random bytes (some of which start like the module's own encodings).
fn garbage(rng: &mut Rng) -> Vec<u8> {
    match rng.below(8) {
        0 => b"garbage".to_vec(),
        1 => Vec::new(),
        2 => b"\0\xff".to_vec(),
        3 => rng
            .pick(&[&b"5"[..], b"0", b"-1", b"9223372036854775808", b"12"])
            .to_vec(),
        _ => {
            let len = rng.below(24);
            rng.bytes(len)
        }
    }
}

fn argv(parts: &[&[u8]]) -> Argv {
    parts.iter().map(|p| p.to_vec()).collect()
}

/// A write by another client to a shared key.
pub fn foreign_write(rng: &mut Rng) -> Argv {
    let key = key(rng);
    // Garbage lives a few seconds at most (or until a DEL), so that the module's calls
    // mostly meet their own states, renewed, expired or overwritten now and then.
    match rng.below(11) {
        0..=1 => {
            let px = rng.between(1, 8_000).to_string();
            argv(&[b"SET", &key, &garbage(rng), b"PX", px.as_bytes()])
        }
        2 => argv(&[b"APPEND", &key, &garbage(rng)]),
        3 => {
            let offset = rng.below(40).to_string();
            argv(&[b"SETRANGE", &key, offset.as_bytes(), &garbage(rng)])
        }
        4 => argv(&[b"PERSIST", &key]),
        5 => {
            let ms = rng
                .pick(&[-1_i64, 0, 1, 50, 5_000, 100_000, 10_000_000])
                .to_string();
            argv(&[b"PEXPIRE", &key, ms.as_bytes()])
        }
        6 => argv(&[b"HSET", &key, b"field", &garbage(rng)]),
        7 => argv(&[b"LPUSH", &key, &garbage(rng)]),
        8..=9 => argv(&[b"DEL", &key]),
        _ => argv(&[b"SET", &key, &garbage(rng)]),
    }
}

/// A MULTI/EXEC block of two to six commands, the module's calls and foreign writes.
pub fn transaction(rng: &mut Rng) -> Step {
    let len = 2 + rng.below(5);
    let commands = (0..len)
        .map(|_| {
            if rng.percent(60) {
                any_call(rng)
            } else {
                foreign_write(rng)
            }
        })
        .collect();
    Step::Transaction(commands)
}

/// `EVAL` of a script that runs one of the module's calls with `redis.call` (errors raise)
/// or `redis.pcall` (errors are returned), its key declared as `KEYS[1]`.
pub fn lua_call(rng: &mut Rng) -> Argv {
    let call = any_call(rng);
    let call_fn: &[u8] = if rng.percent(50) {
        b"redis.call"
    } else {
        b"redis.pcall"
    };
    let script = [
        b"return ".as_slice(),
        call_fn,
        b"(ARGV[1], KEYS[1], unpack(ARGV, 2))",
    ]
    .concat();
    let mut parts = call.into_iter();
    let name = parts.next().unwrap_or_default();
    let key = parts.next().unwrap_or_default();
    let mut argv = vec![b"EVAL".to_vec(), script, b"1".to_vec(), key, name];
    argv.extend(parts);
    argv
}

/// `CONFIG SET ratelimit.<name> <value>`, good values about two times in three; the
/// defaults come back often, so most calls run under them.
pub fn config_set(rng: &mut Rng) -> Argv {
    let (name, values): (&[u8], &[&[u8]]) = match rng.below(5) {
        0 => (
            b"ratelimit.default-algorithm",
            &[
                b"fixed", b"fixed", b"sliding", b"log", b"gcra", b"token", b"bogus", b"",
            ],
        ),
        1 => (
            b"ratelimit.max-window-ms",
            &[
                b"31622400000",
                b"31622400000",
                b"1000",
                b"316224000000",
                b"0",
                b"-1",
                b"316224000001",
                b"abc",
                b"9223372036854775808",
            ],
        ),
        2 => (
            b"ratelimit.max-log-limit",
            &[
                b"10000", b"10000", b"100", b"1", b"0", b"10001", b"-5", b"1.5",
            ],
        ),
        3 => (
            b"ratelimit.max-leases",
            &[b"10000", b"10000", b"2", b"1", b"0", b"10001", b"-1", b"x"],
        ),
        _ => (b"ratelimit.notify-denied", &[b"no", b"yes", b"maybe", b""]),
    };
    let value = *rng.pick(values);
    argv(&[b"CONFIG", b"SET", name, value])
}

/// Puts every module config back to its default (before the final comparison).
pub fn config_defaults() -> Vec<Argv> {
    [
        (&b"ratelimit.default-algorithm"[..], &b"fixed"[..]),
        (b"ratelimit.max-window-ms", b"31622400000"),
        (b"ratelimit.max-log-limit", b"10000"),
        (b"ratelimit.max-leases", b"10000"),
        (b"ratelimit.notify-denied", b"no"),
    ]
    .into_iter()
    .map(|(name, value)| argv(&[b"CONFIG", b"SET", name, value]))
    .collect()
}

/// `BGSAVE` or `BGREWRITEAOF`.
pub fn background_save(rng: &mut Rng) -> Argv {
    if rng.percent(50) {
        argv(&[b"BGSAVE"])
    } else {
        argv(&[b"BGREWRITEAOF"])
    }
}
