//! Random calls of every command of the module, with well-formed arguments most of the
//! time (so that states are written, renewed and refunded) and edge or malformed ones the
//! rest: 0, -1, i64 bounds and beyond, floats, empty strings, NUL and 0xff bytes, 9 and 20
//! tiers, dangling keywords, unknown units and algorithms, `ALGO log` with large limits,
//! calendar windows with known, unknown and ill-cased zones and anchors in and out of range.

use super::keys::{key, policy_name};
use super::rng::Rng;

/// One command line: the name first.
pub type Argv = Vec<Vec<u8>>;

/// Numbers a client of the random traffic sends where an integer is expected.
const EDGE_NUMBERS: &[&[u8]] = &[
    b"0",
    b"-1",
    b"-0",
    b"+1",
    b"01",
    b"9223372036854775807",
    b"9223372036854775808",
    b"-9223372036854775808",
    b"-9223372036854775809",
    b"18446744073709551616",
    b"99999999999999999999999999999",
    b"1.5",
    b"1e3",
    b"0x10",
    b" 1",
    b"1 ",
    b"",
    b"\0",
    b"\xff",
    b"1\0",
    b"inf",
    b"nan",
    b"10001",
];

/// Limits that make sense, `ALGO log`'s largest among them.
const LIMITS: &[&[u8]] = &[b"1", b"2", b"3", b"5", b"10", b"100", b"1000", b"10000"];

/// Windows that make sense: bare seconds and every unit, any case.
const WINDOWS: &[&[u8]] = &[
    b"1", b"2", b"250ms", b"1s", b"10s", b"5m", b"1h", b"1d", b"366d", b"60000ms", b"1H", b"10S",
    b"1Ms", b"day", b"week", b"Month", b"YEAR",
];

/// Windows a client of the random traffic sends.
const EDGE_WINDOWS: &[&[u8]] = &[
    b"0",
    b"-1",
    b"0ms",
    b"367d",
    b"3660d",
    b"31622400001ms",
    b"1w",
    b"1y",
    b"1us",
    b"ms",
    b"s",
    b"",
    b"1.5s",
    b"1e3",
    b"-5m",
    b"9223372036854775807",
    b"9223372036854775807ms",
    b"9223372036854775807d",
    b"9223372036854775808ms",
    b"-9223372036854775808ms",
    b"\0",
    b"\xff",
    b"1\0s",
    b"1s\xff",
    b" 1s",
    b"+1s",
    b"10 s",
    b"months",
    b"1month",
    b"day\0",
];

const ALGOS: &[&[u8]] = &[
    b"fixed", b"sliding", b"log", b"token", b"gcra", b"LOG", b"Gcra",
];
const EDGE_ALGOS: &[&[u8]] = &[b"", b"unknown", b"fixed\0", b"\xff", b"gcra ", b"leaky"];
const KEYWORDS: &[&[u8]] = &[
    b"ALGO", b"BURST", b"COST", b"POLICY", b"MODE", b"algo", b"cost", b"TZ", b"ANCHOR",
];

/// A random call of one of the commands, on the shared key space.
pub fn any_call(rng: &mut Rng) -> Argv {
    match rng.below(100) {
        0..=29 => limit_call(rng, b"RL.HIT"),
        30..=34 => take_call(rng),
        35..=39 => lease_call(rng),
        40..=54 => limit_call(rng, b"RL.PEEK"),
        55..=64 => limit_call(rng, b"RL.REFUND"),
        65..=69 => reset_call(rng),
        70..=79 => throttle_call(rng),
        80..=91 => policy_call(rng),
        92..=96 => stats_call(rng),
        _ => bare_call(rng),
    }
}

/// An `RL.PEEK`, the one call of the module a replica serves.
pub fn peek_call(rng: &mut Rng) -> Argv {
    limit_call(rng, b"RL.PEEK")
}

/// A number: usually a sane one from `sane`, sometimes an edge.
fn number(rng: &mut Rng, sane: &[&[u8]]) -> Vec<u8> {
    if rng.percent(90) {
        rng.pick(sane).to_vec()
    } else {
        rng.pick(EDGE_NUMBERS).to_vec()
    }
}

fn window(rng: &mut Rng) -> Vec<u8> {
    if rng.percent(92) {
        rng.pick(WINDOWS).to_vec()
    } else {
        rng.pick(EDGE_WINDOWS).to_vec()
    }
}

/// `limit window` pairs: mostly 1 to 3 tiers, sometimes none, 8 (the most), 9 or 20.
fn tiers(rng: &mut Rng, argv: &mut Argv) {
    let count = if rng.percent(95) {
        1 + rng.below(3)
    } else {
        *rng.pick(&[0, 8, 9, 20])
    };
    for _ in 0..count {
        argv.push(number(rng, LIMITS));
        argv.push(window(rng));
    }
}

/// `ALGO`, `BURST`, `COST` (and for policies `MODE`) options, sometimes repeated,
/// unknown or left without their value.
fn options(rng: &mut Rng, argv: &mut Argv, cost: bool) {
    if rng.percent(70) {
        argv.push(b"ALGO".to_vec());
        let algo = if rng.percent(95) {
            rng.pick(ALGOS)
        } else {
            rng.pick(EDGE_ALGOS)
        };
        argv.push(algo.to_vec());
    }
    if rng.percent(15) {
        argv.push(b"BURST".to_vec());
        argv.push(number(rng, LIMITS));
    }
    if cost && rng.percent(30) {
        argv.push(b"COST".to_vec());
        argv.push(number(rng, &[b"1", b"1", b"2", b"3", b"10", b"5000"]));
    }
    if !cost && rng.percent(30) {
        argv.push(b"MODE".to_vec());
        argv.push(
            rng.pick(&[&b"enforce"[..], b"shadow", b"SHADOW", b"off", b""])
                .to_vec(),
        );
    }
    if rng.percent(10) {
        argv.push(b"TZ".to_vec());
        let zones: &[&[u8]] = &[
            b"Europe/Paris",
            b"Pacific/Chatham",
            b"asia/kathmandu",
            b"UTC",
            b"Mars/Olympus",
            b"",
            b"\xff",
        ];
        argv.push(rng.pick(zones).to_vec());
    }
    if rng.percent(5) {
        argv.push(b"ANCHOR".to_vec());
        argv.push(number(rng, &[b"1", b"15", b"29", b"31", b"32", b"0"]));
    }
    if rng.percent(5) {
        // A keyword with nothing after it.
        argv.push(rng.pick(KEYWORDS).to_vec());
    }
    if rng.percent(3) {
        let len = rng.below(6);
        argv.push(rng.bytes(len));
    }
}

/// `RL.HIT`, `RL.PEEK` or `RL.REFUND`: written-out tiers or a named policy.
fn limit_call(rng: &mut Rng, command: &[u8]) -> Argv {
    let mut argv = vec![command.to_vec(), key(rng)];
    if rng.percent(15) {
        argv.push(b"POLICY".to_vec());
        if rng.percent(95) {
            argv.push(policy_name(rng));
        }
        if rng.percent(40) {
            argv.push(b"COST".to_vec());
            argv.push(number(rng, &[b"1", b"2", b"4"]));
        }
    } else {
        tiers(rng, &mut argv);
        options(rng, &mut argv, true);
    }
    argv
}

/// `RL.TAKE`: `RL.HIT`'s arguments (a `COST` among them is refused), usually with `UPTO n`.
fn take_call(rng: &mut Rng) -> Argv {
    let mut argv = limit_call(rng, b"RL.TAKE");
    if rng.percent(90) {
        argv.push(b"UPTO".to_vec());
        argv.push(number(rng, &[b"1", b"3", b"50"]));
    }
    argv
}

fn reset_call(rng: &mut Rng) -> Argv {
    let mut argv = vec![b"RL.RESET".to_vec(), key(rng)];
    if rng.percent(5) {
        argv.push(b"extra".to_vec());
    }
    argv
}

/// `CL.THROTTLE key max_burst count_per_period period [quantity]`.
fn throttle_call(rng: &mut Rng) -> Argv {
    let mut argv = vec![b"CL.THROTTLE".to_vec(), key(rng)];
    let arguments = if rng.percent(90) { 4 } else { rng.below(7) };
    for position in 0..arguments {
        let sane: &[&[u8]] = match position {
            0 => &[b"0", b"1", b"5", b"15", b"100"],
            1 => &[b"1", b"10", b"30", b"1000"],
            2 => &[b"1", b"10", b"60", b"3600"],
            _ => &[b"0", b"1", b"2", b"50"],
        };
        argv.push(number(rng, sane));
    }
    argv
}

/// `RL.POLICY SET|GET|DEL|LIST`, sometimes misspelt or short of arguments.
fn policy_call(rng: &mut Rng) -> Argv {
    let mut argv = vec![b"RL.POLICY".to_vec()];
    match rng.below(10) {
        0..=3 => {
            argv.push(b"SET".to_vec());
            argv.push(policy_name(rng));
            tiers(rng, &mut argv);
            options(rng, &mut argv, false);
        }
        4..=5 => {
            argv.push(b"get".to_vec());
            argv.push(policy_name(rng));
        }
        6 => {
            argv.push(b"DEL".to_vec());
            argv.push(policy_name(rng));
        }
        7..=8 => argv.push(b"LIST".to_vec()),
        _ => {
            argv.push(rng.pick(&[&b"SET"[..], b"FLUSH", b"", b"\0"]).to_vec());
        }
    }
    argv
}

/// `RL.STATS [name]`, `RL.STATS RESET [name]`.
fn stats_call(rng: &mut Rng) -> Argv {
    let mut argv = vec![b"RL.STATS".to_vec()];
    match rng.below(5) {
        0 => {}
        1 => argv.push(policy_name(rng)),
        2 => argv.push(b"RESET".to_vec()),
        3 => {
            argv.push(b"reset".to_vec());
            argv.push(policy_name(rng));
        }
        _ => {
            argv.push(b"RESET".to_vec());
            argv.push(policy_name(rng));
            argv.push(b"extra".to_vec());
        }
    }
    argv
}

/// A command with no arguments at all, or only its key.
fn bare_call(rng: &mut Rng) -> Argv {
    let command = rng
        .pick(&[
            &b"RL.HIT"[..],
            b"RL.PEEK",
            b"RL.REFUND",
            b"RL.RESET",
            b"CL.THROTTLE",
            b"RL.POLICY",
        ])
        .to_vec();
    if rng.percent(50) {
        vec![command]
    } else if command == b"RL.POLICY" {
        // RL.POLICY is a container command: the server itself answers an unknown
        // subcommand, echoing its bytes raw (as for `CONFIG \xff`), which the test's
        // client cannot parse when they are not UTF-8. Not the module's reply: a word.
        vec![command, b"NO-SUCH-SUBCOMMAND".to_vec()]
    } else {
        vec![command, key(rng)]
    }
}

/// Lease ids a client of the random traffic gives: a few shared ones (so releases and renewals find
/// their lease), 64 bytes (the most), 65, empty, binary, and 32 hex digits in both cases.
const LEASE_IDS: &[&[u8]] = &[
    b"job-1",
    b"job-2",
    b"w",
    b"ALGO",
    b"ID",
    b"00112233445566778899aabbccddeeff",
    b"00112233445566778899AABBCCDDEEFF",
    b"\0\xff\r\n",
    b"",
    b"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy",
    b"zzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzzz",
];

/// Lease lengths: mostly long enough to outlive a run's comparison, some short.
const LEASE_TTLS: &[&[u8]] = &[b"1h", b"2h", b"1d", b"3600", b"200ms", b"1s", b"366d"];

/// `RL.ACQUIRE key max ttl [tiers] [ID id]`, `RL.RELEASE key id`, `RL.RENEW key id ttl`
/// or `RL.LEASES key max`, with edge arguments now and then.
pub fn lease_call(rng: &mut Rng) -> Argv {
    let id = |rng: &mut Rng| rng.pick(LEASE_IDS).to_vec();
    let ttl = |rng: &mut Rng| {
        if rng.percent(90) {
            rng.pick(LEASE_TTLS).to_vec()
        } else {
            rng.pick(EDGE_WINDOWS).to_vec()
        }
    };
    let max: &[&[u8]] = &[b"1", b"2", b"3", b"8", b"10000"];
    let key = key(rng);
    match rng.below(10) {
        0..=4 => {
            let mut argv = vec![b"RL.ACQUIRE".to_vec(), key, number(rng, max), ttl(rng)];
            if rng.percent(25) {
                tiers(rng, &mut argv);
                options(rng, &mut argv, true);
            }
            if rng.percent(60) {
                argv.push(b"ID".to_vec());
                argv.push(id(rng));
            }
            argv
        }
        5..=6 => vec![b"RL.RELEASE".to_vec(), key, id(rng)],
        7 => vec![b"RL.RENEW".to_vec(), key, id(rng), ttl(rng)],
        8 => vec![b"RL.LEASES".to_vec(), key, number(rng, max)],
        _ => {
            let commands: [&[u8]; 4] = [b"RL.ACQUIRE", b"RL.RELEASE", b"RL.RENEW", b"RL.LEASES"];
            let mut argv = vec![rng.pick(&commands).to_vec(), key];
            for _ in 0..rng.below(3) {
                argv.push(id(rng));
            }
            argv
        }
    }
}
