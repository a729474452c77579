//! What one decision costs in the pure core, without Redis: parse the arguments, read the
//! stored value, decide, encode the new value. The module adds the server's work (key
//! lookup, reply, propagation) on top: `bench/instructions.py` counts that part.
//!
//! `cargo bench -p ratelimit-core --bench decide` prints a Markdown table of ns per call for
//! every algorithm at its common shape and at its largest state (a full exact log, eight
//! tiers). Time on a shared machine moves from run to run; compare rows of one run with each
//! other (every row is measured in interleaved rounds, the median kept), or count
//! instructions with `valgrind --tool=callgrind` on this binary for a figure that does not
//! move.

use ratelimit_core::args::{parse_limits, Settings};
use ratelimit_core::limiter::{Action, Limits, MemoryKey};
use std::hint::black_box;
use std::time::Instant;

/// A moment well inside the arithmetic's range, fixed so that every run decides the same.
const START_MS: i64 = 1_800_000_000_000;
const ROUNDS: usize = 7;
/// Target time per row and round.
const ROUND_NS: u128 = 40_000_000;

/// One row: an argument list, and a stored value reached by calling it `fill` times, one
/// ms apart, before the timed calls.
struct Case {
    name: &'static str,
    args: &'static str,
    fill: i64,
}

const CASES: &[Case] = &[
    Case {
        name: "fixed, one tier",
        args: "1000000 1h",
        fill: 1,
    },
    Case {
        name: "sliding, one tier",
        args: "1000000 1h ALGO sliding",
        fill: 1,
    },
    Case {
        name: "token, one tier",
        args: "1000000 1h ALGO token",
        fill: 1,
    },
    Case {
        name: "gcra, one tier",
        args: "1000000 1h ALGO gcra",
        fill: 1,
    },
    Case {
        name: "log, 10 entries",
        args: "10000 1h ALGO log",
        fill: 10,
    },
    Case {
        name: "log, 10,000 entries (full: RL.HIT denied)",
        args: "10000 1h ALGO log",
        fill: 10_000,
    },
    Case {
        name: "log, 9,999 entries (RL.HIT allowed)",
        args: "10000 1h ALGO log",
        fill: 9_999,
    },
    Case {
        name: "fixed, two tiers",
        args: "1000000 1s 1000000 1h",
        fill: 1,
    },
    Case {
        name: "fixed, eight tiers",
        args: "1000000 1s 1000000 2s 1000000 5s 1000000 10s 1000000 1m 1000000 10m \
               1000000 1h 1000000 1d",
        fill: 1,
    },
    Case {
        name: "gcra, eight tiers",
        args: "1000000 1s 1000000 2s 1000000 5s 1000000 10s 1000000 1m 1000000 10m \
               1000000 1h 1000000 1d ALGO gcra",
        fill: 1,
    },
];

fn parse(args: &str) -> Limits {
    let words: Vec<&[u8]> = args.split_whitespace().map(str::as_bytes).collect();
    match parse_limits(words.into_iter(), &Settings::default()) {
        Ok(parsed) => parsed.limits,
        Err(err) => panic!("the case {args:?} does not parse: {}", err.message()),
    }
}

/// The key after `fill` hits one ms apart, ending at `START_MS`.
fn filled(limits: &Limits, fill: i64) -> MemoryKey {
    let mut key = MemoryKey::default();
    for n in 0..fill {
        let outcome = key
            .run(limits, Action::Hit { cost: 1 }, START_MS - fill + n)
            .expect("a fill hit decides");
        assert!(
            outcome.decision.allowed,
            "the fill must stay under the limit"
        );
    }
    key
}

/// ns per call of `action` on `stored` (unchanged between calls: every call sees the same
/// state, as a denied hit or a look does; an allowed hit's write is built but not kept).
fn time_calls(args: &str, limits: &Limits, action: Action, stored: &MemoryKey) -> f64 {
    let words: Vec<&[u8]> = args.split_whitespace().map(str::as_bytes).collect();
    let once = || {
        // The argument parse is part of every call in the module, so it is timed here too.
        let parsed = parse_limits(black_box(words.iter().copied()), &Settings::default());
        let limits = parsed.map(|p| p.limits).unwrap_or_else(|_| limits.clone());
        black_box(stored.decide(&limits, action, START_MS + 1)).is_ok()
    };
    let mut calls: u64 = 1;
    loop {
        let began = Instant::now();
        for _ in 0..calls {
            once();
        }
        let spent = began.elapsed().as_nanos();
        if spent >= ROUND_NS / 4 {
            return spent as f64 / calls as f64;
        }
        calls *= 2;
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` passes nothing and wants a quick
    // run: one short round proves the bench still works.
    let quick = !std::env::args().any(|a| a == "--bench");
    let rounds = if quick { 1 } else { ROUNDS };
    let prepared: Vec<(&Case, Limits, MemoryKey)> = CASES
        .iter()
        .map(|case| {
            let limits = parse(case.args);
            let stored = filled(&limits, case.fill);
            (case, limits, stored)
        })
        .collect();
    let actions = [
        ("RL.HIT", Action::Hit { cost: 1 }),
        ("RL.PEEK", Action::Peek { cost: 1 }),
    ];
    let mut samples = vec![vec![Vec::new(); actions.len()]; prepared.len()];
    for _ in 0..rounds {
        for (row, (case, limits, stored)) in prepared.iter().enumerate() {
            for (column, (_, action)) in actions.iter().enumerate() {
                samples[row][column].push(time_calls(case.args, limits, *action, stored));
            }
        }
    }
    println!("| core, ns per call (median of {rounds} rounds) | RL.HIT | RL.PEEK | stored bytes |");
    println!("|---|---:|---:|---:|");
    for ((case, _, stored), row) in prepared.iter().zip(samples) {
        let cells: Vec<String> = row
            .into_iter()
            .map(|s| format!("{:.0}", median(s)))
            .collect();
        let bytes = stored.value().map_or(0, <[u8]>::len);
        println!("| {} | {} | {bytes} |", case.name, cells.join(" | "));
    }
}
