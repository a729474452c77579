//! The Functions library against the module on one server: the same calls on keys of each
//! (and on a key both write in turns) in one transaction whose clock stays in one ms, so
//! the replies, the stored bytes and the expiries must be equal, for every algorithm,
//! tiers, calendar windows in UTC, the exact log, several keys, and damaged or junk values.

use redis::Value;
use testkit::functions::*;
use testkit::*;

#[test]
fn fixed_windows_answer_store_and_expire_as_the_module_does() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        let hour = window_clear_of_edges(&mut con) / 60_000;
        let one = &format!("3 {hour}m");
        let two = &format!("3 {hour}m 5 {}m", hour * 2);
        let cost2 = &format!("{one} COST 2");
        let big = &format!("{one} COST 4");
        let steps: &[Step<'_>] = &[
            ("peek", one),
            ("refund", one),
            ("hit", one),
            ("hit", cost2),
            ("hit", one),
            ("peek", one),
            ("hit", big),
            ("refund", cost2),
            ("hit", one),
            // Another rule on the same key: renewed from its usage.
            ("hit", two),
            ("hit", two),
            ("peek", two),
            ("hit", two),
            ("refund", two),
            ("refund", cost2),
            ("hit", "1 1s"),
            ("hit", "1 1s"),
        ];
        assert_same_as_the_module(&mut con, "fixed", steps);
    });
}

/// Every bucket and sliding shape: single tiers (the short form for the buckets, with and
/// without the ns below the ms), tiers, BURST, COST, refunds, looks, a lost expiry and
/// changes of rule and of algorithm, which renew the key from its usage.
#[test]
fn every_algorithm_answers_stores_and_expires_as_the_module_does() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        let minutes = window_clear_of_edges(&mut con) / 60_000;
        for algo in ["sliding", "token", "gcra", "fixed", "log"] {
            let burst = if algo == "token" || algo == "gcra" {
                " BURST 4"
            } else {
                ""
            };
            let rules = [
                format!("3 1s ALGO {algo}"),
                format!("3 1ms ALGO {algo}"),
                format!("7 250ms ALGO {algo}{burst}"),
                format!("5 {minutes}m 9 {}m ALGO {algo}", minutes * 2),
                format!("1000000 1s ALGO {algo}"),
            ];
            for (n, rule) in rules.iter().enumerate() {
                let cost = format!("{rule} COST 2");
                let big = format!("{rule} COST 99");
                let other = if algo == "gcra" { "token" } else { "gcra" };
                let switched = format!("3 1s ALGO {other}");
                let steps: Vec<Step<'_>> = vec![
                    ("peek", rule),
                    ("refund", rule),
                    ("hit", rule),
                    ("hit", &cost),
                    ("peek", &cost),
                    ("hit", rule),
                    ("hit", rule),
                    ("hit", &big),
                    ("refund", &cost),
                    ("hit", rule),
                    ("persist", ""),
                    ("peek", rule),
                    ("hit", rule),
                    ("hit", "2 1s ALGO fixed"),
                    ("hit", rule),
                    ("hit", &switched),
                    ("peek", rule),
                    ("hit", rule),
                    ("refund", rule),
                ];
                assert_same_as_the_module(&mut con, &format!("{algo}:{n}"), &steps);
            }
        }
    });
}

/// Calendar windows in UTC: the tiers form of version 2 (each tier's calendar code), the
/// same ends, renewals between calendars and durations.
#[test]
fn utc_calendar_windows_answer_and_store_as_the_module_does() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        for (n, rule) in [
            "3 day",
            "3 WEEK",
            "3 month",
            "3 month ANCHOR 31 TZ UTC",
            "3 year TZ utc",
            "2 1s 3 month 4 year ANCHOR 5",
        ]
        .into_iter()
        .enumerate()
        {
            let cost = format!("{rule} COST 2");
            let steps: Vec<Step<'_>> = vec![
                ("peek", rule),
                ("hit", rule),
                ("hit", &cost),
                ("hit", rule),
                ("refund", rule),
                ("hit", "3 1h"),
                ("hit", rule),
                ("persist", ""),
                ("hit", rule),
                ("refund", &cost),
            ];
            assert_same_as_the_module(&mut con, &format!("calendar:{n}"), &steps);
        }
    });
}

/// A seeded xorshift: the junk of [`junk_and_damaged_states_read_as_the_module_reads_them`]
/// is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// Values of every form, whole, cut short, with a byte changed or added, or random bytes
/// behind a plausible first byte, with and without an expiry: each backend either reads
/// them the same way (the same reply and the same bytes written) or refuses them the same
/// way. The library may refuse with its own error a number beyond 2^53, which the module
/// reads; that is counted, never a different answer.
#[test]
fn junk_and_damaged_states_read_as_the_module_reads_them() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        let shapes = [
            "3 1h",
            "3 1s ALGO gcra",
            "3 1ms ALGO token BURST 5",
            "3 1h 5 2h",
            "3 1h ALGO sliding",
            "3 1h 5 2h ALGO gcra",
            "3 day 4 month ANCHOR 9",
            "3 1h ALGO log",
            "3 1s 5 1h ALGO log",
        ];
        let mut valid = Vec::new();
        for (n, shape) in shapes.iter().enumerate() {
            let key = format!("junk:shape:{n}");
            let args: Vec<&str> = shape.split_whitespace().collect();
            hit(&mut con, key.as_str(), &args);
            valid.push(stored(&mut con, key.as_bytes()));
        }
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let firsts = [b'1', b'9', 0x01, 0x02, 0xf8, 0xfa, 0xfc, 0xff];
        let (mut same, mut refused) = (0, 0);
        for n in 0..240 {
            let (base, expiry) = valid[rng.below(valid.len())].clone();
            let mut value = base.unwrap_or_default();
            match n % 5 {
                0 => {}
                1 => value.truncate(rng.below(value.len().max(1))),
                2 => {
                    let at = rng.below(value.len().max(1));
                    if let Some(byte) = value.get_mut(at) {
                        *byte = rng.next() as u8;
                    }
                }
                3 => value.push(rng.next() as u8),
                _ => {
                    value = (0..rng.below(24)).map(|_| rng.next() as u8).collect();
                    value.insert(0, firsts[rng.below(firsts.len())]);
                }
            }
            let expiry = if n % 3 == 0 { -1 } else { expiry };
            let rule = shapes[rng.below(shapes.len())];
            let command = ["hit", "peek", "refund", "reset"][rng.below(4)];
            let args = if command == "reset" { "" } else { rule };
            let before = (Some(value.clone()), expiry);
            let [module, library, _] = same_ms(
                &mut con,
                (command, args),
                ["junk:module", "junk:library", "junk:mixed"],
                true,
                &before,
            );
            if let Value::ServerError(err) = &library.0 {
                let text = format!("{} {}", err.code(), err.details().unwrap_or(""));
                if text.contains("functions library handles values up to") {
                    refused += 1;
                    continue;
                }
            }
            assert_eq!(
                module, library,
                "{command} {args} on {value:?} (expiry {expiry})"
            );
            same += 1;
        }
        println!("{flavor:?}: {same} read alike, {refused} refused by the library alone");
        assert!(same > refused * 4, "{same} alike, {refused} refused");
    });
}

/// The exact log: entries in distinct ms, refunds across entries (the newest left as a
/// marker), denials whose wait comes from the oldest entries, tiers, and a value in the
/// older plain layout (read, and written back with the header once changed).
#[test]
fn the_exact_log_answers_and_stores_as_the_module_does() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        let rule = "10 3s ALGO log";
        let steps: Vec<Step<'_>> = vec![
            ("hit", rule),
            ("hit", "10 3s ALGO log COST 2"),
            ("hit", rule),
            ("hit", "10 3s ALGO log COST 3"),
            ("refund", "10 3s ALGO log COST 2"),
            ("peek", rule),
            ("refund", "10 3s ALGO log COST 4"),
            ("hit", "10 3s ALGO log COST 5"),
            ("hit", "10 3s ALGO log COST 4"),
            ("peek", "10 3s ALGO log COST 2"),
            ("refund", "10 3s ALGO log COST 99"),
            ("hit", rule),
            ("hit", "4 1s 10 3s ALGO log COST 2"),
            ("hit", "4 1s 10 3s ALGO log COST 2"),
            ("hit", "4 1s 10 3s ALGO log COST 2"),
            ("refund", "4 1s 10 3s ALGO log"),
            ("hit", rule),
        ];
        assert_same_as_the_module(&mut con, "log", &steps);
        // The tiers form of one log tier of 10 per 3 s (limit, window 3000 and burst as
        // varints), its state in the plain layout: count 2, the oldest time, its units,
        // then (gap, units).
        let at = server_ms(&mut con) - 500;
        let mut plain = vec![0x01, 3, 1, 10, 0xb8, 0x17, 10, 2];
        plain.extend_from_slice(&at.to_le_bytes());
        plain.extend_from_slice(&[3, 100, 2]);
        let expiry = at + 100 + 3_000;
        let steps: Vec<Step<'_>> = vec![("peek", rule), ("refund", rule), ("hit", rule)];
        assert_same_from(&mut con, "log:plain", (Some(plain.clone()), expiry), &steps);
        let look = fcall_cmd("rl_peek", &["log:plain:read"], &["10", "3s", "ALGO", "log"]);
        redis::cmd("SET")
            .arg("log:plain:read")
            .arg(&plain)
            .exec(&mut con)
            .expect("SET");
        let read: Vec<i64> = look.query(&mut con).expect("the plain layout reads");
        assert_eq!(read[2], 4, "5 units logged, one more looked at: {read:?}");
        let steps: Vec<Step<'_>> = vec![("hit", rule), ("peek", rule)];
        assert_same_from(
            &mut con,
            "log:plain:hit",
            (Some(plain.clone()), expiry),
            &steps,
        );
        // Without its expiry, a denied hit writes the unchanged state back as it was.
        let denied = "10 3s ALGO log COST 11";
        let steps: Vec<Step<'_>> = vec![("hit", denied), ("hit", rule)];
        assert_same_from(&mut con, "log:plain:lost", (Some(plain), -1), &steps);
    });
}

#[test]
fn several_keys_answer_and_store_as_the_module_does() {
    each_flavor(|flavor| {
        let server = with_module_and_library(flavor);
        let mut con = server.conn();
        let minutes = window_clear_of_edges(&mut con) / 60_000;
        let a = format!("SPEC 3 {minutes}m");
        let b = "SPEC 2 1s ALGO gcra BURST 3";
        let c = format!("SPEC 4 {minutes}m 6 {}m ALGO sliding", minutes * 2);
        let steps: Vec<(&str, String)> = vec![
            ("peek", format!("{a} {b}")),
            ("refund", format!("{a} {b}")),
            ("hit", format!("{a} {b}")),
            ("hit", format!("{a} COST 2 {b}")),
            // The first key is full: nothing is counted in the second.
            ("hit", format!("{a} {b}")),
            ("peek", format!("{a} {b} COST 9")),
            ("refund", format!("{a} COST 2 {b}")),
            ("hit", format!("{a} {b} COST 3")),
            ("hit", format!("{b} {c}")),
            ("hit", format!("{c} {c} COST 4")),
            ("refund", format!("{c} COST 2 {c}")),
        ];
        let mut before: [Held; 2] = [(None, -2), (None, -2)];
        for (n, (command, args)) in steps.iter().enumerate() {
            let ((module, library), held) = same_ms_several(&mut con, command, args, &before);
            let context = format!("step {n} {command} {args}");
            assert_eq!(module, library, "{context}");
            assert_eq!(held[..2], held[2..], "{context}");
            before = [held[0].clone(), held[1].clone()];
        }
    });
}
