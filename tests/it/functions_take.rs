//! The Functions library's partial grant, `rl_take`, against the module's RL.TAKE: the same
//! calls on keys of each (and on a key both write in turns) in one transaction whose clock
//! stays in one ms, so the replies (six integers), the stored bytes and the expiries must
//! be equal, for every algorithm, tiers, calendar windows in UTC, partial grants, grants of
//! nothing, renewals and units given back with `rl_refund ... COST g`; bad input gets the
//! module's errors; what the library cannot do is refused and writes nothing; over
//! maxmemory it is refused as RL.TAKE is.

use redis::Value;
use testkit::functions::*;
use testkit::*;

/// What one `take` step granted (the module's count, which the library's equals) and the
/// most it asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Granted {
    granted: i64,
    upto: i64,
}

/// The most a `take` step asks for: the value after `UPTO`.
fn upto_of(args: &str) -> i64 {
    let words: Vec<&str> = args.split_whitespace().collect();
    let at = words
        .iter()
        .position(|w| w.eq_ignore_ascii_case("UPTO"))
        .unwrap_or_else(|| panic!("no UPTO in {args}"));
    words[at + 1].parse().expect("UPTO n")
}

/// Runs `steps` through [`assert_same_as_the_module`] (replies, stored bytes and expiries
/// equal on both backends, `persist` dropping the expiry between steps) and returns what
/// each `take` step granted.
fn same_grants(con: &mut redis::Connection, tag: &str, steps: &[Step<'_>]) -> Vec<Granted> {
    let replies = assert_same_as_the_module(con, tag, steps);
    let run = steps.iter().filter(|step| step.0 != "persist");
    run.zip(replies)
        .filter(|(step, _)| step.0 == "take")
        .map(|(step, reply)| {
            let context = format!("{tag}, {step:?}");
            let values: Vec<i64> = redis::from_redis_value(reply)
                .unwrap_or_else(|e| panic!("{context}: an error, not a grant: {e}"));
            assert_eq!(values.len(), 6, "{context}: {values:?}");
            assert_eq!(values[0], i64::from(values[5] > 0), "{context}: {values:?}");
            Granted {
                granted: values[5],
                upto: upto_of(step.1),
            }
        })
        .collect()
}

/// Takes, partial grants, grants of nothing, looks, give-backs with `COST g`, a lost
/// expiry, a change of rule (renewed from the usage) and an UPTO far above any capacity
/// (found by the search, bounded by the capacity), for every algorithm and shape.
#[test]
fn every_algorithm_takes_answers_and_stores_as_the_module_does() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        let minutes = window_clear_of_edges(&mut con) / 60_000;
        for algo in ALGORITHMS {
            let burst = if algo == "token" || algo == "gcra" {
                " BURST 4"
            } else {
                ""
            };
            let tiers = format!("5 {minutes}m 9 {}m ALGO {algo}", minutes * 2);
            let rules = [
                tiers.clone(),
                format!("3 1s ALGO {algo}"),
                format!("3 1ms ALGO {algo}"),
                format!("7 250ms ALGO {algo}{burst}"),
                // The largest log the library takes; a million for the others.
                format!(
                    "{} 1s ALGO {algo}",
                    if algo == "log" { 1_000 } else { 1_000_000 }
                ),
            ];
            for (n, rule) in rules.iter().enumerate() {
                let upto = |u: &str| format!("{rule} UPTO {u}");
                let (two, many, three, one, five) =
                    (upto("2"), upto("99"), upto("3"), upto("1"), upto("5"));
                let most = upto("9223372036854775807");
                let give2 = format!("{rule} COST 2");
                let give3 = format!("{rule} COST 3");
                let other = if algo == "gcra" { "token" } else { "gcra" };
                let switched = format!("3 1s ALGO {other} UPTO 2");
                let steps: Vec<Step<'_>> = vec![
                    ("take", &two),
                    ("take", &many),
                    ("take", &three),
                    ("peek", rule),
                    ("refund", &give2),
                    ("take", &five),
                    ("hit", rule),
                    ("persist", ""),
                    ("take", &one),
                    ("take", &switched),
                    ("take", &most),
                    ("refund", &give3),
                    ("take", &five),
                ];
                let grants = same_grants(&mut con, &format!("take:{algo}:{n}"), &steps);
                if n == 0 {
                    // The long tiers refill nothing during the test: 2 of 5, then the 3
                    // left of 99 asked, then nothing; 2 given back and taken again.
                    let granted: Vec<i64> = grants.iter().map(|g| g.granted).collect();
                    assert_eq!(granted[..4], [2, 3, 0, 2], "{flavor:?} {algo}: {grants:?}");
                }
            }
        }
    });
}

/// Calendar windows in UTC: the grant ends at the calendar's boundary, in the tiers form
/// with each tier's calendar code, as the module stores it.
#[test]
fn utc_calendar_windows_take_as_the_module_does() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        for (n, rule) in ["3 day", "3 month ANCHOR 31 TZ UTC", "2 1s 3 month 4 year"]
            .into_iter()
            .enumerate()
        {
            let two = format!("{rule} UPTO 2");
            let many = format!("{rule} UPTO 40");
            let give = format!("{rule} COST 1");
            let steps: Vec<Step<'_>> = vec![
                ("take", &two),
                ("take", &many),
                ("take", &two),
                ("refund", &give),
                ("take", &many),
                ("take", "3 1h UPTO 1"),
                ("take", &many),
            ];
            let grants = same_grants(&mut con, &format!("take:calendar:{n}"), &steps);
            assert!(
                grants.iter().any(|g| g.granted == 0),
                "{flavor:?} {rule}: a grant of nothing among {grants:?}"
            );
        }
    });
}

/// A seeded xorshift: the random traffic below is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Random takes, hits and refunds of random sizes on one key per rule: every answer and
/// every stored byte equal the module's, and the traffic reached grants of all, of part
/// and of nothing.
#[test]
fn random_takes_hits_and_refunds_answer_as_the_module_does() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut all = Vec::new();
        for algo in ALGORITHMS {
            for rule in [
                format!("6 2s ALGO {algo}"),
                format!("4 300ms 9 3s ALGO {algo}"),
            ] {
                let args: Vec<String> = (0..30)
                    .map(|_| {
                        let n = 1 + rng.below(8);
                        match rng.below(4) {
                            0 => format!("hit {rule} COST {n}"),
                            1 => format!("refund {rule} COST {n}"),
                            _ => format!("take {rule} UPTO {n}"),
                        }
                    })
                    .collect();
                let steps: Vec<Step<'_>> = args
                    .iter()
                    .map(|a| a.split_once(' ').expect("command and arguments"))
                    .collect();
                all.extend(same_grants(
                    &mut con,
                    &format!("take:random:{algo}"),
                    &steps,
                ));
            }
        }
        let whole = all.iter().filter(|g| g.granted == g.upto).count();
        let part = all
            .iter()
            .filter(|g| g.granted > 0 && g.granted < g.upto)
            .count();
        let none = all.iter().filter(|g| g.granted == 0).count();
        println!("{flavor:?}: {whole} whole, {part} partial, {none} nothing");
        assert!(
            whole > 0 && part > 0 && none > 0,
            "{flavor:?}: {whole} whole, {part} partial, {none} nothing"
        );
    });
}

/// The library's own replies, read as a client would: a partial grant, a grant of nothing
/// that leaves the key as it was, and units given back with `rl_refund ... COST g` taken
/// again in the same window.
#[test]
fn a_grant_of_nothing_writes_nothing_and_given_back_units_are_taken_again() {
    each_flavor(|flavor| {
        let server = ServerConfig::managed(flavor).start();
        server.load_functions();
        let mut con = server.conn();
        let window = format!("{}ms", window_clear_of_edges(&mut con));
        let take = |con: &mut redis::Connection, upto: &str| -> Vec<i64> {
            fcall_cmd("rl_take", &["k"], &["10", &window, "UPTO", upto])
                .query(con)
                .expect("rl_take")
        };
        let first = take(&mut con, "4");
        assert_eq!((first[0], first[2], first[5]), (1, 6, 4), "{first:?}");
        let partial = take(&mut con, "9");
        assert_eq!(
            (partial[0], partial[2], partial[5]),
            (1, 0, 6),
            "{partial:?}"
        );
        let full = stored(&mut con, b"k");
        let none = take(&mut con, "3");
        assert_eq!((none[0], none[2], none[5]), (0, 0, 0), "{none:?}");
        assert!(none[4] > 0, "a wait until the window ends: {none:?}");
        assert_eq!(
            stored(&mut con, b"k"),
            full,
            "a grant of nothing writes nothing"
        );
        let back = fcall_reply(&mut con, "rl_refund", "k", &["10", &window, "COST", "4"]);
        assert_eq!((back.allowed, back.remaining), (true, 4));
        let again = take(&mut con, "9");
        assert_eq!((again[2], again[5]), (0, 4), "{again:?}");
    });
}

#[test]
fn bad_input_gets_the_module_errors() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        foreign_keys(&mut con);
        redis::cmd("RL.ACQUIRE")
            .arg(&["leases", "3", "1h"])
            .exec(&mut con)
            .expect("RL.ACQUIRE");
        let cases: &[(&str, &str)] = &[
            ("k", ""),
            ("k", "5"),
            ("k", "5 1m"),
            ("k", "UPTO 3"),
            ("k", "5 UPTO 3"),
            ("k", "5 1m UPTO"),
            ("k", "5 1m UPTO 0"),
            ("k", "5 1m UPTO -2"),
            ("k", "5 1m UPTO 1.5"),
            ("k", "5 1m UPTO 9223372036854775808"),
            ("k", "5 1m UPTO x UPTO 3"),
            ("k", "5 1m UPTO 2 UPTO 3"),
            ("k", "5 1m upto 2 Upto x"),
            ("k", "5 1m COST 2 UPTO 2"),
            ("k", "5 1m UPTO 2 cost 2"),
            ("k", "5 1m UPTO 2 FAST"),
            ("k", "5 1m UPTO 2 MODE shadow"),
            ("k", "5 1m POLICY api UPTO 2"),
            ("k", "5 1m 10 UPTO 2"),
            ("k", "5 1m ALGO COST UPTO 2"),
            ("k", "5 1m ALGO UPTO 2"),
            ("k", "5 1m ALGO leaky UPTO 2"),
            ("k", "5 1m BURST 2 UPTO 2"),
            ("k", "0 1m UPTO 2"),
            ("k", "5 0 UPTO 2"),
            ("k", "5 367d UPTO 2"),
            ("k", "5 month ANCHOR 32 UPTO 2"),
            ("k", "5 1m TZ UTC UPTO 2"),
            ("text", "5 1m UPTO 2"),
            ("hash", "5 1m UPTO 2"),
            ("leases", "5 1m UPTO 2"),
        ];
        for (key, args) in cases {
            let args: Vec<&str> = args.split_whitespace().collect();
            let expected = error_text(&mut con, redis::cmd("RL.TAKE").arg(key).arg(&args));
            let got = error_text(&mut con, &fcall_cmd("rl_take", &[key], &args));
            assert_eq!(got, expected, "{flavor:?} {key} {args:?}");
        }
        let arity = error_text(
            &mut con,
            &fcall_cmd("rl_take", &[], &["5", "1m", "UPTO", "2"]),
        );
        assert_eq!(arity, "ERR wrong number of arguments for 'RL.TAKE' command");
        assert_eq!(
            stored(&mut con, b"k"),
            (None, -2),
            "{flavor:?}: nothing written"
        );
    });
}

/// Named policies and zones other than UTC, refused as `rl_hit` refuses them, before the
/// key is read: nothing is written.
#[test]
fn what_the_library_cannot_do_is_refused_and_writes_nothing() {
    each_flavor(|flavor| {
        let server = ServerConfig::managed(flavor).start();
        server.load_functions();
        let mut con = server.conn();
        let cases: &[(&str, &str)] = &[
            ("POLICY login UPTO 2", "ERR POLICY needs the module"),
            ("UPTO 2 policy login", "ERR POLICY needs the module"),
            (
                "5 month TZ Europe/Paris UPTO 2",
                "ERR TZ other than UTC needs the module",
            ),
            (
                "1001 1m ALGO log UPTO 2",
                "ERR ALGO log allows a limit of at most 1000 in the functions library",
            ),
            (
                "9007199254740992 1m UPTO 2",
                "ERR the functions library handles values up to 9007199254740991",
            ),
        ];
        for (args, prefix) in cases {
            let args: Vec<&str> = args.split_whitespace().collect();
            let text = error_text(&mut con, &fcall_cmd("rl_take", &["k"], &args));
            assert!(text.starts_with(prefix), "{flavor:?} {args:?}: {text}");
            assert_eq!(stored(&mut con, b"k"), (None, -2), "{args:?} wrote");
        }
        // The largest exact limit and an UPTO up to i64's largest: the capacity is granted.
        let most: Vec<i64> = fcall_cmd(
            "rl_take",
            &["k"],
            &["9007199254740991", "1m", "UPTO", "9223372036854775807"],
        )
        .query(&mut con)
        .expect("rl_take");
        assert_eq!((most[2], most[5]), (0, 9_007_199_254_740_991), "{most:?}");
    });
}

/// RL.TAKE adds to what a key holds, so the module refuses it over maxmemory (deny-oom);
/// `rl_take` is registered without `allow-oom` and refused the same way.
#[test]
fn over_maxmemory_takes_are_refused_as_by_the_module() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        hit(&mut con, "m", &["5", "1h"]);
        fhit(&mut con, "l", &["5", "1h"]);
        redis::cmd("CONFIG")
            .arg(&["SET", "maxmemory", "1"])
            .exec(&mut con)
            .expect("CONFIG SET maxmemory");
        let args = ["5", "1h", "UPTO", "2"];
        let by_module = error_text(&mut con, redis::cmd("RL.TAKE").arg("m").arg(&args));
        let by_library = error_text(&mut con, &fcall_cmd("rl_take", &["l"], &args));
        assert!(by_module.starts_with("OOM"), "{flavor:?}: {by_module}");
        assert_eq!(by_library, by_module, "{flavor:?}");
        redis::cmd("CONFIG")
            .arg(&["SET", "maxmemory", "0"])
            .exec(&mut con)
            .expect("CONFIG SET maxmemory");
        let after: Value = fcall_cmd("rl_take", &["l"], &args)
            .query(&mut con)
            .expect("rl_take");
        let values: Vec<i64> = redis::from_redis_value(after).expect("six integers");
        assert_eq!(
            (values[2], values[5]),
            (2, 2),
            "{flavor:?}: the refused take counted nothing"
        );
    });
}
