//! The Functions library's fast path (functions/src/fast.lua): the common calls (one tier
//! of fixed, sliding, token or gcra, with COST and BURST, on no key or the rule's own key)
//! answer, store and expire exactly as the module does at the same ms, at its edges too
//! (denials, COST above the limit, windows that end or roll over, a key of another rule or
//! without its expiry, which the general path takes); and they do take the fast path: one
//! GET and one read of the clock a call (TIME, or PTTL on a fixed window's live key),
//! where leaving it for the general path reads both again.

use testkit::functions::*;
use testkit::*;

/// Hits, looks, COST, BURST, denials and COST beyond the limit (-1) for each algorithm, on
/// no key and on the rule's own key; then a key written by another rule of the same
/// algorithm, and one that lost its expiry, which the general path answers.
#[test]
fn the_fast_path_answers_stores_and_expires_as_the_module_does() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        let minutes = window_clear_of_edges(&mut con) / 60_000;
        for algo in ["fixed", "sliding", "token", "gcra"] {
            let burst = if algo == "token" || algo == "gcra" {
                " BURST 6"
            } else {
                ""
            };
            let rules = [
                format!("5 {minutes}m ALGO {algo}"),
                format!("7 250ms ALGO {algo}{burst}"),
                format!("3 1ms ALGO {algo}"),
            ];
            for (n, rule) in rules.iter().enumerate() {
                let cost = format!("{rule} COST 2");
                let beyond = format!("{rule} COST 9");
                let other = format!("4 {}m ALGO {algo}", minutes * 2);
                let steps: Vec<Step<'_>> = vec![
                    ("peek", rule),
                    ("hit", rule),
                    ("hit", &cost),
                    ("peek", rule),
                    ("hit", &cost),
                    ("hit", rule),
                    ("hit", rule),
                    ("peek", &cost),
                    ("hit", &beyond),
                    ("hit", &other),
                    ("hit", rule),
                    ("persist", ""),
                    ("hit", rule),
                    ("hit", rule),
                ];
                assert_same_as_the_module(&mut con, &format!("fast:{algo}:{n}"), &steps);
            }
        }
    });
}

/// The sliding window counter's stored form: the tiers form of one tier.
fn sliding_state(limit: u64, window_ms: u64, prev: u64, curr: u64, ends: i64) -> Vec<u8> {
    let mut out = vec![0x01, 2, 1];
    for n in [limit, window_ms, limit, prev, curr] {
        let mut n = n;
        while n >= 0x80 {
            out.push((n & 0x7f) as u8 | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    }
    out.extend_from_slice(&ends.to_le_bytes());
    out
}

/// Sliding windows with a previous window's count that still weighs: denials whose wait
/// comes from the previous window, from the current one, or never ends (COST above the
/// limit); a state whose window has just ended (rolled over) or ended long ago; and a
/// state of another limit (the general path's).
#[test]
fn sliding_states_deny_and_wait_as_the_module_does() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        let window = window_clear_of_edges(&mut con);
        let now = server_ms(&mut con);
        let ends = now - now.rem_euclid(window) + window;
        let w = window as u64;
        let rule = format!("10 {}m ALGO sliding", window / 60_000);
        let cost = format!("{rule} COST 3");
        let beyond = format!("{rule} COST 11");
        // (prev, curr, end of the stored window)
        let states = [
            (10, 0, ends),
            (9, 0, ends),
            (3, 7, ends),
            (6, 3, ends),
            (10, 10, ends),
            (0, 9, ends),
            (2, 5, ends - window),
            (10, 0, ends - window),
            (4, 4, ends - 3 * window),
        ];
        for (n, (prev, curr, at)) in states.into_iter().enumerate() {
            let expiry = if curr > 0 { at + window } else { at };
            if expiry <= now {
                continue;
            }
            let start = (Some(sliding_state(10, w, prev, curr, at)), expiry);
            let steps: Vec<Step<'_>> = vec![
                ("peek", &rule),
                ("hit", &rule),
                ("hit", &cost),
                ("hit", &beyond),
                ("peek", &cost),
                ("hit", &rule),
            ];
            assert_same_from(&mut con, &format!("fast:sliding:{n}"), start, &steps);
        }
        // Another limit on the key: renewed from its usage by the general path.
        let start = (Some(sliding_state(20, w, 12, 6, ends)), ends + window);
        let steps: Vec<Step<'_>> = vec![("hit", &rule), ("hit", &rule), ("peek", &rule)];
        assert_same_from(&mut con, "fast:sliding:other", start, &steps);
    });
}

/// The GET calls and the clock's reads (TIME, or PTTL, which the fixed window's live key
/// reads the clock by) that `calls` FCALLs of `args` made on `key`.
fn reads_of(server: &Server, key: &str, args: &[&str], calls: usize) -> (i64, i64) {
    let mut con = server.conn();
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query::<()>(&mut con)
        .expect("CONFIG RESETSTAT");
    for _ in 0..calls {
        fhit(&mut con, key, args);
    }
    (
        server.command_calls("get").unwrap_or(0),
        server.command_calls("time").unwrap_or(0) + server.command_calls("pttl").unwrap_or(0),
    )
}

/// Each common call reads its key once and the clock once: the fast path answered it. A
/// key of another rule is read twice: the fast path leaves it to the general path.
#[test]
fn common_calls_read_the_key_and_the_clock_once() {
    each_flavor(|flavor| {
        let server = ServerConfig::managed(flavor).start();
        assert_eq!(server.load_functions(), "ratelimit");
        let rules: [&[&str]; 6] = [
            &["1000", "1h"],
            &["1000", "1h", "COST", "3"],
            &["1000", "1h", "ALGO", "sliding"],
            &["100", "1h", "ALGO", "token"],
            &["100", "1h", "ALGO", "gcra", "BURST", "50", "COST", "2"],
            &["7", "250ms", "ALGO", "gcra"],
        ];
        for (n, args) in rules.iter().enumerate() {
            // No key, then the key the first call wrote.
            let key = format!("fast:reads:{n}");
            assert_eq!(reads_of(&server, &key, args, 5), (5, 5), "{args:?}");
        }
        // A key another rule wrote (another algorithm for the fixed window, whose plain
        // count records no limit; another limit for the others): read by both paths.
        for (algo, writer) in [
            ("fixed", "sliding"),
            ("sliding", "sliding"),
            ("gcra", "gcra"),
        ] {
            let key = format!("fast:reads:other:{algo}");
            fhit(&mut server.conn(), &key, &["1000", "1h", "ALGO", writer]);
            let (gets, _) = reads_of(&server, &key, &["999", "1h", "ALGO", algo], 1);
            assert_eq!(gets, 2, "{algo} on a key of {writer}");
        }
    });
}
